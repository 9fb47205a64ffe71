"""Consumer groups for the console: members, lag per partition, lag history, offset resets.

Lag is kafka-consumer-groups' ``LAG``: a partition's log end offset minus the group's
committed offset. The console keeps the last `LAG_SAMPLES_MAX` totals of at most
`LAG_GROUPS_MAX` groups in memory (sampled each time the group's page asks) for the lag
chart. An offset reset is planned first (the dry run: each partition's current and new
offset, clamped to [log start, log end] as Kafka's tool does) and committed only when the
page posts the plan back with the group's name as confirmation, and only while the group
is inactive: Kafka's rule, "Assignments can only be reset if the group is inactive".
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition

from riverbed.console.admin import (
    ADMIN_TIMEOUT_S,
    EARLIEST,
    LATEST,
    ConsoleAdmin,
    ConsoleError,
    cluster_error,
)

#: Lag samples kept per group for the chart (one per page refresh).
LAG_SAMPLES_MAX = 720
#: Groups whose lag history is kept (the least recently viewed is forgotten first).
LAG_GROUPS_MAX = 100
#: Partitions one offset reset may touch.
RESET_PARTITIONS_MAX = 10_000

RESET_STRATEGIES = ("earliest", "latest", "offset", "timestamp", "shift")
_INACTIVE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    state: str
    simple: bool


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class LagRow:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    owner: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(0, self.log_end - self.committed)


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    assignor: str
    coordinator: int | None
    members: tuple[Member, ...]
    lag: tuple[LagRow, ...]

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.lag)

    @property
    def inactive(self) -> bool:
        return self.state in ("EMPTY", "DEAD")


@dataclass(frozen=True, slots=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int


def list_groups(admin: ConsoleAdmin) -> list[GroupRow]:
    try:
        result = admin.client.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S).result(
            timeout=ADMIN_TIMEOUT_S
        )
    except Exception as exc:
        raise cluster_error(exc, "cannot list consumer groups") from None
    return sorted(
        (GroupRow(g.group_id, _state(g.state), bool(g.is_simple_consumer_group)) for g in result.valid),
        key=lambda g: g.group_id,
    )  # fmt: skip


def _state(state: Any) -> str:
    return state.name if isinstance(state, ConsumerGroupState) else str(state)


def describe(admin: ConsoleAdmin, group: str) -> GroupView:
    """Members, assignment and lag of ``group`` (404 when the cluster does not know it)."""
    try:
        futures = admin.client.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)
        d = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise cluster_error(exc, f"cannot describe group {group}") from None
    committed = committed_offsets(admin, group)
    if d.state in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN) and not committed:
        raise ConsoleError(404, f"unknown consumer group {group!r}")
    members = tuple(
        Member(
            m.member_id,
            m.client_id,
            m.host,
            tuple(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)),
        )
        for m in d.members
    )
    owner = {tp: m.client_id or m.member_id for m in members for tp in m.assignment}
    tps = sorted(set(committed) | set(owner))
    ends = admin.offsets(tps, LATEST)
    lag = tuple(
        LagRow(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p))) for t, p in tps
    )
    coordinator = d.coordinator.id if d.coordinator is not None else None
    return GroupView(group, _state(d.state), d.partition_assignor or "", coordinator, members, lag)  # fmt: skip


def committed_offsets(admin: ConsoleAdmin, group: str) -> dict[TP, int]:
    try:
        futures = admin.client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=ADMIN_TIMEOUT_S
        )
        answer = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise cluster_error(exc, f"cannot fetch the offsets of group {group}") from None
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in answer.topic_partitions or []
        if tp.offset >= 0 and tp.error is None
    }


class LagHistory:
    """Total lag over time per group, bounded (see the module docstring)."""

    def __init__(self) -> None:
        self._groups: OrderedDict[str, deque[tuple[float, int]]] = OrderedDict()

    def add(self, group: str, lag: int, now_s: float | None = None) -> list[tuple[float, int]]:
        samples = self._groups.pop(group, None) or deque(maxlen=LAG_SAMPLES_MAX)
        samples.append((time.time() if now_s is None else now_s, lag))
        self._groups[group] = samples
        while len(self._groups) > LAG_GROUPS_MAX:
            self._groups.popitem(last=False)
        return list(samples)


def plan_reset(
    admin: ConsoleAdmin, view: GroupView, strategy: str, topic: str, value: int
) -> list[ResetRow]:
    """The dry run: each partition's new offset under ``strategy`` (``value`` is the
    offset, the time in ms or the shift), clamped to [log start, log end]."""
    if strategy not in RESET_STRATEGIES:
        raise ConsoleError(400, f"strategy must be one of {', '.join(RESET_STRATEGIES)}")
    committed = {(r.topic, r.partition): r.committed for r in view.lag}
    if topic:
        t = admin.topic(topic)
        tps = [(topic, p.partition) for p in t.partitions]
    else:
        tps = sorted(committed)
    if not tps:
        raise ConsoleError(400, f"group {view.group_id} has no committed offsets: name a topic")
    if len(tps) > RESET_PARTITIONS_MAX:
        raise ConsoleError(400, f"{len(tps)} partitions is above RESET_PARTITIONS_MAX = {RESET_PARTITIONS_MAX}")  # fmt: skip
    low = admin.offsets(tps, EARLIEST)
    high = admin.offsets(tps, LATEST)
    missing = [f"{t}-{p}" for t, p in tps if (t, p) not in low or (t, p) not in high]
    if missing:
        raise ConsoleError(502, f"no offsets for {', '.join(missing[:10])} (no leader?)")
    if strategy == "timestamp":
        at = admin.offsets(tps, value)
    rows = []
    for tp in tps:
        current = committed.get(tp)
        if strategy == "earliest":
            new = low[tp]
        elif strategy == "latest":
            new = high[tp]
        elif strategy == "offset":
            new = value
        elif strategy == "timestamp":
            new = at.get(tp, -1) if at.get(tp, -1) >= 0 else high[tp]
        else:
            new = (current if current is not None else high[tp]) + value
        rows.append(ResetRow(tp[0], tp[1], current, min(max(new, low[tp]), high[tp])))
    return rows


def execute_reset(admin: ConsoleAdmin, group: str, rows: list[ResetRow]) -> None:
    view = describe(admin, group)
    if not view.inactive:
        raise ConsoleError(
            409,
            f"Assignments can only be reset if the group '{group}' is inactive, "
            f"but the current state is {view.state}.",
        )
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(r.topic, r.partition, r.new) for r in rows]
    )
    try:
        futures = admin.client.alter_consumer_group_offsets([request], request_timeout=ADMIN_TIMEOUT_S)  # fmt: skip
        answer = futures[group].result(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise cluster_error(exc, f"cannot reset the offsets of group {group}") from None
    failed = [
        f"{tp.topic}-{tp.partition}: {tp.error}" for tp in answer.topic_partitions if tp.error
    ]
    if failed:
        raise ConsoleError(502, f"offsets not reset: {'; '.join(failed[:10])}")
