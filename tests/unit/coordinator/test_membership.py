"""Classic group membership: joins, syncs, heartbeats, leaves, timeouts, static members."""

from __future__ import annotations

from riverbed.coordinator.group import GroupState
from riverbed.coordinator.shard import GroupConfig
from riverbed.protocol.errors import ErrorCode
from riverbed.testing.group_harness import Harness, assignment, join_req

E = ErrorCode


DELAYED = GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=100)


def joined(h: Harness, n: int) -> list[str]:
    """n members join an empty group within the initial delay: one generation for all."""
    ids = [h.join_member() for _ in range(n)]
    group = h.shard.groups["g"]
    while group.state is GroupState.PREPARING_REBALANCE:
        h.advance(100)
    return ids


def stable_group(h: Harness, n: int) -> list[str]:
    """n members through one rebalance to Stable (generation 1); returns their ids."""
    ids = joined(h, n)
    group = h.shard.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    leader = group.leader_id
    assert leader == ids[0]
    assignments = {m: assignment([i]) for i, m in enumerate(ids)}
    h.sync(leader, group.generation, assignments)
    for m in ids[1:]:
        h.sync(m, group.generation)
    assert group.state is GroupState.STABLE
    return ids


def test_member_id_required_then_join_completes_a_generation() -> None:
    h = Harness()
    first = h.replies[h.join(join_req())]
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("c-")
    assert first.generation_id == -1
    rid = h.join(join_req(member_id=first.member_id))
    resp = h.replies[rid]
    assert resp.error_code == 0 and resp.generation_id == 1
    assert resp.leader == first.member_id and resp.protocol_name == "range"
    assert [m.member_id for m in resp.members] == [first.member_id]


def test_old_clients_get_a_member_id_without_a_second_join() -> None:
    h = Harness()
    resp = h.replies[h.join(join_req(), version=3)]
    assert resp.error_code == 0 and resp.member_id and resp.generation_id == 1


def test_sync_answers_after_the_write_and_followers_get_their_assignment() -> None:
    h = Harness(DELAYED)
    a, b = joined(h, 2)
    group = h.shard.groups["g"]
    gen = group.generation
    h.hold_writes = True
    follower = h.sync(b, gen)
    leader = h.sync(a, gen, {a: assignment([0, 1]), b: assignment([2])})
    assert follower not in h.replies and leader not in h.replies  # not durable yet
    h.release()
    assert h.replies[leader].assignment == assignment([0, 1])
    assert h.replies[follower].assignment == assignment([2])
    assert group.state is GroupState.STABLE
    # the group metadata record carries the assignment
    fresh = h.replay_into_new_shard().groups["g"]
    assert fresh.state is GroupState.STABLE and fresh.generation == gen
    assert fresh.members[b].assignment == assignment([2]) and fresh.leader_id == a


def test_a_failed_sync_write_answers_the_error_and_rebalances() -> None:
    h = Harness()
    a = h.join_member()
    h.hold_writes = True
    rid = h.sync(a, 1, {a: assignment([0])})
    h.release(E.NOT_COORDINATOR)
    assert h.replies[rid].error_code == E.NOT_COORDINATOR
    assert h.shard.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_a_new_member_triggers_a_rebalance_heard_through_heartbeats() -> None:
    h = Harness(DELAYED)
    a, b = stable_group(h, 2)
    c = h.join_member()
    assert h.heartbeat(a, 1).error_code == E.REBALANCE_IN_PROGRESS
    ra = h.join(join_req(member_id=a))
    assert ra not in h.replies  # b has not rejoined yet
    rb = h.join(join_req(member_id=b))
    for rid in (ra, rb, h.pending):
        assert h.replies[rid].error_code == 0 and h.replies[rid].generation_id == 2
    assert len(h.replies[ra].members) == 3 and h.replies[rb].members == []
    assert h.heartbeat(c, 1).error_code == E.ILLEGAL_GENERATION
    assert h.heartbeat(c, 2).error_code == 0  # CompletingRebalance: heartbeats are fine


def test_members_that_do_not_rejoin_in_time_are_removed() -> None:
    h = Harness(DELAYED)
    a, b = stable_group(h, 2)
    h.leave([(b, None)])
    rid = h.join(join_req(member_id=a))
    assert h.replies[rid].generation_id == 2  # only a is left: completes at once
    h.sync(a, 2, {a: assignment([0, 1])})
    h.join_member()  # c arrives; a never rejoins
    h.advance(2001)  # the rebalance timeout
    group = h.shard.groups["g"]
    assert list(group.members) != [] and a not in group.members
    assert h.replies[h.pending].generation_id == 3


