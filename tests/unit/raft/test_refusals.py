"""A refused connection to the quorum leader (riverbed.raft.refusals, issue 23): a voter
whose leader's endpoint refuses (the process died, its host lives) becomes Prospective at
once instead of waiting out controller.quorum.fetch.timeout.ms, and grants pre-votes; a
refusal that is stale, of another epoch, or from an endpoint that never answered counts
for nothing, and without one KIP-996's rule stands."""

from __future__ import annotations

from riverbed.raft.actions import Action, PersistQuorumState, SendRequest, SendResponse
from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from riverbed.raft.node import RaftNode
from riverbed.raft.refusals import Refusal, refusal_proves_leader_gone
from riverbed.raft.replication import FETCH_ERROR_BACKOFF_MS
from riverbed.raft.roles import Role
from riverbed.testing.raft_sim_helpers import (
    fetch_reply,
    make_follower,
    make_node,
    of_type,
    requests,
    responses,
)

LEADER, EPOCH = 2, 3


def pending_fetch(node: RaftNode) -> int:
    """The latest fetch, in flight."""
    corr = node.fetch_correlation_id
    assert node.fetch_in_flight and node.pending[corr][1] == "fetch"
    return corr


def fetching_follower(node_id: int = 1, now: int = 0) -> RaftNode:
    """A voter following ``LEADER`` whose first fetch was answered at ``now`` (so the
    leader's endpoint is known to reach it) and whose next fetch is in flight."""
    node = make_node(node_id)
    make_follower(node, leader=LEADER, epoch=EPOCH, now=now)
    node.handle_response(LEADER, pending_fetch(node), fetch_reply(LEADER, EPOCH, 0, []), now)
    assert node.role is Role.FOLLOWER and node.fetch_in_flight
    return node


def refuse_next_fetch(node: RaftNode, lost_at: int) -> list[Action]:
    """The leader's process dies at ``lost_at``: the parked fetch's connection closes, the
    fetch sent again after the backoff is refused."""
    node.request_failed(LEADER, pending_fetch(node), False, lost_at)
    retry = lost_at + FETCH_ERROR_BACKOFF_MS
    node.tick(retry)
    return node.request_failed(LEADER, pending_fetch(node), True, retry + 1)


def test_a_refused_leader_makes_the_follower_prospective_at_once() -> None:
    node = fetching_follower()
    actions = refuse_next_fetch(node, lost_at=100)
    # without the shortcut the follower waits until its fetch timeout (2000 ms)
    assert node.role is Role.PROSPECTIVE and node.refusal_shortcuts == 1
    assert node.epoch == EPOCH and of_type(actions, PersistQuorumState) == []  # pre-vote only
    votes = requests(actions, VoteRequest)
    assert sorted(s.dest for s, _ in votes) == [2, 3]
    assert all(r.pre_vote and r.candidate_epoch == EPOCH for _, r in votes)


def test_a_lost_connection_refetches_after_the_backoff_not_the_request_timeout() -> None:
    node = fetching_follower()
    node.request_failed(LEADER, pending_fetch(node), False, 100)
    assert node.role is Role.FOLLOWER and not node.fetch_in_flight
    assert node.next_deadline_ms() == 100 + FETCH_ERROR_BACKOFF_MS
    fetches = requests(node.tick(100 + FETCH_ERROR_BACKOFF_MS), FetchRequest)
    assert [s.dest for s, _ in fetches] == [LEADER]


def test_a_refusal_from_an_endpoint_that_never_answered_counts_for_nothing() -> None:
    # e.g. a wrong address for the leader in this node's controller.quorum.voters
    node = make_node(1)
    make_follower(node, leader=LEADER, epoch=EPOCH, now=0)  # its BeginQuorumEpoch came in
    node.request_failed(LEADER, pending_fetch(node), True, 10)
    assert node.role is Role.FOLLOWER and node.refusal_shortcuts == 0


def test_a_refusal_older_than_the_last_contact_is_stale() -> None:
    node = fetching_follower()
    stale = pending_fetch(node)  # sent at 0
    begin = BeginQuorumEpochRequest("test", LEADER, EPOCH)
    node.handle_request(LEADER, 7, begin, 5)  # the leader speaks again at 5
    node.request_failed(LEADER, stale, True, 10)
    assert node.role is Role.FOLLOWER and node.refusal_shortcuts == 0


def test_a_refusal_of_a_request_from_an_older_epoch_counts_for_nothing() -> None:
    assert not refusal_proves_leader_gone(
        Refusal(EPOCH - 1, LEADER, 10),
        epoch=EPOCH,
        leader_id=LEADER,
        last_contact_ms=0,
        answered={LEADER},
    )
    assert refusal_proves_leader_gone(
        Refusal(EPOCH, LEADER, 10), epoch=EPOCH, leader_id=LEADER, last_contact_ms=0, answered={2}
    )
    # another peer's refusal says nothing about the leader
    assert not refusal_proves_leader_gone(
        Refusal(EPOCH, 3, 10), epoch=EPOCH, leader_id=LEADER, last_contact_ms=0, answered={2, 3}
    )


def pre_vote(candidate: int) -> VoteRequest:
    return VoteRequest("test", EPOCH, candidate, 0, 0, pre_vote=True)


