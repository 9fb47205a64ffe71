"""RaftNode: the sans-I/O KRaft replica (KIP-595 + KIP-630 snapshots + KIP-996 pre-vote).

Inputs: ``start``, ``tick(now_ms)``, ``handle_request``/``handle_response`` (RPCs from a
node id, with the correlation id the shell carries), ``request_failed`` (a request's
connection lost or refused: ``riverbed.raft.refusals``), ``on_log_flushed``,
``on_snapshot_written``, ``append`` (leader only) and ``resign`` (graceful shutdown). Each
returns a list of actions (``riverbed.raft.actions``) for the shell to execute in order.
The node reads no clock (``now_ms`` is passed in), draws randomness only from the injected
``random.Random``, and writes through the injected ``RaftLog`` and ``SnapshotStore``
(durability is the shell's ``FlushLog``). Roles and transitions: ``riverbed.raft.roles``.

Replication is pull: followers and observers send Fetch(fetch_offset = their flushed log
end, last_fetched_epoch); the leader answers with entries, or a DivergingEpoch to truncate
to, or — when the offset is below its log begin offset — the id of its latest snapshot,
which the follower downloads with FetchSnapshot (Position/MaxBytes, continued until Size)
before it truncates its log fully to the snapshot and resumes fetching after it. Riverbed
fetches the snapshot *before* resuming the log (as Apache Kafka's KafkaRaftClient does):
a replica that acked log entries it would forget after a crash (start-up validation treats a
log without a snapshot under its begin offset as empty) could break a committed majority.
The old log stays in place during the download, so the replica votes with it.

This module holds the inputs, the refused-connection shortcut and the plumbing (requests
in flight, actions out). Mixed into ``RaftNode``: the role transitions
(``riverbed.raft.role_transitions``), the replication half (Fetch, FetchSnapshot,
DescribeQuorum, commits, snapshots, log begin offset: ``riverbed.raft.replication``) and
the answers to Vote, BeginQuorumEpoch and EndQuorumEpoch (``riverbed.raft.votes``).
"""

from __future__ import annotations

import random

from riverbed.raft.actions import (
    Action,
    FlushLog,
    LeaderChanged,
    LoadSnapshot,
    SendRequest,
    SendResponse,
)
from riverbed.raft.config import RaftConfig
from riverbed.raft.leader_state import LeaderState
from riverbed.raft.log import RaftLog
from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.refusals import Refusal, refusal_proves_leader_gone
from riverbed.raft.replication import FETCH_ERROR_BACKOFF_MS, ReplicationMixin
from riverbed.raft.role_transitions import RoleTransitionsMixin
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_transfer import SnapshotTransferMixin
from riverbed.raft.snapshots import SnapshotStore
from riverbed.raft.votes import VotesMixin

_REPLY_TYPES: dict[str, type] = {
    "vote": VoteResponse,
    "pre_vote": VoteResponse,
    "fetch": FetchResponse,
    "fetch_snapshot": FetchSnapshotResponse,
    "begin_epoch": BeginQuorumEpochResponse,
    "end_epoch": EndQuorumEpochResponse,
}


class NotLeaderError(Exception):
    """``append`` on a replica that is not the leader; carries what it knows."""

    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class AppendQueueFullError(Exception):
    """More records would wait for the append linger than ``append_queue_records_max``.

    ``alone_too_large``: the operation alone is over the limit, so retrying cannot help
    (the request is refused); otherwise other operations fill the queue for now."""

    def __init__(self, op_records: int, pending_records: int, limit: int) -> None:
        super().__init__(
            f"an operation of {op_records} records with {pending_records} records waiting "
            f"for the linger is over append_queue_records_max ({limit})"
        )
        self.op_records = op_records
        self.pending_records = pending_records
        self.limit = limit

    @property
    def alone_too_large(self) -> bool:
        return self.op_records > self.limit