def test_session_timeout_removes_a_silent_member() -> None:
    h = Harness(DELAYED)
    a, b = stable_group(h, 2)
    h.advance(600)
    assert h.heartbeat(a, 1).error_code == 0
    h.advance(600)  # b said nothing for 1200 ms > its 1000 ms session
    group = h.shard.groups["g"]
    assert b not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, 1).error_code == E.REBALANCE_IN_PROGRESS
    assert h.heartbeat(b, 1).error_code == E.UNKNOWN_MEMBER_ID


def test_leave_of_the_last_member_empties_the_group() -> None:
    h = Harness()
    (a,) = stable_group(h, 1)
    resp = h.leave([(a, None), ("nobody", None)])
    assert [m.error_code for m in resp.members] == [0, E.UNKNOWN_MEMBER_ID]
    group = h.shard.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation == 2
    assert h.replay_into_new_shard().groups["g"].state is GroupState.EMPTY


def test_a_pending_join_is_answered_unknown_member_when_its_member_leaves() -> None:
    h = Harness(DELAYED)
    a, b = stable_group(h, 2)
    rid = h.join(join_req(member_id=a))  # a rebalance starts, a is parked
    h.leave([(a, None)])
    assert h.replies[rid].error_code == E.UNKNOWN_MEMBER_ID
    assert h.shard.groups["g"].leader_id == b


def test_static_member_rejoins_without_a_rebalance_and_fences_its_old_id() -> None:
    h = Harness(DELAYED)
    # static members get their id at once (no MEMBER_ID_REQUIRED round)
    r1 = h.join(join_req(instance="i1"))
    r2 = h.join(join_req(instance="i2"))
    group = h.shard.groups["g"]
    while group.state is GroupState.PREPARING_REBALANCE:
        h.advance(100)
    first, second = h.replies[r1], h.replies[r2]
    assert first.generation_id == second.generation_id == 1
    h.sync(first.member_id, 1, {first.member_id: assignment([0]), second.member_id: b"x"})
    h.sync(second.member_id, 1, instance="i2")
    assert group.state is GroupState.STABLE
    # i2 restarts: a join without member id takes its place, same generation, no rebalance
    again = h.replies[h.join(join_req(instance="i2"))]
    assert again.error_code == 0 and again.generation_id == 1
    assert again.member_id != second.member_id
    assert group.state is GroupState.STABLE and group.generation == 1
    assert group.members[again.member_id].assignment == b"x"
    fenced = h.heartbeat(second.member_id, 1, instance="i2")
    assert fenced.error_code == E.FENCED_INSTANCE_ID
    assert h.heartbeat(again.member_id, 1, instance="i2").error_code == 0
    assert h.heartbeat(first.member_id, 1, instance="i1").error_code == 0
    # the new id is durable
    assert again.member_id in h.replay_into_new_shard().groups["g"].members
    # a static member leaving by instance id only
    resp = h.leave([("", "i2")])
    assert [m.error_code for m in resp.members] == [0]
    assert group.state is GroupState.PREPARING_REBALANCE


def test_invalid_session_timeouts_and_group_max_size() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100,
                            max_session_timeout_ms=1000, max_size=1))  # fmt: skip
    assert h.replies[h.join(join_req(session_ms=50))].error_code == E.INVALID_SESSION_TIMEOUT
    assert h.replies[h.join(join_req(session_ms=5000))].error_code == E.INVALID_SESSION_TIMEOUT
    h.join_member()
    assert h.replies[h.join(join_req())].error_code == E.GROUP_MAX_SIZE_REACHED


def test_inconsistent_protocols_are_refused() -> None:
    h = Harness()
    stable_group(h, 1)
    other = join_req(protocols=[("roundrobin", b"")])
    assert h.replies[h.join(other)].error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selection_by_vote() -> None:
    h = Harness(DELAYED)
    both = [("range", b"r"), ("roundrobin", b"rr")]
    h.join_member(protocols=[("roundrobin", b"rr"), ("range", b"r")])
    h.join_member(protocols=both)
    h.join_member(protocols=[("roundrobin", b"rr"), ("range", b"r")])
    while h.shard.groups["g"].state is GroupState.PREPARING_REBALANCE:
        h.advance(100)
    assert h.shard.groups["g"].protocol_name == "roundrobin"


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=300, min_session_timeout_ms=100))
    h.join_member()
    first = h.pending
    h.advance(200)
    h.join_member()
    assert first not in h.replies
    h.advance(150)  # first delay over, a member came: one more step
    assert first not in h.replies
    h.advance(300)
    assert h.replies[first].generation_id == 1 and len(h.replies[first].members) == 2


def test_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness(DELAYED)
    a, b = joined(h, 2)
    h.sync(a, 1, {a: assignment([0]), b: assignment([1])})
    h.advance(2001)
    group = h.shard.groups["g"]
    assert b not in group.members


def test_deadlines_are_never_in_the_past_after_a_tick() -> None:
    h = Harness(DELAYED)
    stable_group(h, 3)
    h.advance(10_000)
    deadline = h.shard.next_deadline()
    assert deadline is None or deadline > h.now
