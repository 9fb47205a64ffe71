"""KIP-848 consumer groups: heartbeat errors, assignors, reconciliation, records, replay;
a seeded simulation of clients joining, leaving, crashing and revoking late checks that no
partition is ever held by two members (server side) nor consumed by two clients."""

from __future__ import annotations

import dataclasses
import os
import random
import time
import uuid
from typing import Any

import pytest

from riverbed.coordinator.assignors import range_assignor, to_partitions, uniform
from riverbed.coordinator.consumer_group import ConsumerGroupState, MemberState
from riverbed.coordinator.consumer_membership import StaticTopics
from riverbed.coordinator.shard import GroupConfig, GroupShard
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    OffsetCommitRequest,
)
from riverbed.testing.group_harness import CONFIG as CLASSIC
from riverbed.testing.group_harness import Harness, group_state, join_req, replay_log

E = ErrorCode
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
CONFIG = dataclasses.replace(
    CLASSIC,
    consumer_session_timeout_ms=1000,
    consumer_heartbeat_interval_ms=100,
    consumer_max_size=8,
)
Owned = dict[uuid.UUID, list[int]]


class CG:
    """Drives ConsumerGroupHeartbeat on a shard through the classic harness."""

    def __init__(self, config: GroupConfig = CONFIG, seed: int = 0) -> None:
        self.h = Harness(config, seed)
        self.topics = StaticTopics({"t": (T1, 6), "u": (T2, 4)})

    def hb(
        self,
        member: str = "",
        epoch: int = 0,
        *,
        topics: list[str] | None = None,
        owned: Owned | None = None,
        group: str = "g",
        instance: str | None = None,
        assignor: str | None = None,
        regex: str | None = None,
        version: int = 1,
        full: bool = False,
    ) -> Any:
        """``full``: every field, as Kafka's consumer sends after a failed heartbeat."""
        req = ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            instance_id=instance,
            rebalance_timeout_ms=5000 if epoch == 0 or full else -1,
            subscribed_topic_names=topics
            if topics is not None or regex
            else (["t"] if epoch == 0 or full else None),
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=(
                []
                if epoch == 0
                else None
                if owned is None
                else [
                    ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in owned.items()
                ]
            ),
        )
        shard = self.h.shard
        return self.h.replies[
            self.h.run(
                lambda r: shard.consumer_group_heartbeat(
                    r, req, "cid", "/h", self.topics, self.h.now
                ),
                version,
            )
        ]

    def join(self, **kw: Any) -> tuple[str, int, Owned]:
        r = self.hb(**kw)
        assert r.error_code == 0, r
        return r.member_id, r.member_epoch, assigned(r)


def assigned(resp: Any) -> Owned:
    if resp.assignment is None:
        return {}
    return {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}


def count(owned: Owned) -> int:
    return sum(len(ps) for ps in owned.values())


def test_heartbeat_validation_errors() -> None:
    g = CG()
    assert g.hb(group="").error_code == E.INVALID_REQUEST
    assert g.hb(epoch=-3, member="m").error_code == E.INVALID_REQUEST
    assert g.hb(epoch=3, member="").error_code == E.INVALID_REQUEST
    assert g.hb(assignor="sticky").error_code == E.UNSUPPORTED_ASSIGNOR
    assert g.hb(regex="t(", topics=[]).error_code == E.INVALID_REGULAR_EXPRESSION
    assert g.hb(member="m", epoch=5, owned={}).error_code == E.GROUP_ID_NOT_FOUND
    m, epoch, _ = g.join()
    assert epoch == 1
    assert g.hb(member="other", epoch=1, owned={}).error_code == E.UNKNOWN_MEMBER_ID
    fenced = g.hb(member=m, epoch=epoch + 1, owned={})
    assert fenced.error_code == E.FENCED_MEMBER_EPOCH and fenced.member_epoch == -1
    assert g.hb(member=m, epoch=epoch, owned={T1: list(range(6))}).error_code == 0
    assert g.hb(member="m", epoch=-2).error_code == E.INVALID_REQUEST  # -2 needs an instance


