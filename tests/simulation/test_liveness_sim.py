"""Seeded simulation of the controller's broker liveness (riverbed.testing.liveness_sim):
pauses, partitions both ways and one way, slow links, deaths with the host up or down,
restarts, endpoints that refuse from inside, controller pauses and fail-overs. The early
fence (a silent broker whose endpoint, once reached, refuses connections) must never fence
a broker whose process lives; a session fence only a broker with no heartbeat within the
session. A failure message starts with the replay command."""

from __future__ import annotations

from collections import Counter

import pytest

from riverbed.testing.liveness_sim import (
    BROKEN_LIVENESS_RULES,
    SimulationFailure,
    main,
    params_for,
    run_seed,
)

SEEDS = 100


def test_simulation_seeds() -> None:
    stats: Counter[str] = Counter()
    for seed in range(SEEDS):
        stats.update(run_seed(params_for(seed)).stats)
    # the chaos must reach the interesting paths, or passing proves little
    assert stats["early fences"] > SEEDS  # dead brokers fenced without their session
    assert stats["session fences"] > SEEDS // 2  # paused / partitioned past the session
    assert stats["unfenced"] > SEEDS // 4  # ... and back
    assert stats["probe accepted"] > 5 * SEEDS and stats["probe no answer"] > 2 * SEEDS
    assert stats["probe refused"] > 2 * SEEDS
    for chaos in ("pauses", "partitions", "partitions one way", "slow links", "controller pauses"):
        assert stats[chaos] > SEEDS // 2, chaos
    assert stats["controller fail-overs"] > SEEDS and stats["restarts"] > SEEDS
    # a dead seat whose host lives is replaced at once (its quorum peers' reconnects are
    # refused): the new seat probes the old one's broker without waiting for its silence
    assert stats["fast controller fail-overs"] > SEEDS // 4
    assert stats["lost controllers fenced before the silence rule"] > SEEDS // 8
    # most deaths of a broker whose host refuses end in an early fence (the rest: the
    # broker restarted first, or no controller was active)
    assert stats["dead brokers not fenced early"] < stats["early fences"] // 2


def test_replay_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3"]) == 0
    assert "1/1 seeds passed" in capsys.readouterr().out


@pytest.mark.parametrize("rule", BROKEN_LIVENESS_RULES)
def test_broken_rules_are_caught(monkeypatch: pytest.MonkeyPatch, rule: str) -> None:
    monkeypatch.setattr(*BROKEN_LIVENESS_RULES[rule])
    with pytest.raises(SimulationFailure) as info:
        for seed in range(50):  # the first failure stops it (seed 1 at the latest today)
            run_seed(params_for(seed))
    message = str(info.value)
    assert message.startswith("replay: .venv/bin/python -m riverbed.testing.liveness_sim --seed ")
    assert "fenced early while its process lives" in message
