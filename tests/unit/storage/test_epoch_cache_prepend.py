"""LeaderEpochCache.prepend: older history (a tiered log's remote range) before the first entry."""

from __future__ import annotations

from pathlib import Path

from riverbed.storage.epoch_cache import LeaderEpochCache


def test_prepend_adds_older_epochs_and_extends_the_first_one(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(3, 500)
    cache.prepend([(0, 0), (1, 100), (1, 150), (3, 300), (4, 600)])
    assert cache.entries() == [(0, 0), (1, 100), (3, 300)]
    # persisted: a reopened cache has the same entries
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries() == cache.entries()
    empty = LeaderEpochCache(None)
    empty.prepend([(2, 10), (5, 40)])
    assert empty.entries() == [(2, 10), (5, 40)]
    cache.prepend([(7, 0)])  # a newer epoch before the first entry cannot be placed
    assert cache.entries() == [(0, 0), (1, 100), (3, 300)]