def test_group_max_size_and_classic_group_clash() -> None:
    g = CG(dataclasses.replace(CONFIG, consumer_max_size=2))
    g.join()
    g.join()
    assert g.hb().error_code == E.GROUP_MAX_SIZE_REACHED
    # a classic group with members owns its id
    h = g.h
    first = h.replies[h.join(join_req("classic"))]
    h.join(join_req("classic", first.member_id))
    assert g.hb(group="classic").error_code == E.GROUP_ID_NOT_FOUND


def test_three_members_get_two_each_and_a_join_moves_only_what_must_move() -> None:
    g = CG()
    members: dict[str, tuple[int, Owned]] = {}
    for _ in range(2):
        m, e, a = g.join()
        members[m] = (e, a)
    # settle the first two (the first got everything, the second waits for releases)
    settle(g, members)
    assert sorted(count(a) for _, a in members.values()) == [3, 3]
    before = {m: set(a.get(T1, [])) for m, (_, a) in members.items()}
    m3, e3, a3 = g.join()
    members[m3] = (e3, a3)
    revoked = settle(g, members)
    assert sorted(count(a) for _, a in members.values()) == [2, 2, 2]
    for m, had in before.items():
        now = set(members[m][1].get(T1, []))
        assert now <= had  # the old members only gave partitions up
        assert revoked[m] == had - now  # and exactly those were revoked
    group = g.h.shard.consumer_groups["g"]
    assert group.state is ConsumerGroupState.STABLE
    group.check_invariants()


def settle(g: CG, members: dict[str, tuple[int, Owned]], rounds: int = 10) -> dict[str, set[int]]:
    """Heartbeat every member (owning what it was last given) until nothing changes;
    returns what each member was asked to give up."""
    revoked: dict[str, set[int]] = {m: set() for m in members}
    for _ in range(rounds):
        changed = False
        for m, (epoch, owned) in list(members.items()):
            r = g.hb(member=m, epoch=epoch, owned=owned)
            assert r.error_code == 0, r
            new = assigned(r) if r.assignment is not None else owned
            revoked[m] |= set(owned.get(T1, [])) - set(new.get(T1, []))
            if (r.member_epoch, new) != (epoch, owned):
                changed = True
            members[m] = (r.member_epoch, new)
            g.h.shard.consumer_groups["g"].check_invariants()
        if not changed:
            return revoked
    raise AssertionError("did not settle")


def test_a_partition_waits_for_its_previous_owner_to_revoke() -> None:
    g = CG()
    a, ea, owned_a = g.join()
    owned_a_full = {T1: list(range(6))}
    ra = g.hb(member=a, epoch=ea, owned=owned_a_full)
    assert count(assigned(ra) or owned_a) == 6
    b, eb, owned_b = g.join()
    assert owned_b == {}  # everything is still held by a
    group = g.h.shard.consumer_groups["g"]
    assert group.members[b].state is MemberState.UNRELEASED_PARTITIONS
    # a heartbeats without listing its partitions: nothing can be assumed released
    r = g.hb(member=a, epoch=ea)
    keep = assigned(r)
    assert count(keep) == 3 and group.members[a].state is MemberState.UNREVOKED_PARTITIONS
    assert r.member_epoch == ea  # no epoch bump before the revocation is acknowledged
    assert count(assigned(g.hb(member=b, epoch=eb, owned={}))) == 0
    # a acknowledges: its epoch advances, then b gets the three released partitions
    r = g.hb(member=a, epoch=ea, owned=keep)
    assert r.member_epoch == group.assignment_epoch
    rb = g.hb(member=b, epoch=eb, owned={})
    assert count(assigned(rb)) == 3 and not set(assigned(rb)[T1]) & set(keep[T1])
    group.check_invariants()


def test_a_full_heartbeat_is_told_its_assignment() -> None:
    """Kafka's consumer sends every field after a failed heartbeat (its HeartbeatState is
    reset), and Kafka's coordinator answers such a full request with the assignment, changed
    or not (GroupMetadataManager.consumerGroupHeartbeat: the assignment is provided when
    "the member sent a full request ... on any errors (e.g. timeout)"): whatever response
    was lost, the member learns what it may use."""
    g = CG()
    a, ea, _ = g.join()
    g.join()  # b: the target gives it three of a's
    keep = assigned(g.hb(member=a, epoch=ea, owned={T1: list(range(6))}))
    ra = g.hb(member=a, epoch=ea, owned=keep)  # revoked: a moves to the group's epoch
    epoch = ra.member_epoch
    assert g.hb(member=a, epoch=epoch, owned=keep).assignment is None  # nothing new
    full = g.hb(member=a, epoch=epoch, owned=keep, full=True)
    assert full.error_code == 0 and full.member_epoch == epoch
    assert full.assignment is not None and assigned(full) == keep
    # all three fields make a full request: without the owned partitions it is not one
    assert g.hb(member=a, epoch=epoch, full=True).assignment is None


