"""Transactional offset commits (KIP-98, KIP-447): TxnOffsetCommit, pending offsets, markers.

A mixin of `GroupShard`, following Kafka's group coordinator (``OffsetMetadataManager``):

- TxnOffsetCommit is validated like an OffsetCommit of the group except that the group's
  state is not enforced ("this does not apply to transactional offset commits, since the
  older versions of this protocol do not require member id and generation id"): a Dead
  classic group is COORDINATOR_NOT_AVAILABLE; generation -1 with no member id and no
  instance id (every v0-2 request) is taken; otherwise (KIP-447, v3+) the member must be
  known (UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID for an instance id bound to another member)
  and the generation current (ILLEGAL_GENERATION). An unknown group takes generation -1
  only (it becomes a simple group); a KIP-848 group checks the member epoch and a stale
  one is ILLEGAL_GENERATION.
- Its records are one transactional batch of the producer (`Write.producer_id`). Once
  written they are *pending* for that producer id, invisible to OffsetFetch, which answers
  UNSTABLE_OFFSET_COMMIT for such a partition when asked for stable offsets (v7+).
- The producer's marker on this partition ends them: COMMIT materialises them, but "we
  always keep the most recent committed offset when we have a mix of transactional and
  regular offset commits" (the later record offset wins); ABORT drops them. A marker that
  follows the append of a write still in flight decides that write's offsets when it
  completes (its records precede the marker in the log).
- An offset tombstone (OffsetDelete, DeleteGroups) drops the pending offsets of its
  partition too, and DeleteGroups writes one for a partition with only pending offsets;
  expiry keeps an offset with pending ones, and a group with open transactions.

Loading replays the same from the log: a transactional offset record is pending until its
producer's control batch (`replay_txn_offset`, `apply_marker`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from riverbed.coordinator.consumer_group import ConsumerGroup
from riverbed.coordinator.group import ClassicGroup, GroupState, Reply
from riverbed.coordinator.records import OffsetAndMetadata, offset_commit_key, offset_commit_value
from riverbed.coordinator.writes import answer_error
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import TxnOffsetCommitResponse

E = ErrorCode
Tp = tuple[str, int]
#: (group, topic, partition) of a pending offset.
TxnKey = tuple[str, str, int]
#: Pending transactional offsets one shard holds (all producers and groups): a
#: TxnOffsetCommit that would add more is COORDINATOR_NOT_AVAILABLE (clients retry) until
#: markers end transactions (the transaction coordinator aborts the timed-out ones).
TXN_PENDING_OFFSETS_MAX = 100_000
#: The TxnOffsetCommit version that carries generation, member id and instance id.
TXN_MEMBER_VERSION = 3


class TxnOffsets:
    """Pending transactional offsets of one shard (see the module docstring)."""

    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    config: Any
    written_at: int
    _respond: Callable[[Reply, Any], None]
    _gated: Callable[..., None]
    _write_gated: Callable[..., int]
    _offsets_holder: Callable[[str, int], ClassicGroup | ConsumerGroup]

    def _init_txn_offsets(self) -> None:
        #: producer id -> (group, topic, partition) -> its pending offset
        self.pending_txn: dict[int, dict[TxnKey, OffsetAndMetadata]] = {}
        #: group -> partition -> producer ids with a pending offset for it
        self._open_txns: dict[str, dict[Tp, set[int]]] = {}
        self._pending_count = 0
        #: producer id -> token of each TxnOffsetCommit write in flight -> the result of
        #: the first marker appended after it (None: none yet)
        self._txn_in_flight: dict[int, dict[int, bool | None]] = {}

    # ------------------------------------------------------------------ queries
    def has_pending(self, group_id: str, tp: Tp) -> bool:
        return bool(self._open_txns.get(group_id, {}).get(tp))

    def has_open_txns(self, group_id: str) -> bool:
        return group_id in self._open_txns

    def pending_keys(self, group_id: str) -> list[Tp]:
        return list(self._open_txns.get(group_id, ()))

    def pending_count(self) -> int:
        return self._pending_count

    # ------------------------------------------------------------------ TxnOffsetCommit
    def txn_offset_commit(
        self, reply: Reply, req: Any, now_ms: int, unknown: Iterable[Tp] = ()
    ) -> None:
        """TxnOffsetCommit v0-5: ``unknown`` partitions fail alone; the offsets become
        pending for the producer once the write commits."""
        keys = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        missing = set(unknown)
        self._gated(
            req.group_id,
            lambda: self._txn_offset_commit(reply, req, now_ms, missing),
            lambda code: self._txn_response(reply, {key: code for key in keys}),
        )

    def _txn_offset_commit(self, reply: Reply, req: Any, now_ms: int, missing: set[Tp]) -> None:
        group_id, pid = req.group_id, req.producer_id
        code = self._txn_commit_code(reply.version, req)
        results, commits = split_commits(
            req.topics, code, missing, self.config.offset_metadata_max_bytes, now_ms
        )
        held = self.pending_txn.get(pid, {})
        added = sum((group_id, *key) not in held for key in commits)
        if added and self._pending_count + added > TXN_PENDING_OFFSETS_MAX:
            results.update(dict.fromkeys(commits, E.COORDINATOR_NOT_AVAILABLE))
            commits = {}
        if not commits:
            self._txn_response(reply, results)
            return
        token = 0

        def answer(write_code: ErrorCode) -> None:
            flight = self._txn_in_flight.get(pid, {})
            decided = flight.pop(token, None)
            if not flight:
                self._txn_in_flight.pop(pid, None)
            if write_code == E.NONE:
                self._offsets_holder(group_id, now_ms)  # a simple group, as the replay makes
                placed = _placed(commits, self.written_at)
                if decided is None:
                    for key, om in placed.items():
                        self._add_pending(pid, group_id, key, om)
                elif decided:
                    self._materialize(group_id, placed)
            for key in commits:
                results[key] = answer_error(write_code)
            self._txn_response(reply, results)

        records = [
            (offset_commit_key(group_id, t, p), offset_commit_value(v))
            for (t, p), v in commits.items()
        ]
        producer = (pid, req.producer_epoch)
        token = self._write_gated(group_id, records, answer, producer=producer)
        self._txn_in_flight.setdefault(pid, {})[token] = None

    def _txn_commit_code(self, version: int, req: Any) -> ErrorCode:
        """Kafka's validateOffsetCommit with isTransactional (see the module docstring)."""
        if not req.group_id:
            return E.INVALID_GROUP_ID
        member_fields = version >= TXN_MEMBER_VERSION
        generation = req.generation_id if member_fields else -1
        member_id = req.member_id if member_fields else ""
        instance = req.group_instance_id if member_fields else None
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None:
            if generation < 0 and not consumer.members:
                return E.NONE
            member = consumer.members.get(member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID
            # Kafka turns the STALE_MEMBER_EPOCH of a transactional commit into this
            return E.ILLEGAL_GENERATION if generation != member.member_epoch else E.NONE
        group = self.groups.get(req.group_id)
        if group is None:
            return E.NONE if generation < 0 else E.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is GroupState.EMPTY:
            return E.NONE
        if generation >= 0 or member_id or instance is not None:
            if instance is not None:
                bound = group.static_members.get(instance)
                if bound is None:
                    return E.UNKNOWN_MEMBER_ID
                if bound != member_id:
                    return E.FENCED_INSTANCE_ID
            elif member_id not in group.members:
                return E.UNKNOWN_MEMBER_ID
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        return E.NONE

    def _txn_response(self, reply: Reply, results: dict[Tp, ErrorCode]) -> None:
        R = TxnOffsetCommitResponse
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), c in results.items():
            by_topic.setdefault(topic, []).append(
                R.TxnOffsetCommitResponsePartition(partition_index=index, error_code=int(c))
            )
        topics = [
            R.TxnOffsetCommitResponseTopic(name=n, partitions=ps) for n, ps in by_topic.items()
        ]
        self._respond(reply, R(throttle_time_ms=0, topics=topics))

    # ------------------------------------------------------------------ pending state
    def _add_pending(self, pid: int, group_id: str, tp: Tp, om: OffsetAndMetadata) -> None:
        offsets = self.pending_txn.setdefault(pid, {})
        if (group_id, *tp) not in offsets:
            self._pending_count += 1
        offsets[(group_id, *tp)] = om
        self._open_txns.setdefault(group_id, {}).setdefault(tp, set()).add(pid)

    def replay_txn_offset(
        self, pid: int, group_id: str, tp: Tp, om: OffsetAndMetadata, record_offset: int
    ) -> None:
        """A transactional offset record of the log (loading): pending until its marker."""
        self._offsets_holder(group_id, -1)
        self._add_pending(pid, group_id, tp, dataclasses.replace(om, record_offset=record_offset))

    def drop_pending(self, group_id: str, keys: list[Tp]) -> None:
        """An offset tombstone: the partition's pending offsets go with it (Kafka)."""
        open_tps = self._open_txns.get(group_id)
        if not open_tps:
            return
        for tp in keys:
            for pid in open_tps.pop(tp, ()):
                offsets = self.pending_txn.get(pid)
                if offsets is not None and offsets.pop((group_id, *tp), None) is not None:
                    self._pending_count -= 1
                    if not offsets:
                        del self.pending_txn[pid]
        if not open_tps:
            del self._open_txns[group_id]

    def apply_marker(self, pid: int, commit: bool) -> None:
        """The producer's COMMIT / ABORT marker was appended to this partition (or is
        replayed): its pending offsets become committed offsets or are dropped; writes
        of it still in flight (appended before the marker) get the same result."""
        for token, decided in self._txn_in_flight.get(pid, {}).items():
            if decided is None:
                self._txn_in_flight[pid][token] = commit
        pending = self.pending_txn.pop(pid, None)
        if not pending:
            return
        self._pending_count -= len(pending)
        by_group: dict[str, dict[Tp, OffsetAndMetadata]] = {}
        for (group_id, topic, index), om in pending.items():
            open_tps = self._open_txns.get(group_id, {})
            pids = open_tps.get((topic, index), set())
            pids.discard(pid)
            if not pids:
                open_tps.pop((topic, index), None)
            if not open_tps:
                self._open_txns.pop(group_id, None)
            by_group.setdefault(group_id, {})[(topic, index)] = om
        if commit:
            for group_id, offsets in by_group.items():
                self._materialize(group_id, offsets)

    def _materialize(self, group_id: str, offsets: dict[Tp, OffsetAndMetadata]) -> None:
        holder = self._offsets_holder(group_id, -1)
        for tp, om in offsets.items():
            current = holder.offsets.get(tp)
            if current is None or om.record_offset > current.record_offset:
                holder.offsets[tp] = om


