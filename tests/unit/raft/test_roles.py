"""Every role transition of riverbed.raft.roles and the Vote/Begin/EndQuorumEpoch handlers."""

from __future__ import annotations

from riverbed.raft.actions import LeaderChanged, PersistQuorumState
from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EntryKind,
    Errors,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.roles import Role
from riverbed.testing.raft_sim_helpers import (
    FAR,
    entries,
    make_follower,
    make_leader,
    make_node,
    of_type,
    requests,
    responses,
    timeout,
)


def vote_req(epoch: int, cand: int, last_epoch: int = 0, last_off: int = 0, pre: bool = False):
    return VoteRequest("test", epoch, cand, last_epoch, last_off, pre_vote=pre)


def test_fresh_voter_starts_unattached_and_times_out_into_prospective() -> None:
    node = make_node()
    node.start(0)
    assert node.role is Role.UNATTACHED and node.epoch == 0
    deadline = node.next_deadline_ms()
    # Kafka's randomized election timeout: between timeout and 2x timeout
    assert 1000 <= deadline <= 2000
    assert node.tick(deadline - 1) == [] and node.role is Role.UNATTACHED
    _, actions = timeout(node, deadline)
    assert node.role is Role.PROSPECTIVE
    assert node.epoch == 0  # pre-vote does not bump the epoch
    assert of_type(actions, PersistQuorumState) == []
    votes = requests(actions, VoteRequest)
    assert sorted(s.dest for s, _ in votes) == [2, 3]
    assert all(r.pre_vote and r.candidate_epoch == 0 for _, r in votes)


def test_the_only_voter_elects_itself_at_start_without_an_election_timeout() -> None:
    # a single combined node (the embedded default) is its own one-voter quorum; like
    # Kafka's isOnlyVoter it campaigns at once, so start-up does not wait 1-2 s
    node = make_node(voters=(1,))
    actions = node.start(0)
    assert node.role is Role.LEADER and node.epoch == 1 and node.leader_id == 1
    assert of_type(actions, PersistQuorumState)
    # after a restart (the quorum-state says it led epoch 1) it leads again, in epoch 2
    again = make_node(voters=(1,), log=node.log, quorum_state=node._quorum_state())
    again.start(10)
    assert again.role is Role.LEADER and again.epoch == 2


def test_prospective_wins_pre_vote_then_candidate_then_leader() -> None:
    node = make_node()
    _now, actions = make_leader(node)
    assert node.role is Role.LEADER and node.epoch == 1 and node.leader_id == 1
    assert node.voted_id == 1
    # the epoch start is marked by a LeaderChange control entry
    first = node.log.entry(0)
    assert first.kind is EntryKind.LEADER_CHANGE and first.epoch == 1
    begins = requests(actions, BeginQuorumEpochRequest)
    assert sorted(s.dest for s, _ in begins) == [2, 3]
    persisted = [a.state for a in of_type(actions, PersistQuorumState)]
    assert persisted[-1] == QuorumState(1, 1, 1, "")


def test_candidate_persists_vote_for_itself_before_asking() -> None:
    node = make_node()
    node.start(0)
    now, actions = timeout(node, 0)
    for corr, (dest, _, _, _) in list(node.pending.items()):
        actions = node.handle_response(dest, corr, VoteResponse(0, -1, 0, True, True), now)
        if node.role is Role.CANDIDATE:
            break
    assert node.role is Role.CANDIDATE and node.epoch == 1
    kinds = [type(a).__name__ for a in actions]
    assert kinds.index("PersistQuorumState") < kinds.index("SendRequest")
    assert of_type(actions, PersistQuorumState)[0].state.voted_id == 1
    assert all(not r.pre_vote and r.candidate_epoch == 1 for _, r in requests(actions, VoteRequest))


def test_prospective_lost_pre_vote_goes_back_to_unattached() -> None:
    node = make_node()
    node.start(0)
    now, _ = timeout(node, 0)
    assert node.role is Role.PROSPECTIVE
    for corr, (dest, _, _, _) in list(node.pending.items()):
        node.handle_response(dest, corr, VoteResponse(0, -1, 0, False, True), now)
    assert node.role is Role.UNATTACHED and node.epoch == 0


