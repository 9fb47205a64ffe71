"""Transactional offset commits (KIP-98 / KIP-447): fencing by version, pending offsets
that a marker commits or drops, ordering against ordinary commits, OffsetFetch with
require_stable, deletion / expiry, and the replay of all of it from the log."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.coordinator import txn_offsets
from riverbed.coordinator.shard import GroupConfig, GroupShard
from riverbed.protocol.errors import ErrorCode
from riverbed.testing.group_harness import (
    CONFIG,
    Harness,
    assignment,
    group_state,
    join_req,
    pending_state,
    write_entries,
)

E = ErrorCode
PID = 7000
TP = ("t", 0)


def codes(resp: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def fetch(shard: GroupShard, stable: bool, group: str = "g") -> dict[tuple[str, int], Any]:
    got = shard.offset_fetch(group, [("t", [0, 1])], require_stable=stable)
    return {
        (t.name, p.partition_index): (p.committed_offset, E(p.error_code))
        for t in got.topics
        for p in t.partitions
    }


def assert_replays(h: Harness) -> GroupShard:
    """A reload gives the same committed and pending offsets as the live shard."""
    fresh = h.replay_into_new_shard()
    assert group_state(fresh) == group_state(h.shard)
    assert pending_state(fresh) == pending_state(h.shard)
    return fresh


def stable_member(h: Harness, instance: str | None = None) -> tuple[str, int]:
    """A classic group 'g' with one member, Stable at generation 1."""
    if instance is None:
        h.join_member()
        joined = h.replies[h.pending]
    else:  # a static member joins with its instance id at once
        joined = h.replies[h.join(join_req(instance=instance))]
    member = joined.member_id
    assert joined.error_code == 0
    h.sync(member, joined.generation_id, {member: assignment([0, 1])}, instance=instance)
    return member, joined.generation_id


def test_pending_until_the_commit_marker() -> None:
    h = Harness()
    h.commit("", -1, {TP: 5})
    rid = h.txn_commit(PID, {TP: 10, ("t", 1): 11})
    assert codes(h.replies[rid]) == {TP: 0, ("t", 1): 0}
    assert h.shard.has_pending("g", TP)
    # without require_stable: the last committed offset; with it: unstable
    assert fetch(h.shard, False) == {TP: (5, E.NONE), ("t", 1): (-1, E.NONE)}
    assert fetch(h.shard, True) == {
        TP: (-1, E.UNSTABLE_OFFSET_COMMIT),
        ("t", 1): (-1, E.UNSTABLE_OFFSET_COMMIT),
    }
    assert_replays(h)  # pending survives a reload
    h.marker(PID + 1, True)  # another producer's marker changes nothing
    assert fetch(h.shard, True)[TP] == (-1, E.UNSTABLE_OFFSET_COMMIT)
    h.marker(PID, True)
    assert fetch(h.shard, True) == {TP: (10, E.NONE), ("t", 1): (11, E.NONE)}
    assert h.shard.pending_count() == 0
    assert_replays(h)


def test_abort_marker_drops_the_offsets() -> None:
    h = Harness()
    h.commit("", -1, {TP: 5})
    h.txn_commit(PID, {TP: 10})
    h.marker(PID, False)
    assert fetch(h.shard, True)[TP] == (5, E.NONE)
    assert not h.shard.has_pending("g", TP)
    assert_replays(h)
    # a later commit marker of the same producer does not bring them back
    h.marker(PID, True)
    assert fetch(h.shard, True)[TP] == (5, E.NONE)


def test_the_later_record_wins_between_transactional_and_ordinary_commits() -> None:
    h = Harness()
    h.txn_commit(PID, {TP: 10})  # record at offset 0
    h.commit("", -1, {TP: 20})  # record at offset 1: committed at once
    h.marker(PID, True)  # the transaction's record is older: the ordinary commit stays
    assert fetch(h.shard, True)[TP] == (20, E.NONE)
    assert_replays(h)
    h.txn_commit(PID + 1, {TP: 30})  # newer than the ordinary commit
    h.marker(PID + 1, True)
    assert fetch(h.shard, True)[TP] == (30, E.NONE)
    assert_replays(h)


def test_marker_after_the_append_of_a_write_in_flight_decides_it() -> None:
    """The transaction coordinator may abort (a timeout, a fence) while the write of a
    TxnOffsetCommit waits for its replicas: the marker follows its records in the log."""
    for commit in (True, False):
        h = Harness()
        h.hold_writes = True
        rid = h.txn_commit(PID, {TP: 10})
        (write,) = h.held
        h.held.clear()
        base = len(h.log)
        h.log.extend(write_entries(write))  # appended, not yet replicated
        h.marker(PID, commit)
        h.shard.complete_write(write.token, E.NONE, base)
        h.flush()
        assert codes(h.replies[rid]) == {TP: 0}
        assert not h.shard.has_pending("g", TP), "the marker's result was lost"
        assert fetch(h.shard, True)[TP] == ((10, E.NONE) if commit else (-1, E.NONE))
        assert_replays(h)


def test_failed_write_leaves_nothing_pending() -> None:
    h = Harness()
    h.hold_writes = True
    rid = h.txn_commit(PID, {TP: 10})
    h.release(E.NOT_ENOUGH_REPLICAS)
    assert codes(h.replies[rid]) == {TP: int(E.NOT_ENOUGH_REPLICAS)}
    assert h.shard.pending_count() == 0 and not h.shard.has_pending("g", TP)
    h.hold_writes = True
    rid = h.txn_commit(PID, {TP: 10})
    h.release(E.REQUEST_TIMED_OUT)  # answered as Kafka maps a timeout (clients retry)
    assert codes(h.replies[rid]) == {TP: int(E.COORDINATOR_NOT_AVAILABLE)}
    assert h.shard.pending_count() == 0


@pytest.mark.parametrize("version", [0, 1, 2])
def test_versions_before_3_are_not_fenced_by_member_fields(version: int) -> None:
    """v0-2 carry no generation, member or instance: the group's members do not matter."""
    h = Harness()
    stable_member(h)
    rid = h.txn_commit(PID, {TP: 1}, version=version, member="ghost", generation=99)
    assert codes(h.replies[rid]) == {TP: 0}


