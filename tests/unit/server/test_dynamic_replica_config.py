"""Dynamic ``min.insync.replicas`` and ``replica.lag.time.max.ms`` reach the partition cores
at once (issue 18, defect 4).

Node 1's real broker shell: a `PartitionManager` over real logs with the real
`ReplicaManager` attached, fed metadata images built by the real controller, and the real
Produce handler. A config change is a new image whose only difference is a ConfigRecord;
the ISR and the leader stay as they are. Before the fix such an image reached the logs'
`LogConfig` but not the partition cores: acks=all was accepted with ISR [1] after
``min.insync.replicas`` went to 2, and the ISR-shrink rule kept the static 30 s lag.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, replay_all
from riverbed.metadata.records import ResourceType
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    ConfigRecord,
    CreateTopicsRequest,
    PartitionChangeRecord,
    ProduceRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker import produce
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.network import RequestContext
from riverbed.server.purgatory import Purgatory
from riverbed.server.replication.manager import ReplicaManager
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager

NODE = 1
LISTENER = "PLAINTEXT"
START_MS = 1_700_000_000_000


def _image(isr: list[int]) -> MetadataImage:
    c = Controller(ControllerConfig(node_id=NODE))
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records())
    for b in (1, 2):
        eps = [BrokerEndpoint(LISTENER, f"host{b}", 9090 + b)]
        image = replay_all(
            image, c.register_broker(image, b, uuid.UUID(int=b), eps, None, 0).records
        )
    CT = CreateTopicsRequest
    req = CT(
        topics=[
            CT.CreatableTopic(
                name="t",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])],
            )
        ],
        timeout_ms=0,
        validate_only=False,
    )
    image = replay_all(image, c.create_topics(image, req, 0).records)
    topic = image.topic("t")
    assert topic is not None
    change = PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, leader=1, isr=isr)
    return replay_all(image, [change])


class Shell:
    """Node 1's partitions and replica manager, as the node wires them."""

    def __init__(self, tmp_path: Path, isr: list[int]) -> None:
        self.clock = ManualClock(START_MS)
        self.logs = LogManager([tmp_path / "logs"], self.clock)
        self.purgatory = Purgatory()
        self.partitions = PartitionManager(self.logs, NODE, {}, self.purgatory)
        self.metadata = SimpleNamespace(image=_image(isr))
        self.alter_requests: list[AlterPartitionRequest] = []
        self.altered = asyncio.Event()
        self.replicas = ReplicaManager(
            NODE,
            {},
            self.partitions,
            self.purgatory,
            self.clock.now_ms,
            self._alter_partition,
            lambda: self.metadata.image,
            LISTENER,
        )
        self.partitions.replicas = self.replicas
        self.partitions.apply_image(self.metadata.image)
        self.broker: Any = SimpleNamespace(
            partitions=self.partitions, metadata=self.metadata, fetch_purgatory=self.purgatory
        )

    async def _alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.alter_requests.append(request)
        self.altered.set()
        await asyncio.Event().wait()  # never answered: the proposal is what is checked
        raise AssertionError("unreachable")

    def set_config(self, rtype: ResourceType, name: str, key: str, value: str) -> None:
        """Publish an image whose only change is one dynamic config (no ISR/leader change)."""
        rec = ConfigRecord(resource_type=int(rtype), resource_name=name, name=key, value=value)
        self.metadata.image = replay_all(self.metadata.image, [rec])
        self.partitions.apply_image(self.metadata.image)

    async def produce(self, acks: int) -> int:
        P = ProduceRequest
        batch = build_batch([SimpleRecord(b"v")], now_ms=START_MS)
        data = P.PartitionProduceData(index=0, records=batch)
        req = P(
            acks=acks,
            timeout_ms=1000,
            topic_data=[P.TopicProduceData(name="t", partition_data=[data])],
        )
        ctx = RequestContext(RequestHeader(int(ApiKey.PRODUCE), 9, 7, "t"), "peer", LISTENER, 1, 0)
        resp = await produce.handle_produce(self.broker, ctx, req)
        return int(resp.responses[0].partition_responses[0].error_code)


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
        shell = Shell(tmp_path, isr=[1])
        try:
            assert await shell.produce(acks=-1) == ErrorCode.NONE
            shell.set_config(rtype, resource, key, "2")
            assert await shell.produce(acks=-1) == ErrorCode.NOT_ENOUGH_REPLICAS
            assert await shell.produce(acks=1) == ErrorCode.NONE  # only acks=all is bound
            shell.set_config(rtype, resource, key, "1")
            assert await shell.produce(acks=-1) == ErrorCode.NONE
        finally:
            await shell.replicas.close()
            shell.logs.shutdown()

    asyncio.run(run())


@pytest.mark.parametrize("resource", ["", str(NODE)])
def test_lowering_replica_lag_time_max_ms_shrinks_the_isr_at_the_next_tick(
    tmp_path: Path, resource: str
) -> None:
    async def run() -> None:
        shell = Shell(tmp_path, isr=[1, 2])
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
            await shell.replicas.close()
            shell.logs.shutdown()

    asyncio.run(run())
