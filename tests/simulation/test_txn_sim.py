"""Seeded simulation of the transaction coordinator with partition leaders and markers
(`riverbed.testing.txn_sim`): crashes and moves of the coordinator, lost, failed and
in-doubt writes, lost and reordered marker traffic, leadership moves, zombie producers
and producers that die mid-transaction, with the invariants checked after every step; a
deliberately broken rule must be caught. Soak: ``python -m riverbed.testing.txn_sim
--seeds 2000``."""

from __future__ import annotations

from collections import Counter

import pytest

from riverbed.producer import snapshot
from riverbed.producer.state import ProducerStateTable
from riverbed.testing.txn_sim import SimulationFailure, main, run_seed
from riverbed.transaction import shard

SEEDS = 20


def test_simulation_seeds() -> None:
    stats: Counter[str] = Counter()
    for seed in range(SEEDS):
        stats.update(run_seed(seed).stats)
    # the chaos must reach the interesting paths, or passing proves little
    assert stats["end NONE"] > 5 * SEEDS and stats["marker NONE"] > 20 * SEEDS
    assert stats["coordinator moves"] > SEEDS and stats["write in doubt committed"] > 0
    assert stats["write failed"] > 0 and stats["marker TRANSACTION_COORDINATOR_FENCED"] > 0
    assert stats["marker NOT_LEADER_OR_FOLLOWER"] > 0 and stats["disconnects"] > 0
    assert stats["end PRODUCER_FENCED"] > 0 and stats["restarts"] > 0
    assert stats["clients died"] > 0 and stats["answer lost"] > 0
    assert stats["marker requests of 2 shards"] > 0  # one request per broker for both
    # partition leaders crash and recover from their flushed log and producer snapshot
    assert stats["leader crashes"] > SEEDS and stats["producer snapshots"] > SEEDS
    assert stats["leader crash entries lost"] > 0  # a write caught before its flush


def test_replay_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3"]) == 0
    assert "1/1 seeds passed" in capsys.readouterr().out


def _first_failure(seeds: int = 40) -> str:
    for seed in range(seeds):
        try:
            run_seed(seed)
        except SimulationFailure as e:
            return str(e)
    return ""


def test_an_endtxn_that_ignores_the_epoch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zombie's EndTxn accepted whatever its epoch: it is told "committed" while its
    transaction was aborted by the fence."""
    check = shard._check_end

    def ignoring_epoch(cur, pid, epoch, commit, pending):  # type: ignore[no-untyped-def]
        return check(cur, pid, cur.producer_epoch, commit, pending)

    monkeypatch.setattr(shard, "_check_end", ignoring_epoch)
    failure = _first_failure()
    assert failure.startswith(".venv/bin/python -m riverbed.testing.txn_sim --seed ")
    assert "the client was told commit=True" in failure


def test_a_load_that_forgets_prepared_transactions_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shard.TransactionShard, "loaded", lambda self: None)
    assert "did not close every transaction" in _first_failure()


# -- the partition leaders are riverbed's ProducerStateTable (txn_sim_leader) -----------


def test_a_leader_that_applies_fenced_markers_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's TRANSACTION_COORDINATOR_FENCED rule dropped: a deposed coordinator's
    late marker is applied after its successor's."""
    check_txn = ProducerStateTable._check_txn

    def no_fencing(self, h, marker, in_txn):  # type: ignore[no-untyped-def]
        return check_txn(self, h, None, in_txn)

    monkeypatch.setattr(ProducerStateTable, "_check_txn", no_fencing)
    failure = _first_failure()
    assert failure.startswith(".venv/bin/python -m riverbed.testing.txn_sim --seed ")
    assert "a marker of coordinator epoch" in failure, failure


def test_an_lso_that_ignores_open_transactions_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ProducerStateTable, "last_stable_offset", lambda self, hw: hw)
    assert "passes open transaction records" in _first_failure()


def test_aborts_missing_from_the_txn_index_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """No .txnindex entry for an abort: read_committed returns the aborted records."""
    apply = ProducerStateTable.apply

    def no_index(self, h, marker=None):  # type: ignore[no-untyped-def]
        apply(self, h, marker)

    monkeypatch.setattr(ProducerStateTable, "apply", no_index)
    assert "read_committed returned uncommitted records" in _first_failure()


# -- partition leaders recover from their flushed log and producer snapshot -----------


def test_a_snapshot_without_the_open_transaction_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The producer snapshot's codec drops currentTxnFirstOffset: a leader that recovers
    from it forgets a transaction open at the snapshot (Kafka's loadFromSnapshot fills
    ongoingTxns from it)."""
    fields = snapshot.entry_fields

    def no_open_txn(e):  # type: ignore[no-untyped-def]
        return (*fields(e)[:7], -1)

    monkeypatch.setattr(snapshot, "entry_fields", no_open_txn)
    failure = _first_failure()
    assert failure.startswith(".venv/bin/python -m riverbed.testing.txn_sim --seed ")
    assert "producer state after recovery" in failure, failure


def test_a_recovery_that_does_not_seed_the_open_transactions_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replay starts without the open transactions of the snapshot's entries
    (``seed_ongoing`` dropped): the LSO passes a transaction open across the snapshot."""
    monkeypatch.setattr(ProducerStateTable, "seed_ongoing", lambda self, open_txns: None)
    assert "producer state after recovery" in _first_failure()
