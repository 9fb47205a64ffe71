"""Node 1's real broker shell in one process, for tests of the replication shells.

A `PartitionManager` over real logs with the real `ReplicaManager` attached (as the node
wires them), fed metadata images built by the real controller: brokers 1 and 2 and topic
``t`` with one partition on replicas [1, 2], its leader and ISR chosen by the test. The
clock is a `ManualClock`, the random numbers seeded, the fault handler recording, and the
AlterPartition call and the fetchers' sleep and connections are the test's.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, replay_all
from riverbed.metadata.records import ResourceType
from riverbed.protocol.api_versions import ApiKey
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
from riverbed.server.fault_handler import RecordingFaultHandler
from riverbed.server.network import RequestContext
from riverbed.server.purgatory import Purgatory
from riverbed.server.replication.manager import ReplicaManager
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager

NODE = 1
LISTENER = "PLAINTEXT"
TOPIC = "t"
START_MS = 1_700_000_000_000

AlterPartition = Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]]


def two_broker_image(leader: int, isr: list[int]) -> MetadataImage:
    """Brokers 1 and 2; topic ``t``, partition 0 on [1, 2] led by ``leader`` with ``isr``."""
    c = Controller(ControllerConfig(node_id=NODE))
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records())
    for b in (1, 2):
        eps = [BrokerEndpoint(LISTENER, f"host{b}", 9090 + b)]
        image = replay_all(
            image, c.register_broker(image, b, uuid.UUID(int=b), eps, None, 0).records
        )
        # registrations start fenced; a caught-up heartbeat unfences (issue 18 defect 2)
        up = c.unfence_broker(image, b, -1, 0, metadata_offset=image.offset)
        image = replay_all(image, up.records)
    CT = CreateTopicsRequest
    assignment = CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])
    topic_req = CT.CreatableTopic(
        name=TOPIC, num_partitions=-1, replication_factor=-1, assignments=[assignment]
    )
    req = CT(topics=[topic_req], timeout_ms=0, validate_only=False)
    image = replay_all(image, c.create_topics(image, req, 0).records)
    topic = image.topic(TOPIC)
    assert topic is not None
    change = PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, leader=leader, isr=isr)
    return replay_all(image, [change])


class BrokerShell:
    """Node 1's partitions and replica manager over ``two_broker_image(leader, isr)``."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        leader: int = NODE,
        isr: list[int] | None = None,
        alter_partition: AlterPartition | None = None,
        seed: int = 0,
    ) -> None:
        self.clock = ManualClock(START_MS)
        self.logs = LogManager([tmp_path / "logs"], self.clock)
        self.purgatory = Purgatory()
        self.partitions = PartitionManager(self.logs, NODE, {}, self.purgatory)
        self.metadata = SimpleNamespace(image=two_broker_image(leader, isr or [NODE]))
        self.alter_requests: list[AlterPartitionRequest] = []
        self.altered = asyncio.Event()
        self.faults = RecordingFaultHandler()
        self._alter_partition = alter_partition
        self.replicas = ReplicaManager(
            NODE,
            {},
            self.partitions,
            self.purgatory,
            self.clock.now_ms,
            self._send_alter_partition,
            lambda: self.metadata.image,
            LISTENER,
            fault_handler=self.faults,
            rng=random.Random(seed),
        )
        self.partitions.replicas = self.replicas
        self.broker: Any = SimpleNamespace(
            partitions=self.partitions,
            metadata=self.metadata,
            fetch_purgatory=self.purgatory,
            topic_stats=None,  # no metrics (riverbed.metrics.enable=false)
        )

    def apply(self) -> None:
        """Publish the current image to the partitions (and so to the replica manager)."""
        self.partitions.apply_image(self.metadata.image)

    async def _send_alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.alter_requests.append(request)
        self.altered.set()
        if self._alter_partition is not None:
            return await self._alter_partition(request)
        await asyncio.Event().wait()  # never answered: the proposal is what is checked
        raise AssertionError("unreachable")

    def set_config(self, rtype: ResourceType, name: str, key: str, value: str) -> None:
        """Publish an image whose only change is one dynamic config (no ISR/leader change)."""
        rec = ConfigRecord(resource_type=int(rtype), resource_name=name, name=key, value=value)
        self.metadata.image = replay_all(self.metadata.image, [rec])
        self.apply()

    async def produce(self, acks: int) -> int:
        """One record to ``t``-0 through the real Produce handler; its error code."""
        P = ProduceRequest
        batch = build_batch([SimpleRecord(b"v")], now_ms=START_MS)
        data = P.PartitionProduceData(index=0, records=batch)
        req = P(
            acks=acks,
            timeout_ms=1000,
            topic_data=[P.TopicProduceData(name=TOPIC, partition_data=[data])],
        )
        ctx = RequestContext(RequestHeader(int(ApiKey.PRODUCE), 9, 7, "t"), "peer", LISTENER, 1, 0)
        resp = await produce.handle_produce(self.broker, ctx, req)
        assert resp is not None  # acks != 0
        return int(resp.responses[0].partition_responses[0].error_code)

    async def close(self) -> None:
        await self.replicas.close()
        self.logs.shutdown()
