"""A history checker for transactional queues: Jepsen's Kafka queue workload, in Python.

Clients record every transaction they run as a `Txn`: its sends (partition, value and the
offset the delivery report gave), its polls (partition and the ``(offset, value)`` records
returned), and its outcome:

- ``OK``: the commit was acknowledged (a consumer's polls outside a transaction are OK);
- ``FAIL``: the transaction is known aborted (``abort_transaction`` returned);
- ``INFO``: unknown (a commit or abort that raised, a client that died).

Values are unique over the whole history (the checker finds a value's writer by it). Each
process is one client reading from the start of its partitions and never seeking back;
times (``invoke_at``, ``commit_at``, ``complete_at``) come from one clock.

`check` is sans-I/O and reports, by kind:

- ``aborted_read`` (G1a): a poll returned a value of a FAIL transaction.
- ``precommitted_read``: a poll returned a value whose writer had not even asked to commit
  when the reading transaction completed (``reader.complete_at < writer.commit_at``, or a
  writer that never invoked a commit). A read_committed reader may see a commit's records
  before the producer hears that its commit succeeded (the markers are written first), so
  "read before the commit was acknowledged" is legal; "read before the commit was sent" is
  not. An INFO writer that did invoke its commit is given the benefit of the doubt.
- ``lost_write``: an OK transaction's value at offset ``o`` that no poll returned while some
  poll of its partition returned an offset above ``o`` (a reader went past it).
- ``duplicate``: one value at two offsets of a partition.
- ``inconsistent_offset``: two values at one offset of a partition.
- ``nonmonotonic_poll`` / ``nonmonotonic_send``: a process's polls (sends) of a partition
  whose offsets do not strictly increase in its history order.
- ``unwritten_read``: a poll returned a value no send wrote.
- ``G1c``: a cycle of transactions over write-read edges (W wrote a value R read), and
  optionally write-write edges (W1's value directly precedes W2's in a partition's offset
  order), with at least one write-read edge. Write-write edges are off by default:
  Kafka's concurrent transactions interleave their records in a partition, so a
  transaction still open when another commits may hold the earlier offsets, and a reader
  of the committed one can then close a cycle Kafka allows (T2 sends y@1; T1 sends y@2 and
  x@1 and commits; T2 polls x@1 and commits: T2 -ww-> T1 -wr-> T2). A write-read-only
  cycle is impossible in any correct run: a read needs its writer committed, and a
  transaction polls before it commits.
"""

from __future__ import annotations

import enum
import itertools
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: At most this many cases of one kind are kept in a report (a broken run can have
#: thousands; the count is kept whole).
CASES_PER_KIND_MAX = 20
#: Cycles searched for at most this many write-read edges inside strongly connected parts.
CYCLE_EDGES_MAX = 1000


class Outcome(enum.Enum):
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True)
class Send:
    partition: int
    value: int
    offset: int | None = None


@dataclass(frozen=True)
class Poll:
    partition: int
    records: tuple[tuple[int, int], ...]  # (offset, value) in the order returned


@dataclass(frozen=True)
class Txn:
    process: str
    outcome: Outcome
    sends: tuple[Send, ...] = ()
    polls: tuple[Poll, ...] = ()
    invoke_at: int = 0
    commit_at: int | None = None  # when the commit was invoked; None: never
    complete_at: int = 0


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=dict)
    cases: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, case: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        kept = self.cases.setdefault(kind, [])
        if len(kept) < CASES_PER_KIND_MAX:
            kept.append(case)

    @property
    def clean(self) -> bool:
        return not self.counts

    def kinds(self) -> set[str]:
        return set(self.counts)

    def __str__(self) -> str:
        if self.clean:
            return "no anomaly"
        lines = []
        for kind in sorted(self.counts):
            lines.append(f"{kind}: {self.counts[kind]}")
            lines.extend(f"  {case}" for case in self.cases[kind])
        return "\n".join(lines)