def test_kip_996_rule_stands_without_a_refusal_and_yields_with_one() -> None:
    node = fetching_follower(now=0)
    # heard from the leader 10 ms ago, no refusal: rejected (KIP-996)
    reply = responses(node.handle_request(3, 1, pre_vote(3), 10), VoteResponse)[0]
    assert not reply.vote_granted
    # a lost pre-vote round brings a refused follower back to following the leader (with
    # a fresh fetch timer); the refusal still stands, so it grants the next one
    refuse_next_fetch(node, lost_at=20)
    for corr, (dest, kind, _, _) in list(node.pending.items()):
        if kind == "pre_vote":
            node.handle_response(dest, corr, VoteResponse(0, LEADER, EPOCH, False, True), 80)
    assert node.role is Role.FOLLOWER and node.leader_id == LEADER
    reply = responses(node.handle_request(3, 2, pre_vote(3), 90), VoteResponse)[0]
    assert reply.vote_granted
    # a reply from the leader after the refusal: it lives, KIP-996 again
    node.handle_response(LEADER, pending_fetch(node), fetch_reply(LEADER, EPOCH, 0, []), 200)
    reply = responses(node.handle_request(3, 3, pre_vote(3), 210), VoteResponse)[0]
    assert not reply.vote_granted


def route(nodes: dict[int, RaftNode], actions: dict[int, list[Action]], now: int) -> None:
    """Deliver every request between the live nodes at ``now``; those to the dead leader
    are refused (its host answers that nothing listens)."""
    while any(actions.values()):
        src = next(i for i, a in actions.items() if a)
        action = actions[src].pop(0)
        if not isinstance(action, SendRequest):
            continue
        sender = nodes[src]
        if action.dest not in nodes:
            actions[src] += sender.request_failed(action.dest, action.correlation_id, True, now)
            continue
        dest = nodes[action.dest]
        for reply in dest.handle_request(src, action.correlation_id, action.request, now):
            if isinstance(reply, SendRequest):
                actions[action.dest].append(reply)
            elif isinstance(reply, SendResponse):
                actions[src] += sender.handle_response(
                    action.dest, action.correlation_id, reply.response, now
                )


def test_the_survivors_elect_a_new_leader_within_milliseconds_of_the_refusals() -> None:
    # the leader of a three-voter quorum is SIGKILLed at 100: both followers' parked
    # fetches lose their connection, their next fetches are refused, and a new leader is
    # elected at once; on the code before, both waited out the 2000 ms fetch timeout
    nodes = {1: fetching_follower(1), 3: fetching_follower(3)}
    actions = {i: refuse_next_fetch(n, lost_at=100) for i, n in nodes.items()}
    assert all(n.role is Role.PROSPECTIVE for n in nodes.values())
    route(nodes, actions, now=151)
    leaders = [n for n in nodes.values() if n.role is Role.LEADER]
    assert [n.node_id for n in leaders] == [1] and leaders[0].epoch == EPOCH + 1
    assert nodes[3].voted_id == 1


def pre_vote_to(node: RaftNode, dest: int) -> tuple[int, VoteRequest]:
    (corr,) = [c for c, (d, kind, _, _) in node.pending.items() if kind == "pre_vote" and d == dest]
    return corr, VoteRequest("test", EPOCH, node.node_id, 0, 0, pre_vote=True)


def test_crossed_pre_votes_do_not_wait_for_an_election_timeout() -> None:
    # the fail-over benchmark's slow trial (1.3 s): node 1's reconnect was refused first,
    # node 3 (still following, the leader heard 50 ms ago) refused its pre-vote; node 3's
    # reconnect was refused next and its pre-vote reached node 1 before that refusal did:
    # node 1 refused it by the tie-break (equal logs, the lower id goes first). Each had
    # refused the other, the dead leader answers nobody: both waited out their election
    # timeouts. Node 1 now asks node 3 again, which yields to it.
    low, high = fetching_follower(1), fetching_follower(3)
    refuse_next_fetch(low, lost_at=100)
    corr_low, asks_high = pre_vote_to(low, 3)
    refused_low = responses(high.handle_request(1, 1, asks_high, 152), VoteResponse)[0]
    assert not refused_low.vote_granted  # KIP-996: node 3 heard from the leader
    refuse_next_fetch(high, lost_at=100)
    _, asks_low = pre_vote_to(high, 1)
    assert high.role is Role.PROSPECTIVE
    assert not responses(low.handle_request(3, 1, asks_low, 153), VoteResponse)[0].vote_granted
    again = low.handle_response(3, corr_low, refused_low, 154)
    ((send, retry),) = requests(again, VoteRequest)
    assert send.dest == 3 and retry.pre_vote
    granted = responses(high.handle_request(1, 2, retry, 155), VoteResponse)[0]
    assert granted.vote_granted
    low.handle_response(3, send.correlation_id, granted, 156)
    assert low.role is Role.CANDIDATE and low.epoch == EPOCH + 1


def test_an_observer_asks_another_voter_for_the_new_leader_at_once() -> None:
    # a broker-only node (an observer) whose leader refuses: it stops following it and asks
    # another voter at once (the code before waited out its 2000 ms fetch timeout)
    node = fetching_follower(node_id=4)
    assert not node.is_voter
    actions = refuse_next_fetch(node, lost_at=100)
    assert node.role is Role.UNATTACHED and node.leader_id == -1 and node.epoch == EPOCH
    fetches = requests(actions, FetchRequest)
    assert len(fetches) == 1 and fetches[0][0].dest in (1, 3)
    assert requests(actions, VoteRequest) == []  # observers never campaign
