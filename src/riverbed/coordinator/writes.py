"""A shard's writes: one write in flight per group, and no trace of a failed write.

Kafka's coordinator runtime applies an operation's records at once and, when their
write fails, "reverts the state machine to the last committed offset" (its timeline
structures: ``TimelineHashMap`` under a ``SnapshotRegistry``, reverted to the offset
before the failed write); a write operation without records waits for the pending
writes before it answers, so that no answer reveals an uncommitted state. riverbed does
the equivalent per group, with two rules (`GroupWrites`):

1. **One write in flight per group.** An operation on a group whose last write has not
   completed is queued (at most ``GROUP_QUEUED_OPS_MAX``; COORDINATOR_NOT_AVAILABLE
   beyond) and runs when that write completes. An operation therefore always starts
   from the group's committed state, and an answer without records (a heartbeat that
   changes nothing) never tells a client what no committed record holds.
2. **A failed write leaves the group as its committed records say, and the answer is
   the write's error** (as Kafka maps it, `answer_error`). Operations that only add or remove offsets or whole groups
   (OffsetCommit, OffsetDelete, DeleteGroups, offset expiry, a conversion to a classic
   group) change memory only once their write commits. Operations whose records are
   computed by changing the group in place (ConsumerGroupHeartbeat, a leave, the
   timers' removals) take a `GroupSnapshot` first (a copy of the group's containers and
   of the members the operation may change; immutable assignments and the offsets are
   shared, since nothing else may change them while the write is in flight) and put it
   back when the write fails. A timer due while its group has a write in flight runs
   right after that write (queued like any operation: skipping it could starve a busy
   group's session timeouts); a failed timer write is tried again after
   ``TIMER_RETRY_BACKOFF_MS`` (Kafka's coordinator timers retry after 500 ms).

Snapshot rather than replay-on-commit because the KIP-848 operations read their own
changes as they go (a new member's epoch feeds the target, the target feeds the
reconciliation); with rule 1 a snapshot is needed for one write per group at a time.
The simulation (`riverbed.testing.group_sim`) checks after every step that the memory
equals a replay of the committed records.

The shell reports a write as failed only when its records will never commit from this
leader (refused before the append, or the partition's leadership is gone); a write
whose acknowledgement timed out after the append is in doubt: the shell answers it
through `complete_write` (REQUEST_TIMED_OUT), refuses whatever the shard writes next
(it would build on a state the log may contradict) and reloads the shard from the log.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from riverbed.coordinator.consumer_group import ConsumerGroup
from riverbed.coordinator.group import ClassicGroup, Reply
from riverbed.protocol.errors import ErrorCode

E = ErrorCode
Record = tuple[bytes, bytes | None]
#: Operations waiting for one group's write (heartbeats, commits...): beyond, refused.
GROUP_QUEUED_OPS_MAX = 1024
#: A timer's write that failed is tried again this much later (Kafka's retry back-off).
TIMER_RETRY_BACKOFF_MS = 500


def answer_error(code: ErrorCode) -> ErrorCode:
    """A failed write as the answer to a heartbeat, a join or an admin operation, as
    Kafka's GroupCoordinatorService maps it: a timeout is COORDINATOR_NOT_AVAILABLE (a
    KIP-848 consumer takes REQUEST_TIMED_OUT in a heartbeat for a fatal error; this one
    it retries after finding the coordinator again). OffsetCommit keeps the classic
    coordinator's REQUEST_TIMED_OUT, which consumers retry."""
    return E.COORDINATOR_NOT_AVAILABLE if code == E.REQUEST_TIMED_OUT else code