def test_leave_static_leave_and_session_timeout() -> None:
    g = CG()
    a, ea, _ = g.join()
    b, eb, _ = g.join(instance="i-b")
    members = {a: (ea, {}), b: (eb, {})}
    settle(g, members)
    group = g.h.shard.consumer_groups["g"]
    epoch = group.group_epoch
    # static member leaves for now: keeps its partitions, no new group epoch
    r = g.hb(member=b, epoch=-2, instance="i-b")
    assert r.error_code == 0 and r.member_epoch == -2
    assert group.group_epoch == epoch and count(group.members[b].assigned) == 3
    # its instance comes back under a new member id with the same partitions
    r = g.hb(member="b2", epoch=0, instance="i-b")
    assert r.error_code == 0 and r.member_id == "b2" and count(assigned(r)) == 3
    assert group.group_epoch == epoch and b not in group.members
    assert group_state(replay(g.h)) == group_state(g.h.shard)  # the new id's records replace b's
    # a member leaving with -1 gives its partitions to the other
    assert g.hb(member=a, epoch=members[a][0], owned=members[a][1]).error_code == 0
    assert g.hb(member=a, epoch=-1).member_epoch == -1
    r = g.hb(member="b2", epoch=r.member_epoch, owned=assigned(r))
    assert count(assigned(r)) == 6
    # a member that stops heartbeating is removed after the session timeout
    g.h.advance(CONFIG.consumer_session_timeout_ms + 1)
    assert group.members == {} and group.state is ConsumerGroupState.EMPTY