class RaftNode(RoleTransitionsMixin, VotesMixin, ReplicationMixin, SnapshotTransferMixin):
    def __init__(
        self,
        node_id: int,
        config: RaftConfig,
        log: RaftLog,
        snapshots: SnapshotStore,
        rng: random.Random,
        quorum_state: QuorumState | None = None,
        directory_id: str = "",
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.snapshots = snapshots
        self.rng = rng
        self.directory_id = directory_id
        expected_dir = config.voter_directory_ids.get(node_id)
        self.is_voter = node_id in config.voters and expected_dir in (None, directory_id)
        qs = quorum_state or QuorumState()
        self.epoch = qs.leader_epoch
        self.leader_id = qs.leader_id
        self.voted_id = qs.voted_id
        self.role = Role.UNATTACHED
        self.high_watermark = 0
        self.applied_offset = 0  # next offset the state machine has not seen
        self.latest_snapshot: SnapshotId | None = None
        self.snapshot_in_progress: SnapshotId | None = None
        self.snapshot_created_ms: dict[SnapshotId, int] = {}
        self.last_snapshot_ms = 0
        self.bytes_since_snapshot = 0
        self.leader_state: LeaderState | None = None
        # timers
        self.election_deadline_ms = 0
        self.fetch_deadline_ms = 0  # follower: leader presumed dead after this
        self.last_leader_contact_ms = -(10**12)  # last good reply from / begin by the leader
        #: the latest refused request to the leader that proves it gone (raft.refusals)
        self.leader_refusal: Refusal | None = None
        #: peers whose endpoint answered this process (a reply): only their refusals count
        self.peers_answered: set[int] = set()
        #: how often a refusal made this follower prospective at once (for simulations)
        self.refusal_shortcuts = 0
        self.backoff_until_ms = 0
        self.candidate_backing_off = False
        self.prospective_from_leader = -1
        # elections
        self.votes_granted: set[int] = set()
        self.votes_rejected: set[int] = set()
        #: prospectives whose pre-vote this prospective refused by the tie-break this round
        self.pre_votes_refused: set[int] = set()
        # requests in flight: correlation id -> (dest, kind, epoch, sent_ms)
        self.pending: dict[int, tuple[int, str, int, int]] = {}
        self.next_correlation_id = 1
        self.fetch_in_flight = False
        self.fetch_correlation_id = -1  # the latest Fetch/FetchSnapshot sent
        self.fetch_target = -1  # observer discovery target
        self.snapshot_download: SnapshotId | None = None
        #: the download whose last chunk is written, handed to the shell to validate and
        #: make durable (CompleteSnapshotDownload); nothing else touches its file meanwhile
        self.snapshot_completing: SnapshotId | None = None
        #: snapshots handed to the shell for deletion (DeleteSnapshots): never served again
        self.snapshots_deleting: set[SnapshotId] = set()
        self.rejected_inputs = 0  # invalid remote messages ignored (see _reject_input)
        self.started = False
        self._out: list[Action] = []
        self._now = 0

    # ======================================================================================
    # inputs
    # ======================================================================================
    def start(self, now_ms: int) -> list[Action]:
        """Validate log + snapshots (KIP-630 start-up rules) and take the restart role."""
        assert not self.started
        self.started = True
        self._now = now_ms
        self.last_snapshot_ms = now_ms
        snaps = self.snapshots.list()
        lbo = self.log.start_offset
        if lbo > 0 and not any(s.end_offset >= lbo for s in snaps):
            # no snapshot covers LBO - 1: the log cannot be replayed; bootstrap from leader
            self.log.truncate_fully_and_start_at(0, 0)
        if snaps:
            latest = snaps[-1]
            last = latest.end_offset - 1
            if latest.end_offset > self.log.end_offset or (
                last >= self.log.start_offset - 1 and self.log.epoch_at(last) != latest.epoch
            ):
                # the snapshot is ahead of the log, or the log disagrees with it (a crash
                # between a downloaded snapshot's rename and the log truncation): the
                # snapshot is committed state, the log tail is not
                self.log.truncate_fully_and_start_at(latest.end_offset, latest.epoch)
        for s in snaps[:-1]:
            if s.end_offset < self.log.start_offset:
                self.snapshots.delete(s)
        if snaps:
            self.latest_snapshot = snaps[-1]
            self.snapshot_created_ms[snaps[-1]] = now_ms
            self.high_watermark = self.applied_offset = snaps[-1].end_offset
            self._emit(LoadSnapshot(snaps[-1]))
        else:
            self.high_watermark = self.applied_offset = self.log.start_offset
        if self.log.flushed_end_offset < self.log.end_offset:
            self._emit(FlushLog(self.log.end_offset))
        if self.leader_id == self.node_id:
            self.role = Role.RESIGNED
            self._reset_election_timer()
        elif self.leader_id >= 0:
            self._become_follower(self.epoch, self.leader_id, persist=False)
        else:
            self.role = Role.UNATTACHED
            self._reset_election_timer()
        self._emit(LeaderChanged(self.epoch, self.leader_id))
        if self.is_voter and self.config.voters == {self.node_id}:
            # the only voter (Kafka's isOnlyVoter: a single combined node) needs nobody's
            # vote: it campaigns at once instead of waiting out an election timeout
            self._become_prospective()
            self._after_event()
        return self._drain()

    def tick(self, now_ms: int) -> list[Action]:
        self._now = now_ms
        self._expire_pending()
        role = self.role
        if role is Role.LEADER:
            self._leader_tick()
        elif role is Role.FOLLOWER:
            if now_ms >= self.fetch_deadline_ms:
                if self.is_voter:
                    self._become_prospective()
                else:
                    self._become_unattached(self.epoch, self.voted_id, persist=False)
        elif now_ms >= self.election_deadline_ms:
            if role is Role.UNATTACHED or role is Role.RESIGNED:
                if self.is_voter:
                    self._become_prospective()
                else:
                    self._discover_leader()
            elif role is Role.PROSPECTIVE:
                self._prospective_lost()
            elif role is Role.CANDIDATE:
                if self.candidate_backing_off:
                    self._become_prospective()
                else:
                    self.candidate_backing_off = True
                    self.election_deadline_ms = now_ms + self.rng.randint(
                        0, self.config.election_backoff_max_ms
                    )
        self._after_event()
        return self._drain()

    def next_deadline_ms(self) -> int:
        """The earliest time ``tick`` has something to do."""
        deadlines = [self._now + self.config.request_timeout_ms]
        if self.role is Role.LEADER:
            ls = self.leader_state
            assert ls is not None
            if ls.linger_deadline_ms is not None:
                deadlines.append(ls.linger_deadline_ms)
            deadlines.extend(p.deadline_ms for p in ls.parked.values())
            deadlines.append(self._now + self.config.fetch_timeout_ms // 4)
            if len(ls.begin_epoch_acked) < len(self.config.voters) - 1:
                deadlines.append(ls.begin_epoch_next_ms)
        elif self.role is Role.FOLLOWER:
            deadlines.append(self.fetch_deadline_ms)
            if not self.fetch_in_flight:
                deadlines.append(self.backoff_until_ms)
        else:
            deadlines.append(self.election_deadline_ms)
        if self.pending:
            oldest = min(sent for (_, _, _, sent) in self.pending.values())
            deadlines.append(oldest + self.config.request_timeout_ms)
        return max(self._now + 1, min(deadlines))

    def append(self, values: list[bytes], now_ms: int) -> tuple[int, list[Action]]:
        """Leader only: queue one batch (one operation: committed, delivered and truncated
        as a whole); it is written when the linger expires. Returns the offset its last
        record will get."""
        self._now = now_ms
        if not values:
            raise ValueError("append needs at least one record")
        ls = self.leader_state
        if self.role is not Role.LEADER or ls is None:
            raise NotLeaderError(self.leader_id, self.epoch)
        if ls.pending_records + len(values) > self.config.append_queue_records_max:
            raise AppendQueueFullError(
                len(values), ls.pending_records, self.config.append_queue_records_max
            )
        ls.pending_batches.append(list(values))
        ls.pending_records += len(values)
        if ls.linger_deadline_ms is None:
            ls.linger_deadline_ms = now_ms + self.config.append_linger_ms
        if self.config.append_linger_ms == 0:
            self._leader_write_pending()
        last = self.log.end_offset + ls.pending_records - 1
        self._after_event()
        return last, self._drain()

    def resign(self, now_ms: int) -> list[Action]:
        """Graceful shutdown: a leader hands over with EndQuorumEpoch."""
        self._now = now_ms
        if self.role is Role.LEADER:
            self._become_resigned()
        return self._drain()

    def on_log_flushed(self, end_offset: int, now_ms: int) -> list[Action]:
        self._now = now_ms
        if self.role is Role.LEADER:
            self._leader_maybe_advance_hw()
        self._after_event()
        return self._drain()

    def on_snapshot_written(self, snapshot_id: SnapshotId, now_ms: int) -> list[Action]:
        self._now = now_ms
        if self.snapshot_in_progress == snapshot_id:
            self.snapshot_in_progress = None
        if self.latest_snapshot is None or snapshot_id > self.latest_snapshot:
            self.latest_snapshot = snapshot_id
            self.snapshot_created_ms[snapshot_id] = now_ms
        self.last_snapshot_ms = now_ms
        self.bytes_since_snapshot = 0
        self._after_event()
        return self._drain()

    def on_snapshot_downloaded(
        self, snapshot_id: SnapshotId, problem: str | None, now_ms: int
    ) -> list[Action]:
        """The shell finished a CompleteSnapshotDownload: ``problem`` is None when the
        snapshot is valid and durable, else why it was rejected."""
        self._now = now_ms
        self._snapshot_downloaded(snapshot_id, problem)
        self._after_event()
        return self._drain()

    def on_snapshot_failed(self, snapshot_id: SnapshotId, now_ms: int) -> list[Action]:
        """Writing ``snapshot_id`` failed (disk error): forget it; the next trigger retries."""
        self._now = now_ms
        if self.snapshot_in_progress == snapshot_id:
            self.snapshot_in_progress = None
        return self._drain()

    def handle_request(
        self, src: int, correlation_id: int, request: Request, now_ms: int
    ) -> list[Action]:
        self._now = now_ms
        response: Response | None
        if isinstance(request, VoteRequest):
            response = self._on_vote_request(request)
        elif isinstance(request, BeginQuorumEpochRequest):
            response = self._on_begin_epoch(request)
        elif isinstance(request, EndQuorumEpochRequest):
            response = self._on_end_epoch(request)
        elif isinstance(request, FetchRequest):
            response = self._on_fetch(src, correlation_id, request)
        elif isinstance(request, FetchSnapshotRequest):
            response = self._on_fetch_snapshot(request)
        elif isinstance(request, DescribeQuorumRequest):
            response = self._describe_quorum()
        else:  # pragma: no cover - typed input
            raise TypeError(f"not a raft request: {type(request).__name__}")
        if response is not None:
            self._emit(SendResponse(src, correlation_id, response))
        self._after_event()
        return self._drain()

    def handle_response(
        self, src: int, correlation_id: int, response: Response, now_ms: int
    ) -> list[Action]:
        self._now = now_ms
        info = self.pending.pop(correlation_id, None)
        if info is None or info[0] != src:
            return []  # timed out, duplicated or unsolicited: the request was retried
        _, kind, sent_epoch, _ = info
        self.peers_answered.add(src)  # its endpoint reaches it from here
        if not isinstance(response, _REPLY_TYPES[kind]):
            return []  # a reply that does not match the request: ignore it
        if isinstance(response, VoteResponse):
            # whether it answers a pre-vote is ours to know (Kafka's reply has no flag)
            self._on_vote_response(src, response, sent_epoch, pre_vote=kind == "pre_vote")
        elif isinstance(response, FetchResponse | FetchSnapshotResponse):
            # only the reply to the latest fetch may touch the log: an older one was
            # computed for a position the log has since left (a stale DivergingEpoch would
            # truncate entries this replica already reported to the leader as flushed)
            if correlation_id != self.fetch_correlation_id:
                return []
            self.fetch_in_flight = False
            if isinstance(response, FetchResponse):
                self._on_fetch_response(src, response)
            else:
                self._on_fetch_snapshot_response(src, response)
        elif isinstance(response, BeginQuorumEpochResponse):
            self._maybe_learn(response.leader_epoch, response.leader_id)
            if (
                self.role is Role.LEADER
                and self.leader_state is not None
                and response.error_code == Errors.NONE
                and response.leader_epoch == self.epoch
            ):
                self.leader_state.begin_epoch_acked.add(src)
        elif isinstance(response, EndQuorumEpochResponse | DescribeQuorumResponse):
            pass
        self._after_event()
        return self._drain()

    def request_failed(
        self, dest: int, correlation_id: int, refused: bool, now_ms: int
    ) -> list[Action]:
        """The shell gave up on request ``correlation_id`` to ``dest``: its connection was
        lost, or could not be made, before a reply came. ``refused``: the attempt to connect
        was refused (the peer's host answered that nothing listens at its endpoint).

        A fetch is sent again after ``FETCH_ERROR_BACKOFF_MS`` (Kafka's retry backoff)
        rather than after the request timeout; a refusal that proves the leader gone
        (``riverbed.raft.refusals``) makes a voter following it Prospective at once."""
        self._now = now_ms
        info = self.pending.get(correlation_id)
        if info is None or info[0] != dest:
            return []  # answered, expired or not ours
        del self.pending[correlation_id]
        _, _, sent_epoch, sent_ms = info
        if correlation_id == self.fetch_correlation_id:
            self.fetch_in_flight = False
            self.backoff_until_ms = max(self.backoff_until_ms, now_ms + FETCH_ERROR_BACKOFF_MS)
        if refused:
            self._on_refusal(Refusal(sent_epoch, dest, sent_ms))
        self._after_event()
        return self._drain()

    def _on_refusal(self, refusal: Refusal) -> None:
        if not refusal_proves_leader_gone(
            refusal,
            epoch=self.epoch,
            leader_id=self.leader_id,
            last_contact_ms=self.last_leader_contact_ms,
            answered=self.peers_answered,
        ):
            return
        self.leader_refusal = refusal
        if self.role is not Role.FOLLOWER:
            return
        # its process is gone: nothing is gained by waiting out the fetch timeout
        self.refusal_shortcuts += 1
        if self.is_voter:
            self._become_prospective()
        else:  # an observer (a broker-only node) asks the other voters for the new leader
            self._become_unattached(self.epoch, self.voted_id, persist=False)
            self._discover_leader(avoid=refusal.leader_id)

    def leader_gone(self) -> bool:
        """A refusal (``riverbed.raft.refusals``) since the last contact with our leader."""
        refusal = self.leader_refusal
        return refusal is not None and refusal_proves_leader_gone(
            refusal,
            epoch=self.epoch,
            leader_id=self.leader_id,
            last_contact_ms=self.last_leader_contact_ms,
            answered=self.peers_answered,
        )

    # ======================================================================================
    # plumbing
    # ======================================================================================
    def _send(self, dest: int, kind: str, request: Request) -> int:
        corr = self.next_correlation_id
        self.next_correlation_id += 1
        self.pending[corr] = (dest, kind, self.epoch, self._now)
        self._emit(SendRequest(dest, corr, request))
        return corr

    def _expire_pending(self) -> None:
        limit = self._now - self.config.request_timeout_ms
        for corr, (_, _, _, sent) in list(self.pending.items()):
            if sent <= limit:
                del self.pending[corr]
                if corr == self.fetch_correlation_id:
                    self.fetch_in_flight = False

    def _emit(self, action: Action) -> None:
        self._out.append(action)

    def _drain(self) -> list[Action]:
        out, self._out = self._out, []
        return out

    def describe(self) -> str:
        return (
            f"node {self.node_id} {self.role.value} epoch={self.epoch} leader={self.leader_id} "
            f"voted={self.voted_id} log=[{self.log.start_offset},{self.log.end_offset}) "
            f"flushed={self.log.flushed_end_offset} hw={self.high_watermark} "
            f"applied={self.applied_offset} snapshot={self.latest_snapshot}"
        )