def test_prospective_from_follower_returns_to_that_leader_on_lost_pre_vote() -> None:
    node = make_node()
    make_follower(node, leader=2, epoch=3)
    now, _ = timeout(node, 0)  # fetch timeout
    assert node.role is Role.PROSPECTIVE
    for corr, (dest, kind, _, _) in list(node.pending.items()):
        if kind == "pre_vote":
            node.handle_response(dest, corr, VoteResponse(0, 2, 3, False, True), now)
    assert node.role is Role.FOLLOWER and node.leader_id == 2 and node.epoch == 3


def test_candidate_election_timeout_backs_off_then_prospective() -> None:
    node = make_node(election_backoff_max_ms=100)
    node.start(0)
    now, _ = timeout(node, 0)
    for corr, (dest, _, _, _) in list(node.pending.items()):
        node.handle_response(dest, corr, VoteResponse(0, -1, 0, True, True), now)
        if node.role is Role.CANDIDATE:
            break
    now, _ = timeout(node, now)
    assert node.role is Role.CANDIDATE and node.candidate_backing_off
    now, _ = timeout(node, now)
    assert node.role is Role.PROSPECTIVE and node.epoch == 1


def test_higher_epoch_vote_request_moves_to_unattached_and_grants_once() -> None:
    node = make_node()
    node.start(0)
    actions = node.handle_request(2, 1, vote_req(5, 2), 10)
    assert responses(actions, VoteResponse)[0].vote_granted
    assert node.role is Role.UNATTACHED and node.epoch == 5 and node.voted_id == 2
    assert of_type(actions, PersistQuorumState)[-1].state == QuorumState(5, -1, 2, "")
    # the same epoch, another candidate: rejected (one vote per epoch)
    actions = node.handle_request(3, 2, vote_req(5, 3), 11)
    assert not responses(actions, VoteResponse)[0].vote_granted
    # the same candidate again (a retry): granted again
    assert responses(node.handle_request(2, 3, vote_req(5, 2), 12), VoteResponse)[0].vote_granted


def test_vote_rejected_for_stale_epoch_or_shorter_log() -> None:
    node = make_node()
    node.log.append(entries(0, 2, "a", "b"))
    node.log.flush(2)
    node.start(0)
    node.handle_request(2, 1, vote_req(4, 2, 2, 2), 0)  # epoch 4, granted to 2
    reply = responses(node.handle_request(3, 2, vote_req(3, 3, 2, 5), 1), VoteResponse)[0]
    assert not reply.vote_granted and reply.leader_epoch == 4
    # epoch 5, but the candidate's log (epoch 1) is behind ours (epoch 2)
    reply = responses(node.handle_request(3, 3, vote_req(5, 3, 1, 9), 2), VoteResponse)[0]
    assert not reply.vote_granted and node.epoch == 5 and node.voted_id == -1
    # same last epoch, shorter log
    reply = responses(node.handle_request(3, 4, vote_req(6, 3, 2, 1), 3), VoteResponse)[0]
    assert not reply.vote_granted
    reply = responses(node.handle_request(3, 5, vote_req(7, 3, 2, 2), 4), VoteResponse)[0]
    assert reply.vote_granted


def test_pre_vote_changes_nothing_and_is_refused_while_leader_is_alive() -> None:
    node = make_node()
    make_follower(node, leader=2, epoch=3, now=0)
    before = (node.role, node.epoch, node.voted_id, node.leader_id)
    actions = node.handle_request(3, 1, vote_req(3, 3, 0, 0, pre=True), 10)
    assert not responses(actions, VoteResponse)[0].vote_granted  # heard from 2 at t=0
    assert of_type(actions, PersistQuorumState) == []
    assert (node.role, node.epoch, node.voted_id, node.leader_id) == before
    # once the leader has been silent for a fetch timeout the pre-vote is granted
    reply = responses(node.handle_request(3, 2, vote_req(3, 3, 0, 0, pre=True), 2500), VoteResponse)
    assert reply[0].vote_granted and reply[0].pre_vote
    assert (node.role, node.epoch, node.voted_id, node.leader_id) == before