def test_kip_447_fencing_from_version_3() -> None:
    h = Harness()
    member, generation = stable_member(h, instance="i1")

    def answer(**kw: Any) -> int:
        return codes(h.replies[h.txn_commit(PID, {TP: 1}, version=3, **kw)])[TP]

    assert answer(member=member, generation=generation, instance="i1") == E.NONE
    assert answer(member=member, generation=generation + 1, instance="i1") == (E.ILLEGAL_GENERATION)
    assert answer(member="other", generation=generation, instance="i1") == E.FENCED_INSTANCE_ID
    assert answer(member="other", generation=generation) == E.UNKNOWN_MEMBER_ID
    assert answer(member=member, generation=generation, instance="i2") == E.UNKNOWN_MEMBER_ID
    # generation -1 without member fields is taken from a non-empty group (old clients)
    assert answer() == E.NONE
    # an unknown group takes only generation -1 (it becomes a simple group)
    assert codes(h.replies[h.txn_commit(PID, {TP: 1}, version=3, group="x", generation=4)]) == {
        TP: int(E.ILLEGAL_GENERATION)
    }


def test_no_rebalance_check_for_transactional_commits() -> None:
    """Kafka: 'this does not apply to transactional offset commits, since the group state
    is not enforced for those' (an OffsetCommit would be REBALANCE_IN_PROGRESS)."""
    h = Harness()
    member = h.join_member()
    joined = h.replies[h.pending]  # CompletingRebalance until the leader syncs
    rid = h.txn_commit(PID, {TP: 1}, version=3, member=member, generation=joined.generation_id)
    assert codes(h.replies[rid]) == {TP: 0}
    rid = h.commit(member, joined.generation_id, {TP: 1})
    assert codes(h.replies[rid]) == {TP: int(E.REBALANCE_IN_PROGRESS)}


def test_metadata_too_large_and_invalid_group() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=3))
    rid = h.txn_commit(PID, {TP: 1}, metadata="long")
    assert codes(h.replies[rid]) == {TP: int(E.OFFSET_METADATA_TOO_LARGE)}
    rid = h.txn_commit(PID, {TP: 1}, group="")
    assert codes(h.replies[rid]) == {TP: int(E.INVALID_GROUP_ID)}
    assert h.log == [] and h.shard.pending_count() == 0


def test_delete_group_drops_pending_offsets() -> None:
    h = Harness()
    h.txn_commit(PID, {TP: 10})  # only pending: the group has no committed offset
    rid = h.run(lambda r: h.shard.delete_group(r, "g", h.now), 2)
    assert h.replies[rid] == E.NONE
    assert h.shard.pending_count() == 0 and "g" not in h.shard.groups
    assert_replays(h)  # the tombstone dropped them in the log too
    h.marker(PID, True)
    assert fetch(h.shard, True)[TP] == (-1, E.NONE)
    assert_replays(h)


def test_expiry_waits_for_pending_offsets() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=1000))
    h.commit("", -1, {TP: 5})
    h.txn_commit(PID, {TP: 10})
    h.now += 5000
    assert h.shard.expire_offsets(h.now) == 0  # TP has pending offsets: kept
    h.flush()
    assert "g" in h.shard.groups
    h.marker(PID, False)
    assert h.shard.expire_offsets(h.now) == 1
    h.flush()
    assert "g" not in h.shard.groups
    assert_replays(h)


def test_pending_offsets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(txn_offsets, "TXN_PENDING_OFFSETS_MAX", 2)
    h = Harness()
    assert codes(h.replies[h.txn_commit(PID, {TP: 1, ("t", 1): 1})]) == {TP: 0, ("t", 1): 0}
    # the same keys again do not add to the count
    assert codes(h.replies[h.txn_commit(PID, {TP: 2})]) == {TP: 0}
    assert codes(h.replies[h.txn_commit(PID + 1, {TP: 3})]) == {
        TP: int(E.COORDINATOR_NOT_AVAILABLE)
    }
    h.marker(PID, True)
    assert codes(h.replies[h.txn_commit(PID + 1, {TP: 3})]) == {TP: 0}
    assert h.shard.pending_count() == 1


def test_replay_of_a_log_with_transactions() -> None:
    """Pending until its control batch, from the log alone: committed, aborted, open."""
    h = Harness(CONFIG)
    h.txn_commit(1, {TP: 10})
    h.txn_commit(2, {("t", 1): 20})
    h.txn_commit(3, {TP: 30})
    h.marker(1, True)
    h.marker(2, False)
    fresh = assert_replays(h)
    assert fetch(fresh, True) == {TP: (-1, E.UNSTABLE_OFFSET_COMMIT), ("t", 1): (-1, E.NONE)}
    assert fetch(fresh, False)[TP] == (10, E.NONE)
    assert set(fresh.pending_txn) == {3}
