"""The role transitions of `riverbed.raft.node.RaftNode` (the table in
``riverbed.raft.roles``): becoming Unattached, Follower, Prospective, Candidate, Leader or
Resigned, the epoch state each one sets (and persists), the election timer, learning a
newer epoch or leader from a message, and an observer's leader discovery.

The epoch never goes back; a change of (epoch, leader, vote) is persisted with
``PersistQuorumState`` when the transition asks for it, and a new (epoch, leader) is
announced with ``LeaderChanged``. A Prospective asks for pre-votes in its current epoch
(KIP-996); only a Candidate bumps the epoch and votes for itself. A new leader appends the
LeaderChange control record (``leader_change_value``) and sends BeginQuorumEpoch; a
leader that leaves answers its parked fetches, and one that resigns sends EndQuorumEpoch
naming the most caught-up voters first as preferred successors (KIP-595).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import TYPE_CHECKING

from riverbed.protocol.messages import LeaderChangeMessage, encode
from riverbed.raft.actions import FlushLog, LeaderChanged, PersistQuorumState, SendResponse
from riverbed.raft.leader_state import LeaderState
from riverbed.raft.messages import (
    EndQuorumEpochRequest,
    Entry,
    EntryKind,
    Errors,
    VoteRequest,
)
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.roles import Role

if TYPE_CHECKING:
    from riverbed.raft.actions import Action
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.log import RaftLog
    from riverbed.raft.messages import FetchRequest, FetchResponse, Request, SnapshotId
    from riverbed.raft.snapshots import SnapshotStore


def leader_change_value(leader_id: int, voters: Iterable[int]) -> bytes:
    """Value of the LeaderChange control record: Kafka's LeaderChangeMessage v0."""
    ids = sorted(voters)
    msg = LeaderChangeMessage(
        version=0,
        leader_id=leader_id,
        voters=[LeaderChangeMessage.Voter(voter_id=v) for v in ids],
        granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in ids],
    )
    return encode(msg, 0)