def test_pre_vote_from_a_higher_epoch_moves_to_that_epoch_unvoted() -> None:
    # a replica that became candidate in epoch 4 (then lost) must be able to rejoin a
    # quorum whose leader is still in epoch 3
    node = make_node()
    make_follower(node, leader=2, epoch=3, now=0)
    reply = responses(node.handle_request(3, 1, vote_req(4, 3, 0, 0, pre=True), 10), VoteResponse)
    assert reply[0].vote_granted and reply[0].leader_epoch == 4
    assert node.role is Role.UNATTACHED and node.epoch == 4 and node.voted_id == -1


def test_leader_rejects_votes_in_its_epoch_and_steps_down_for_higher() -> None:
    node = make_node()
    now, _ = make_leader(node)
    reply = responses(node.handle_request(2, 1, vote_req(1, 2, 9, 99), now), VoteResponse)[0]
    assert not reply.vote_granted and node.role is Role.LEADER
    reply = responses(node.handle_request(2, 2, vote_req(2, 2, 9, 99), now), VoteResponse)[0]
    assert reply.vote_granted and node.role is Role.UNATTACHED and node.epoch == 2


def test_vote_request_errors() -> None:
    node = make_node()
    node.start(0)
    bad_cluster = VoteRequest("other", 1, 2, 0, 0)
    reply = responses(node.handle_request(2, 1, bad_cluster, 0), VoteResponse)[0]
    assert reply.error_code == Errors.INCONSISTENT_CLUSTER_ID
    reply = responses(node.handle_request(9, 2, vote_req(1, 9), 0), VoteResponse)[0]
    assert reply.error_code == Errors.INCONSISTENT_VOTER_SET and node.epoch == 0


def test_begin_quorum_epoch_makes_follower_and_fences_old_epochs() -> None:
    node = make_node()
    actions = make_follower(node, leader=2, epoch=4)
    assert node.role is Role.FOLLOWER and node.leader_id == 2 and node.epoch == 4
    assert of_type(actions, LeaderChanged)[-1] == LeaderChanged(4, 2)
    reply = node.handle_request(3, 5, BeginQuorumEpochRequest("test", 3, 3), 1)
    assert responses(reply, BeginQuorumEpochResponse)[0].error_code == Errors.FENCED_LEADER_EPOCH
    assert node.leader_id == 2


def test_follower_fetch_timeout_voter_prospective_observer_unattached() -> None:
    voter = make_node(1)
    make_follower(voter, 2, 1)
    timeout(voter, 0)
    assert voter.role is Role.PROSPECTIVE
    observer = make_node(7)
    make_follower(observer, 2, 1)
    timeout(observer, 0)
    assert observer.role is Role.UNATTACHED
    # an observer never campaigns: it only looks for the leader
    for _ in range(5):
        timeout(observer, 0)
        assert observer.role is Role.UNATTACHED and observer.epoch == 1


def test_observer_never_votes() -> None:
    node = make_node(7)
    node.start(0)
    reply = responses(node.handle_request(2, 1, vote_req(3, 2), 0), VoteResponse)[0]
    assert not reply.vote_granted and node.voted_id == -1


def test_wiped_voter_with_new_directory_id_never_votes_or_campaigns() -> None:
    node = make_node(1, directory_id="new", voter_directory_ids={1: "old", 2: "b", 3: "c"})
    node.start(0)
    assert not node.is_voter
    reply = responses(node.handle_request(2, 1, vote_req(3, 2), 0), VoteResponse)[0]
    assert not reply.vote_granted
    timeout(node, 0)
    assert node.role is Role.UNATTACHED


def test_end_quorum_epoch_starts_election_soon_for_preferred_successor() -> None:
    node = make_node(2)
    make_follower(node, 1, 3)
    node.handle_request(1, 7, EndQuorumEpochRequest("test", 1, 3, (2, 3)), 100)
    assert node.role is Role.UNATTACHED and node.epoch == 3
    assert node.election_deadline_ms <= 101  # first preferred: no backoff
    _, _actions = timeout(node, 100)
    assert node.role is Role.PROSPECTIVE