@dataclass
class _Index:
    """What the history says about every value and every partition's offsets."""

    writer: dict[int, int] = field(default_factory=dict)  # value -> txn index
    sends: dict[int, Send] = field(default_factory=dict)
    readers: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    at_offset: dict[tuple[int, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    offsets_of: dict[tuple[int, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    max_read: dict[int, int] = field(default_factory=dict)  # partition -> highest offset read


def check(history: Sequence[Txn], *, ww_edges: bool = False) -> Report:
    """Every anomaly of `history` (see the module's docstring), by kind."""
    report = Report()
    index = _build_index(history, report)
    _check_offsets(index, report)
    _check_reads(history, index, report)
    _check_lost(history, index, report)
    _check_monotonic(history, report)
    _check_cycles(history, index, report, ww_edges=ww_edges)
    return report


def _build_index(history: Sequence[Txn], report: Report) -> _Index:
    index = _Index()
    for i, txn in enumerate(history):
        for send in txn.sends:
            if send.value in index.writer:
                report.add("duplicate_send", f"value {send.value} sent twice (txn {i})")
                continue
            index.writer[send.value] = i
            index.sends[send.value] = send
            if send.offset is not None:
                _place(index, send.partition, send.offset, send.value)
        for poll in txn.polls:
            for offset, value in poll.records:
                index.readers[value].add(i)
                _place(index, poll.partition, offset, value)
                high = index.max_read.get(poll.partition, -1)
                index.max_read[poll.partition] = max(high, offset)
    return index


def _place(index: _Index, partition: int, offset: int, value: int) -> None:
    index.at_offset[(partition, offset)].add(value)
    index.offsets_of[(partition, value)].add(offset)


def _check_offsets(index: _Index, report: Report) -> None:
    for (partition, offset), values in sorted(index.at_offset.items()):
        if len(values) > 1:
            report.add("inconsistent_offset", f"p{partition}@{offset}: values {sorted(values)}")
    for (partition, value), offsets in sorted(index.offsets_of.items()):
        if len(offsets) > 1:
            report.add("duplicate", f"value {value} at p{partition} offsets {sorted(offsets)}")


def _check_reads(history: Sequence[Txn], index: _Index, report: Report) -> None:
    for value, reader_ids in sorted(index.readers.items()):
        w = index.writer.get(value)
        if w is None:
            report.add("unwritten_read", f"value {value} read by txns {sorted(reader_ids)}")
            continue
        writer = history[w]
        for r in sorted(reader_ids):
            reader = history[r]
            if writer.outcome is Outcome.FAIL:
                report.add("aborted_read", f"txn {r} ({reader.process}) read {value} of txn {w}")
            elif writer.commit_at is None or reader.complete_at < writer.commit_at:
                report.add(
                    "precommitted_read",
                    f"txn {r} ({reader.process}, done at {reader.complete_at}) read {value} "
                    f"of txn {w} (commit invoked at {writer.commit_at})",
                )


def _check_lost(history: Sequence[Txn], index: _Index, report: Report) -> None:
    for value, w in sorted(index.writer.items()):
        if history[w].outcome is not Outcome.OK or index.readers.get(value):
            continue
        send = index.sends[value]
        offsets = index.offsets_of.get((send.partition, value))
        if not offsets:
            continue  # offset unknown: nothing tells a reader went past it
        offset = min(offsets)
        high = index.max_read.get(send.partition, -1)
        if high > offset:
            report.add(
                "lost_write",
                f"value {value} of txn {w} at p{send.partition}@{offset} unread, "
                f"reads reached {high}",
            )


def _check_monotonic(history: Sequence[Txn], report: Report) -> None:
    last_poll: dict[tuple[str, int], int] = {}
    last_send: dict[tuple[str, int], int] = {}
    for i, txn in enumerate(history):
        for poll in txn.polls:
            for offset, value in poll.records:
                key = (txn.process, poll.partition)
                prev = last_poll.get(key)
                if prev is not None and offset <= prev:
                    report.add(
                        "nonmonotonic_poll",
                        f"txn {i} ({txn.process}) polled p{poll.partition}@{offset} "
                        f"(value {value}) after @{prev}",
                    )
                last_poll[key] = offset
        for send in txn.sends:
            if send.offset is None:
                continue
            key = (txn.process, send.partition)
            prev = last_send.get(key)
            if prev is not None and send.offset <= prev:
                report.add(
                    "nonmonotonic_send",
                    f"txn {i} ({txn.process}) sent {send.value} to p{send.partition}"
                    f"@{send.offset} after @{prev}",
                )
            last_send[key] = send.offset


def _edges(
    history: Sequence[Txn], index: _Index, *, ww_edges: bool
) -> tuple[dict[int, set[int]], list[tuple[int, int]]]:
    """The dependency graph (over committed or maybe-committed transactions) and its
    write-read edges."""
    graph: dict[int, set[int]] = defaultdict(set)
    wr: list[tuple[int, int]] = []
    for value, reader_ids in index.readers.items():
        w = index.writer.get(value)
        if w is None or history[w].outcome is Outcome.FAIL:
            continue
        for r in reader_ids:
            if r != w and history[r].outcome is Outcome.OK and r not in graph[w]:
                graph[w].add(r)
                wr.append((w, r))
    if ww_edges:
        for a, b in _ww_pairs(history, index):
            graph[a].add(b)
    return graph, sorted(wr)


def _ww_pairs(history: Sequence[Txn], index: _Index) -> Iterable[tuple[int, int]]:
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), values in index.at_offset.items():
        for value in values:
            w = index.writer.get(value)
            if w is not None and history[w].outcome is not Outcome.FAIL:
                by_partition[partition].append((offset, w))
    for order in by_partition.values():
        order.sort()
        for (_, a), (_, b) in itertools.pairwise(order):
            if a != b:
                yield a, b


def _check_cycles(history: Sequence[Txn], index: _Index, report: Report, *, ww_edges: bool) -> None:
    graph, wr = _edges(history, index, ww_edges=ww_edges)
    component = _components(graph)
    searched = 0
    for w, r in wr:
        if component.get(w) != component.get(r) or searched >= CYCLE_EDGES_MAX:
            continue
        searched += 1
        path = _path(graph, r, w, component)
        if path is not None:
            cycle = " -> ".join(f"{t}({history[t].process})" for t in [w, *path])
            report.add("G1c", f"cycle {cycle}")


def _components(graph: dict[int, set[int]]) -> dict[int, int]:
    """Strongly connected components (Tarjan's, iterative): node -> component id."""
    nodes = set(graph) | {n for targets in graph.values() for n in targets}
    number: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    component: dict[int, int] = {}
    for root in sorted(nodes):
        if root in number:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        number[root] = low[root] = len(number)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == number[node]:
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component[top] = node
                        if top == node:
                            break
            elif child not in number:
                number[child] = low[child] = len(number)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], number[child])
    return component


def _path(
    graph: dict[int, set[int]], start: int, goal: int, component: dict[int, int]
) -> list[int] | None:
    """A shortest path start -> goal inside their component (breadth first)."""
    parent: dict[int, int | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in parent and component.get(nxt) == component[start]:
                parent[nxt] = node
                queue.append(nxt)
    return None
