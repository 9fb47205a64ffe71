"""The consumer group protocol (KIP-848): assignors, reconciliation, fencing, timeouts."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from riverbed.coordinator.assignors import RANGE, UNIFORM, assign
from riverbed.coordinator.consumer_group import ConsumerGroupConfig
from riverbed.coordinator.group import Reply
from riverbed.coordinator.shard import GroupConfig, GroupShard
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import ConsumerGroupHeartbeatRequest as HB
from riverbed.protocol.messages import OffsetCommitRequest

E = ErrorCode
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": (T, 6), "u": (U, 3)}


class Driver:
    def __init__(self, session_ms: int = 1000) -> None:
        cfg = ConsumerGroupConfig(session_timeout_ms=session_ms, heartbeat_interval_ms=100)
        self.shard = GroupShard(0, GroupConfig(), random.Random(0), cfg)
        self.now = 1_000_000
        self.n = 0
        self.epochs: dict[str, int] = {}
        self.owned: dict[str, dict[uuid.UUID, set[int]]] = {}

    def beat(
        self,
        member: str,
        epoch: int | None = None,
        topics: list[str] | None = None,
        owned: dict[uuid.UUID, set[int]] | None = None,
    ) -> Any:
        self.n += 1
        reply = Reply(self.n, 1)
        ep = self.epochs.get(member, 0) if epoch is None else epoch
        held = self.owned.get(member, {}) if owned is None else owned
        req = HB(
            group_id="g",
            member_id=member,
            member_epoch=ep,
            rebalance_timeout_ms=5000 if ep == 0 else -1,
            subscribed_topic_names=topics if topics is not None else (["t"] if ep == 0 else None),
            topic_partitions=[
                HB.TopicPartitions(topic_id=t, partitions=sorted(p)) for t, p in held.items()
            ],
        )
        self.shard.consumer_heartbeat(reply, req, "c", "/h", TOPICS, self.now)
        out, writes = self.shard.take_output()
        assert not writes
        ((_r, resp),) = out
        if resp.error_code == 0 and ep >= 0:
            self.epochs[member] = resp.member_epoch
            if resp.assignment is not None:  # the client applies what it is told at once
                self.owned[member] = {
                    tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions
                }
        return resp

    def parts(self, member: str) -> set[int]:
        return self.owned.get(member, {}).get(T, set())

    def settle(self, members: list[str], rounds: int = 6) -> None:
        for _ in range(rounds):
            for m in members:
                assert self.beat(m).error_code == 0


def test_assignors_split_evenly_and_uniform_is_sticky() -> None:
    subs = {"a": {"t"}, "b": {"t"}, "c": {"t", "u"}}
    r = assign(RANGE, subs, {}, TOPICS)
    assert [sorted(r[m][T]) for m in "abc"] == [[0, 1], [2, 3], [4, 5]]
    assert r["c"][U] == {0, 1, 2}
    first = assign(UNIFORM, {"a": {"t"}, "b": {"t"}}, {}, TOPICS)
    assert sorted(len(first[m][T]) for m in "ab") == [3, 3]
    second = assign(UNIFORM, {"a": {"t"}, "b": {"t"}, "c": {"t"}}, first, TOPICS)
    assert all(len(second[m][T]) == 2 for m in "abc")
    # each old member kept two of its own three: only one partition each moved
    assert all(second[m][T] <= first[m][T] for m in "ab")


def test_join_gets_an_epoch_and_its_partitions() -> None:
    d = Driver()
    resp = d.beat("a")
    assert resp.error_code == 0 and resp.member_epoch == 1 and resp.heartbeat_interval_ms == 100
    assert d.parts("a") == set(range(6))
    assert d.beat("a").assignment is None  # unchanged: not repeated


def test_partitions_move_only_after_their_owner_revoked_them() -> None:
    d = Driver()
    d.beat("a")
    resp = d.beat("b")  # epoch 2: the target gives b three of a's partitions
    assert resp.member_epoch == 2 and d.parts("b") == set()  # a still holds them all
    resp = d.beat("a")  # a is told to keep three: it revokes the others
    assert len(d.parts("a")) == 3 and resp.member_epoch == 1  # epoch moves after revoking
    resp = d.beat("a")  # confirms: owns only the kept three
    assert resp.member_epoch == 2
    d.beat("b")
    assert len(d.parts("b")) == 3 and d.parts("a").isdisjoint(d.parts("b"))
    assert d.shard.consumer_groups["g"].state == "Stable"


def test_fencing_and_unknown_members() -> None:
    d = Driver()
    d.beat("a")
    assert d.beat("a", epoch=5).error_code == E.FENCED_MEMBER_EPOCH
    assert d.beat("zz", epoch=3).error_code == E.UNKNOWN_MEMBER_ID
    d.beat("b")
    d.settle(["a", "b"])
    epoch = d.epochs["a"]
    # the previous epoch with a subset of the assignment is fine (a lost response)
    prev = d.shard.consumer_groups["g"].members["a"].previous_epoch
    assert d.beat("a", epoch=prev, owned={T: set(list(d.parts("a"))[:1])}).error_code == 0
    assert d.beat("a", epoch=epoch - 5 if epoch > 5 else -3).error_code != 0


def test_leave_and_session_timeout_hand_partitions_over() -> None:
    d = Driver(session_ms=1000)
    for m in "abc":
        d.beat(m)
    d.settle(list("abc"))
    assert sorted(len(d.parts(m)) for m in "abc") == [2, 2, 2]
    assert d.beat("c", epoch=-1).error_code == 0
    d.settle(["a", "b"])
    assert sorted(len(d.parts(m)) for m in "ab") == [3, 3]
    d.now += 600
    d.beat("a")
    d.now += 600  # b silent for 1200 ms > 1000
    d.shard.tick(d.now)
    d.settle(["a"])
    assert d.parts("a") == set(range(6))
    assert list(d.shard.consumer_groups["g"].members) == ["a"]


def test_commit_needs_the_member_epoch() -> None:
    d = Driver()
    d.beat("a")

    def commit(member: str, epoch: int) -> int:
        d.n += 1
        req = OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=epoch,
            member_id=member,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5
                        )
                    ],
                )
            ],
        )
        d.shard.offset_commit(Reply(d.n, 9), req, d.now)
        out, writes = d.shard.take_output()
        for w in writes:
            d.shard.complete_write(w.token, E.NONE)
        out += d.shard.take_output()[0]
        return int(out[0][1].topics[0].partitions[0].error_code)

    assert commit("a", 7) == E.STALE_MEMBER_EPOCH
    assert commit("x", 1) == E.UNKNOWN_MEMBER_ID
    assert commit("a", 1) == 0
    fetched = d.shard.offset_fetch("g", None)
    assert fetched.topics[0].partitions[0].committed_offset == 5
    assert ("g", "consumer", "Stable") in d.shard.list_groups(None)


@pytest.mark.parametrize("seed", range(20))
def test_random_membership_never_gives_a_partition_to_two_members(seed: int) -> None:
    """Seeded: members join, leave, heartbeat (sometimes late to revoke); at every step
    no partition is owned by two members, and once all settle every partition is owned."""
    rng = random.Random(seed)
    d = Driver(session_ms=10**9)
    live: list[str] = []
    for step in range(150):
        action = rng.random()
        if action < 0.2 and len(live) < 5:
            m = f"m{step}"
            d.beat(m)
            live.append(m)
        elif action < 0.3 and len(live) > 1:
            m = live.pop(rng.randrange(len(live)))
            d.beat(m, epoch=-1)
            d.owned.pop(m, None)
        elif live:
            d.beat(rng.choice(live))
        owners: dict[int, str] = {}
        for m in live:
            for p in d.parts(m):
                assert p not in owners, f"seed {seed} step {step}: {p} owned twice"
                owners[p] = m
    d.settle(live, rounds=8)
    assert set().union(*(d.parts(m) for m in live)) == set(range(6)), f"seed {seed}"