def test_resign_sends_end_quorum_epoch_with_successors_by_progress() -> None:
    node = make_node()
    now, _ = make_leader(node)
    node.leader_state.replicas[3].end_offset = 5  # type: ignore[union-attr]
    node.leader_state.replicas[2].end_offset = 1  # type: ignore[union-attr]
    actions = node.resign(now)
    assert node.role is Role.RESIGNED
    ends = requests(actions, EndQuorumEpochRequest)
    assert sorted(s.dest for s, _ in ends) == [2, 3]
    assert ends[0][1].preferred_successors == (3, 2)
    # the resigned leader does not vote in its own epoch, and campaigns after a timeout
    reply = responses(node.handle_request(2, 1, vote_req(1, 2, 9, 99), now), VoteResponse)[0]
    assert not reply.vote_granted
    timeout(node, now)
    assert node.role is Role.PROSPECTIVE


def test_check_quorum_resigns_a_leader_nobody_fetches_from() -> None:
    node = make_node()
    now, _ = make_leader(node)
    node.tick(now + 2999)
    assert node.role is Role.LEADER
    actions = node.tick(now + 3000)  # 1.5 x controller.quorum.fetch.timeout.ms
    assert node.role is Role.RESIGNED
    assert requests(actions, EndQuorumEpochRequest)


