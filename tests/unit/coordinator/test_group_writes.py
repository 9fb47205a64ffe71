"""A failed ``__consumer_offsets`` write leaves no trace (issue 18, defect 3).

Every KIP-848 and admin operation of a group changes memory only as far as its records
commit: a write that fails is answered with its error and the group is what a replay of
the committed records gives, so a retry, a fail-over and the offsets all agree."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from riverbed.coordinator.shard import GroupShard
from riverbed.protocol.errors import ErrorCode
from riverbed.testing.group_harness import (
    CONFIG,
    Harness,
    commit_req,
    group_state,
    heartbeat_req,
    offset_delete_req,
    replay_log,
)

E = ErrorCode
T = uuid.UUID(int=1)
TOPICS = {"t": (T, 6)}
CFG = dataclasses.replace(CONFIG, consumer_session_timeout_ms=1000)


class Topics:
    def get(self, name: str) -> tuple[uuid.UUID, int] | None:
        return TOPICS.get(name)

    def names(self) -> list[str]:
        return list(TOPICS)


class Client:
    """One consumer: what it was last told (its partitions and epoch)."""

    def __init__(self, h: Harness, member: str) -> None:
        self.h, self.member, self.epoch = h, member, 0
        self.told: set[int] = set()

    def beat(self, epoch: int | None = None, leave: bool = False) -> Any:
        req = heartbeat_req(
            self.member,
            -1 if leave else self.epoch if epoch is None else epoch,
            owned=None if leave or self.epoch == 0 else {T: self.told},
        )
        shard = self.h.shard
        rid = self.h.run(
            lambda r: shard.consumer_group_heartbeat(r, req, "c", "/h", Topics(), self.h.now), 1
        )
        resp = self.h.replies[rid]
        if resp.error_code == E.NONE and not leave:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.told = {p for tp in resp.assignment.topic_partitions for p in tp.partitions}
        return resp

    def beat_alive(self) -> int:
        """A heartbeat that only keeps the session (its answer may wait)."""
        req = heartbeat_req(self.member, self.epoch, owned={T: self.told})
        shard = self.h.shard
        return self.h.run(
            lambda r: shard.consumer_group_heartbeat(r, req, "c", "/h", Topics(), self.h.now), 1
        )

    def send_commit(self, offsets: dict[int, int]) -> int:
        req = commit_req(self.member, self.epoch, {("t", p): o for p, o in offsets.items()})
        shard = self.h.shard
        return self.h.run(lambda r: shard.offset_commit(r, req, self.h.now), 9)

    def commit(self, offsets: dict[int, int]) -> Any:
        return self.h.replies[self.send_commit(offsets)]


def reloaded(h: Harness) -> GroupShard:
    return replay_log(h.log, h.shard.config, h.now)


def offset(shard: GroupShard, p: int) -> int:
    got = shard.offset_fetch("g", [("t", [p])])
    return int(got.topics[0].partitions[0].committed_offset)


def stable_pair(h: Harness) -> tuple[Client, Client]:
    a, b = Client(h, "A"), Client(h, "B")
    a.beat()
    b.beat()
    for _ in range(4):
        a.beat()
        b.beat()
    assert a.told and b.told and not a.told & b.told and a.epoch == b.epoch
    return a, b


def test_a_failed_heartbeat_write_is_rolled_back_and_never_told() -> None:
    """The issue's sequence: a heartbeat gains partitions, its write fails with
    REQUEST_TIMED_OUT; the retry at the same epoch must not be told an assignment that
    no record holds; after a fail-over no other member gets those partitions while the
    first still holds them, and the committed offset never goes from 100 back to 40."""
    h = Harness(CFG)
    a, b = stable_pair(h)
    assert b.beat(leave=True).error_code == E.NONE  # A's target is now all six
    gained = set(range(6)) - a.told
    h.hold_writes = True
    before = a.epoch
    rid = h.run(
        lambda r: h.shard.consumer_group_heartbeat(
            r, heartbeat_req("A", before, owned={T: a.told}), "c", "/h", Topics(), h.now
        ),
        1,
    )
    assert rid not in h.replies  # nothing answered before its records are durable
    h.release(E.REQUEST_TIMED_OUT)
    # answered as Kafka's coordinator answers a timed-out write (a consumer retries it)
    assert h.replies[rid].error_code == E.COORDINATOR_NOT_AVAILABLE
    # no trace in memory: the group is what the committed records say
    assert group_state(h.shard) == group_state(reloaded(h))
    h.hold_writes = False
    retry = a.beat(epoch=before)
    assert retry.error_code == E.NONE and a.told == set(range(6))
    # what the retry was told, a record holds
    member = reloaded(h).consumer_groups["g"].members["A"]
    assert member.member_epoch == a.epoch
    assert {p for ps in member.assigned.values() for p in ps} == a.told
    last = max(gained)
    assert a.commit({last: 100}).topics[0].partitions[0].error_code == E.NONE
    h.shard = reloaded(h)  # the coordinator moves
    c = Client(h, "C")
    c.beat()
    c.beat()
    assert not c.told & a.told, f"C told {c.told} while A holds {a.told}"
    c.commit({p: 40 for p in c.told})  # C's position, before A's commit reaches it
    assert offset(h.shard, last) == 100
    for _ in range(3):  # A gives partitions up, C takes them over: never both at once
        a.beat()
        c.beat()
        assert not c.told & a.told, f"C told {c.told} while A holds {a.told}"
    assert c.told and a.told | c.told == set(range(6))


def test_timer_removals_and_leaves_are_rolled_back_on_a_failed_write() -> None:
    h = Harness(CFG)
    stable_pair(h)
    before = group_state(h.shard)
    h.hold_writes = True
    resp_id = h.run(
        lambda r: h.shard.consumer_group_heartbeat(
            r, heartbeat_req("B", -1), "c", "/h", Topics(), h.now
        ),
        1,
    )
    h.release(E.NOT_COORDINATOR)
    assert h.replies[resp_id].error_code == E.NOT_COORDINATOR
    assert group_state(h.shard) == before
    # the session timer's removal fails too: both members stay, and it is tried again
    h.now += CFG.consumer_session_timeout_ms + 1
    h.shard.tick(h.now)
    h.flush()
    assert h.held
    h.release(E.COORDINATOR_NOT_AVAILABLE)
    assert group_state(h.shard) == before == group_state(reloaded(h))
    h.hold_writes = False
    h.advance(1000)  # after the timers' back-off the removal is written
    assert h.shard.consumer_groups["g"].members == {}
    assert group_state(h.shard) == group_state(reloaded(h))


def test_failed_admin_writes_leave_groups_and_offsets_as_they_were() -> None:
    h = Harness(CFG)
    a = Client(h, "A")
    a.beat()
    a.beat()
    assert a.commit({0: 5, 1: 6}).topics[0].partitions[0].error_code == E.NONE
    h.hold_writes = True
    rid = a.send_commit({0: 7})
    h.release(E.REQUEST_TIMED_OUT)
    assert h.replies[rid].topics[0].partitions[0].error_code == E.REQUEST_TIMED_OUT
    assert offset(h.shard, 0) == 5
    h.hold_writes = False
    assert a.beat(leave=True).error_code == E.NONE
    h.hold_writes = True
    req = offset_delete_req("g", [("t", 1)])
    rid = h.run(lambda r: h.shard.offset_delete(r, req), 0)
    h.release(E.NOT_ENOUGH_REPLICAS)
    assert h.replies[rid].error_code == E.NOT_ENOUGH_REPLICAS
    assert offset(h.shard, 1) == 6
    rid = h.run(lambda r: h.shard.delete_group(r, "g", h.now), 2)
    h.release(E.REQUEST_TIMED_OUT)
    assert h.replies[rid] == E.COORDINATOR_NOT_AVAILABLE
    assert "g" in h.shard.consumer_groups and offset(h.shard, 0) == 5
    h.shard.expire_offsets(h.now + CFG.offsets_retention_ms + 1)
    h.flush()
    h.release(E.REQUEST_TIMED_OUT)
    assert offset(h.shard, 0) == 5
    assert group_state(h.shard) == group_state(reloaded(h))


def test_offsets_of_a_classic_group_survive_its_conversion_across_a_reload() -> None:
    """Found by the group simulation: an empty classic group (offsets set by an admin)
    that a KIP-848 member takes over writes a tombstone for the classic group record;
    a reload must not drop the offsets with it (they have records of their own)."""
    h = Harness(CFG)
    h.run(lambda r: h.shard.offset_commit(r, commit_req("", -1, {("t", 2): 23}), h.now), 9)
    a = Client(h, "A")
    a.beat()
    assert offset(h.shard, 2) == 23
    assert offset(reloaded(h), 2) == 23
    assert group_state(reloaded(h)) == group_state(h.shard)


def test_a_session_timeout_fires_while_the_group_keeps_writing() -> None:
    """Found by the group simulation: a timer due while the group has a write in flight
    runs right after that write (it used to be skipped until the next tick found the
    group idle, which a busy group may never be)."""
    h = Harness(CFG)
    a, _b = stable_pair(h)
    h.hold_writes = True
    a.send_commit({0: 1})
    h.now += CFG.consumer_session_timeout_ms + 1
    a.beat_alive()
    h.shard.tick(h.now)  # B's session ran out while A's commit is in flight
    a.send_commit({0: 2})  # and A commits again, behind them
    for _ in range(3):
        h.release()
    assert set(h.shard.consumer_groups["g"].members) == {"A"}


def test_an_answer_without_records_waits_for_the_groups_write_in_flight() -> None:
    """Kafka's rule for a write operation without records: it waits for the pending
    writes, so that no answer reveals what may not commit. Other groups do not wait."""
    h = Harness(CFG)
    a, b = stable_pair(h)
    assert b.beat(leave=True).error_code == E.NONE
    h.hold_writes = True
    gaining = a.beat_alive()  # A gains B's partitions: a write, held
    assert h.held and gaining not in h.replies
    other = h.run(
        lambda r: h.shard.consumer_group_heartbeat(
            r, heartbeat_req("X", 0, group="other"), "c", "/h", Topics(), h.now
        ),
        1,
    )
    assert other not in h.replies  # its own write, held too, but not queued behind A's
    joined = h.run(
        lambda r: h.shard.consumer_group_heartbeat(
            r, heartbeat_req("C", 0), "c", "/h", Topics(), h.now
        ),
        1,
    )
    assert joined not in h.replies and len(h.held) == 2  # C waits for A's write
    h.release()  # A's write and the other group's commit; C's join runs and writes
    assert h.replies[gaining].error_code == E.NONE
    h.release()
    assert h.replies[joined].error_code == E.NONE
