"""A driver for one `GroupShard` in tests: builds requests, completes writes, collects
replies; `replay_log` rebuilds a shard from records and `group_state` is what a replay
must reproduce (the groups' persisted state)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.coordinator.consumer_protocol import encode_assignment, encode_subscription
from riverbed.coordinator.consumer_records import parse_consumer_record
from riverbed.coordinator.group import Reply
from riverbed.coordinator.records import parse_record
from riverbed.coordinator.shard import GroupConfig, GroupShard, Write
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A record of a transactional batch (a TxnOffsetCommit's) in a model log."""

    key: bytes
    value: bytes | None
    producer_id: int


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT / ABORT control batch of a producer in a model log."""

    producer_id: int
    commit: bool


#: One entry of a model ``__consumer_offsets`` log (its index is its offset).
LogEntry = tuple[bytes, bytes | None] | TxnRecord | TxnMarker


def write_entries(write: Write) -> list[LogEntry]:
    """The log entries a write appends (transactional when it has a producer)."""
    if write.producer_id < 0:
        return list(write.records)
    return [TxnRecord(k, v, write.producer_id) for k, v in write.records]


CONFIG = GroupConfig(
    initial_rebalance_delay_ms=0,
    min_session_timeout_ms=100,
    max_session_timeout_ms=60_000,
)


def join_req(
    group: str = "g",
    member_id: str = "",
    *,
    session_ms: int = 1000,
    rebalance_ms: int = 2000,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    topics: tuple[str, ...] = ("t",),
) -> JoinGroupRequest:
    protos = protocols or [("range", encode_subscription(list(topics)))]
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protos
        ],
    )


class Harness:
    """Drives a shard like the shell does; writes complete at once unless held."""

    def __init__(self, config: GroupConfig = CONFIG, seed: int = 0) -> None:
        self.shard = GroupShard(0, config, random.Random(seed))
        self.now = 1_000_000
        self.replies: dict[int, Any] = {}
        self.answered: list[int] = []
        self.next_id = 0
        self.hold_writes = False
        self.held: list[Write] = []
        self.log: list[LogEntry] = []

    def reply(self, version: int) -> Reply:
        self.next_id += 1
        return Reply(self.next_id, version)

    def flush(self) -> None:
        while True:
            out, writes = self.shard.take_output()
            if not out and not writes:
                return
            for r, resp in out:
                assert r.id not in self.replies, f"reply {r.id} answered twice"
                self.replies[r.id] = resp
                self.answered.append(r.id)
            for w in writes:
                if self.hold_writes:
                    self.held.append(w)
                else:
                    base = len(self.log)
                    self.log.extend(write_entries(w))
                    self.shard.complete_write(w.token, ErrorCode.NONE, base)

    def release(self, code: ErrorCode = ErrorCode.NONE) -> None:
        held, self.held = self.held, []
        for w in held:
            base = len(self.log)
            if code == ErrorCode.NONE:
                self.log.extend(write_entries(w))
            self.shard.complete_write(w.token, code, base)
        self.flush()

    def marker(self, producer_id: int, commit: bool) -> None:
        """A transaction marker appended to the partition (WriteTxnMarkers)."""
        self.log.append(TxnMarker(producer_id, commit))
        self.shard.apply_marker(producer_id, commit)
        self.flush()

    def txn_commit(
        self,
        producer_id: int,
        offsets: dict[tuple[str, int], int],
        *,
        version: int = 4,
        group: str = "g",
        member: str = "",
        generation: int = -1,
        instance: str | None = None,
        metadata: str = "",
    ) -> int:
        req = txn_commit_req(
            producer_id, offsets, group, member, generation, instance, metadata=metadata
        )
        return self.run(lambda r: self.shard.txn_offset_commit(r, req, self.now), version)

    def run(self, op: Any, version: int) -> int:
        r = self.reply(version)
        op(r)
        self.flush()
        return r.id

    def join(self, req: JoinGroupRequest, version: int = 9, client: str = "c") -> int:
        return self.run(lambda r: self.shard.join_group(r, req, client, "/h", self.now), version)

    def sync(
        self,
        member: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        group: str = "g",
        instance: str | None = None,
    ) -> int:
        req = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member,
            group_instance_id=instance,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return self.run(lambda r: self.shard.sync_group(r, req, self.now), 5)

    def heartbeat(
        self, member: str, generation: int, group: str = "g", instance: str | None = None
    ) -> Any:
        req = HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member, group_instance_id=instance
        )
        return self.replies[self.run(lambda r: self.shard.heartbeat(r, req, self.now), 4)]

    def leave(self, members: list[tuple[str, str | None]], group: str = "g") -> Any:
        req = LeaveGroupRequest(
            group_id=group,
            members=[
                LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i)
                for m, i in members
            ],
        )
        return self.replies[self.run(lambda r: self.shard.leave_group(r, req, self.now), 5)]

    def commit(
        self, member: str, generation: int, offsets: dict[tuple[str, int], int], group: str = "g"
    ) -> int:
        req = commit_req(member, generation, offsets, group, metadata="m")
        return self.run(lambda r: self.shard.offset_commit(r, req, self.now), 8)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.shard.tick(self.now)
        self.flush()

    def join_member(self, group: str = "g", **kw: Any) -> str:
        """A v4+ join: MEMBER_ID_REQUIRED, then the join with the id (parked)."""
        first = self.replies[self.join(join_req(group, **kw))]
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        self.pending = self.join(join_req(group, first.member_id, **kw))
        return str(first.member_id)

    def replay_into_new_shard(self) -> GroupShard:
        fresh = GroupShard(0, self.shard.config, random.Random(1))
        replay_into(fresh, self.log)
        fresh.finish_load(self.now)
        return fresh


def assignment(parts: list[int], topic: str = "t") -> bytes:
    return encode_assignment({topic: parts})


def heartbeat_req(
    member: str,
    epoch: int,
    *,
    group: str = "g",
    topics: list[str] | None = None,
    owned: Mapping[uuid.UUID, Iterable[int]] | None = None,
    instance: str | None = None,
    full: bool = False,
) -> ConsumerGroupHeartbeatRequest:
    """A ConsumerGroupHeartbeat as the Java consumer sends it: a join (epoch 0) carries
    the subscription and no partitions; ``owned`` None leaves TopicPartitions out; ``full``
    sets the rebalance timeout too (with ``topics`` and ``owned``: every field, as the
    consumer sends after a failed heartbeat)."""
    joining = epoch == 0
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        instance_id=instance,
        rebalance_timeout_ms=5000 if joining or full else -1,
        subscribed_topic_names=topics if topics is not None else (["t"] if joining else None),
        topic_partitions=[]
        if joining
        else None
        if owned is None
        else [
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in owned.items()
        ],
    )


def commit_req(
    member: str,
    epoch: int,
    offsets: dict[tuple[str, int], int],
    group: str = "g",
    metadata: str = "",
) -> OffsetCommitRequest:
    topics: dict[str, list[Any]] = {}
    for (t, p), off in sorted(offsets.items()):
        topics.setdefault(t, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_metadata=metadata
            )
        )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
            for t, ps in topics.items()
        ],
    )


def txn_commit_req(
    producer_id: int,
    offsets: dict[tuple[str, int], int],
    group: str = "g",
    member: str = "",
    generation: int = -1,
    instance: str | None = None,
    *,
    epoch: int = 0,
    metadata: str = "",
) -> TxnOffsetCommitRequest:
    R = TxnOffsetCommitRequest
    topics: dict[str, list[Any]] = {}
    for (t, p), off in sorted(offsets.items()):
        topics.setdefault(t, []).append(
            R.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_metadata=metadata
            )
        )
    return R(
        transactional_id=f"tx-{producer_id}",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
        topics=[R.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


def offset_delete_req(group: str, keys: list[tuple[str, int]]) -> OffsetDeleteRequest:
    topics: dict[str, list[Any]] = {}
    for t, p in keys:
        topics.setdefault(t, []).append(
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
        )
    return OffsetDeleteRequest(
        group_id=group,
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(name=t, partitions=ps)
            for t, ps in topics.items()
        ],
    )


def replay_into(shard: GroupShard, records: Iterable[LogEntry], start: int = 0) -> None:
    """Apply log entries in log order, as a coordinator's load does (``start``: the
    offset of the first)."""
    for offset, entry in enumerate(records, start):
        if isinstance(entry, TxnMarker):
            shard.replay_marker(entry.producer_id, entry.commit)
            continue
        pid = -1
        if isinstance(entry, TxnRecord):
            key, value, pid = entry.key, entry.value, entry.producer_id
        else:
            key, value = entry
        parsed = parse_record(key, value)
        if parsed is not None:
            shard.replay(parsed, pid, offset)
            continue
        rec = parse_consumer_record(key, value)
        assert rec is not None, f"unknown record key {key!r}"
        shard.replay_consumer(rec)


def pending_state(shard: GroupShard) -> dict[int, dict[tuple[str, str, int], Any]]:
    """The pending transactional offsets (what a reload must reproduce too)."""
    return {pid: dict(offsets) for pid, offsets in shard.pending_txn.items() if offsets}


def replay_log(records: Iterable[LogEntry], config: GroupConfig, now_ms: int) -> GroupShard:
    """A coordinator that loads ``records`` (a fail-over)."""
    fresh = GroupShard(0, config, random.Random(1))
    replay_into(fresh, records)
    fresh.finish_load(now_ms)
    return fresh


def group_state(shard: GroupShard) -> dict[str, Any]:
    """Everything a reload must reproduce: committed offsets, and the persisted part of
    every KIP-848 group (epochs, targets, members' metadata and assignments) and classic
    group (generation, members, assignments)."""
    out: dict[str, Any] = {}
    for gid, c in shard.groups.items():
        out[gid] = (
            "classic",
            c.generation,
            c.protocol_name,
            sorted((m.member_id, m.assignment) for m in c.members.values()),
            dict(c.offsets),
        )
    for gid, g in shard.consumer_groups.items():
        members = {
            m.member_id: (
                m.member_epoch,
                m.previous_member_epoch,
                m.state,
                m.assigned,
                m.pending_revocation,
                m.metadata_key(),
            )
            for m in g.members.values()
        }
        out[gid] = (
            "consumer",
            g.group_epoch,
            g.assignment_epoch,
            {m: a for m, a in g.target.items() if a},
            g.subscription_metadata,
            members,
            dict(g.offsets),
        )
    return out
