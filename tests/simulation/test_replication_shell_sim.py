"""The replication simulation over the brokers' shells (``replication_shell_sim``): the
real ReplicaManager, replica fetchers, config refresh, PartitionManager and
PartitionReplicaLog over real PartitionLogs on a simulated disk whose crashes lose the
unflushed tail (or the whole disk). Soak: ``make soak``."""

from __future__ import annotations

from riverbed.testing.replication_shell_sim import run_seed
from riverbed.testing.replication_sim import SimParams, params_for


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
