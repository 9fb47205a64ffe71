"""Seeded group coordinator simulation: 200 seeds of KIP-848 consumers (dynamic and
static, restarting) in two groups while a topic grows and the coordinator's writes fail, commit in doubt, complete out of order and the
coordinator moves in the middle of them (``riverbed.testing.group_sim``: the invariants
are checked after every step). A failure message starts with the replay command. Soak:
``make soak`` (thousands of seeds)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from riverbed.coordinator import consumer_group, txn_offsets
from riverbed.coordinator.shard import GroupShard
from riverbed.coordinator.writes import GroupWrites
from riverbed.testing.group_sim import SimParams, SimulationFailure, main, run_seed

SEEDS_PER_CHUNK = 50
CHUNKS = 4  # 200 seeds


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_simulation_seeds(chunk: int) -> None:
    stats: Counter[str] = Counter()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        stats.update(run_seed(SimParams(seed)).stats)
    # the chaos must reach the interesting paths, or passing proves little
    assert stats["write committed"] > 10 * SEEDS_PER_CHUNK
    for failed in ("REQUEST_TIMED_OUT", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"):
        assert stats[f"write failed {failed}"] > SEEDS_PER_CHUNK // 2
    assert stats["write in doubt"] > 0 and stats["coordinator moved (fail-over)"] > 0
    assert stats["fail-over write kept"] > 0 and stats["fail-over write lost"] > 0
    assert stats["queued behind a write"] > 10 * SEEDS_PER_CHUNK
    assert stats["seen UNREVOKED_PARTITIONS"] > 0 and stats["seen UNRELEASED_PARTITIONS"] > 0
    assert stats["heartbeat response lost"] > 0 and stats["heartbeat FENCED_MEMBER_EPOCH"] > 0
    assert stats["full heartbeat"] > SEEDS_PER_CHUNK  # every field again after a failure
    assert stats["heartbeat COORDINATOR_NOT_AVAILABLE"] > 0
    assert stats["commit REQUEST_TIMED_OUT"] > 0
    assert stats["commit NONE"] > 10 * SEEDS_PER_CHUNK and stats["commit STALE_MEMBER_EPOCH"] > 0
    assert stats["consumer fenced by a timer"] > 0 and stats["offsets expired"] > 0
    assert stats["offset delete NONE"] > 0 and stats["delete group NONE"] > 0
    assert stats["admin commit NONE"] > 0 and stats["topic grown"] > 0
    assert stats["static member took its place back"] > 0
    assert stats["heartbeat UNRELEASED_INSTANCE_ID"] > 0
    assert stats["settled Stable"] > SEEDS_PER_CHUNK // 2  # and calm brings groups back
    # transactions (issue 19): commits, fencing, markers of both kinds, a marker right
    # behind a write in flight, pending offsets across reloads
    assert stats["txn commit v3+ NONE"] > 2 * SEEDS_PER_CHUNK
    assert stats["txn commit v3+ ILLEGAL_GENERATION"] > 0
    assert stats["txn commit v0+ UNKNOWN_MEMBER_ID"] > 0
    assert stats["marker commit"] > 0 and stats["marker abort"] > 0
    assert stats["txn offsets committed by a marker"] > 0
    assert stats["txn write appended before its marker"] > 0
    assert stats["pending offsets seen"] > 10 * SEEDS_PER_CHUNK
    assert stats["position unstable"] > 0  # a consumer waited for a transaction (KIP-447)


def test_replay_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3"]) == 0
    assert "1/1 seeds passed" in capsys.readouterr().out


def _no_rollback(mp: pytest.MonkeyPatch) -> None:
    # defect 3 reintroduced: a failed write's in-memory changes stay
    mp.setattr(GroupWrites, "_restore", lambda self, snap: None)


def _hand_over_before_revocation(mp: pytest.MonkeyPatch) -> None:
    # the coordinator takes a revocation for done without the member saying so
    mp.setattr(consumer_group, "_still_owns", lambda owned, revoke: False)


def _aborts_commit(mp: pytest.MonkeyPatch) -> None:
    # an ABORT marker materialises the transaction's offsets
    apply = txn_offsets.TxnOffsets.apply_marker
    mp.setattr(txn_offsets.TxnOffsets, "apply_marker", lambda self, pid, c: apply(self, pid, True))


def _marker_misses_writes_in_flight(mp: pytest.MonkeyPatch) -> None:
    # a marker appended behind a TxnOffsetCommit's write in flight does not decide it
    apply = txn_offsets.TxnOffsets.apply_marker

    def forgetful(self: txn_offsets.TxnOffsets, pid: int, commit: bool) -> None:
        self._txn_in_flight.pop(pid, None)
        apply(self, pid, commit)

    mp.setattr(txn_offsets.TxnOffsets, "apply_marker", forgetful)


def _fetch_ignores_pending(mp: pytest.MonkeyPatch) -> None:
    # OffsetFetch with require_stable answers the committed offset of a partition whose
    # transaction is still open (consumers then start below what the commit will give)
    fetch = GroupShard.offset_fetch
    mp.setattr(
        GroupShard, "offset_fetch", lambda self, g, t, require_stable=False: fetch(self, g, t)
    )


@pytest.mark.parametrize(
    "breakage",
    [
        _no_rollback,
        _hand_over_before_revocation,
        _aborts_commit,
        _marker_misses_writes_in_flight,
        _fetch_ignores_pending,
    ],
    ids=[
        "no-rollback-of-a-failed-write",
        "hand-over-before-revocation",
        "abort-marker-commits",
        "marker-misses-writes-in-flight",
        "fetch-ignores-pending-offsets",
    ],
)
def test_broken_rules_are_caught(
    monkeypatch: pytest.MonkeyPatch, breakage: Callable[[pytest.MonkeyPatch], None]
) -> None:
    breakage(monkeypatch)
    with pytest.raises(SimulationFailure) as info:
        for seed in range(100):  # the first failure stops it
            run_seed(SimParams(seed))
    assert str(info.value).startswith(
        "replay: .venv/bin/python -m riverbed.testing.group_sim --seed "
    )