def split_commits(
    topics: Any,
    code: ErrorCode,
    missing: set[Tp],
    metadata_max_bytes: int,
    now_ms: int,
    expire_ms: int = -1,
) -> tuple[dict[Tp, ErrorCode], dict[Tp, OffsetAndMetadata]]:
    """An (Txn)OffsetCommit's partitions: the error of each, and the offsets to write
    (``code`` fails them all; unknown partitions and metadata too large fail alone)."""
    results: dict[Tp, ErrorCode] = {}
    commits: dict[Tp, OffsetAndMetadata] = {}
    for t in topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if code != E.NONE:
                results[key] = code
            elif key in missing:
                results[key] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > metadata_max_bytes:
                results[key] = E.OFFSET_METADATA_TOO_LARGE
            else:
                commits[key] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch,
                    metadata=metadata,
                    commit_timestamp_ms=now_ms,
                    expire_timestamp_ms=expire_ms,
                )
                results[key] = E.NONE
    return results, commits


def _placed(offsets: dict[Tp, OffsetAndMetadata], base: int) -> dict[Tp, OffsetAndMetadata]:
    """The offsets of a write with the log offsets of their records (-1: unknown)."""
    return {
        tp: dataclasses.replace(om, record_offset=base + i if base >= 0 else -1)
        for i, (tp, om) in enumerate(offsets.items())
    }
