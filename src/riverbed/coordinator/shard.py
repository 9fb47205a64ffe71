"""The groups of one ``__consumer_offsets`` partition: a sans-I/O coordinator shard.

Inputs: requests with a `Reply` handle and ``now_ms``, `tick(now_ms)` for timers,
`complete_write(token, error)` once a write is durable (or failed), and `replay` of
the partition's records when the shard is loaded. Outputs (`take_output`): responses
for `Reply` handles and `Write` s, each a list of (key, value) records that the shell
appends as one batch to the partition and then confirms with `complete_write`.
Nothing is answered before the records it depends on are durable: an OffsetCommit
changes the committed offsets (and is answered) only when its write completed.

Offsets: OffsetCommit fences by generation and member id (admin commits with
generation -1 only into an Empty group); metadata longer than
``offset.metadata.max.bytes`` is OFFSET_METADATA_TOO_LARGE. `expire_offsets` drops
offsets ``offsets.retention.minutes`` after an Empty group became empty (or, for a
group that never had members, after each commit) and forgets groups left with nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.coordinator.assignors import DEFAULT_ASSIGNORS
from riverbed.coordinator.consumer_admin import ConsumerAdmin
from riverbed.coordinator.consumer_group import ConsumerGroup
from riverbed.coordinator.consumer_membership import ConsumerMembership
from riverbed.coordinator.group import ClassicGroup, GroupState, Member, Reply
from riverbed.coordinator.membership import Membership
from riverbed.coordinator.records import (
    GroupRecord,
    OffsetRecord,
    group_metadata_key,
    offset_commit_key,
    offset_commit_value,
)
from riverbed.coordinator.txn_offsets import TxnOffsets, split_commits
from riverbed.coordinator.writes import GroupWrites, Write, answer_error
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DescribeGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
)

E = ErrorCode
S = GroupState
#: Group metadata records plus every offset of a group, written by one deletion.
Record = tuple[bytes, bytes | None]
__all__ = ["GroupConfig", "GroupShard", "Write"]
#: DescribeGroups' "authorized operations not requested".
_OPERATIONS_OMITTED = -(2**31)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker configs the classic coordinator obeys (Kafka's names, ms units)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 10080 * 60_000
    # KIP-848 consumer groups (group.consumer.*)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = DEFAULT_ASSIGNORS

    @classmethod
    def from_config(cls, cfg: Any) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=int(cfg.get("group.initial.rebalance.delay.ms")),
            min_session_timeout_ms=int(cfg.get("group.min.session.timeout.ms")),
            max_session_timeout_ms=int(cfg.get("group.max.session.timeout.ms")),
            max_size=int(cfg.get("group.max.size")),
            offset_metadata_max_bytes=int(cfg.get("offset.metadata.max.bytes")),
            offsets_retention_ms=int(cfg.get("offsets.retention.minutes")) * 60_000,
            consumer_session_timeout_ms=int(cfg.get("group.consumer.session.timeout.ms")),
            consumer_heartbeat_interval_ms=int(cfg.get("group.consumer.heartbeat.interval.ms")),
            consumer_max_size=int(cfg.get("group.consumer.max.size")),
            consumer_assignors=tuple(_assignor_names(cfg.get("group.consumer.assignors"))),
        )


def _unstable(index: int) -> OffsetFetchResponse.OffsetFetchResponsePartitions:
    return OffsetFetchResponse.OffsetFetchResponsePartitions(
        partition_index=index,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=int(E.UNSTABLE_OFFSET_COMMIT),
    )


def _assignor_names(value: Any) -> list[str]:
    """``group.consumer.assignors``: short names, or Kafka's class names of the same."""
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    names = []
    for item in items:
        name = str(item).strip().rsplit(".", 1)[-1]
        name = {"UniformAssignor": "uniform", "RangeAssignor": "range"}.get(name, name)
        if name:
            names.append(name)
    return names or list(DEFAULT_ASSIGNORS)


