"""The votes half of `riverbed.raft.node.RaftNode`: Vote (KIP-595, with KIP-996's
pre-vote), BeginQuorumEpoch and EndQuorumEpoch, on both sides.

Kafka's rules: a voter grants one vote per epoch, to a candidate whose log is at least as
up to date as its own (last epoch, then end offset); a pre-vote changes no state and is
refused while the replica has heard from a leader within ``fetch_timeout_ms`` (KIP-996); a
BeginQuorumEpoch from a newer (or this epoch's) leader makes the replica follow it; an
EndQuorumEpoch from the resigning leader starts an election at once, the preferred
successors first (each next one backs off exponentially).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    VoteRequest,
    VoteResponse,
)
from riverbed.raft.roles import Role

if TYPE_CHECKING:
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.log import RaftLog


class VotesMixin:
    if TYPE_CHECKING:  # provided by RaftNode
        node_id: int
        config: RaftConfig
        log: RaftLog
        rng: random.Random
        role: Role
        epoch: int
        leader_id: int
        voted_id: int
        is_voter: bool
        votes_granted: set[int]
        votes_rejected: set[int]
        pre_votes_refused: set[int]
        candidate_backing_off: bool
        election_deadline_ms: int
        fetch_in_flight: bool
        last_leader_contact_ms: int
        _now: int

        def leader_gone(self) -> bool: ...
        def _maybe_learn(self, epoch: int, leader_id: int) -> None: ...
        def _set_epoch_state(
            self, epoch: int, leader_id: int, voted_id: int, persist: bool
        ) -> None: ...
        def _reset_election_timer(self) -> None: ...
        def _leave_leader(self) -> None: ...
        def _become_unattached(self, epoch: int, voted_id: int, persist: bool = True) -> None: ...
        def _become_follower(self, epoch: int, leader_id: int, persist: bool = True) -> None: ...
        def _become_candidate(self) -> None: ...
        def _become_leader(self) -> None: ...
        def _prospective_lost(self) -> None: ...
        def _send_pre_vote(self, voter: int) -> None: ...
        def _reject_input(self, src: int, problem: str) -> None: ...

    # ======================================================================================
    # votes
    # ======================================================================================
    def _vote_log_position(self) -> tuple[int, int]:
        return self.log.last_epoch, self.log.end_offset

    def _log_up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        return (last_epoch, last_offset) >= self._vote_log_position()

    def _yields_to(self, req: VoteRequest) -> bool:
        """Does this prospective grant ``req``'s pre-vote: one that refused ours (it heard
        from the leader when we asked: we cannot win, it may), a newer log, or as new and a
        lower id (pre-votes change nothing, so the tie-break costs no safety)."""
        if req.candidate_id in self.votes_rejected:
            return True
        theirs = (req.last_offset_epoch, req.last_offset)
        mine = self._vote_log_position()
        return theirs > mine or (theirs == mine and req.candidate_id < self.node_id)

    def _pre_vote_blocked_by_leader(self) -> bool:
        """KIP-996: "We also want servers to reject Pre-Vote requests received if they are
        still within their fetch timeout ... they have recently heard from a leader so
        there is no need to consider electing a new leader." A leader or candidate
        rejects too; a follower whose leader refused a connection since (its process is
        gone, ``riverbed.raft.refusals``) does not."""
        if self.role in (Role.LEADER, Role.CANDIDATE):
            return True
        # contact, not fetch_deadline: a replica that lost a pre-vote goes back to
        # following with a fresh timer, and must not block the others' pre-votes
        return (
            self.role is Role.FOLLOWER
            and self._now - self.last_leader_contact_ms < self.config.fetch_timeout_ms
            and not self.leader_gone()
        )

    def _vote_reply(self, granted: bool, pre_vote: bool, error: int = Errors.NONE) -> VoteResponse:
        return VoteResponse(error, self.leader_id, self.epoch, granted, pre_vote)

    def _on_vote_request(self, req: VoteRequest) -> VoteResponse:
        if req.cluster_id != self.config.cluster_id:
            return self._vote_reply(False, req.pre_vote, Errors.INCONSISTENT_CLUSTER_ID)
        if req.candidate_id not in self.config.voters:
            return self._vote_reply(False, req.pre_vote, Errors.INCONSISTENT_VOTER_SET)
        if not self.is_voter:
            return self._vote_reply(False, req.pre_vote)
        if req.candidate_epoch < self.epoch:
            return self._vote_reply(False, req.pre_vote)
        log_ok = self._log_up_to_date(req.last_offset_epoch, req.last_offset)
        if req.pre_vote:
            if req.candidate_epoch > self.epoch:
                # the asker saw an epoch we have not: our leader (if any) is from an older
                # epoch and can never be followed by it; move up so an election can happen
                # (a prospective that never won a pre-vote has not bumped its epoch, so a
                # partitioned replica coming back does not get here)
                self._become_unattached(req.candidate_epoch, -1)
            leader_alive = self._pre_vote_blocked_by_leader()
            if self.role is Role.PROSPECTIVE and not self._yields_to(req):
                # two prospectives of one round (the leader's last replies reached both at
                # once, so their fetch timeouts ran out together) that granted each other
                # would both campaign and split the vote, each voting for itself, until an
                # election timeout and a back-off later (issue 23: 2.4 s of a fail-over);
                # one of them yields: the newer log, else the lower id
                self.pre_votes_refused.add(req.candidate_id)
                return self._vote_reply(False, True)
            return self._vote_reply(log_ok and not leader_alive, True)
        if req.candidate_epoch > self.epoch:
            self._become_unattached(req.candidate_epoch, -1)
        granted = (
            self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self.leader_id == -1
            and self.voted_id in (-1, req.candidate_id)
            and log_ok
        )
        if granted:
            if self.role is Role.PROSPECTIVE:
                self.role = Role.UNATTACHED
            self._set_epoch_state(self.epoch, -1, req.candidate_id, persist=True)
            self._reset_election_timer()
        return self._vote_reply(granted, False)

    def _on_vote_response(
        self, src: int, resp: VoteResponse, sent_epoch: int, pre_vote: bool
    ) -> None:
        if resp.error_code != Errors.NONE:
            return
        self._maybe_learn(resp.leader_epoch, resp.leader_id)
        if pre_vote:
            if self.role is not Role.PROSPECTIVE or sent_epoch != self.epoch:
                return
        elif self.role is not Role.CANDIDATE or sent_epoch != self.epoch:
            return
        if src not in self.config.voters:
            return
        (self.votes_granted if resp.vote_granted else self.votes_rejected).add(src)
        if pre_vote and not resp.vote_granted and src in self.pre_votes_refused:
            # it refused us while it was still following (its reply crossed its own
            # pre-vote, which we refused by the tie-break): asked again it yields to us,
            # who refused it; else each waits for the other for an election timeout
            self.pre_votes_refused.discard(src)
            self.votes_rejected.discard(src)
            self._send_pre_vote(src)
            return
        if len(self.votes_granted) >= self.config.majority:
            if self.role is Role.PROSPECTIVE:
                self._become_candidate()
            else:
                self._become_leader()
        elif len(self.votes_rejected) > len(self.config.voters) - self.config.majority:
            if self.role is Role.PROSPECTIVE:
                self._prospective_lost()
            else:
                self.candidate_backing_off = True
                self.election_deadline_ms = self._now + self.rng.randint(
                    0, self.config.election_backoff_max_ms
                )

    # ======================================================================================
    # Begin/EndQuorumEpoch
    # ======================================================================================
    def _on_begin_epoch(self, req: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
        if req.cluster_id != self.config.cluster_id:
            return BeginQuorumEpochResponse(
                Errors.INCONSISTENT_CLUSTER_ID, self.leader_id, self.epoch
            )
        if req.leader_epoch < self.epoch:
            return BeginQuorumEpochResponse(Errors.FENCED_LEADER_EPOCH, self.leader_id, self.epoch)
        if req.leader_id == self.node_id or req.leader_id not in self.config.voters:
            return BeginQuorumEpochResponse(Errors.INVALID_REQUEST, self.leader_id, self.epoch)
        if req.leader_epoch == self.epoch and self.leader_id not in (-1, req.leader_id):
            # a second leader for an epoch that has one (us, or the one we follow): only a
            # broken peer sends this; refuse it rather than follow or crash
            self._reject_input(req.leader_id, f"BeginQuorumEpoch conflicts: {req}")
            return BeginQuorumEpochResponse(Errors.INVALID_REQUEST, self.leader_id, self.epoch)
        if req.leader_epoch > self.epoch or self.role is not Role.FOLLOWER:
            self._become_follower(req.leader_epoch, req.leader_id)
        self.last_leader_contact_ms = self._now
        return BeginQuorumEpochResponse(Errors.NONE, self.leader_id, self.epoch)

    def _on_end_epoch(self, req: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
        if req.cluster_id != self.config.cluster_id:
            return EndQuorumEpochResponse(
                Errors.INCONSISTENT_CLUSTER_ID, self.leader_id, self.epoch
            )
        if req.leader_epoch < self.epoch:
            return EndQuorumEpochResponse(Errors.FENCED_LEADER_EPOCH, self.leader_id, self.epoch)
        if req.leader_epoch > self.epoch or (
            self.role is Role.FOLLOWER and self.leader_id == req.leader_id
        ):
            self._leave_leader()
            voted = self.voted_id if req.leader_epoch == self.epoch else -1
            self._set_epoch_state(req.leader_epoch, -1, voted, persist=True)
            self.role = Role.UNATTACHED
            self.fetch_in_flight = False
            if self.is_voter:
                # preferred successors campaign first; the rest back off exponentially
                try:
                    rank = req.preferred_successors.index(self.node_id)
                except ValueError:
                    rank = len(self.config.voters)
                backoff = min(self.config.election_backoff_max_ms, 50 * (2**rank) - 50)
                self.election_deadline_ms = self._now + self.rng.randint(0, max(backoff, 1))
            else:
                self._reset_election_timer()
        return EndQuorumEpochResponse(Errors.NONE, self.leader_id, self.epoch)