@dataclass(slots=True)
class Write:
    """Records the shell appends as one batch. A TxnOffsetCommit's write carries its
    producer: the batch is transactional, with that producer id and epoch."""

    token: int
    records: list[Record] = field(default_factory=list)
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group id's state before an in-place operation: its consumer group (a copy) and
    its classic group (a conversion only moves it, never changes it)."""

    group_id: str
    consumer: ConsumerGroup | None
    classic: ClassicGroup | None


def copy_consumer_group(group: ConsumerGroup, member_ids: set[str] | None) -> ConsumerGroup:
    """A copy that the operation's in-place changes do not reach: the containers, and
    the members in ``member_ids`` (None: every member)."""
    members = {
        mid: dataclasses.replace(m) if member_ids is None or mid in member_ids else m
        for mid, m in group.members.items()
    }
    return dataclasses.replace(
        group,
        members=members,
        static_members=dict(group.static_members),
        target=dict(group.target),
        subscription_metadata=dict(group.subscription_metadata),
        owners=dict(group.owners),
    )


@dataclass(slots=True)
class _Waiting:
    run: Callable[[], None]
    reject: Callable[[ErrorCode], None]


class GroupWrites:
    """The outbox, the writes and the per-group gate of `GroupShard`."""

    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    _schedule: Callable[[Any], None]

    def _init_writes(self) -> None:
        self._outbox: list[tuple[Reply, Any]] = []
        self._writes: list[Write] = []
        self._on_written: dict[int, Callable[[ErrorCode], None]] = {}
        self._next_token = 0
        #: the first log offset of the write being completed (-1: unknown)
        self.written_at = -1
        #: group id -> operations waiting for its write in flight.
        self._gates: dict[str, deque[_Waiting]] = {}

    def take_output(self) -> tuple[list[tuple[Reply, Any]], list[Write]]:
        out, writes = self._outbox, self._writes
        self._outbox, self._writes = [], []
        return out, writes

    def _respond(self, reply: Reply, response: Any) -> None:
        self._outbox.append((reply, response))

    def _write(
        self,
        records: list[Record],
        done: Callable[[ErrorCode], None],
        producer: tuple[int, int] = (-1, -1),
    ) -> int:
        """A write outside the gate (the classic membership's group records); returns
        its token."""
        self._next_token += 1
        self._writes.append(Write(self._next_token, records, *producer))
        self._on_written[self._next_token] = done
        return self._next_token

    def complete_write(self, token: int, code: ErrorCode, base_offset: int = -1) -> None:
        """The write ``token`` committed (NONE) or will never commit (an error);
        ``base_offset`` is the log offset of its first record (its records follow)."""
        done = self._on_written.pop(token, None)
        if done is not None:
            self.written_at = base_offset
            try:
                done(code)
            finally:
                self.written_at = -1

    def pending_writes(self) -> int:
        return len(self._on_written)

    # ------------------------------------------------------------------ the gate
    def busy(self, group_id: str) -> bool:
        return group_id in self._gates

    def _gated(
        self, group_id: str, run: Callable[[], None], reject: Callable[[ErrorCode], None]
    ) -> None:
        """Run ``run`` now, or once the group's write in flight completes."""
        waiting = self._gates.get(group_id)
        if waiting is None:
            run()
        elif len(waiting) >= GROUP_QUEUED_OPS_MAX:
            reject(E.COORDINATOR_NOT_AVAILABLE)
        else:
            waiting.append(_Waiting(run, reject))

    def _write_gated(
        self,
        group_id: str,
        records: list[Record],
        done: Callable[[ErrorCode], None],
        undo: GroupSnapshot | None = None,
        producer: tuple[int, int] = (-1, -1),
    ) -> int:
        """The group's one write in flight: ``undo`` goes back when it fails, then
        ``done(code)`` answers (and, on success, applies what waited for the commit).
        Returns its token (0: nothing to write, answered at once)."""
        if not records:
            done(E.NONE)
            return 0
        assert group_id not in self._gates, f"two writes in flight for group {group_id}"
        self._gates[group_id] = deque()

        def finish(code: ErrorCode) -> None:
            if code != E.NONE and undo is not None:
                self._restore(undo)
            done(code)
            self._release(group_id)

        return self._write(records, finish, producer)

    def _release(self, group_id: str) -> None:
        waiting = self._gates.pop(group_id)
        while waiting:
            waiting.popleft().run()
            gate = self._gates.get(group_id)
            if gate is not None:  # it wrote: the rest waits for that write
                gate.extend(waiting)
                return
        group: ConsumerGroup | ClassicGroup | None = self.consumer_groups.get(group_id)
        if group is None:
            group = self.groups.get(group_id)
        if group is not None:
            self._schedule(group)  # timers skipped while the write was in flight

    # ------------------------------------------------------------------ snapshots
    def _snapshot(self, group_id: str, member_ids: set[str] | None) -> GroupSnapshot:
        consumer = self.consumer_groups.get(group_id)
        return GroupSnapshot(
            group_id,
            copy_consumer_group(consumer, member_ids) if consumer is not None else None,
            self.groups.get(group_id),
        )

    def _restore(self, snap: GroupSnapshot) -> None:
        gid = snap.group_id
        if snap.consumer is None:
            self.consumer_groups.pop(gid, None)
        else:
            self.consumer_groups[gid] = snap.consumer
        if snap.classic is None:
            self.groups.pop(gid, None)
        else:
            self.groups[gid] = snap.classic
