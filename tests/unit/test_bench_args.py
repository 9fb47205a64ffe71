"""Benchmark options checked before any process starts."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

#: the checkout: ``benchmarks`` is a directory of it, not an installed package
ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module(f"benchmarks.{name}")


def test_quorum_bench_refuses_fewer_topics_than_a_batch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    quorum_bench = _bench("quorum_bench", monkeypatch)
    # --topics 10 with the default --batch 50 made no batched request: ZeroDivisionError
    # after both clusters had run
    with pytest.raises(SystemExit) as exited:
        quorum_bench.main(["--topics", "10"])
    assert exited.value.code == 2
    assert "--topics (10) must be at least --batch (50)" in capsys.readouterr().err


def test_tiered_bench_refuses_less_than_a_rolled_segment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tiered_bench = _bench("tiered_bench", monkeypatch)
    # --mib 2 with the default --segment-mib 4 rolled no segment: it waited for a copy forever
    with pytest.raises(SystemExit) as exited:
        tiered_bench.main(["--mib", "2", "--stores", "file"])
    assert exited.value.code == 2
    assert "--mib (2) must be more than --segment-mib (4)" in capsys.readouterr().err
