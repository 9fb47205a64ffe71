"""Offsets: commit fencing, durability before the answer, fetch, delete, expiry, replay;
the record formats and Kafka's group -> partition hash."""

from __future__ import annotations

import random

import pytest

from riverbed.coordinator.group import GroupState, Reply
from riverbed.coordinator.records import (
    OffsetAndMetadata,
    StoredGroup,
    StoredMember,
    group_metadata_key,
    group_metadata_value,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    parse_record,
    partition_for,
)
from riverbed.coordinator.shard import GroupConfig, GroupShard
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import OffsetDeleteRequest
from riverbed.testing.group_harness import Harness, join_req

E = ErrorCode


def codes(resp) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def committed(shard: GroupShard, group: str = "g") -> dict[tuple[str, int], int]:
    fetched = shard.offset_fetch(group, None)
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics
        for p in t.partitions
    }


def test_java_string_hash_and_partition_mapping() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("é") == 0xE9
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


def test_record_formats_round_trip_and_match_kafkas_bytes() -> None:
    key = offset_commit_key("g", "t", 3)
    # int16 version 1, then string "g", string "t", int32 3
    assert key == bytes.fromhex("000100016700017400000003")
    assert group_metadata_key("g") == bytes.fromhex("0002000167")
    value = offset_commit_value(OffsetAndMetadata(42, 5, "meta", 1234))
    assert value[:2] == b"\x00\x03"
    parsed = parse_record(key, value)
    assert parsed is not None and parsed.value == OffsetAndMetadata(42, 5, "meta", 1234)
    member = StoredMember("m", "inst", "cid", "/h", 300, 100, b"sub", b"asg")
    stored = StoredGroup("consumer", 7, "range", "m", 99, [member])
    back = parse_record(group_metadata_key("g"), group_metadata_value(stored))
    assert back is not None and back.value == stored
    tomb = parse_record(key, None)
    assert tomb is not None and tomb.value is None
    assert parse_record(b"\x00\x05abc", b"") is None  # a KIP-848 record: not ours


def test_commit_is_fenced_by_generation_and_member() -> None:
    h = Harness()
    m = h.join_member()
    assert h.replies[h.pending].generation_id == 1
    h.sync(m, 1, {m: b""})
    ok = h.replies[h.commit(m, 1, {("t", 0): 10})]
    assert codes(ok) == {("t", 0): 0}
    assert codes(h.replies[h.commit(m, 0, {("t", 0): 11})]) == {("t", 0): E.ILLEGAL_GENERATION}
    assert codes(h.replies[h.commit("x", 1, {("t", 0): 11})]) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # an admin commit (generation -1) only into an Empty group
    assert codes(h.replies[h.commit("", -1, {("t", 0): 11})]) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert committed(h.shard) == {("t", 0): 10}
    # a group that does not exist: only admin commits create it
    assert codes(h.replies[h.commit("", 3, {("t", 1): 1}, group="new")]) == {
        ("t", 1): E.ILLEGAL_GENERATION
    }
    assert codes(h.replies[h.commit("", -1, {("t", 1): 1}, group="new")]) == {("t", 1): 0}
    assert committed(h.shard, "new") == {("t", 1): 1}


def test_commit_is_answered_and_visible_only_once_durable() -> None:
    h = Harness()
    h.hold_writes = True
    rid = h.commit("", -1, {("t", 0): 5, ("t", 1): 6})
    assert rid not in h.replies and committed(h.shard) == {}
    h.release()
    assert codes(h.replies[rid]) == {("t", 0): 0, ("t", 1): 0}
    assert committed(h.shard) == {("t", 0): 5, ("t", 1): 6}
    h.hold_writes = True
    rid = h.commit("", -1, {("t", 0): 7})
    h.release(E.REQUEST_TIMED_OUT)
    assert codes(h.replies[rid]) == {("t", 0): E.REQUEST_TIMED_OUT}
    assert committed(h.shard) == {("t", 0): 5, ("t", 1): 6}


