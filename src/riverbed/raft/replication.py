"""Replication half of ``RaftNode``: Fetch on both sides, DescribeQuorum and commit delivery
(KIP-595); FetchSnapshot, snapshot triggers and the log begin offset are
``riverbed.raft.snapshot_transfer``'s (KIP-630).

A mixin of ``RaftNode`` (``riverbed.raft.node``), as the votes and the role transitions are;
every method runs on a ``RaftNode``.

Fetch (leader side): a fetch below the log begin offset gets the latest snapshot id; a
``(FetchOffset, LastFetchedEpoch)`` that does not match the leader's log gets a
DivergingEpoch (the end offset of the largest epoch <= LastFetchedEpoch); otherwise the
offset counts as the replica's flushed position for the high watermark, and the reply
carries entries, or waits (long poll, ``fetch_max_wait_ms``) until there are some or the
high watermark moves. Follower side: append + FlushLog, fetch again only once flushed;
truncate on DivergingEpoch; on a snapshot id download it with FetchSnapshot
(Position/MaxBytes, continued until Size), then truncate the log fully to it and load it.

Batches (one ``append`` = one operation) are never split: a fetch returns whole batches
(the first even when it exceeds the budget), the high watermark on leader and follower is
aligned down to a batch boundary, commits are delivered in whole batches, a divergence
truncates whole batches, and so snapshots (taken at the applied offset) end on one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from riverbed.raft.actions import (
    CommitEntries,
    FlushLog,
    SendResponse,
)
from riverbed.raft.leader_state import ParkedFetch
from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumResponse,
    Entry,
    Errors,
    FetchRequest,
    FetchResponse,
    OffsetAndEpoch,
    ReplicaState,
    SnapshotId,
)
from riverbed.raft.roles import Role

if TYPE_CHECKING:
    from riverbed.raft.actions import Action
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.leader_state import LeaderState
    from riverbed.raft.log import RaftLog
    from riverbed.raft.messages import Request
    from riverbed.raft.snapshots import SnapshotStore

COMMIT_CHUNK_BYTES = 1024 * 1024  # whole batches per CommitEntries action, by size
FETCH_ERROR_BACKOFF_MS = 50  # wait before re-fetching after an error reply

log = logging.getLogger(__name__)


class ReplicationMixin:
    if TYPE_CHECKING:  # provided by RaftNode
        node_id: int
        directory_id: str
        config: RaftConfig
        log: RaftLog
        snapshots: SnapshotStore
        role: Role
        epoch: int
        leader_id: int
        high_watermark: int
        applied_offset: int
        latest_snapshot: SnapshotId | None
        snapshot_download: SnapshotId | None
        snapshot_completing: SnapshotId | None
        bytes_since_snapshot: int
        leader_state: LeaderState | None
        fetch_deadline_ms: int
        fetch_in_flight: bool
        fetch_correlation_id: int
        backoff_until_ms: int
        last_leader_contact_ms: int
        rejected_inputs: int
        _now: int

        def _emit(self, action: Action) -> None: ...
        def _send(self, dest: int, kind: str, request: Request) -> int: ...
        def _maybe_learn(self, epoch: int, leader_id: int) -> None: ...
        def _become_resigned(self) -> None: ...
        def _send_fetch_snapshot(self) -> None: ...
        def _maybe_snapshot(self) -> None: ...
        def _maybe_advance_log_start(self) -> None: ...
        def _follower_maybe_advance_log_start(self, leader_lbo: int) -> None: ...

    def _reject_input(self, src: int, problem: str) -> None:
        """A message from ``src`` breaks the protocol's rules (corrupt, or impossible from a
        correct peer): it is ignored, as Kafka treats an invalid response. These are explicit
        checks, never ``assert`` (which ``python -O`` strips)."""
        self.rejected_inputs += 1
        log.warning("node %d: ignored input from node %d: %s", self.node_id, src, problem)

    # ======================================================================================
    # Fetch: leader side
    # ======================================================================================
    def _fetch_error(self, error: int) -> FetchResponse:
        return FetchResponse(
            error, self.leader_id, self.epoch, log_start_offset=self.log.start_offset
        )

    def _on_fetch(self, src: int, corr: int, req: FetchRequest) -> FetchResponse | None:
        if req.cluster_id != self.config.cluster_id:
            return self._fetch_error(Errors.INCONSISTENT_CLUSTER_ID)
        if self.role is not Role.LEADER:
            return self._fetch_error(Errors.NOT_LEADER_OR_FOLLOWER)
        if req.current_leader_epoch < self.epoch:
            return self._fetch_error(Errors.FENCED_LEADER_EPOCH)
        if req.current_leader_epoch > self.epoch:
            return self._fetch_error(Errors.UNKNOWN_LEADER_EPOCH)
        if (
            req.fetch_offset < 0
            or not 0 <= req.last_fetched_epoch <= req.current_leader_epoch
            or req.max_bytes < 0
            or req.replica_id == self.node_id
        ):
            # Kafka's rule; a negative LastFetchedEpoch would name no epoch of our log
            return self._fetch_error(Errors.INVALID_REQUEST)
        ls = self.leader_state
        assert ls is not None
        replaced = ls.parked.pop(req.replica_id, None)
        if replaced is not None:  # answer it so nothing waits on it (the fetcher moved on)
            self._respond_fetch_now(replaced.src, replaced.correlation_id, replaced.request)
        # snapshot / divergence checks first: such replies carry no progress
        early = self._validate_fetch_position(req)
        if early is not None:
            return early
        expected_dir = self.config.voter_directory_ids.get(req.replica_id)
        if expected_dir is not None and req.replica_directory_id != expected_dir:
            # a voter id on a re-formatted disk (KIP-853): it forgot what it acknowledged
            # and which epochs it saw, so its acks must not count toward any majority (a
            # stale leader could otherwise commit with it); it still gets the data
            pass
        else:
            progress = ls.progress(req.replica_id)
            progress.end_offset = req.fetch_offset
            progress.last_fetch_ms = progress.last_active_ms = self._now
            if req.fetch_offset >= self.log.end_offset:
                progress.last_caught_up_ms = self._now
            if req.replica_id in self.config.voters:
                self._leader_maybe_advance_hw()
        # park only when there is nothing new for the fetcher: a high watermark it has not
        # been sent yet (one this very fetch advanced, or another replica's fetch did while
        # this one was on its way) must reach it now, not after fetch_max_wait_ms (Kafka
        # completes fetches on a high-watermark change)
        known = ls.replicas.get(req.replica_id)
        if (
            req.fetch_offset >= self.log.end_offset
            and req.max_wait_ms > 0
            and (known is None or known.high_watermark_sent >= self.high_watermark)
        ):
            wait = min(req.max_wait_ms, self.config.fetch_max_wait_ms)
            ls.parked[req.replica_id] = ParkedFetch(src, corr, req, self._now + wait)
            return None
        return self._fetch_reply(req)

    def _validate_fetch_position(self, req: FetchRequest) -> FetchResponse | None:
        lbo = self.log.start_offset
        if req.fetch_offset < lbo:
            return self._snapshot_reply()
        if req.fetch_offset == lbo and req.last_fetched_epoch == self.log.start_epoch:
            return None
        end = self.log.end_offset_for_epoch(req.last_fetched_epoch)
        if end.offset < 0 or (end.offset < lbo):
            return self._snapshot_reply()
        if end.epoch != req.last_fetched_epoch or end.offset < req.fetch_offset:
            return FetchResponse(
                Errors.NONE,
                self.node_id,
                self.epoch,
                high_watermark=self.high_watermark,
                log_start_offset=lbo,
                diverging_epoch=end,
            )
        return None

    def _snapshot_reply(self) -> FetchResponse:
        assert self.latest_snapshot is not None, "LBO > 0 without a snapshot"
        return FetchResponse(
            Errors.NONE,
            self.node_id,
            self.epoch,
            high_watermark=self.high_watermark,
            log_start_offset=self.log.start_offset,
            snapshot_id=self.latest_snapshot,
        )

    def _fetch_reply(self, req: FetchRequest) -> FetchResponse:
        max_bytes = min(req.max_bytes, self.config.fetch_bytes_max)
        entries = self.log.read(req.fetch_offset, max_bytes)
        known = self.leader_state.replicas.get(req.replica_id) if self.leader_state else None
        if known is not None:
            known.high_watermark_sent = self.high_watermark
        return FetchResponse(
            Errors.NONE,
            self.node_id,
            self.epoch,
            high_watermark=self.high_watermark,
            log_start_offset=self.log.start_offset,
            entries=entries,
        )

    def _respond_fetch_now(self, src: int, corr: int, req: FetchRequest) -> None:
        self._emit(SendResponse(src, corr, self._fetch_reply(req)))

    def _complete_parked(self, only_expired: bool) -> None:
        ls = self.leader_state
        assert ls is not None
        for rid, fetch in list(ls.parked.items()):
            if only_expired and fetch.deadline_ms > self._now:
                continue
            del ls.parked[rid]
            self._respond_fetch_now(fetch.src, fetch.correlation_id, fetch.request)

    def _leader_maybe_advance_hw(self) -> None:
        ls = self.leader_state
        assert ls is not None
        new_hw = ls.next_high_watermark(self.high_watermark, self.log.flushed_end_offset)
        # never inside a batch: a committed half operation would be delivered and, after
        # a failover, stay committed (replicas flush and fetch whole batches, so this only
        # guards the rule)
        new_hw = self.log.batch_start(new_hw)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self._complete_parked(only_expired=False)

    def _leader_write_pending(self) -> None:
        ls = self.leader_state
        assert ls is not None
        ls.linger_deadline_ms = None
        if not ls.pending_batches:
            return
        offset = self.log.end_offset
        entries = []
        for values in ls.pending_batches:  # one record batch per append
            last = len(values) - 1
            for i, v in enumerate(values):
                entries.append(Entry(offset, self.epoch, v, batch_end=i == last))
                offset += 1
        ls.pending_batches = []
        ls.pending_records = 0
        self.log.append(entries)
        self._emit(FlushLog(self.log.end_offset))
        self._complete_parked(only_expired=False)

    def _leader_tick(self) -> None:
        ls = self.leader_state
        assert ls is not None
        now = self._now
        if ls.linger_deadline_ms is not None and now >= ls.linger_deadline_ms:
            self._leader_write_pending()
        self._complete_parked(only_expired=True)
        window = self.config.fetch_timeout_ms * 3 // 2
        if now - ls.started_ms >= window and ls.voters_active_since(now - window) < (
            self.config.majority
        ):
            self._become_resigned()  # check-quorum: we may be partitioned away
            return
        if now >= ls.begin_epoch_next_ms:
            self._send_begin_epoch()
        self._maybe_advance_log_start()

    def _send_begin_epoch(self) -> None:
        ls = self.leader_state
        assert ls is not None
        ls.begin_epoch_next_ms = self._now + self.config.request_timeout_ms
        for v in sorted(self.config.voters - {self.node_id} - ls.begin_epoch_acked):
            if ls.replicas[v].last_fetch_ms >= 0:
                ls.begin_epoch_acked.add(v)  # it already fetches from us
                continue
            self._send(
                v,
                "begin_epoch",
                BeginQuorumEpochRequest(
                    cluster_id=self.config.cluster_id,
                    leader_id=self.node_id,
                    leader_epoch=self.epoch,
                    voter_id=v,
                ),
            )

    # ======================================================================================
    # Fetch: follower side
    # ======================================================================================
    def _send_fetch(self, dest: int) -> None:
        self.fetch_in_flight = True
        self.fetch_correlation_id = self._send(
            dest,
            "fetch",
            FetchRequest(
                cluster_id=self.config.cluster_id,
                replica_id=self.node_id,
                current_leader_epoch=self.epoch,
                fetch_offset=self.log.end_offset,
                last_fetched_epoch=self.log.last_epoch,
                max_bytes=self.config.fetch_bytes_max,
                max_wait_ms=self.config.fetch_max_wait_ms,
                replica_directory_id=self.directory_id,
            ),
        )

    def _maybe_send_fetch(self) -> None:
        if self.role is not Role.FOLLOWER or self.fetch_in_flight:
            return
        if self._now < self.backoff_until_ms:
            return
        if self.snapshot_completing is not None:
            return  # the downloaded snapshot replaces the log first
        if self.snapshot_download is not None:
            self._send_fetch_snapshot()
            return
        if self.log.flushed_end_offset < self.log.end_offset:
            return  # the leader counts our fetch offset as durable: flush first
        self._send_fetch(self.leader_id)

    def _on_fetch_response(self, src: int, resp: FetchResponse) -> None:
        known = (self.epoch, self.leader_id)
        self._maybe_learn(resp.leader_epoch, resp.leader_id)
        if resp.error_code != Errors.NONE:
            if (self.epoch, self.leader_id) == known:
                # nothing new learned: do not hammer the same replica
                self.backoff_until_ms = self._now + FETCH_ERROR_BACKOFF_MS
            return
        if self.role is not Role.FOLLOWER or src != self.leader_id:
            return
        if resp.leader_epoch != self.epoch:
            return
        target = -1
        if resp.diverging_epoch is not None:
            target = self._diverging_target(resp.diverging_epoch)
        problem = self._fetch_response_problem(resp, target)
        if problem is not None:
            # not proof of a working leader either: the fetch timer keeps running
            self._reject_input(src, problem)
            self.backoff_until_ms = self._now + FETCH_ERROR_BACKOFF_MS
            return
        self.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms
        self.last_leader_contact_ms = self._now
        if resp.diverging_epoch is not None:
            self.log.truncate_to(target)
            return
        if resp.snapshot_id is not None:
            if self.snapshot_completing is not None:
                return  # a late reply: the snapshot being completed decides first
            if resp.snapshot_id.end_offset <= self.applied_offset:
                self.backoff_until_ms = self._now + FETCH_ERROR_BACKOFF_MS
                return  # we already have that state; fetch again
            if self.snapshot_download != resp.snapshot_id:
                if self.snapshot_download is not None:
                    self.snapshots.abort_download(self.snapshot_download)
                self.snapshot_download = resp.snapshot_id
                self.snapshots.begin_download(resp.snapshot_id)
            return
        if resp.entries:
            if resp.entries[0].offset != self.log.end_offset:
                return  # a reply to an older fetch position
            if not self._entries_valid(resp.entries, resp.leader_epoch):
                self.backoff_until_ms = self._now + FETCH_ERROR_BACKOFF_MS
                return
            self.log.append(list(resp.entries))
            self._emit(FlushLog(self.log.end_offset))
        if resp.high_watermark > self.high_watermark:
            hw = self.log.batch_start(min(resp.high_watermark, self.log.end_offset))
            self.high_watermark = max(self.high_watermark, hw)
        self._follower_maybe_advance_log_start(resp.log_start_offset)

    def _diverging_target(self, diverging: OffsetAndEpoch) -> int:
        """Where a DivergingEpoch truncates this log to (whole batches)."""
        local = self.log.end_offset_for_epoch(diverging.epoch)
        target = max(min(diverging.offset, local.offset), self.log.start_offset)
        return self.log.batch_start(target)

    def _fetch_response_problem(self, resp: FetchResponse, target: int) -> str | None:
        """Why a successful Fetch reply from the leader cannot be right (None: it can).
        A correct leader never asks to truncate committed entries (Kafka's check against
        the high watermark) nor names a snapshot with a negative id or a future epoch."""
        div = resp.diverging_epoch
        if div is not None:
            if div.offset < 0 or not 0 <= div.epoch <= resp.leader_epoch:
                return f"invalid DivergingEpoch {div} at leader epoch {resp.leader_epoch}"
            if target < self.high_watermark:
                return (
                    f"DivergingEpoch {div} would truncate to {target}, below the high "
                    f"watermark {self.high_watermark}"
                )
        sid = resp.snapshot_id
        if sid is not None and (sid.end_offset < 0 or not 0 <= sid.epoch <= resp.leader_epoch):
            return f"invalid SnapshotId {sid} at leader epoch {resp.leader_epoch}"
        return None

    def _entries_valid(self, entries: tuple[Entry, ...], leader_epoch: int) -> bool:
        """Contiguous offsets, epochs non-decreasing from our last and never past the
        leader's, whole batches (one epoch and kind each, the last one closed):
        anything else is a corrupt or hostile reply, not something to append."""
        prev = None
        prev_offset, prev_epoch = self.log.end_offset - 1, self.log.last_epoch
        for e in entries:
            if e.offset != prev_offset + 1 or not prev_epoch <= e.epoch <= leader_epoch:
                return False
            if (
                prev is not None
                and not prev.batch_end
                and (e.epoch != prev.epoch or e.kind != prev.kind)
            ):
                return False
            prev, prev_offset, prev_epoch = e, e.offset, e.epoch
        return prev is None or prev.batch_end

    # ======================================================================================
    # DescribeQuorum
    # ======================================================================================
    def _describe_quorum(self) -> DescribeQuorumResponse:
        ls = self.leader_state
        if self.role is not Role.LEADER or ls is None:
            return DescribeQuorumResponse(Errors.NOT_LEADER_OR_FOLLOWER, self.leader_id, self.epoch)

        def state(rid: int) -> ReplicaState:
            if rid == self.node_id:
                return ReplicaState(rid, self.log.end_offset, self._now, self._now)
            p = ls.replicas[rid]
            return ReplicaState(rid, p.end_offset, p.last_fetch_ms, p.last_caught_up_ms)

        return DescribeQuorumResponse(
            Errors.NONE,
            self.node_id,
            self.epoch,
            self.high_watermark,
            current_voters=tuple(state(v) for v in sorted(self.config.voters)),
            observers=tuple(state(r) for r in sorted(ls.replicas) if r not in self.config.voters),
        )

    # ======================================================================================
    # commits (snapshots and the log begin offset: riverbed.raft.snapshot_transfer)
    # ======================================================================================
    def _after_event(self) -> None:
        self._deliver_commits()
        self._maybe_send_fetch()

    def _deliver_commits(self) -> None:
        if self.snapshot_download is not None:
            return
        upper = min(self.high_watermark, self.log.end_offset)
        while self.applied_offset < upper:
            assert self.applied_offset >= self.log.start_offset, (
                self.applied_offset,
                self.log.start_offset,
            )
            # whole batches only: the state machine never sees half an operation
            entries = self.log.read(self.applied_offset, COMMIT_CHUNK_BYTES, upper)
            assert entries and entries[0].offset == self.applied_offset, (
                f"node {self.node_id}: no whole batch at {self.applied_offset} below {upper}"
            )
            self.applied_offset = entries[-1].offset + 1
            self.bytes_since_snapshot += sum(e.size for e in entries)
            self._emit(CommitEntries(entries, self.high_watermark))
        self._maybe_snapshot()
