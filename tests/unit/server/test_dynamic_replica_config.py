"""Dynamic ``min.insync.replicas`` and ``replica.lag.time.max.ms`` reach the partition cores
at once (issue 18, defect 4).

Node 1's real broker shell (`riverbed.testing.broker_shell`): a `PartitionManager` over
real logs with the real `ReplicaManager` attached, fed metadata images built by the real
controller, and the real Produce handler. A config change is a new image whose only difference is a ConfigRecord;
the ISR and the leader stay as they are. Before the fix such an image reached the logs'
`LogConfig` but not the partition cores: acks=all was accepted with ISR [1] after
``min.insync.replicas`` went to 2, and the ISR-shrink rule kept the static 30 s lag.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from riverbed.metadata.records import ResourceType
from riverbed.protocol.errors import ErrorCode
from riverbed.testing.broker_shell import NODE, BrokerShell


@pytest.mark.parametrize(
    ("rtype", "resource", "key"),
    [
        (ResourceType.TOPIC, "t", "min.insync.replicas"),  # topic override
        (ResourceType.BROKER, "", "min.insync.replicas"),  # cluster-wide dynamic default
        (ResourceType.BROKER, str(NODE), "min.insync.replicas"),  # this broker's
    ],
)
def test_raising_min_insync_replicas_refuses_acks_all_at_once(
    tmp_path: Path, rtype: ResourceType, resource: str, key: str
) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1])
        shell.apply()
        try:
            assert await shell.produce(acks=-1) == ErrorCode.NONE
            shell.set_config(rtype, resource, key, "2")
            assert await shell.produce(acks=-1) == ErrorCode.NOT_ENOUGH_REPLICAS
            assert await shell.produce(acks=1) == ErrorCode.NONE  # only acks=all is bound
            shell.set_config(rtype, resource, key, "1")
            assert await shell.produce(acks=-1) == ErrorCode.NONE
        finally:
            await shell.close()

    asyncio.run(run())


@pytest.mark.parametrize("resource", ["", str(NODE)])
def test_lowering_replica_lag_time_max_ms_shrinks_the_isr_at_the_next_tick(
    tmp_path: Path, resource: str
) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1, 2])
        shell.apply()
        shell.replicas.start()
        try:
            assert await shell.produce(acks=1) == ErrorCode.NONE  # follower 2 never fetches
            shell.clock.advance(5_000)
            shell.replicas.tick()
            await asyncio.sleep(0)
            assert not shell.alter_requests  # 5 s behind is within the default 30 s
            shell.set_config(ResourceType.BROKER, resource, "replica.lag.time.max.ms", "1000")
            shell.replicas.tick()
            await asyncio.wait_for(shell.altered.wait(), 5)
            [request] = shell.alter_requests
            [part] = request.topics[0].partitions
            assert [s.broker_id for s in part.new_isr_with_epochs] == [1]
        finally:
            await shell.close()

    asyncio.run(run())