def test_unknown_partitions_and_large_metadata_fail_alone() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=0))
    rid = h.commit("", -1, {("t", 0): 1})
    assert codes(h.replies[rid]) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}  # "m" is 1 byte
    h2 = Harness()
    req_reply = Reply(99, 8)
    from riverbed.protocol.messages import OffsetCommitRequest as R

    req = R(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            R.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    R.OffsetCommitRequestPartition(partition_index=i, committed_offset=1)
                    for i in (0, 9)
                ],
            )
        ],
    )
    h2.shard.offset_commit(req_reply, req, h2.now, unknown={("t", 9)})
    h2.flush()
    assert codes(h2.replies[99]) == {("t", 0): 0, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_fetch_of_requested_partitions_answers_minus_one_without_commit() -> None:
    h = Harness()
    h.commit("", -1, {("t", 0): 5})
    got = h.shard.offset_fetch("g", [("t", [0, 1]), ("u", [0])])
    rows = {
        (t.name, p.partition_index): p.committed_offset for t in got.topics for p in t.partitions
    }
    assert rows == {("t", 0): 5, ("t", 1): -1, ("u", 0): -1}
    assert h.shard.offset_fetch("nobody", None).topics == []


def test_replay_restores_offsets_groups_and_tombstones() -> None:
    h = Harness()
    h.commit("", -1, {("t", 0): 5, ("t", 1): 6})
    h.commit("", -1, {("t", 0): 8})
    h.commit("", -1, {("x", 0): 1}, group="other")
    req = OffsetDeleteRequest(
        group_id="g",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="t",
                partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=1)],
            )
        ],
    )
    rid = h.run(lambda r: h.shard.offset_delete(r, req), 0)
    assert h.replies[rid].error_code == 0
    rid = h.run(lambda r: h.shard.delete_group(r, "other", h.now), 2)
    assert h.replies[rid] == E.NONE
    fresh = h.replay_into_new_shard()
    assert committed(fresh) == {("t", 0): 8}
    assert "other" not in fresh.groups


def test_delete_groups_refuses_non_empty_and_unknown_groups() -> None:
    h = Harness()
    h.join_member()
    assert h.replies[h.run(lambda r: h.shard.delete_group(r, "g", h.now), 2)] == E.NON_EMPTY_GROUP
    assert h.replies[h.run(lambda r: h.shard.delete_group(r, "zz", h.now), 2)] == (
        E.GROUP_ID_NOT_FOUND
    )


def test_offset_delete_of_a_subscribed_topic_is_refused() -> None:
    h = Harness()
    m = h.join_member(topics=("t",))
    h.sync(m, 1, {m: b""})
    h.commit(m, 1, {("t", 0): 1, ("u", 0): 2})
    req = OffsetDeleteRequest(
        group_id="g",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=n,
                partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
            )
            for n in ("t", "u")
        ],
    )
    resp = h.replies[h.run(lambda r: h.shard.offset_delete(r, req), 0)]
    assert codes(resp) == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0}
    assert committed(h.shard) == {("t", 0): 1}


def test_offsets_of_empty_groups_expire_after_the_retention() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=1000, initial_rebalance_delay_ms=0,
                            min_session_timeout_ms=100))  # fmt: skip
    h.commit("", -1, {("t", 0): 1}, group="standalone")
    m = h.join_member()
    h.sync(m, 1, {m: b""})
    h.commit(m, 1, {("t", 0): 2})
    h.now += 5000
    assert h.shard.expire_offsets(h.now) == 1  # the group with a member keeps its offsets
    h.flush()
    assert "standalone" not in h.shard.groups
    h.leave([(m, None)])
    assert h.shard.groups["g"].state is GroupState.EMPTY
    h.now += 999
    assert h.shard.expire_offsets(h.now) == 0
    h.now += 2
    assert h.shard.expire_offsets(h.now) == 1
    h.flush()
    assert "g" not in h.shard.groups
    assert h.replay_into_new_shard().groups == {}


