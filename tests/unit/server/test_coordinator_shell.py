"""The group coordinator shell: a failure in its timers halts the node (crash-only)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.server.config import ServerConfig
from riverbed.server.coordinator import GroupCoordinator
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.storage import ManualClock


class BrokenShard:
    groups: dict[str, Any] = {}

    def next_deadline(self) -> int:
        return 0

    def tick(self, now_ms: int) -> None:
        raise RuntimeError("a bug in a group state machine")


def test_a_failing_shard_tick_goes_to_the_fault_handler() -> None:
    faults = RecordingFaultHandler()
    metadata = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))
    partitions = SimpleNamespace(get=lambda topic, index: None)

    async def run() -> None:
        coordinator = GroupCoordinator(
            ServerConfig.embedded_default(), 1, partitions, metadata, ManualClock(5), faults
        )
        coordinator.shards[0] = BrokenShard()  # type: ignore[assignment]
        coordinator.start()
        assert coordinator._timer_task is not None
        with pytest.raises(FaultHalt):
            await asyncio.wait_for(coordinator._timer_task, 5)

    asyncio.run(run())
    ((what, cause),) = faults.faults
    assert what == "group coordinator timers failed" and isinstance(cause, RuntimeError)