def test_assignors_balance_stick_and_range() -> None:
    subs = {m: frozenset({T1}) for m in ("a", "b", "c")}
    first = uniform(subs, {T1: 7}, {})
    assert sorted(len(to_partitions(a)) for a in first.values()) == [2, 2, 3]
    grown = dict(subs, d=frozenset({T1}))
    second = uniform(grown, {T1: 7}, first)
    for m in subs:
        assert to_partitions(second[m]) <= to_partitions(first[m])  # sticky
    assert sorted(len(to_partitions(a)) for a in second.values()) == [1, 2, 2, 2]
    mixed = {"a": frozenset({T1, T2}), "b": frozenset({T2})}
    out = uniform(mixed, {T1: 2, T2: 2}, {})
    assert to_partitions(out["a"]) | to_partitions(out["b"]) == {(T1, 0), (T1, 1), (T2, 0), (T2, 1)}
    assert len(to_partitions(out["b"])) == 2 and all(t == T2 for t, _ in to_partitions(out["b"]))
    ranged = range_assignor(
        {"b": frozenset({T1, T2}), "a": frozenset({T1, T2})}, {T1: 3, T2: 3}, {}
    )
    assert ranged["a"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert ranged["b"] == {T1: frozenset({2}), T2: frozenset({2})}


def test_range_assignor_is_selected_by_the_members() -> None:
    g = CG()
    g.join(assignor="range")
    g.join(assignor="range")
    d = g.h.shard.describe_consumer_group("g")
    assert d.assignor_name == "range" and d.error_code == 0
    members = list(g.h.shard.consumer_groups["g"].members.values())
    epoch = g.h.shard.consumer_groups["g"].group_epoch
    # switching the assignor is a new group epoch with a new target assignment
    for m in members:
        r = g.hb(member=m.member_id, epoch=m.member_epoch, assignor="uniform")
        assert r.error_code == 0
    assert g.h.shard.consumer_groups["g"].group_epoch == epoch + 2
    assert g.h.shard.describe_consumer_group("g").assignor_name == "uniform"
    assert g.h.shard.describe_consumer_group("nope").error_code == E.GROUP_ID_NOT_FOUND


def test_a_backtracking_regex_is_matched_in_linear_time() -> None:
    """RE2 (as Kafka's RE2/J): ``(a+)+$`` against a long non-matching name would take
    Python's ``re`` longer than the age of the universe; here it is instant."""
    g = CG()
    g.topics.topics["a" * 200 + "b"] = (uuid.UUID(int=9), 1)
    g.topics.topics["aaa"] = (uuid.UUID(int=10), 1)
    started = time.monotonic()
    _m, _e, a = g.join(regex="(a+)+$", topics=None)
    assert time.monotonic() - started < 5
    assert a == {uuid.UUID(int=10): [0]}


def test_regex_subscription_and_new_partitions_bump_the_epoch() -> None:
    g = CG()
    m, e, a = g.join(regex="t|u", topics=None)
    assert count(a) == 10
    group = g.h.shard.consumer_groups["g"]
    epoch = group.group_epoch
    g.topics.topics["t"] = (T1, 8)
    r = g.hb(member=m, epoch=e, owned=a)
    assert group.group_epoch == epoch + 1 and count(assigned(r)) == 12


def test_offset_commit_uses_the_member_epoch() -> None:
    g = CG()
    m, e, a = g.join()
    g.hb(member=m, epoch=e, owned=a)

    def commit(member: str, epoch: int, version: int = 9) -> int:
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
        rid = g.h.run(lambda r: g.h.shard.offset_commit(r, req, g.h.now), version)
        return int(g.h.replies[rid].topics[0].partitions[0].error_code)

    assert commit(m, e) == 0
    assert commit(m, e + 1) == E.STALE_MEMBER_EPOCH
    assert commit("x", e) == E.UNKNOWN_MEMBER_ID
    assert commit(m, e, version=8) == E.UNSUPPORTED_VERSION
    assert g.h.shard.consumer_fetch_check("g", m, e + 1) == E.STALE_MEMBER_EPOCH
    assert g.h.shard.offset_fetch("g", None).topics[0].partitions[0].committed_offset == 5
    listed = g.h.shard.list_consumer_groups(None)
    assert listed == [("g", "consumer", "Stable")]
    classic = g.h.shard.describe_group("g")
    assert classic.protocol_type == "consumer" and len(classic.members) == 1


def replay(h: Harness) -> GroupShard:
    return replay_log(h.log, h.shard.config, h.now)


@pytest.mark.parametrize("seed", range(int(os.environ.get("RIVERBED_SIM_SEEDS", "12"))))
def test_simulation_never_gives_a_partition_to_two_members(seed: int) -> None:
    simulate(seed)


def simulate(seed: int) -> set[MemberState]:
    """Random joins, leaves, crashes, late revocations, heartbeats without their owned
    partitions, lost responses and coordinator reloads from the records; after every step
    the group holds each partition at most once and no two live clients consume the same
    partition; at the end everything is assigned, balanced, and a replay of the records
    rebuilds the same groups."""
    rng = random.Random(seed)
    g = CG(dataclasses.replace(CONFIG, consumer_max_size=64), seed)
    clients: dict[str, dict[str, Any]] = {}  # member -> epoch, owned, told
    seen_states: set[MemberState] = set()
    try:
        for _step in range(300):
            action = rng.random()
            if action < 0.1 and len(clients) < 6:
                m, e, a = g.join(assignor=rng.choice([None, "uniform"]))
                clients[m] = {"epoch": e, "owned": a, "told": a}
            elif action < 0.15 and clients:
                m = rng.choice(sorted(clients))
                assert g.hb(member=m, epoch=-1).error_code == 0
                del clients[m]
            elif action < 0.18 and clients:
                m = rng.choice(sorted(clients))
                del clients[m]  # crashed: the session timeout will notice
                g.h.advance(rng.choice([10, 600]))
            elif action < 0.5 and clients:
                m = rng.choice(sorted(clients))
                c = clients[m]  # a late revocation: the client catches up with "told"
                c["owned"] = {t: ps for t, ps in c["told"].items() if ps}
            elif action < 0.54 and clients:
                m = rng.choice(sorted(clients))  # a heartbeat whose response is lost
                c = clients[m]
                assert g.hb(member=m, epoch=c["epoch"], owned=c["owned"]).error_code in (
                    0,
                    E.FENCED_MEMBER_EPOCH,
                )
            elif action < 0.56:
                g.h.shard = replay(g.h)  # the coordinator moves: state from the records
            elif clients:
                m = rng.choice(sorted(clients))
                c = clients[m]
                owned = c["owned"] if rng.random() < 0.8 else None
                r = g.hb(member=m, epoch=c["epoch"], owned=owned)
                if r.error_code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
                    m2, e2, a2 = g.join(member=m)
                    clients[m2] = {"epoch": e2, "owned": a2, "told": a2}
                else:
                    assert r.error_code == 0, r
                    c["epoch"] = r.member_epoch
                    if r.assignment is not None:
                        told = assigned(r)
                        c["told"] = told
                        # new partitions are used at once; revoked ones are dropped later
                        c["owned"] = {
                            t: sorted(set(c["owned"].get(t, [])) | set(told.get(t, [])))
                            for t in set(c["owned"]) | set(told)
                        }
            g.h.now += rng.choice([1, 5, 50])
            group = g.h.shard.consumer_groups.get("g")
            if group is not None:
                group.check_invariants()
                seen_states.update(m.state for m in group.members.values())
            consumed: dict[tuple[uuid.UUID, int], str] = {}
            for m, c in clients.items():
                for t, ps in c["owned"].items():
                    for p in ps:
                        assert (t, p) not in consumed, (
                            f"{(t, p)} consumed by {m} and {consumed[(t, p)]}"
                        )
                        consumed[(t, p)] = m
            g.h.shard.tick(g.h.now)
            g.h.flush()
            # members the coordinator timed out are crashed clients by then
            if group is not None:
                for m in list(clients):
                    if m not in group.members:
                        del clients[m]
        # quiesce: everyone revokes on time and heartbeats until stable
        for _ in range(20):
            g.h.advance(300)  # crashed members' sessions run out meanwhile
            for m in sorted(clients):
                c = clients[m]
                c["owned"] = {t: ps for t, ps in c["told"].items() if ps}
                r = g.hb(member=m, epoch=c["epoch"], owned=c["owned"])
                if r.error_code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
                    # fenced meanwhile (e.g. it sat on revoked partitions past its
                    # rebalance timeout): the client gives everything up and rejoins
                    m2, e2, a2 = g.join(member=m)
                    clients[m2] = {"epoch": e2, "owned": a2, "told": a2}
                    continue
                assert r.error_code == 0, r
                c["epoch"] = r.member_epoch
                if r.assignment is not None:
                    c["told"] = assigned(r)
        group = g.h.shard.consumer_groups.get("g")
        if clients and group is not None:
            assert group.state is ConsumerGroupState.STABLE
            sizes = [count(c["told"]) for c in clients.values()]
            assert sum(sizes) == 6 and max(sizes) - min(sizes) <= 1
        assert group_state(replay(g.h)) == group_state(g.h.shard)
    except AssertionError as exc:
        raise AssertionError(f"replay with seed={seed}: {exc}") from exc
    return seen_states


def test_the_simulation_goes_through_revocations_and_hand_overs() -> None:
    """The seeds of the test above are not all easy cases: members wait to revoke and
    wait for partitions to be released."""
    seen: set[MemberState] = set()
    for seed in range(12):
        seen |= simulate(seed)
    assert MemberState.UNREVOKED_PARTITIONS in seen
    assert MemberState.UNRELEASED_PARTITIONS in seen


# ---------------------------------------------------------------------------------------
# The first KIP-848 tests on main (written against an earlier, in-memory implementation),
# driven through this implementation: the client applies what it is told at once and
# reports its partitions on every heartbeat.
T = T1
TOPICS = {"t": (T1, 6), "u": (T2, 3)}


class Driver:
    def __init__(self, session_ms: int = 1000) -> None:
        self.h = Harness(dataclasses.replace(CONFIG, consumer_session_timeout_ms=session_ms))
        self.topics = StaticTopics(dict(TOPICS))
        self.epochs: dict[str, int] = {}
        self.owned: dict[str, dict[uuid.UUID, set[int]]] = {}

    @property
    def shard(self) -> GroupShard:
        return self.h.shard

    @property
    def now(self) -> int:
        return self.h.now

    @now.setter
    def now(self, value: int) -> None:
        self.h.now = value

    def beat(
        self,
        member: str,
        epoch: int | None = None,
        topics: list[str] | None = None,
        owned: dict[uuid.UUID, set[int]] | None = None,
    ) -> Any:
        ep = self.epochs.get(member, 0) if epoch is None else epoch
        held = self.owned.get(member, {}) if owned is None else owned
        req = ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=member,
            member_epoch=ep,
            rebalance_timeout_ms=5000 if ep == 0 else -1,
            subscribed_topic_names=topics if topics is not None else (["t"] if ep == 0 else None),
            topic_partitions=[
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(p))
                for t, p in held.items()
            ],
        )
        rid = self.h.run(
            lambda r: self.shard.consumer_group_heartbeat(r, req, "c", "/h", self.topics, self.now),
            1,
        )
        resp = self.h.replies[rid]
        if resp.error_code == 0 and ep >= 0:
            self.epochs[member] = resp.member_epoch
            if resp.assignment is not None:
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


