"""Server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

Input: each member's subscribed topic names, its current assignment, and the topics'
(id, partition count). Output: member -> {topic id: partitions}. Deterministic (members
and topics taken in sorted order).

- ``uniform`` (the default, as in Kafka): every subscribed partition goes to one of its
  subscribers, sticky first: a member keeps what it owns up to its fair share (the
  partitions divided by the members, the remainder to the first members), then the rest
  goes, partition by partition, to the subscriber holding the fewest;
- ``range``: per topic, its subscribers sorted by member id get contiguous ranges of the
  partitions, the first ``partitions % subscribers`` one more (the classic RangeAssignor).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

Assignment = dict[uuid.UUID, set[int]]
#: topic name -> (topic id, partition count), for the topics the image has.
TopicsMeta = Mapping[str, tuple[uuid.UUID, int]]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)


def assign(
    name: str,
    subscriptions: Mapping[str, set[str]],
    current: Mapping[str, Assignment],
    topics: TopicsMeta,
) -> dict[str, Assignment]:
    if name == RANGE:
        return _range(subscriptions, topics)
    return _uniform(subscriptions, current, topics)


def _range(subscriptions: Mapping[str, set[str]], topics: TopicsMeta) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {m: {} for m in subscriptions}
    for topic in sorted({t for subs in subscriptions.values() for t in subs}):
        if topic not in topics:
            continue
        topic_id, count = topics[topic]
        members = sorted(m for m, subs in subscriptions.items() if topic in subs)
        per, extra = divmod(count, len(members))
        start = 0
        for i, m in enumerate(members):
            n = per + (1 if i < extra else 0)
            if n:
                out[m][topic_id] = set(range(start, start + n))
            start += n
    return out


def _uniform(
    subscriptions: Mapping[str, set[str]], current: Mapping[str, Assignment], topics: TopicsMeta
) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    out: dict[str, Assignment] = {m: {} for m in members}
    if not members:
        return out
    subscribers: dict[tuple[uuid.UUID, int], list[str]] = {}
    for topic in sorted({t for subs in subscriptions.values() for t in subs}):
        if topic not in topics:
            continue
        topic_id, count = topics[topic]
        who = [m for m in members if topic in subscriptions[m]]
        for p in range(count):
            subscribers[(topic_id, p)] = who
    total = len(subscribers)
    per, extra = divmod(total, len(members))
    quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(members)}
    counts = dict.fromkeys(members, 0)
    taken: set[tuple[uuid.UUID, int]] = set()
    for m in members:  # stickiness: what a member owns stays, up to its share
        for topic_id, parts in sorted(current.get(m, {}).items()):
            for p in sorted(parts):
                tp = (topic_id, p)
                mine = tp in subscribers and m in subscribers[tp] and tp not in taken
                if mine and counts[m] < quota[m]:
                    out[m].setdefault(topic_id, set()).add(p)
                    counts[m] += 1
                    taken.add(tp)
    for tp, who in sorted(subscribers.items()):
        if tp in taken:
            continue
        m = min(who, key=lambda x: (counts[x], x))
        out[m].setdefault(tp[0], set()).add(tp[1])
        counts[m] += 1
    return out
