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


def test_a_commit_below_min_insync_replicas_is_coordinator_not_available() -> None:
    """acks=all for the coordinator's writes: an ISR below min.insync.replicas refuses the
    write up front, and the commit answers what Kafka's coordinator answers."""
    import random

    from riverbed.coordinator.shard import GroupConfig, GroupShard
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import OffsetCommitRequest as R
    from riverbed.server.coordinator import append_error

    appended: list[bytes] = []
    replicas = SimpleNamespace(check_produce=lambda hosted, acks: ErrorCode.NOT_ENOUGH_REPLICAS)
    partitions = SimpleNamespace(
        get=lambda topic, index: SimpleNamespace(log=None),
        replicas=replicas,
        append=lambda hosted, batch: appended.append(bytes(batch)),
    )
    metadata = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))
    req = R(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            R.OffsetCommitRequestTopic(
                name="t",
                partitions=[R.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)],
            )
        ],
    )

    async def run() -> Any:
        coordinator = GroupCoordinator(
            ServerConfig.embedded_default(), 1, partitions, metadata, ManualClock(5)
        )
        shard = GroupShard(0, GroupConfig(), random.Random(0))
        coordinator.shards[0] = shard
        return await coordinator.call_shard(
            0, shard, 8, lambda s, reply, now: s.offset_commit(reply, req, now)
        )

    resp = asyncio.run(run())
    assert resp.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert appended == []  # nothing was written
    assert append_error(ErrorCode.NOT_LEADER_OR_FOLLOWER) == ErrorCode.NOT_COORDINATOR
    assert append_error(ErrorCode.RECORD_LIST_TOO_LARGE) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