def by_names(fn: Any, subs: dict[str, set[str]], previous: dict[str, Any]) -> dict[str, Any]:
    """Run an assignor on topic names (TOPICS) instead of ids."""
    ids = {m: frozenset(TOPICS[n][0] for n in names) for m, names in subs.items()}
    return fn(ids, {tid: n for tid, n in TOPICS.values()}, previous)


def test_assignors_split_evenly_and_uniform_is_sticky() -> None:
    subs = {"a": {"t"}, "b": {"t"}, "c": {"t", "u"}}
    r = by_names(range_assignor, subs, {})
    assert [sorted(r[m][T]) for m in "abc"] == [[0, 1], [2, 3], [4, 5]]
    assert r["c"][T2] == {0, 1, 2}
    first = by_names(uniform, {"a": {"t"}, "b": {"t"}}, {})
    assert sorted(len(first[m][T]) for m in "ab") == [3, 3]
    second = by_names(uniform, {"a": {"t"}, "b": {"t"}, "c": {"t"}}, first)
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
    assert d.shard.consumer_groups["g"].state is ConsumerGroupState.STABLE


def test_fencing_and_unknown_members() -> None:
    d = Driver()
    d.beat("a")
    assert d.beat("a", epoch=5).error_code == E.FENCED_MEMBER_EPOCH
    assert d.beat("zz", epoch=3).error_code == E.UNKNOWN_MEMBER_ID
    d.beat("b")
    d.settle(["a", "b"])
    epoch = d.epochs["a"]
    # the previous epoch with a subset of the assignment is fine (a lost response)
    prev = d.shard.consumer_groups["g"].members["a"].previous_member_epoch
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
    d.h.flush()
    d.settle(["a"])
    assert d.parts("a") == set(range(6))
    assert list(d.shard.consumer_groups["g"].members) == ["a"]


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


