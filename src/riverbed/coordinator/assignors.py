"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor maps each member to the partitions it should own (the *target assignment*),
from every member's subscribed topic ids and each topic's partition count. Both are
pure and deterministic: the same inputs (in any dict order) give the same output.

- ``uniform`` (Kafka's UniformAssignor, the default): balanced and sticky. Every member
  keeps the partitions of its previous target it is still subscribed to, unowned
  partitions go to the least loaded subscriber, then partitions move one at a time from
  the most to the least loaded eligible member until no two eligible members differ by
  more than one. A member joining takes only what it must from the others; a member
  leaving spreads its partitions without moving anyone else's. When every member
  subscribes to the same topics (the usual case) the same result comes from quotas in
  O(partitions) instead of the move loop.
- ``range`` (Kafka's RangeAssignor): per topic, the subscribers sorted by member id get
  consecutive ranges of ``partitions // n`` (the first ``partitions % n`` one more), so
  members subscribed to co-partitioned topics get the same partition numbers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

#: topic id -> partitions of one member.
Assignment = dict[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]
#: (subscriptions: member -> topic ids, topics: topic id -> partition count,
#:  previous target: member -> assignment) -> new target.
Assignor = Callable[
    [Mapping[str, frozenset[uuid.UUID]], Mapping[uuid.UUID, int], Mapping[str, Assignment]],
    dict[str, Assignment],
]
UNIFORM = "uniform"
RANGE = "range"
#: The assignors riverbed ships, in Kafka's default order (the first is the default).
DEFAULT_ASSIGNORS = (UNIFORM, RANGE)


def to_assignment(parts: set[TopicPartition] | frozenset[TopicPartition]) -> Assignment:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic, p in parts:
        by_topic.setdefault(topic, set()).add(p)
    return {t: frozenset(ps) for t, ps in by_topic.items()}


def to_partitions(assignment: Mapping[uuid.UUID, frozenset[int]]) -> set[TopicPartition]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def uniform(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    if len(set(subscriptions.values())) == 1:
        return _uniform_homogeneous(subscriptions, topics, previous)
    members = sorted(subscriptions)
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    owner: dict[TopicPartition, str] = {}

    def eligible(member: str, tp: TopicPartition) -> bool:
        return tp[0] in subscriptions[member] and 0 <= tp[1] < topics.get(tp[0], 0)

    # stickiness: what each member had and may still have (the first claimant wins)
    for m in members:
        for tp in sorted(to_partitions(previous.get(m, {}))):
            if tp not in owner and eligible(m, tp):
                owner[tp] = m
                owned[m].add(tp)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in members:
        for t in subscriptions[m]:
            if t in topics:
                subscribers.setdefault(t, []).append(m)
    # unowned partitions, fewest candidates first, to the least loaded candidate
    free = [(t, p) for t in sorted(subscribers) for p in range(topics[t]) if (t, p) not in owner]
    free.sort(key=lambda tp: len(subscribers[tp[0]]))
    for tp in free:
        m = min(subscribers[tp[0]], key=lambda c: (len(owned[c]), c))
        owner[tp] = m
        owned[m].add(tp)
    # balance: move from the most loaded to an eligible member with two fewer or less
    moves_max = sum(topics.get(t, 0) for t in subscribers) * 2  # a bound, never reached
    for _ in range(moves_max):
        moved = False
        for donor in sorted(members, key=lambda c: (-len(owned[c]), c)):
            best: tuple[int, str, TopicPartition] | None = None
            for tp in sorted(owned[donor], reverse=True):
                for c in subscribers.get(tp[0], ()):
                    if len(owned[c]) + 1 < len(owned[donor]):
                        cand = (len(owned[c]), c, tp)
                        if best is None or cand[:2] < best[:2]:
                            best = cand
            if best is not None:
                _, receiver, tp = best
                owned[donor].discard(tp)
                owned[receiver].add(tp)
                moved = True
                break
        if not moved:
            break
    return {m: to_assignment(owned[m]) for m in members}


def _uniform_homogeneous(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Everyone subscribes to the same topics: quotas of ``len // n`` (the members that
    keep the most get the ``len % n`` extra ones), each member keeps what it had up to
    its quota, the rest fills the members below theirs. Same result shape as the general
    path (balanced within one, sticky), in O(partitions + members log members)."""
    members = sorted(subscriptions)
    wanted = next(iter(subscriptions.values()))
    every = [(t, p) for t in sorted(wanted) if t in topics for p in range(topics[t])]
    valid = set(every)
    kept: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    for m in members:
        mine = sorted(tp for tp in to_partitions(previous.get(m, {})) if tp in valid)
        kept[m] = [tp for tp in mine if tp not in taken]
        taken.update(kept[m])
    base, extra = divmod(len(every), len(members))
    by_kept = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_kept)}
    free = [tp for tp in every if tp not in taken]
    for m in members:
        if len(kept[m]) > quota[m]:
            free.extend(kept[m][quota[m] :])
            del kept[m][quota[m] :]
    free.sort()
    i = 0
    for m in members:
        need = quota[m] - len(kept[m])
        kept[m].extend(free[i : i + need])
        i += need
    return {m: to_assignment(set(kept[m])) for m in members}


def range_assignor(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    del previous  # ranges depend only on the members and the partition counts
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic in sorted(topics):
        subs = sorted(m for m, ts in subscriptions.items() if topic in ts)
        if not subs:
            continue
        base, extra = divmod(topics[topic], len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = base + (1 if i < extra else 0)
            out[m].update((topic, p) for p in range(start, start + n))
            start += n
    return {m: to_assignment(ps) for m, ps in out.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_assignor}
