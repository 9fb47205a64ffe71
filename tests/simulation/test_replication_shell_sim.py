"""The replication simulation over the brokers' shells (``replication_shell_sim``): the
real ReplicaManager, replica fetchers, config refresh, PartitionManager and
PartitionReplicaLog over real PartitionLogs on a simulated disk whose crashes lose the
unflushed tail (or the whole disk), in the seeded loop of ``replication_sim`` (its
controller, network, chaos and invariants). Soak: ``make soak``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from riverbed.metadata.control_common import ControllerResult
from riverbed.metadata.controller import Controller
from riverbed.metadata.image import MetadataImage
from riverbed.protocol.messages import RegisterBrokerRecord
from riverbed.testing.replication_breakages import BROKEN_CORE_RULES
from riverbed.testing.replication_shell_sim import main, run_seed
from riverbed.testing.replication_sim import SimParams, SimulationFailure, params_for

SEEDS_PER_CHUNK = 10
CHUNKS = 2  # 20 seeds here; thousands in make soak


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_shell_simulation_seeds(chunk: int) -> None:
    stats: Counter[str] = Counter()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        stats.update(run_seed(params_for(seed)).stats)
    # the chaos must reach the paths that lose data when a rule is wrong
    assert stats["acks NONE"] > 20 * SEEDS_PER_CHUNK
    assert stats["power losses"] > 0 and stats["process crashes"] > 0
    assert stats["clean shutdowns"] > 0 and stats["config changes"] > SEEDS_PER_CHUNK
    assert stats["leaders"] > SEEDS_PER_CHUNK and stats["fenced"] > 0
    assert stats["fetch NONE diverging"] > 0 and stats["truncations"] > 0
    assert stats["alter result NONE"] > SEEDS_PER_CHUNK
    assert stats["registration refused"] > 0  # a restart within the old session waits
    assert stats["acks NOT_ENOUGH_REPLICAS"] > 0


def test_replay_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3", "--brokers", "3", "--rf", "3", "--min-insync", "2"]) == 0
    assert "1/1 seeds passed" in capsys.readouterr().out


def _registers_like_before_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 2 reintroduced: a restarted broker registers at once (no
    DUPLICATE_BROKER_REGISTRATION), its old registration is not fenced in the same batch
    and its unclean shutdown is not noticed, so it keeps every ISR seat it had."""
    register = Controller.register_broker

    def keeps_its_seats(
        self: Controller, image: MetadataImage, broker_id: int, *args: Any, **kwargs: Any
    ) -> ControllerResult:
        old = image.brokers.get(broker_id)
        kwargs["session_live"] = False
        kwargs["previous_broker_epoch"] = old.broker_epoch if old is not None else -1
        result = register(self, image, broker_id, *args, **kwargs)
        records = list(result.records)
        first = next(i for i, r in enumerate(records) if isinstance(r, RegisterBrokerRecord))
        return ControllerResult(records[first:], result.response)  # no fencing first

    monkeypatch.setattr(Controller, "register_broker", keeps_its_seats)


def test_defect_2_reintroduced_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    _registers_like_before_the_fix(monkeypatch)
    with pytest.raises(SimulationFailure) as info:
        for seed in range(60):  # the first failure stops it (seed 3 today)
            run_seed(params_for(seed))
    message = str(info.value)
    assert message.startswith(
        "replay: .venv/bin/python -m riverbed.testing.replication_shell_sim --seed "
    )
    assert "committed" in message


@pytest.mark.parametrize("rule", BROKEN_CORE_RULES)
def test_broken_core_rules_are_caught_through_the_shells(
    monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    monkeypatch.setattr(*BROKEN_CORE_RULES[rule])
    with pytest.raises(SimulationFailure) as info:
        for seed in range(60):  # the first failure stops it (seed 3 at the latest today)
            run_seed(params_for(seed))
    assert "committed" in str(info.value)


def test_calm_cluster_replicates_everything_through_the_shells() -> None:
    sim = run_seed(SimParams(seed=5, brokers=3, replication_factor=3, min_insync=2, chaos_ms=0))
    logs = list(sim.final_logs.values())
    assert len(logs) == 3 and all(log == logs[0] for log in logs)
    assert sim.stats["crashes"] == 0 and sim.stats["acks NONE"] == 10
    assert [value for _, value in logs[0]] == [f"calm{i}" for i in range(1, 11)]


def test_a_seed_replays_exactly() -> None:
    first, again = run_seed(params_for(2)), run_seed(params_for(2))
    assert first.stats == again.stats and first.final_logs == again.final_logs
    assert first.stats["crashes"] > 0