class GroupShard(GroupWrites, Membership, ConsumerMembership, ConsumerAdmin, TxnOffsets):
    """Every group of one ``__consumer_offsets`` partition."""

    def __init__(self, partition: int, config: GroupConfig, rng: random.Random) -> None:
        self.partition = partition
        self.config = config
        self._random = rng
        self.groups: dict[str, ClassicGroup] = {}
        #: KIP-848 groups; a group id names a classic or a consumer group, never both.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self._regexes: dict[str, Any] = {}
        #: group id -> its KIP-848 GROUP configs (set by the shell from the metadata image)
        self.group_overrides: Mapping[str, Mapping[str, str]] = {}
        self._init_writes()
        self._init_txn_offsets()
        self._timers: list[tuple[int, str]] = []
        self._scheduled: dict[str, int] = {}

    # ------------------------------------------------------------------ timers
    def _schedule(self, group: ClassicGroup | ConsumerGroup) -> None:
        if isinstance(group, ConsumerGroup):
            deadline = self.consumer_group_deadline(group)
        else:
            deadline = self.group_deadline(group)
        if deadline is None:
            return
        current = self._scheduled.get(group.group_id)
        if current is None or deadline < current:
            self._scheduled[group.group_id] = deadline
            heapq.heappush(self._timers, (deadline, group.group_id))

    def next_deadline(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def tick(self, now_ms: int) -> None:
        while self._timers and self._timers[0][0] <= now_ms:
            deadline, group_id = heapq.heappop(self._timers)
            if self._scheduled.get(group_id) != deadline:
                continue  # superseded by an earlier deadline, already handled
            del self._scheduled[group_id]
            # a group with a write in flight runs its timers right after it, never skips
            # them (a busy group would starve its session timeouts)
            self._gated(
                group_id,
                functools.partial(self._tick_group_id, group_id, now_ms),
                lambda _code: None,  # queue full: `_release` schedules it again
            )

    def _tick_group_id(self, group_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self.tick_group(group, now_ms)
            self._schedule(group)
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            self.tick_consumer_group(consumer, now_ms)
            self._schedule(consumer)

    # ------------------------------------------------------------------ loading
    def replay(
        self, record: OffsetRecord | GroupRecord, producer_id: int = -1, offset: int = -1
    ) -> None:
        """Apply one record of the partition, in log order (loading): ``offset`` is its
        log offset, ``producer_id`` its producer's when its batch is transactional (an
        offset commit of a transaction: pending until the producer's marker,
        `replay_marker`)."""
        if isinstance(record, OffsetRecord):
            group: ClassicGroup | ConsumerGroup | None = self.consumer_groups.get(record.group)
            if group is None:
                group = self.groups.get(record.group)
            key = (record.topic, record.partition)
            if record.value is None:
                if group is not None:
                    group.offsets.pop(key, None)
                self.drop_pending(record.group, [key])
                return
            if producer_id >= 0:
                self.replay_txn_offset(producer_id, record.group, key, record.value, offset)
                return
            if group is None:
                group = self.groups[record.group] = ClassicGroup(record.group)
            group.offsets[key] = dataclasses.replace(record.value, record_offset=offset)
            return
        if record.value is None:
            gone = self.groups.pop(record.group, None)
            if gone is not None and gone.offsets:
                # offsets outlive the group record until their own tombstones (a classic
                # group that became a consumer group keeps them)
                self.groups[record.group] = ClassicGroup(record.group)
                self.groups[record.group].offsets = gone.offsets
            return
        stored = record.value
        old: ClassicGroup | ConsumerGroup | None = self.groups.get(record.group)
        if old is None:  # a classic group record after a consumer group's (a conversion)
            old = self.consumer_groups.pop(record.group, None)
        group = ClassicGroup(record.group, state_timestamp_ms=stored.current_state_timestamp_ms)
        if old is not None:
            group.offsets = old.offsets
        group.protocol_type = stored.protocol_type or None
        group.protocol_name = stored.protocol
        group.generation = stored.generation
        for sm in stored.members:
            group.add(
                Member(
                    member_id=sm.member_id,
                    group_instance_id=sm.group_instance_id,
                    client_id=sm.client_id,
                    client_host=sm.client_host,
                    rebalance_timeout_ms=sm.rebalance_timeout_ms,
                    session_timeout_ms=sm.session_timeout_ms,
                    protocol_type=stored.protocol_type,
                    protocols=[(stored.protocol or "", sm.subscription)],
                    assignment=sm.assignment,
                )
            )
        group.leader_id = stored.leader if stored.members else None
        group.state = S.STABLE if stored.members else S.EMPTY
        self.groups[record.group] = group

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """A transaction marker (control batch) of the partition, in log order."""
        self.apply_marker(producer_id, commit)

    def finish_load(self, now_ms: int) -> None:
        """Loaded members get a full session from now (Kafka does the same)."""
        for group in self.groups.values():
            for m in group.members.values():
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            self._schedule(group)
        self.finish_consumer_load(now_ms)

    # ------------------------------------------------------------------ OffsetCommit
    def offset_commit(
        self, reply: Reply, req: Any, now_ms: int, unknown: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Commit, fenced by generation and member; ``unknown`` partitions fail alone.
        The offsets change when the write commits; a failed write answers its error."""
        keys = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        missing = set(unknown)
        self._gated(
            req.group_id,
            lambda: self._offset_commit(reply, req, now_ms, missing),
            lambda code: self._commit_response(reply, dict.fromkeys(keys, code)),
        )

    def _offset_commit(
        self, reply: Reply, req: Any, now_ms: int, missing: set[tuple[str, int]]
    ) -> None:
        group_id = req.group_id
        code = self._commit_code(reply, req, now_ms)
        # OffsetCommit v2-4 may ask for a retention of its own (-1: the broker's)
        retention = req.retention_time_ms if 2 <= reply.version <= 4 else -1
        expire_ms = now_ms + retention if retention >= 0 else -1
        results, commits = split_commits(
            req.topics, code, missing, self.config.offset_metadata_max_bytes, now_ms, expire_ms
        )

        def answer(write_code: ErrorCode) -> None:
            if write_code == E.NONE and commits:
                base = self.written_at
                self._offsets_holder(group_id, now_ms).offsets.update(
                    (key, dataclasses.replace(om, record_offset=base + i if base >= 0 else -1))
                    for i, (key, om) in enumerate(commits.items())
                )
            for key in commits:
                results[key] = write_code
            self._commit_response(reply, results)

        records: list[Record] = [
            (offset_commit_key(group_id, t, p), offset_commit_value(v))
            for (t, p), v in commits.items()
        ]
        self._write_gated(group_id, records, answer)

    def _commit_code(self, reply: Reply, req: Any, now_ms: int) -> ErrorCode:
        generation = req.generation_id_or_member_epoch if reply.version >= 1 else -1
        member_id = req.member_id if reply.version >= 1 else ""
        if not req.group_id:
            return E.INVALID_GROUP_ID
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None:
            return self.consumer_commit_check(
                consumer, member_id, generation, reply.version, now_ms
            )
        group = self.groups.get(req.group_id)
        if group is None:  # an admin commit creates the group (once it is written)
            return E.NONE if generation < 0 else E.ILLEGAL_GENERATION
        return self._commit_check(group, member_id, req.group_instance_id, generation, now_ms)

    def _offsets_holder(self, group_id: str, now_ms: int) -> ClassicGroup | ConsumerGroup:
        """The group whose offsets a committed write changes (a new classic group for an
        admin commit to an unknown id)."""
        group: ClassicGroup | ConsumerGroup | None = self.consumer_groups.get(group_id)
        if group is None:
            group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        return group

    def _commit_response(self, reply: Reply, results: dict[tuple[str, int], ErrorCode]) -> None:
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), c in results.items():
            by_topic.setdefault(topic, []).append(
                OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=index, error_code=int(c)
                )
            )
        self._respond(
            reply,
            OffsetCommitResponse(
                throttle_time_ms=0,
                topics=[
                    OffsetCommitResponse.OffsetCommitResponseTopic(name=n, partitions=ps)
                    for n, ps in by_topic.items()
                ],
            ),
        )

    def _commit_check(
        self, group: ClassicGroup, member_id: str, instance: str | None, generation: int, now: int
    ) -> ErrorCode:
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.static_member_fenced(member_id, instance):
            return E.FENCED_INSTANCE_ID
        if generation < 0 and group.state is S.EMPTY:
            return E.NONE  # an admin / manual-assignment commit
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state is S.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now + member.session_timeout_ms  # a commit is alive
        self._schedule(group)
        return E.NONE

    # ------------------------------------------------------------------ OffsetFetch
    def offset_fetch(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResponse.OffsetFetchResponseGroup:
        """One group's committed offsets (all of them when ``topics`` is None), in the
        v8+ shape; partitions without a commit answer offset -1. ``require_stable``
        (OffsetFetch v7+): a partition with pending transactional offsets answers
        UNSTABLE_OFFSET_COMMIT, as Kafka's fetchOffsets does (the client retries)."""
        group: ClassicGroup | ConsumerGroup | None = self.consumer_groups.get(group_id)
        if group is None:
            group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        wanted: dict[str, list[int]] = {}
        if topics is None:
            for topic, index in sorted(offsets):
                wanted.setdefault(topic, []).append(index)
        else:
            for name, parts in topics:
                wanted.setdefault(name, []).extend(parts)
        out = []
        for name, parts in wanted.items():
            rows = []
            for index in parts:
                om = offsets.get((name, index))
                if require_stable and self.has_pending(group_id, (name, index)):
                    rows.append(_unstable(index))
                    continue
                rows.append(
                    OffsetFetchResponse.OffsetFetchResponsePartitions(
                        partition_index=index,
                        committed_offset=om.offset if om is not None else -1,
                        committed_leader_epoch=om.leader_epoch if om is not None else -1,
                        metadata=om.metadata if om is not None else "",
                        error_code=0,
                    )
                )
            out.append(OffsetFetchResponse.OffsetFetchResponseTopics(name=name, partitions=rows))
        return OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=group_id, topics=out, error_code=0
        )

    # ------------------------------------------------------------------ admin
    def list_groups(self, states: set[str] | None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, filtered by state name
        (case-insensitive, as Kafka)."""
        wanted = {s.lower() for s in states} if states else None
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if g.state is not S.DEAD and (wanted is None or g.state.value.lower() in wanted)
        ]

    def describe_group(self, group_id: str) -> DescribeGroupsResponse.DescribedGroup:
        if group_id in self.consumer_groups:
            return self.describe_consumer_group_classic(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return DescribeGroupsResponse.DescribedGroup(
                error_code=0,
                group_id=group_id,
                group_state=S.DEAD.value,
                protocol_type="",
                protocol_data="",
                members=[],
                authorized_operations=_OPERATIONS_OMITTED,
            )
        stable = group.state is S.STABLE
        members = [
            DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return DescribeGroupsResponse.DescribedGroup(
            error_code=0,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
            authorized_operations=_OPERATIONS_OMITTED,
        )

    def delete_group(self, reply: Reply, group_id: str, now_ms: int) -> None:
        """DeleteGroups of one group: answers an ErrorCode once its tombstones are written
        (a failed write: its error, and the group stays)."""
        self._gated(
            group_id,
            lambda: self._delete_group(reply, group_id, now_ms),
            lambda code: self._respond(reply, answer_error(code)),
        )

    def _delete_group(self, reply: Reply, group_id: str, now_ms: int) -> None:
        if group_id in self.consumer_groups:
            return self.delete_consumer_group(reply, group_id)
        group = self.groups.get(group_id)
        if group is None or group.state is S.DEAD:
            self._respond(reply, E.GROUP_ID_NOT_FOUND)
            return
        if group.state is not S.EMPTY:
            self._respond(reply, E.NON_EMPTY_GROUP)
            return
        # Kafka's deleteAllOffsets: a tombstone for each partition with only pending
        # transactional offsets too (it drops them)
        keys = list(group.offsets)
        keys += [k for k in self.pending_keys(group_id) if k not in group.offsets]
        records = self._tombstones(group, keys)
        records.append((group_metadata_key(group_id), None))
        self._write_gated(group_id, records, self._deleting(group, now_ms, reply))

    def _deleting(
        self, group: ClassicGroup, now_ms: int, reply: Reply | None = None
    ) -> Callable[[ErrorCode], None]:
        """Dead at once (a JoinGroup meanwhile is COORDINATOR_NOT_AVAILABLE, as in
        Kafka); forgotten once the tombstones commit, back as it was if they fail."""
        state, since = group.state, group.state_timestamp_ms
        group.transition(S.DEAD, now_ms)

        def done(code: ErrorCode) -> None:
            if code == E.NONE:
                if self.groups.get(group.group_id) is group:
                    del self.groups[group.group_id]
                self.drop_pending(group.group_id, self.pending_keys(group.group_id))
            else:
                group.state, group.state_timestamp_ms = state, since
            if reply is not None:
                self._respond(reply, answer_error(code))

        return done

    def _tombstones(
        self, group: ClassicGroup | ConsumerGroup, keys: Iterable[tuple[str, int]]
    ) -> list[Record]:
        return [(offset_commit_key(group.group_id, t, p), None) for t, p in keys]

    def offset_delete(self, reply: Reply, req: Any) -> None:
        self._gated(
            req.group_id,
            lambda: self._offset_delete(reply, req),
            lambda code: self._respond(
                reply, OffsetDeleteResponse(error_code=int(code), throttle_time_ms=0, topics=[])
            ),
        )

    def _offset_delete(self, reply: Reply, req: Any) -> None:
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None:
            subscribed = consumer.subscribed_names() | set(consumer.subscription_metadata)
            return self._delete_offsets(reply, req, consumer, subscribed)
        group = self.groups.get(req.group_id)
        if group is None or group.state is S.DEAD:
            self._respond(
                reply,
                OffsetDeleteResponse(
                    error_code=int(E.GROUP_ID_NOT_FOUND), throttle_time_ms=0, topics=[]
                ),
            )
            return
        if group.state is not S.EMPTY and group.protocol_type != "consumer":
            self._respond(
                reply,
                OffsetDeleteResponse(
                    error_code=int(E.NON_EMPTY_GROUP), throttle_time_ms=0, topics=[]
                ),
            )
            return
        known = group.subscribed_topics() if group.state is not S.EMPTY else set()
        return self._delete_offsets(reply, req, group, known)

    def _delete_offsets(
        self,
        reply: Reply,
        req: Any,
        group: ClassicGroup | ConsumerGroup,
        subscribed: set[str] | None,
    ) -> None:
        deleted: list[tuple[str, int]] = []
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code = E.NONE
                if subscribed is None or t.name in subscribed:
                    code = E.GROUP_SUBSCRIBED_TO_TOPIC
                elif (t.name, p.partition_index) in group.offsets or self.has_pending(
                    group.group_id, (t.name, p.partition_index)
                ):
                    deleted.append((t.name, p.partition_index))
                parts.append(
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=int(code)
                    )
                )
            topics.append(
                OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=parts)
            )
        response = OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=topics)

        def answer(code: ErrorCode) -> None:
            if code == E.NONE:
                for key in deleted:
                    group.offsets.pop(key, None)
                self.drop_pending(group.group_id, deleted)
            else:
                response.error_code = int(answer_error(code))
            self._respond(reply, response)

        self._write_gated(group.group_id, self._tombstones(group, deleted), answer)

    # ------------------------------------------------------------------ retention
    def expire_offsets(self, now_ms: int) -> int:
        """Drop expired offsets (``offsets.retention.minutes``) and groups left with
        nothing: one write per group (a group with a write in flight waits for the next
        check); the offsets go when it commits. Returns how many offsets it expires."""
        retention = self.config.offsets_retention_ms
        expired = 0
        for group in list(self.groups.values()):
            if group.state is not S.EMPTY or self.busy(group.group_id):
                continue  # a group with members keeps its offsets (Kafka 2.1+)
            standalone = group.protocol_type is None
            gone = []
            for key, om in group.offsets.items():
                if om.expire_timestamp_ms >= 0:
                    due = om.expire_timestamp_ms
                elif standalone:
                    due = om.commit_timestamp_ms + retention
                else:
                    due = max(group.state_timestamp_ms, 0) + retention
                # an offset with pending transactional ones waits for them (Kafka)
                if due <= now_ms and not self.has_pending(group.group_id, key):
                    gone.append(key)
            expired += len(gone)
            self._expire(group, gone, now_ms)
        return expired + self.expire_consumer_offsets(now_ms, retention)

    def _expire(self, group: ClassicGroup, gone: list[tuple[str, int]], now_ms: int) -> None:
        records = self._tombstones(group, gone)
        forget = (
            not group.members
            and len(gone) == len(group.offsets)
            and not self.has_open_txns(group.group_id)
        )
        deleting = self._deleting(group, now_ms) if forget else None
        if forget:
            records.append((group_metadata_key(group.group_id), None))

        def done(code: ErrorCode) -> None:
            if code == E.NONE:
                for key in gone:
                    group.offsets.pop(key, None)
            if deleting is not None:
                deleting(code)

        self._write_gated(group.group_id, records, done)