def test_single_voter_elects_itself_and_never_resigns() -> None:
    node = make_node(1, voters=(1,))
    now, _ = make_leader(node)
    assert node.role is Role.LEADER
    node.tick(now + FAR // 1000)
    assert node.role is Role.LEADER


def test_restart_roles_from_quorum_state() -> None:
    was_leader = make_node(quorum_state=QuorumState(4, 1, 1))
    was_leader.start(0)
    assert was_leader.role is Role.RESIGNED and was_leader.epoch == 4
    follower = make_node(quorum_state=QuorumState(4, 2, -1))
    follower.start(0)
    assert follower.role is Role.FOLLOWER and follower.leader_id == 2
    voted = make_node(quorum_state=QuorumState(4, -1, 3))
    voted.start(0)
    assert voted.role is Role.UNATTACHED and voted.voted_id == 3
    # the persisted vote holds: no second vote in epoch 4
    reply = responses(voted.handle_request(2, 1, vote_req(4, 2), 0), VoteResponse)[0]
    assert not reply.vote_granted


def test_end_quorum_epoch_stale_or_from_other_leader_is_ignored() -> None:
    node = make_node(2)
    make_follower(node, 1, 3)
    from riverbed.raft.messages import EndQuorumEpochResponse

    reply = responses(
        node.handle_request(1, 1, EndQuorumEpochRequest("test", 1, 2, (2,)), 10),
        EndQuorumEpochResponse,
    )[0]
    assert reply.error_code == Errors.FENCED_LEADER_EPOCH and node.role is Role.FOLLOWER
    # same epoch, but not our leader: nothing changes
    node.handle_request(3, 2, EndQuorumEpochRequest("test", 3, 3, (2,)), 11)
    assert node.role is Role.FOLLOWER and node.leader_id == 1


def test_begin_quorum_epoch_errors() -> None:
    node = make_node(2)
    node.start(0)
    bad = responses(
        node.handle_request(1, 1, BeginQuorumEpochRequest("other", 1, 1), 0),
        BeginQuorumEpochResponse,
    )[0]
    assert bad.error_code == Errors.INCONSISTENT_CLUSTER_ID
    bad = responses(
        node.handle_request(9, 2, BeginQuorumEpochRequest("test", 9, 1), 0),
        BeginQuorumEpochResponse,
    )[0]
    assert bad.error_code == Errors.INVALID_REQUEST and node.role is Role.UNATTACHED


def test_observer_discovers_the_leader_from_a_voter_hint() -> None:
    from riverbed.raft.messages import FetchRequest, FetchResponse

    node = make_node(7)
    node.start(0)
    now, actions = timeout(node, 0)
    sends = requests(actions, FetchRequest)
    assert len(sends) == 1 and sends[0][0].dest in (1, 2, 3)
    hint = FetchResponse(Errors.NOT_LEADER_OR_FOLLOWER, 2, 4)
    actions = node.handle_response(sends[0][0].dest, sends[0][0].correlation_id, hint, now)
    assert node.role is Role.FOLLOWER and node.leader_id == 2 and node.epoch == 4
    nxt = requests(actions, FetchRequest)
    assert nxt and nxt[0][0].dest == 2


def test_check_quorum_counts_voters_downloading_a_snapshot() -> None:
    # a majority downloading the leader's snapshot (FetchSnapshot only, for longer than
    # 1.5 x fetch timeout) is following it: the leader must not resign and restart them
    node = make_node(fetch_snapshot_bytes_max=10)
    now, _ = make_leader(node)
    sid = SnapshotId(5, 1)
    node.snapshots.write(sid, bytes(1000))
    for t in range(now, now + 4 * 2000, 100):
        for voter in (2, 3):
            position = (t // 100) * 10 % 1000
            req = FetchSnapshotRequest("test", voter, node.epoch, sid, position, 10)
            reply = responses(node.handle_request(voter, t, req, t), FetchSnapshotResponse)
            assert reply[0].error_code == Errors.NONE
        node.tick(t)
        assert node.role is Role.LEADER, t
    # an observer's download does not count: with the voters silent the leader resigns
    node.handle_request(4, 1, FetchSnapshotRequest("test", 4, node.epoch, sid, 0, 10), t)
    node.tick(t + 3001)
    assert node.role is Role.RESIGNED


def test_two_prospectives_of_one_round_grant_only_one_of_them() -> None:
    # the leader died: its last fetch replies reached both followers together, so their
    # fetch timeouts ran out together; granting each other's pre-votes, both campaigned
    # and split the vote (each voting for itself, the dead voter silent): 2.4 s more in
    # the fail-over benchmark (issue 23). Between two prospectives of equal logs the
    # lower id gets the pre-vote; a newer log gets it whatever its id.
    low, high = make_node(1), make_node(3)
    for node in (low, high):
        make_follower(node, leader=2, epoch=3, now=0)
        timeout(node, 0)  # fetch timeout
        assert node.role is Role.PROSPECTIVE
    asks_high = vote_req(3, 1, 0, 0, pre=True)
    asks_low = vote_req(3, 3, 0, 0, pre=True)
    assert responses(high.handle_request(1, 1, asks_high, 2100), VoteResponse)[0].vote_granted
    assert not responses(low.handle_request(3, 1, asks_low, 2100), VoteResponse)[0].vote_granted
    assert low.role is Role.PROSPECTIVE and high.role is Role.PROSPECTIVE  # nothing changed
    newer = vote_req(3, 3, 3, 5, pre=True)
    assert responses(low.handle_request(3, 2, newer, 2100), VoteResponse)[0].vote_granted


def test_a_prospective_yields_to_the_replica_that_refused_its_pre_vote() -> None:
    # node 1's fetch timeout ran out first: node 3 still heard from the leader and refused
    # it; when node 3's own timeout runs out, node 1 (still prospective, unable to win)
    # must grant it, or both lose their round and wait another fetch timeout
    node = make_node(1)
    make_follower(node, leader=2, epoch=3, now=0)
    now, _ = timeout(node, 0)
    assert node.role is Role.PROSPECTIVE
    for corr, (dest, _, _, _) in list(node.pending.items()):
        if dest == 3:
            node.handle_response(3, corr, VoteResponse(0, 2, 3, False, True), now)
    assert node.role is Role.PROSPECTIVE  # node 2 (the dead leader) never answers
    reply = responses(
        node.handle_request(3, 1, vote_req(3, 3, 0, 0, pre=True), now + 5), VoteResponse
    )
    assert reply[0].vote_granted