def test_list_and_describe() -> None:
    h = Harness()
    m = h.join_member()
    h.sync(m, 1, {m: b"asg"})
    h.commit("", -1, {("t", 0): 1}, group="simple")
    listed = sorted(h.shard.list_groups(None))
    assert listed == [("g", "consumer", "Stable"), ("simple", "", "Empty")]
    assert h.shard.list_groups({"empty"}) == [("simple", "", "Empty")]
    d = h.shard.describe_group("g")
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert [(x.member_id, x.client_id, x.member_assignment) for x in d.members] == [
        (m, "c", b"asg")
    ]
    assert h.shard.describe_group("none").group_state == "Dead"


@pytest.mark.parametrize("seed", range(30))
def test_random_membership_keeps_invariants(seed: int) -> None:
    """Seeded: members join, sync, heartbeat, leave, go silent, commit; time jumps.
    Invariants after every step; at the end everyone leaves and every parked request
    has been answered exactly once."""
    rng = random.Random(seed)
    h = Harness(GroupConfig(initial_rebalance_delay_ms=rng.choice([0, 50]),
                            min_session_timeout_ms=10), seed=seed)  # fmt: skip
    issued: list[int] = []
    known: list[str] = []
    last_generation = 0
    for _step in range(200):
        group = h.shard.groups.get("g")
        action = rng.random()
        gen = group.generation if group else 0
        if action < 0.2 or not known:
            member = rng.choice(known) if known and rng.random() < 0.5 else ""
            rid = h.join(join_req(member_id=member, session_ms=rng.choice([100, 300])))
            issued.append(rid)
            resp = h.replies.get(rid)
            if resp is not None and resp.member_id and resp.member_id not in known:
                known.append(resp.member_id)
        elif action < 0.4:
            m = rng.choice(known)
            assignments = {x: b"a" for x in known} if rng.random() < 0.5 else None
            issued.append(h.sync(m, gen, assignments))
        elif action < 0.6:
            h.heartbeat(rng.choice(known), gen)
        elif action < 0.7:
            h.leave([(rng.choice(known), None)])
        elif action < 0.8:
            issued.append(h.commit(rng.choice(known), gen, {("t", 0): _step}))
        else:
            h.advance(rng.choice([1, 10, 50, 150, 400]))
        group = h.shard.groups.get("g")
        if group is None:
            continue
        seed_msg = f"seed {seed} step {_step}"
        assert group.generation >= last_generation, seed_msg
        last_generation = group.generation
        if group.members:
            assert group.leader_id in group.members, seed_msg
        assert group.pending_sync <= set(group.members), seed_msg
        for mem in group.members.values():
            if mem.awaiting_join is not None:
                assert group.state is GroupState.PREPARING_REBALANCE, seed_msg
            if mem.awaiting_sync is not None:
                assert group.state is GroupState.COMPLETING_REBALANCE, seed_msg
        if group.state is GroupState.STABLE:
            assert group.protocol_name == "range", seed_msg
    group = h.shard.groups.get("g")
    if group is not None:
        h.leave([(m, None) for m in list(group.members)])
    h.advance(10_000)
    assert set(issued) <= set(h.replies), f"seed {seed}: parked requests never answered"
    assert len(h.answered) == len(set(h.answered))


def test_a_commit_with_its_own_retention_expires_then_and_is_stored_as_value_v1() -> None:
    from riverbed.protocol.messages import OffsetCommitRequest as R

    h = Harness()
    req = R(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=500,
        topics=[
            R.OffsetCommitRequestTopic(
                name="t",
                partitions=[R.OffsetCommitRequestPartition(partition_index=0, committed_offset=3)],
            )
        ],
    )
    h.run(lambda r: h.shard.offset_commit(r, req, h.now), 3)  # v3 carries retention_time_ms
    ((_key, value),) = h.log
    assert value is not None and value[:2] == b"\x00\x01"
    assert h.replay_into_new_shard().groups["g"].offsets[("t", 0)].expire_timestamp_ms == (
        h.now + 500
    )
    assert h.shard.expire_offsets(h.now + 499) == 0  # the broker's retention is a week
    assert h.shard.expire_offsets(h.now + 500) == 1