def test_offsets_of_an_empty_consumer_group_expire_and_the_group_goes() -> None:
    cfg = dataclasses.replace(CONFIG, offsets_retention_ms=10_000)
    g = CG(cfg)
    m, e, a = g.join()
    g.hb(member=m, epoch=e, owned=a)
    req = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=e,
        member_id=m,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=name,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=7
                    )
                ],
            )
            for name in ("t", "gone")
        ],
    )
    g.h.run(lambda r: g.h.shard.offset_commit(r, req, g.h.now), 9)
    shard = g.h.shard
    g.h.now += 20_000
    # a member keeps the group: only the offset of a topic it does not subscribe to expires
    assert g.hb(member=m, epoch=e).error_code == 0
    assert shard.expire_offsets(g.h.now) == 1
    g.h.flush()  # the offset goes once its tombstone is written
    assert set(shard.consumer_groups["g"].offsets) == {("t", 0)}
    assert g.hb(member=m, epoch=-1).error_code == 0
    assert shard.expire_offsets(g.h.now) == 1
    g.h.flush()
    assert "g" not in shard.consumer_groups
    assert "g" not in replay(g.h).consumer_groups  # the tombstones were written


def test_a_group_id_is_one_kind_at_a_time_and_an_empty_group_converts() -> None:
    g = CG()
    m, e, _ = g.join()
    h = g.h
    refused = h.replies[h.join(join_req("g"))]
    assert refused.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    req = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=e,
        member_id=m,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=3
                    )
                ],
            )
        ],
    )
    h.run(lambda r: h.shard.offset_commit(r, req, h.now), 9)
    assert g.hb(member=m, epoch=-1).error_code == 0
    # empty: a classic member may take the id over, with the committed offsets
    first = h.replies[h.join(join_req("g"))]
    assert first.error_code == E.MEMBER_ID_REQUIRED
    h.join(join_req("g", first.member_id))
    assert "g" not in h.shard.consumer_groups and h.shard.groups["g"].members
    assert set(h.shard.groups["g"].offsets) == {("t", 0)}
    fresh = replay(h)
    assert "g" not in fresh.consumer_groups and set(fresh.groups["g"].offsets) == {("t", 0)}


