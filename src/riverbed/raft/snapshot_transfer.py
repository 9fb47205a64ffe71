"""Snapshot half of ``RaftNode`` (KIP-630): FetchSnapshot on both sides, snapshot
triggers, and the log begin offset that snapshots let advance.

A mixin of ``RaftNode`` (``riverbed.raft.node``), as the replication, the votes and the
role transitions are; every method runs on a ``RaftNode``.

Follower: a Fetch answered with a snapshot id starts a download with FetchSnapshot
(Position/MaxBytes, continued until Size); the last chunk is validated, fsynced and renamed
by the shell (CompleteSnapshotDownload), and only then does the snapshot replace the log
below its end offset (LoadSnapshot). A failed chunk or a corrupt file drops the partial
download; the next Fetch names the leader's latest snapshot again.

Leader: FetchSnapshot serves chunks of a snapshot it has and is not deleting; a voter
downloading counts as active for check-quorum. The log begin offset moves to a snapshot's
end once every live replica has it or the snapshot is older than max.replication.lag.ms;
older snapshots are then deleted by the shell (DeleteSnapshots), keeping at least one.

Snapshots are taken at the applied offset (whole batches) when the records or bytes since
the last one, or the time, reach their configured bounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.raft.actions import (
    CompleteSnapshotDownload,
    CreateSnapshot,
    DeleteSnapshots,
    LoadSnapshot,
)
from riverbed.raft.messages import (
    Errors,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    SnapshotId,
)
from riverbed.raft.replication import FETCH_ERROR_BACKOFF_MS
from riverbed.raft.roles import Role

if TYPE_CHECKING:
    from riverbed.raft.actions import Action
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.leader_state import LeaderState
    from riverbed.raft.log import RaftLog
    from riverbed.raft.messages import Request
    from riverbed.raft.snapshots import SnapshotStore


class SnapshotTransferMixin:
    if TYPE_CHECKING:  # provided by RaftNode
        node_id: int
        config: RaftConfig
        log: RaftLog
        snapshots: SnapshotStore
        role: Role
        epoch: int
        leader_id: int
        high_watermark: int
        applied_offset: int
        latest_snapshot: SnapshotId | None
        snapshot_in_progress: SnapshotId | None
        snapshot_download: SnapshotId | None
        snapshot_completing: SnapshotId | None
        snapshots_deleting: set[SnapshotId]
        snapshot_created_ms: dict[SnapshotId, int]
        last_snapshot_ms: int
        bytes_since_snapshot: int
        leader_state: LeaderState | None
        fetch_deadline_ms: int
        fetch_in_flight: bool
        fetch_correlation_id: int
        backoff_until_ms: int
        last_leader_contact_ms: int
        _now: int

        def _emit(self, action: Action) -> None: ...
        def _send(self, dest: int, kind: str, request: Request) -> int: ...
        def _maybe_learn(self, epoch: int, leader_id: int) -> None: ...
        def _reject_input(self, src: int, problem: str) -> None: ...

    # ======================================================================================
    # FetchSnapshot: follower side
    # ======================================================================================
    def _send_fetch_snapshot(self) -> None:
        sid = self.snapshot_download
        assert sid is not None
        self.fetch_in_flight = True
        self.fetch_correlation_id = self._send(
            self.leader_id,
            "fetch_snapshot",
            FetchSnapshotRequest(
                cluster_id=self.config.cluster_id,
                replica_id=self.node_id,
                current_leader_epoch=self.epoch,
                snapshot_id=sid,
                position=self.snapshots.partial_size(sid),
                max_bytes=self.config.fetch_snapshot_bytes_max,
            ),
        )

    def _on_fetch_snapshot_response(self, src: int, resp: FetchSnapshotResponse) -> None:
        self._maybe_learn(resp.leader_epoch, resp.leader_id)
        sid = self.snapshot_download
        if sid is None or resp.snapshot_id != sid or self.snapshot_completing is not None:
            return
        if resp.error_code != Errors.NONE:
            # SNAPSHOT_NOT_FOUND / POSITION_OUT_OF_RANGE / NOT_LEADER_OR_FOLLOWER / fenced:
            # drop the partial file and rediscover with a new Fetch (KIP-630)
            self.snapshots.abort_download(sid)
            self.snapshot_download = None
            self.backoff_until_ms = self._now + FETCH_ERROR_BACKOFF_MS
            return
        if self.role is not Role.FOLLOWER or src != self.leader_id:
            return
        if resp.leader_epoch != self.epoch:
            return
        self.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms
        self.last_leader_contact_ms = self._now
        have = self.snapshots.partial_size(sid)
        if resp.position != have or resp.size < have + len(resp.data):
            return  # stale or inconsistent chunk: ask again from where we are
        self.snapshots.write_chunk(sid, resp.position, resp.data)
        if have + len(resp.data) < resp.size:
            return
        # the last chunk: validating the whole file, fsyncing and renaming it is disk work
        # for the shell's worker thread; the log is replaced when it reports back
        self.snapshot_completing = sid
        self._emit(CompleteSnapshotDownload(sid))

    def _snapshot_downloaded(self, sid: SnapshotId, problem: str | None) -> None:
        if self.snapshot_completing != sid:
            return  # not this incarnation's download
        self.snapshot_completing = None
        if self.snapshot_download != sid:
            # given up meanwhile (this node became the leader): not ours to install
            if problem is None:
                self.snapshots.delete(sid)
            else:
                self.snapshots.abort_download(sid)
            return
        if problem is not None:
            # a corrupt download never replaces the log: drop the .part; the next Fetch
            # names the leader's latest snapshot again and the download restarts
            self._reject_input(self.leader_id, f"downloaded snapshot {sid.file_stem()}: {problem}")
            self.snapshots.abort_download(sid)
            self.snapshot_download = None
            self.backoff_until_ms = self._now + FETCH_ERROR_BACKOFF_MS
            return
        self.snapshot_download = None
        # the snapshot replaces everything below its end offset (KIP-630)
        self.log.truncate_fully_and_start_at(sid.end_offset, sid.epoch)
        self.high_watermark = max(self.high_watermark, sid.end_offset)
        self.applied_offset = sid.end_offset
        self.latest_snapshot = sid
        self.snapshot_created_ms[sid] = self._now
        self.bytes_since_snapshot = 0
        self._emit(LoadSnapshot(sid))
        self._delete_snapshots_below(self.log.start_offset)

    # ======================================================================================
    # FetchSnapshot: leader side
    # ======================================================================================
    def _on_fetch_snapshot(self, req: FetchSnapshotRequest) -> FetchSnapshotResponse:
        def error(code: int) -> FetchSnapshotResponse:
            return FetchSnapshotResponse(code, self.leader_id, self.epoch, req.snapshot_id)

        if req.cluster_id != self.config.cluster_id:
            return error(Errors.INCONSISTENT_CLUSTER_ID)
        if self.role is not Role.LEADER:
            return error(Errors.NOT_LEADER_OR_FOLLOWER)
        if req.current_leader_epoch < self.epoch:
            return error(Errors.FENCED_LEADER_EPOCH)
        if req.current_leader_epoch > self.epoch:
            return error(Errors.UNKNOWN_LEADER_EPOCH)
        if (
            req.snapshot_id in self.snapshots_deleting
            or req.snapshot_id not in self.snapshots.list()
        ):
            return error(Errors.SNAPSHOT_NOT_FOUND)
        size = self.snapshots.size(req.snapshot_id)
        if req.position < 0 or req.position > size:
            return error(Errors.POSITION_OUT_OF_RANGE)
        max_bytes = max(1, min(req.max_bytes, self.config.fetch_snapshot_bytes_max))
        data = self.snapshots.read(req.snapshot_id, req.position, max_bytes)
        ls = self.leader_state
        if ls is not None and req.replica_id in self.config.voters - {self.node_id}:
            # a voter downloading our snapshot follows us: check-quorum counts it (Kafka
            # does), or a leader whose majority downloads resigns and restarts the download
            ls.progress(req.replica_id).last_active_ms = self._now
        return FetchSnapshotResponse(
            Errors.NONE,
            self.node_id,
            self.epoch,
            req.snapshot_id,
            size=size,
            position=req.position,
            data=data,
        )

    # ======================================================================================
    # snapshots, log begin offset
    # ======================================================================================
    def _maybe_snapshot(self) -> None:
        if self.snapshot_in_progress is not None or self.applied_offset == 0:
            return
        base = self.latest_snapshot.end_offset if self.latest_snapshot else 0
        if self.applied_offset <= base:
            return
        due = (
            self.applied_offset - base >= self.config.snapshot_minimum_records
            or self.bytes_since_snapshot >= self.config.snapshot_max_bytes_between
            or self._now - self.last_snapshot_ms >= self.config.snapshot_max_interval_ms
        )
        if not due:
            return
        sid = SnapshotId(self.applied_offset, self.log.epoch_at(self.applied_offset - 1))
        self.snapshot_in_progress = sid
        self._emit(CreateSnapshot(sid))

    def _maybe_advance_log_start(self) -> None:
        """Leader: LBO -> X when a snapshot covers X - 1 and every live replica has
        replicated X, or the snapshot is older than max.replication.lag.ms (KIP-630)."""
        sid = self.latest_snapshot
        ls = self.leader_state
        if sid is None or ls is None or sid.end_offset <= self.log.start_offset:
            return
        live_since = self._now - self.config.fetch_timeout_ms
        lagging = any(
            p.last_fetch_ms >= live_since and p.end_offset < sid.end_offset
            for p in ls.replicas.values()
        )
        created = self.snapshot_created_ms.get(sid, self._now)
        if lagging and self._now - created < self.config.max_replication_lag_ms:
            return
        self._set_log_start(sid)

    def _follower_maybe_advance_log_start(self, leader_lbo: int) -> None:
        candidates = [
            s
            for s in self.snapshots.list()
            if self.log.start_offset < s.end_offset <= min(leader_lbo, self.applied_offset)
        ]
        if candidates:
            self._set_log_start(candidates[-1])

    def _set_log_start(self, sid: SnapshotId) -> None:
        assert sid.end_offset <= self.applied_offset, (sid, self.applied_offset)
        self.log.delete_before(sid.end_offset, sid.epoch)
        self._delete_snapshots_below(self.log.start_offset)

    def _delete_snapshots_below(self, lbo: int) -> None:
        """Older snapshots go (keeping at least one): unlinking them is the shell's disk
        work (DeleteSnapshots); from now on they are not served."""
        snaps = self.snapshots.list()
        self.snapshots_deleting &= set(snaps)  # those the shell removed already
        doomed = tuple(
            s for s in snaps[:-1] if s.end_offset < lbo and s not in self.snapshots_deleting
        )
        if not doomed:
            return
        for s in doomed:
            self.snapshot_created_ms.pop(s, None)
        self.snapshots_deleting.update(doomed)
        self._emit(DeleteSnapshots(doomed))