class RoleTransitionsMixin:
    if TYPE_CHECKING:  # provided by RaftNode
        node_id: int
        directory_id: str
        config: RaftConfig
        log: RaftLog
        snapshots: SnapshotStore
        rng: random.Random
        is_voter: bool
        role: Role
        epoch: int
        leader_id: int
        voted_id: int
        leader_state: LeaderState | None
        snapshot_download: SnapshotId | None
        snapshot_completing: SnapshotId | None
        election_deadline_ms: int
        fetch_deadline_ms: int
        fetch_in_flight: bool
        fetch_target: int
        backoff_until_ms: int
        candidate_backing_off: bool
        prospective_from_leader: int
        votes_granted: set[int]
        votes_rejected: set[int]
        pre_votes_refused: set[int]
        _now: int

        def _emit(self, action: Action) -> None: ...
        def _send(self, dest: int, kind: str, request: Request) -> int: ...
        def _vote_log_position(self) -> tuple[int, int]: ...
        def _fetch_error(self, error: int) -> FetchResponse: ...
        def _respond_fetch_now(self, src: int, corr: int, req: FetchRequest) -> None: ...
        def _send_fetch(self, dest: int) -> None: ...
        def _send_begin_epoch(self) -> None: ...
        def _leader_maybe_advance_hw(self) -> None: ...

    # ======================================================================================
    # transitions (see roles.py)
    # ======================================================================================
    def _quorum_state(self) -> QuorumState:
        return QuorumState(
            leader_epoch=self.epoch,
            leader_id=self.leader_id,
            voted_id=self.voted_id,
            voted_directory_id=self.directory_id if self.voted_id == self.node_id else "",
        )

    def _set_epoch_state(self, epoch: int, leader_id: int, voted_id: int, persist: bool) -> None:
        assert epoch >= self.epoch, (epoch, self.epoch)
        changed = (epoch, leader_id) != (self.epoch, self.leader_id)
        durable_changed = (epoch, leader_id, voted_id) != (
            self.epoch,
            self.leader_id,
            self.voted_id,
        )
        if epoch > self.epoch and self.snapshot_download is not None:
            pass  # the download continues against the new leader after a new Fetch
        self.epoch, self.leader_id, self.voted_id = epoch, leader_id, voted_id
        if persist and durable_changed:
            self._emit(PersistQuorumState(self._quorum_state()))
        if changed:
            self._emit(LeaderChanged(epoch, leader_id))

    def _leave_leader(self) -> None:
        ls = self.leader_state
        self.leader_state = None
        if ls is not None:
            # parked fetches must not wait forever on a leader that is gone
            for fetch in ls.parked.values():
                self._emit(
                    SendResponse(
                        fetch.src,
                        fetch.correlation_id,
                        self._fetch_error(Errors.NOT_LEADER_OR_FOLLOWER),
                    )
                )

    def _randomized_election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self.rng.randint(0, t)

    def _reset_election_timer(self) -> None:
        self.election_deadline_ms = self._now + self._randomized_election_timeout()

    def _become_unattached(self, epoch: int, voted_id: int, persist: bool = True) -> None:
        self._leave_leader()
        self._set_epoch_state(epoch, -1, voted_id, persist)
        self.role = Role.UNATTACHED
        self.fetch_in_flight = False
        self.candidate_backing_off = False
        self._reset_election_timer()

    def _become_follower(self, epoch: int, leader_id: int, persist: bool = True) -> None:
        assert leader_id != self.node_id
        self._leave_leader()
        voted = self.voted_id if epoch == self.epoch else -1
        self._set_epoch_state(epoch, leader_id, voted, persist)
        self.role = Role.FOLLOWER
        self.fetch_in_flight = False
        self.candidate_backing_off = False
        self.backoff_until_ms = 0
        self.fetch_deadline_ms = self._now + self.config.fetch_timeout_ms

    def _become_prospective(self) -> None:
        assert self.is_voter
        self.prospective_from_leader = self.leader_id if self.role is Role.FOLLOWER else -1
        self._leave_leader()
        self.role = Role.PROSPECTIVE
        self.candidate_backing_off = False
        self.fetch_in_flight = False
        self.votes_granted = {self.node_id}
        self.votes_rejected = set()
        self.pre_votes_refused = set()
        self._reset_election_timer()
        if len(self.votes_granted) >= self.config.majority:
            self._become_candidate()
            return
        for v in sorted(self.config.voters - {self.node_id}):
            self._send_pre_vote(v)

    def _send_pre_vote(self, voter: int) -> None:
        last_epoch, last_offset = self._vote_log_position()
        self._send(
            voter,
            "pre_vote",
            VoteRequest(
                cluster_id=self.config.cluster_id,
                candidate_epoch=self.epoch,  # Kafka: a pre-vote carries the current epoch
                candidate_id=self.node_id,
                last_offset_epoch=last_epoch,
                last_offset=last_offset,
                pre_vote=True,
                voter_id=voter,
            ),
        )

    def _prospective_lost(self) -> None:
        leader = self.prospective_from_leader
        if leader >= 0 and self.leader_id in (-1, leader) and leader != self.node_id:
            self._become_follower(self.epoch, leader, persist=False)
            # the pre-vote failed because others still hear from this leader; give it a
            # fresh fetch timeout rather than campaigning again at once
        else:
            self._become_unattached(self.epoch, self.voted_id, persist=False)
            self.election_deadline_ms += self.rng.randint(0, self.config.election_backoff_max_ms)

    def _become_candidate(self) -> None:
        self._leave_leader()
        self._set_epoch_state(self.epoch + 1, -1, self.node_id, persist=True)
        self.role = Role.CANDIDATE
        self.candidate_backing_off = False
        self.votes_granted = {self.node_id}
        self.votes_rejected = set()
        self._reset_election_timer()
        if len(self.votes_granted) >= self.config.majority:
            self._become_leader()
            return
        last_epoch, last_offset = self._vote_log_position()
        for v in sorted(self.config.voters - {self.node_id}):
            self._send(
                v,
                "vote",
                VoteRequest(
                    cluster_id=self.config.cluster_id,
                    candidate_epoch=self.epoch,
                    candidate_id=self.node_id,
                    last_offset_epoch=last_epoch,
                    last_offset=last_offset,
                    voter_id=v,
                ),
            )

    def _become_leader(self) -> None:
        assert self.role is Role.CANDIDATE and self.is_voter
        self._set_epoch_state(self.epoch, self.node_id, self.voted_id, persist=True)
        self.role = Role.LEADER
        if self.snapshot_download is not None:
            if self.snapshot_completing is None:  # else the shell owns the file
                self.snapshots.abort_download(self.snapshot_download)
            self.snapshot_download = None
        start = self.log.end_offset
        self.leader_state = LeaderState(
            epoch=self.epoch,
            epoch_start_offset=start,
            voters=self.config.voters,
            local_id=self.node_id,
            started_ms=self._now,
        )
        self.log.append(
            [
                Entry(
                    start,
                    self.epoch,
                    leader_change_value(self.node_id, self.config.voters),
                    EntryKind.LEADER_CHANGE,
                )
            ]
        )
        self._emit(FlushLog(self.log.end_offset))
        self._send_begin_epoch()
        self._leader_maybe_advance_hw()

    def _become_resigned(self) -> None:
        ls = self.leader_state
        assert self.role is Role.LEADER and ls is not None
        # preferred successors: most caught-up voters first (KIP-595)
        successors = sorted(
            (v for v in self.config.voters if v != self.node_id),
            key=lambda v: (-ls.replicas[v].end_offset, v),
        )
        for fetch in ls.parked.values():
            self._respond_fetch_now(fetch.src, fetch.correlation_id, fetch.request)
        self._leave_leader()
        self.role = Role.RESIGNED
        self._reset_election_timer()
        for v in successors:
            self._send(
                v,
                "end_epoch",
                EndQuorumEpochRequest(
                    cluster_id=self.config.cluster_id,
                    leader_id=self.node_id,
                    leader_epoch=self.epoch,
                    preferred_successors=tuple(successors),
                ),
            )

    def _maybe_learn(self, epoch: int, leader_id: int) -> None:
        """React to the epoch/leader a message carries (first rows of the table)."""
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._become_follower(epoch, leader_id)
            else:
                self._become_unattached(epoch, -1)
        elif (
            epoch == self.epoch
            and leader_id >= 0
            and leader_id != self.node_id
            and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
            # a Prospective that came from following L already knows L; others still
            # naming L is no sign that L is alive
            and not (self.role is Role.PROSPECTIVE and leader_id == self.prospective_from_leader)
        ):
            self._become_follower(epoch, leader_id)

    def _discover_leader(self, avoid: int = -1) -> None:
        """Observer without a leader: ask a random voter (it answers with a leader hint),
        not ``avoid`` (a leader that refused a connection) if there is another."""
        self._reset_election_timer()
        if self.fetch_in_flight:
            return
        voters = sorted(self.config.voters - {self.node_id})
        target = self.rng.choice([v for v in voters if v != avoid] or voters or [self.node_id])
        if target == self.node_id:
            return
        self.fetch_target = target
        self._send_fetch(target)