@pytest.mark.parametrize("seed", range(30))
def test_uniform_assignor_properties(seed: int) -> None:
    """Every subscribed partition goes to exactly one subscriber; with identical
    subscriptions the split is within one and a member keeps all it had up to its share
    (only the partitions that must move do)."""
    rng = random.Random(seed)
    tids = [uuid.UUID(int=i + 1) for i in range(4)]
    topics = {t: rng.randint(1, 12) for t in tids}
    members = [f"m{i}" for i in range(rng.randint(1, 9))]
    same = rng.random() < 0.5
    common = frozenset(rng.sample(tids, rng.randint(1, 4)))
    subs = {m: common if same else frozenset(rng.sample(tids, rng.randint(1, 4))) for m in members}
    # a previous target from another membership (some members new, some gone)
    before = uniform({m: subs[m] for m in members if rng.random() < 0.7} or subs, topics, {})
    after = uniform(subs, topics, before)
    held: dict[tuple[uuid.UUID, int], str] = {}
    for m, a in after.items():
        for tp in to_partitions(a):
            assert tp not in held and tp[0] in subs[m] and tp[1] < topics[tp[0]]
            held[tp] = m
    wanted = {(t, p) for m in members for t in subs[m] for p in range(topics[t])}
    assert set(held) == wanted, f"seed {seed}"
    if same:
        sizes = [len(to_partitions(after[m])) for m in members]
        assert max(sizes) - min(sizes) <= 1, f"seed {seed}: {sizes}"
        for m in members:
            had = to_partitions(before.get(m, {}))
            kept = had & to_partitions(after[m])
            assert len(kept) == min(len(had), len(to_partitions(after[m]))), f"seed {seed}"


def test_describe_v1_names_each_member_a_consumer_protocol_member() -> None:
    """ConsumerGroupDescribe v1 (KIP-1099): MemberType 1 for a member on the consumer
    protocol (every member of a consumer group here); v0 has no such field."""
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.headers import RequestHeader, decode_response, encode_response

    g = CG()
    g.join()
    d = g.h.shard.describe_consumer_group("g")
    assert [m.member_type for m in d.members] == [1]
    response = ConsumerGroupDescribeResponse(groups=[d])
    for version, member_type in ((1, 1), (0, -1)):
        header = RequestHeader(int(ApiKey.CONSUMER_GROUP_DESCRIBE), version, 3, "t")
        wire = decode_response(header, encode_response(header, response)[4:])
        assert [m.member_type for m in wire.groups[0].members] == [member_type]


def test_group_configs_override_session_timeout_and_heartbeat_interval() -> None:
    """A group's consumer.session.timeout.ms / consumer.heartbeat.interval.ms GROUP configs
    (the shell's ``group_overrides``, from the metadata image) replace the broker's for that
    group alone, from the next heartbeat on (Kafka's GroupConfigManager)."""
    g = CG()
    g.h.shard.group_overrides = {
        "slow": {"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "700"}
    }
    slow = g.hb(group="slow")
    plain = g.hb(group="g")
    assert (slow.error_code, slow.heartbeat_interval_ms) == (0, 700)
    assert (plain.error_code, plain.heartbeat_interval_ms) == (
        0,
        CONFIG.consumer_heartbeat_interval_ms,
    )
    g.h.advance(CONFIG.consumer_session_timeout_ms + 1)  # the broker's timeout: 1000
    assert g.h.shard.consumer_groups["g"].members == {}
    assert list(g.h.shard.consumer_groups["slow"].members) == [slow.member_id]
    g.h.advance(3000 - CONFIG.consumer_session_timeout_ms)  # the group's own: 3000
    assert g.h.shard.consumer_groups["slow"].members == {}
