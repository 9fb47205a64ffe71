"""What a nemesis run (`riverbed.testing.nemesis`) must never show: the checks of its
history, pure functions over what the producer was told and what the log holds.

The producer writes the values 0, 1, 2, ... in order, value ``v`` to partition
``v % partitions``, as one idempotent producer (``enable.idempotence``, acks=all). Its
history is what it sent, which values were acknowledged at which (partition, offset),
which failed, and a fatal error if it got one; after the faults are healed, each
partition is read from its start to its end. Kafka's guarantees for that producer, and
so riverbed's:

- **no loss**: every acknowledged value is in the log, at the offset its
  acknowledgement named;
- **no duplicates**: no value is in the log twice (a retried batch that was written
  before is acknowledged as a duplicate, not written again);
- **order**: within a partition the values are in the order they were sent;
- **nothing foreign**: every value in the log was sent, to that partition; offsets are
  read once each, increasing;
- **resolved**: every sent value ended acknowledged or failed (the producer's flush
  finished), and no fatal producer error (an idempotent producer gets one when the log
  it writes to lost or reordered its sequences, e.g. OUT_OF_ORDER_SEQUENCE_NUMBER).

A value whose delivery failed may or may not be in the log; either is allowed.

With a consumer group member reading through the faults (`GroupRead`), also:

- **only the log**: every record delivered to the group is in the log at that offset
  (a consumer reads below the high watermark, and that is never truncated);
- **at least once**: every offset of the log was delivered to the group (it starts at
  the earliest offset and drains to the end after the faults);
- **commits hold**: the offsets the coordinator acknowledged never go backwards, the
  committed offsets a new client reads are the last ones acknowledged, and they reach
  the log's end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

GroupProtocol = Literal["consumer", "classic"]

#: Examples listed per kind of violation (the count is always given).
EXAMPLES_MAX = 5


@dataclass(frozen=True)
class Acked:
    """The producer was told ``value`` is at ``offset`` of ``partition``."""

    value: int
    partition: int
    offset: int


@dataclass
class GroupRead:
    """What a consumer group's member saw: records delivered, commits acknowledged."""

    protocol: GroupProtocol
    #: partition -> (offset, value) in delivery order (a record may come twice)
    delivered: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: partition -> the next offsets of the acknowledged commits, in order
    commits: dict[int, list[int]] = field(default_factory=dict)
    failed_commits: int = 0
    #: partition -> the committed offset a new client read at the end (-1: none)
    committed: dict[int, int] = field(default_factory=dict)


@dataclass
class History:
    """One run, as the producer and the read-back saw it."""

    partitions: int
    sent: int = 0
    acked: list[Acked] = field(default_factory=list)
    failed: set[int] = field(default_factory=set)
    fatal: str | None = None
    #: partition -> (offset, value) as read back, in read order
    logs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: the group member's view (None: the run had no group)
    group: GroupRead | None = None


def _report(kind: str, examples: list[str]) -> list[str]:
    if not examples:
        return []
    shown = "; ".join(examples[:EXAMPLES_MAX])
    more = f" (and {len(examples) - EXAMPLES_MAX} more)" if len(examples) > EXAMPLES_MAX else ""
    return [f"{kind}: {len(examples)}: {shown}{more}"]


def _log_shape(h: History) -> tuple[list[str], list[str], list[str]]:
    """(offsets read twice or backwards, foreign values, values out of order)."""
    offsets, foreign, order = [], [], []
    for partition, rows in sorted(h.logs.items()):
        last_offset, last_value = -1, -1
        for offset, value in rows:
            if offset <= last_offset:
                offsets.append(f"p{partition} offset {offset} after {last_offset}")
            if not 0 <= value < h.sent or value % h.partitions != partition:
                foreign.append(f"p{partition}@{offset} holds {value}")
            elif value <= last_value:
                order.append(f"p{partition}@{offset} holds {value} after {last_value}")
            last_offset = max(last_offset, offset)
            last_value = max(last_value, value)
    return offsets, foreign, order


