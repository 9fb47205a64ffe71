"""The brokers of the replication simulation (``riverbed.testing.replication_sim``): what
a simulated broker holds (``SimBroker``), the messages brokers exchange with the model
controller and the client, and the broker side of a step (``BrokerSide``, a mixin of
``ReplicationSim``): each broker runs the real partition core
(``replication.partition.Partition``) over its in-memory log, learns metadata from its
registration and heartbeat answers, fetches from the leader it is told of, answers
followers' fetches and the client's acks=all produces as a leader, checkpoints its high
watermark and sends the core's AlterPartition requests to the controller.

A crash (``SimBroker.crash``) is the SIGKILL model: the log survives, memory and unsent
messages do not; the high watermark comes back from its last checkpoint.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from riverbed.metadata.image import MetadataImage, PartitionRegistration
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AlterPartitionResponse
from riverbed.replication.actions import (
    Action,
    AlterIsr,
    FetchAnswer,
    FetchPosition,
    FetchResult,
    HighWatermarkChanged,
    ProduceCompleted,
    StateChange,
)
from riverbed.replication.partition import Partition
from riverbed.replication.wire import alter_partition_results
from riverbed.testing.replication_sim_parts import CLIENT, CONTROLLER, Checker, MemLog, Net

if TYPE_CHECKING:
    from riverbed.replication.config import ReplicaConfig

HEARTBEAT_MS = 200
FETCH_WAIT_MS = 40  # the leader parks a fetch with nothing new this long
FETCH_TIMEOUT_MS = 600
PRODUCE_TIMEOUT_MS = 1500
CHECKPOINT_MS = 300  # replica.high.watermark.checkpoint.interval.ms
TOPIC = "t"


# ---------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Register:
    incarnation: int
    #: PreviousBrokerEpoch (the clean-shutdown marker's); None: this simulation's crash
    #: model, which loses nothing, so the registered epoch (a clean shutdown)
    previous_epoch: int | None = None


@dataclass(frozen=True)
class Registered:
    broker_epoch: int
    incarnation: int
    image: MetadataImage


@dataclass(frozen=True)
class Heartbeat:
    broker_epoch: int
    metadata_offset: int  # the offset of the image the broker has applied


@dataclass(frozen=True)
class HeartbeatAnswer:
    error: ErrorCode
    image: MetadataImage


@dataclass(frozen=True)
class AlterReq:
    broker_epoch: int
    topic_id: uuid.UUID
    req: AlterIsr


@dataclass(frozen=True)
class AlterAnswer:
    topic_id: uuid.UUID
    response: AlterPartitionResponse | None
    error: ErrorCode
    req: AlterIsr


@dataclass(frozen=True)
class ProduceReq:
    request_id: int
    value: str


@dataclass(frozen=True)
class ProduceAnswer:
    request_id: int
    error: ErrorCode
    offset: int


# ---------------------------------------------------------------------------- broker
@dataclass
class SimBroker:
    broker_id: int
    log: MemLog = field(default_factory=MemLog)
    alive: bool = True
    incarnation: int = 0
    checkpoint_hw: int = 0
    broker_epoch: int = -1
    image: MetadataImage | None = None
    part: Partition | None = None
    fetching: FetchPosition | None = None
    fetch_sent_ms: int = 0
    next_fetch_ms: int = 0
    next_heartbeat_ms: int = 0
    next_register_ms: int = 0
    next_checkpoint_ms: int = 0
    produces: dict[int, tuple[int, str]] = field(default_factory=dict)  # rid -> offset, value

    def crash(self) -> None:
        self.alive = False
        self.image, self.part, self.fetching = None, None, None
        self.broker_epoch = -1
        self.produces.clear()

    def restart(self, now_ms: int) -> None:
        self.alive = True
        self.incarnation += 1
        self.next_register_ms = self.next_heartbeat_ms = now_ms


# ---------------------------------------------------------------------------- broker side
class BrokerSide:
    """How every live broker handles what reaches it and what its timers start."""

    if TYPE_CHECKING:  # provided by ReplicationSim
        rng: random.Random
        now: int
        net: Net
        checker: Checker
        stats: Counter[str]
        config: ReplicaConfig

        def partition_reg(
            self, image: MetadataImage | None = None
        ) -> PartitionRegistration | None: ...
        def _note(self, line: str) -> None: ...

    def _broker_receive(self, b: SimBroker, src: int, msg: Any) -> None:
        if isinstance(msg, Registered):
            if msg.incarnation == b.incarnation and b.broker_epoch < msg.broker_epoch:
                b.broker_epoch = msg.broker_epoch
                if b.part is not None:
                    b.part.set_broker_epoch(msg.broker_epoch)
                self._apply_image(b, msg.image)
        elif isinstance(msg, HeartbeatAnswer):
            if msg.error is ErrorCode.STALE_BROKER_EPOCH:
                b.broker_epoch = -1  # register again
            else:
                self._apply_image(b, msg.image)
        elif isinstance(msg, FetchPosition):
            self._leader_fetch(b, src, msg)
        elif isinstance(msg, FetchResult):
            part = b.part
            if b.fetching == msg.position:
                b.fetching = None
                b.next_fetch_ms = self.now + (0 if msg.records else FETCH_WAIT_MS)
            if part is not None and part.follower is not None:
                before = part.follower.truncations
                self._run(b, part.follower.on_fetch_result(msg, self.now))
                self.stats["truncations"] += part.follower.truncations - before
        elif isinstance(msg, AlterAnswer):
            part = b.part
            if part is not None and part.leader is not None:
                (result,) = alter_partition_results(
                    [(msg.topic_id, 0, msg.req)], msg.response, msg.error
                )
                self.stats[f"alter result {result.error.name}"] += 1
                self._run(b, part.leader.on_alter_partition_response(result, self.now))
        elif isinstance(msg, ProduceReq):
            self._produce(b, msg)

    def _apply_image(self, b: SimBroker, image: MetadataImage) -> None:
        if b.image is not None and image.offset <= b.image.offset:
            return
        b.image = image
        reg = self.partition_reg(image)
        if reg is None or b.broker_epoch < 0:
            return
        if b.part is None:
            b.part = Partition(
                b.broker_id,
                b.log,
                self.config,
                high_watermark=b.checkpoint_hw,
                broker_epoch=b.broker_epoch,
                name=f"{TOPIC}-0",
            )
        was_leader = b.part.leader
        self._run(b, b.part.apply_registration(reg, self.now))
        if b.part.leader is not None and b.part.leader is not was_leader:
            self.checker.on_leader(b.broker_id, b.part.leader.leader_epoch)
            self.stats["leaders"] += 1
            self._run(b, [HighWatermarkChanged(b.part.leader.high_watermark)])
        if b.part.follower is not None:
            b.fetching = None

    def _leader_fetch(self, b: SimBroker, src: int, pos: FetchPosition) -> None:
        part = b.part
        if part is None or part.leader is None:
            answer = FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.net.send(b.broker_id, src, FetchResult(pos, answer), self.now)
            return
        answer, actions = part.leader.on_follower_fetch(pos, self.now)
        self._run(b, actions)
        records = None
        if answer.read_records:
            records = b.log.read(pos.fetch_offset, self.rng.randint(1, 8)) or None
        self.stats[
            f"fetch {answer.error.name}{' diverging' if answer.diverging_epoch else ''}"
        ] += 1
        self.net.send(b.broker_id, src, FetchResult(pos, answer, records), self.now)

    def _produce(self, b: SimBroker, msg: ProduceReq) -> None:
        part = b.part
        if part is None or part.leader is None:
            self.net.send(
                b.broker_id,
                CLIENT,
                ProduceAnswer(msg.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
                self.now,
            )
            return
        leader = part.leader
        error = leader.check_produce(-1)
        if error is not ErrorCode.NONE:
            self.stats[f"produce {error.name}"] += 1
            self.net.send(b.broker_id, CLIENT, ProduceAnswer(msg.request_id, error, -1), self.now)
            return
        offset = b.log.append_as_leader(msg.value, leader.leader_epoch)
        b.produces[msg.request_id] = (offset, msg.value)
        self._run(b, leader.on_local_append(self.now))
        self._run(b, leader.park_produce(msg.request_id, offset + 1, PRODUCE_TIMEOUT_MS, self.now))

    def _run(self, b: SimBroker, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, AlterIsr):
                assert b.image is not None
                topic = b.image.topic(TOPIC)
                assert topic is not None
                self.net.send(
                    b.broker_id, CONTROLLER, AlterReq(b.broker_epoch, topic.topic_id, a), self.now
                )
            elif isinstance(a, HighWatermarkChanged):
                part = b.part
                if part is not None and part.leader is not None:
                    self.checker.on_leader_hw(
                        b.broker_id,
                        b.incarnation,
                        part.leader.leader_epoch,
                        b.log,
                        a.high_watermark,
                    )
            elif isinstance(a, ProduceCompleted):
                offset, _ = b.produces.pop(a.request_id, (-1, ""))
                self.net.send(
                    b.broker_id, CLIENT, ProduceAnswer(a.request_id, a.error, offset), self.now
                )
            elif isinstance(a, StateChange):
                self._note(a.message)

    def _broker_tick(self, b: SimBroker) -> None:
        now = self.now
        if b.broker_epoch < 0:
            if now >= b.next_register_ms:
                b.next_register_ms = now + 300
                self.net.send(b.broker_id, CONTROLLER, Register(b.incarnation), now)
            return
        if now >= b.next_heartbeat_ms:
            b.next_heartbeat_ms = now + HEARTBEAT_MS
            offset = b.image.offset if b.image is not None else -1
            self.net.send(b.broker_id, CONTROLLER, Heartbeat(b.broker_epoch, offset), now)
        part = b.part
        if part is None:
            return
        if now >= b.next_checkpoint_ms:
            b.next_checkpoint_ms = now + CHECKPOINT_MS
            b.checkpoint_hw = part.high_watermark
        if part.leader is not None:
            self._run(b, part.leader.tick(now))
        follower = part.follower
        if follower is None:
            return
        if b.fetching is not None and now - b.fetch_sent_ms < FETCH_TIMEOUT_MS:
            return
        if now < b.next_fetch_ms:
            return
        pos = follower.fetch_position(now)
        if pos is not None:
            b.fetching, b.fetch_sent_ms = pos, now
            self.net.send(b.broker_id, follower.leader_id, pos, now)
