"""Every seeded simulation's command line takes the same seed options (`sim_seeds`): one
seed to replay, N seeds from a first seed on (a soak's new seeds), and a failure that is
reported and counted while the other seeds still run."""

from __future__ import annotations

import argparse
import importlib

import pytest

from riverbed.testing.sim_seeds import add_seed_options, chosen_seeds

SIMULATIONS = (
    "raft_sim",
    "replication_sim",
    "replication_shell_sim",
    "group_sim",
    "ledger_model",
    "txn_sim",
    "liveness_sim",
)


def _parse(*argv: str) -> list[int]:
    ap = argparse.ArgumentParser()
    add_seed_options(ap)
    return chosen_seeds(ap.parse_args(list(argv)))


def test_the_options_name_one_seed_or_a_range_from_the_first_seed():
    assert _parse() == list(range(100))
    assert _parse("--seed", "7") == [7]
    assert _parse("--seeds", "3", "--first-seed", "1000") == [1000, 1001, 1002]
    assert _parse("--seeds", "2", "--start", "5") == [5, 6]  # group_sim's older spelling


def test_a_negative_count_or_first_seed_is_refused_with_both_named():
    with pytest.raises(SystemExit, match="--seeds and --first-seed must be >= 0"):
        _parse("--seeds", "-1")
    with pytest.raises(SystemExit, match="got --seeds 2, --first-seed -3"):
        _parse("--seeds", "2", "--first-seed", "-3")


@pytest.mark.parametrize("name", SIMULATIONS)
def test_every_simulation_runs_the_seeds_it_is_given(name, monkeypatch, capsys):
    """Each main runs exactly the seeds --seeds/--first-seed name (the runs are
    recorded, not performed: the simulations' own tests run them)."""
    sim = importlib.import_module(f"riverbed.testing.{name}")
    # the replication simulations share one main, which takes its runner as an argument
    module = sim.replication_sim if name == "replication_shell_sim" else sim
    ran: list[int] = []

    # run_seed is what each main calls per seed; a stand-in that fails as the simulation
    # would for seed 1001 and passes the others
    fail = module.SimulationFailure if hasattr(module, "SimulationFailure") else sim.ModelFailure

    def run(params, *rest):
        seed = params if isinstance(params, int) else params.seed
        ran.append(seed)
        if seed == 1001:
            raise fail(f"replay: --seed {seed}")
        return _Stats()

    if name in ("replication_sim", "replication_shell_sim"):
        code = module.main(["--seeds", "3", "--first-seed", "1000"], run, name, "d")
    else:
        monkeypatch.setattr(sim, "run_seed", run)
        code = sim.main(["--seeds", "3", "--first-seed", "1000"])
    assert ran == [1000, 1001, 1002]
    assert code == 1  # the failed seed is counted, and the seeds after it still ran
    out = capsys.readouterr()
    assert "2/3 seeds passed" in out.out
    assert "1001" in out.out + out.err


class _Stats:
    """What a passed seed's simulation gives its main: counters (none here)."""

    stats: dict[str, int] = {}
    events = 0
