"""The producer ledger's seeded model check (issue 18, defect 1): 200 seeds of appends,
retries, rolls, flushes, truncations, DeleteRecords, retention and clean, crash and power
failure reopens against a reference (``riverbed.testing.ledger_model``), with coverage
floors, and the deliberately broken rules it must catch. A failure message starts with
the replay command. Soak: ``make soak`` (thousands of seeds)."""

from __future__ import annotations

from collections import Counter

import pytest

from riverbed.testing.ledger_model import MUTATIONS, ModelFailure, ModelParams, main, run_seed

SEEDS_PER_CHUNK = 50
CHUNKS = 4  # 200 seeds
#: per chunk of 50 seeds: the paths a pass must have gone through (about half of what
#: they reach today), or passing proves little
FLOORS = {
    "reopens clean": 120,
    "reopens crash": 70,
    "reopens power_loss": 100,
    "power losses that lost batches": 40,
    "mapped files lost": 50,
    "crashes with a pending flush": 15,
    "truncations": 120,
    "truncations below a complete file": 20,
    "full truncations": 25,
    "delete records": 150,
    "files carried into": 90,
    "complete files deleted": 40,
    "retries recognised": 100,
    "complete snapshots checked": 70,
    "timer flushes": 50,
    "background flushes": 100,
    "expired producers": 8,
}


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_model_seeds(chunk: int) -> None:
    stats: Counter[str] = Counter()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        stats.update(run_seed(ModelParams(seed)).stats)
    low = {k: (stats[k], floor) for k, floor in FLOORS.items() if stats[k] < floor}
    assert not low, f"coverage below the floors (reached, floor): {low}"


@pytest.mark.parametrize(
    ("mutation", "seeds"),
    [
        ("carry-to-active", range(20)),  # the carry-forward of issue 18's defect 1
        ("replay-from-log-start", range(20)),
        ("replay-without-base-files", range(100)),
    ],
)
def test_broken_rule_is_caught(mutation: str, seeds: range) -> None:
    assert mutation in MUTATIONS
    for seed in seeds:
        try:
            run_seed(ModelParams(seed, mutation))
        except ModelFailure as failure:
            assert f"--seed {seed} --mutation {mutation}" in str(failure)
            return
    pytest.fail(f"{mutation} not caught by seeds {seeds.start}..{seeds.stop - 1}")


def test_replay_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3"]) == 0
    assert "1/1 seeds passed" in capsys.readouterr().out
    assert main(["--seed", "0", "--mutation", "carry-to-active"]) == 1
    err = capsys.readouterr().err
    assert "python -m riverbed.testing.ledger_model --seed 0 --mutation carry-to-active" in err