def _duplicates(logs: dict[int, list[tuple[int, int]]]) -> list[str]:
    where: dict[int, str] = {}
    twice = []
    for partition, rows in sorted(logs.items()):
        for offset, value in rows:
            here = f"p{partition}@{offset}"
            if value in where:
                twice.append(f"{value} at {where[value]} and {here}")
            else:
                where[value] = here
    return twice


def _lost(acked: Iterable[Acked], logs: dict[int, list[tuple[int, int]]]) -> list[str]:
    at = {(p, offset): value for p, rows in logs.items() for offset, value in rows}
    lost = []
    for a in acked:
        found = at.get((a.partition, a.offset))
        if found != a.value:
            holds = "nothing" if found is None else str(found)
            lost.append(f"{a.value} acked at p{a.partition}@{a.offset}, which holds {holds}")
    return lost


def _unresolved(h: History) -> list[str]:
    resolved = {a.value for a in h.acked} | h.failed
    return [str(v) for v in range(h.sent) if v not in resolved]


def _group_reads(
    g: GroupRead, logs: dict[int, list[tuple[int, int]]]
) -> tuple[list[str], list[str]]:
    """(records delivered that the log does not hold there, log offsets never delivered)."""
    at = {(p, offset): value for p, rows in logs.items() for offset, value in rows}
    phantom, missed = [], []
    for p, rows in sorted(g.delivered.items()):
        for offset, value in rows:
            if at.get((p, offset)) != value:
                phantom.append(f"{value} at p{p}@{offset}, which holds {at.get((p, offset))}")
    for p, rows in sorted(logs.items()):
        seen = {offset for offset, _ in g.delivered.get(p, [])}
        missed += [f"p{p}@{offset}" for offset, _ in rows if offset not in seen]
    return phantom, missed


def _group_commits(g: GroupRead, logs: dict[int, list[tuple[int, int]]]) -> list[str]:
    found = []
    for p, offsets in sorted(g.commits.items()):
        found += [f"p{p} commit {b} after {a}" for a, b in pairwise(offsets) if b < a]
    for p, rows in sorted(logs.items()):
        end = rows[-1][0] + 1 if rows else 0
        last = g.commits.get(p, [-1])[-1]
        read = g.committed.get(p, -1)
        if read != last:
            found.append(f"p{p} reads committed {read}, the last acknowledged was {last}")
        elif end and last != end:
            found.append(f"p{p} committed {last}, the log ends at {end}")
    return found


def _group_violations(h: History) -> list[str]:
    if h.group is None:
        return []
    phantom, missed = _group_reads(h.group, h.logs)
    found = _report("delivered to the group, not in the log", phantom)
    found += _report("never delivered to the group", missed)
    found += _report("group commits lost or behind", _group_commits(h.group, h.logs))
    return found


def violations(h: History) -> list[str]:
    """Every guarantee the history breaks, one line per kind, with examples."""
    offsets, foreign, order = _log_shape(h)
    found = [f"fatal producer error: {h.fatal}"] if h.fatal is not None else []
    found += _report("acknowledged and lost", _lost(h.acked, h.logs))
    found += _report("written twice", _duplicates(h.logs))
    found += _report("out of send order", order)
    found += _report("not sent there", foreign)
    found += _report("offsets read twice or backwards", offsets)
    found += _report("never acknowledged nor failed", _unresolved(h))
    return found + _group_violations(h)


def summary(h: History) -> str:
    """One line: what the producer sent and what became of it."""
    logged = sum(len(rows) for rows in h.logs.values())
    line = (
        f"sent {h.sent:,}, acknowledged {len(h.acked):,}, failed {len(h.failed):,}, "
        f"in the log {logged:,} over {h.partitions} partitions"
    )
    g = h.group
    if g is not None:
        delivered = sum(len(rows) for rows in g.delivered.values())
        commits = sum(len(c) for c in g.commits.values())
        line += (
            f"; the {g.protocol} group: delivered {delivered:,}, commits acknowledged "
            f"{commits:,}, failed {g.failed_commits:,}"
        )
    return line
