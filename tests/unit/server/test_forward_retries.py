"""A metadata write forwarded to the active controller is sent again, as Kafka's
broker-to-controller channel does, when the controller dies mid-request (the connection
closes before an answer) or answers NOT_CONTROLLER (a new leader not active yet, or an old
one that resigned mid-operation); a retried write the old controller already applied gets
the natural answer from the next one, never NOT_CONTROLLER (librdkafka's DeleteTopics hands
that back to the application).

The controller side is a scripted fake listener on loopback: each connection takes one
request and, by the script, closes without answering or answers a given error code; the
node side is `QuorumMetadata` with a Raft node that follows that listener's id."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.metadata.control_common import ControllerError
from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import decode_request, encode_response
from riverbed.protocol.messages import (
    AlterConfigsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    EnvelopeRequest,
    Message,
)
from riverbed.raft.node import NotLeaderError
from riverbed.raft.roles import Role
from riverbed.server.broker.error_response import error_code_of, error_response
from riverbed.server.client_login import PLAINTEXT_CLIENT
from riverbed.server.config import ServerConfig
from riverbed.server.controller_channel import ControllerChannel
from riverbed.server.fault_handler import RecordingFaultHandler
from riverbed.server.forwarding import Origin, unwrap_request, wrap_response
from riverbed.server.quorum import QuorumMetadata, open_quorum_metadata
from riverbed.storage.clock import ManualClock

CONTROLLER = 2
#: what the fake controller does with the n-th connection's request
CLOSE = "close"  # reads it, then dies: the connection closes without an answer
SILENT = "silent"  # reads it and never answers (a stalled controller)

Step = str | ErrorCode


class FakeController:
    """A controller listener that follows ``script`` (one step per connection)."""

    def __init__(self, script: list[Step]) -> None:
        self.script = list(script)
        self.seen: list[Message] = []
        #: the clients of the enveloped requests among them
        self.origins: list[Origin] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            header, body = decode_request(await reader.readexactly(size))
            envelope = isinstance(body, EnvelopeRequest)
            if isinstance(body, EnvelopeRequest):  # a client's write: answered inside
                inner_header, body, origin = unwrap_request(body)
                self.origins.append(origin)
            self.seen.append(body)
            step = self.script.pop(0) if self.script else CLOSE
            if step == SILENT:
                await reader.read()  # until the node gives up and closes
            elif step != CLOSE:
                assert isinstance(step, ErrorCode)
                if envelope:
                    v = inner_header.api_version
                    inner = error_response(inner_header.api_key, body, v, step)
                    answer: Message = wrap_response(inner_header, inner)
                else:
                    answer = error_response(header.api_key, body, header.api_version, step)
                writer.write(encode_response(header, answer))
                await writer.drain()
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def follower_of(port: int, image: MetadataImage = MetadataImage.EMPTY) -> QuorumMetadata:
    """A node whose Raft follows ``CONTROLLER`` at ``port`` (only what `_write` reads)."""
    node: Any = SimpleNamespace(
        role=Role.FOLLOWER, leader_id=CONTROLLER, epoch=3, leader_state=None, high_watermark=9
    )
    quorum = QuorumMetadata.__new__(QuorumMetadata)
    quorum.node_id = 1
    quorum.voters = {CONTROLLER: ("127.0.0.1", port)}
    quorum.driver = SimpleNamespace(node=node)  # type: ignore[assignment]
    # 30 s: controller.socket.timeout.ms's default
    quorum.channel = ControllerChannel(1, quorum.voters, PLAINTEXT_CLIENT, 30.0, lambda: 3)
    quorum.lifecycle_attempt_s = 30.0
    quorum.service = SimpleNamespace(image=image)  # type: ignore[assignment]
    quorum.image = image  # the service's, mirrored (`MetadataService.mirror_image_to`)
    quorum._image_changed = asyncio.Event()
    return quorum


def quorum_of_one(tmp_path: Path, *overrides: str) -> QuorumMetadata:
    """A combined node's metadata quorum seat, built from its config (nothing runs)."""
    config = ServerConfig.load(
        None,
        [
            "node.id=1",
            "process.roles=broker,controller",
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "controller.listener.names=CONTROLLER",
            f"log.dirs={tmp_path}",
            *overrides,
        ],
    )
    return open_quorum_metadata(config, "c" * 22, ManualClock(), RecordingFaultHandler())


def delete(name: str) -> DeleteTopicsRequest:
    return DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], topic_names=[], timeout_ms=30_000
    )


def run_against(
    script: list[Step], write: Callable[[QuorumMetadata], Any]
) -> tuple[Any, list[Message]]:
    async def main() -> tuple[Any, list[Message]]:
        fake = FakeController(script)
        port = await fake.start()
        try:
            return await asyncio.wait_for(write(follower_of(port)), 20), fake.seen
        finally:
            await fake.close()

    return asyncio.run(main())


def test_delete_applied_by_a_controller_that_died_mid_request_gets_the_natural_answer() -> None:
    """The old controller takes the request and dies before answering (it may have applied
    it); the next one, not yet active, answers NOT_CONTROLLER; the one after that no longer
    knows the topic. The client is told UNKNOWN_TOPIC_OR_PARTITION, as Kafka's forwarding
    channel would, not NOT_CONTROLLER (before: NotLeaderError at the first closed
    connection)."""
    script: list[Step] = [CLOSE, ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    response, seen = run_against(script, lambda q: q.delete_topics(delete("gone")))
    assert isinstance(response, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("gone", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert len(seen) == 3 and all(isinstance(r, DeleteTopicsRequest) for r in seen)


def test_not_controller_answer_is_sent_again_to_the_active_controller() -> None:
    """A new leader that is not active yet answers NOT_CONTROLLER without applying the
    request; the node asks again and hands back the active controller's answer (before:
    NOT_CONTROLLER went to the client)."""
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1)],
        timeout_ms=30_000,
    )
    script: list[Step] = [ErrorCode.NOT_CONTROLLER, ErrorCode.TOPIC_ALREADY_EXISTS]
    response, seen = run_against(script, lambda q: q.create_topics(request))
    assert isinstance(response, CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("t", ErrorCode.TOPIC_ALREADY_EXISTS)
    ]
    assert len(seen) == 2


def test_a_controller_that_never_answers_ends_in_request_timed_out_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bounded: with no controller answering, the write gives up at its deadline with
    REQUEST_TIMED_OUT, as Kafka's ForwardingManager answers a request its channel timed
    out (``getErrorResponse(new TimeoutException())``), never a success (before:
    NotLeaderError, NOT_CONTROLLER to the client)."""
    monkeypatch.setattr("riverbed.server.write_forwarding.FORWARD_RETRY_TIMEOUT_S", 0.5)
    with pytest.raises(ControllerError) as raised:
        run_against([CLOSE] * 1000, lambda q: q.delete_topics(delete("t")))
    assert error_code_of(raised.value) is ErrorCode.REQUEST_TIMED_OUT


def test_no_controller_at_all_ends_in_request_timed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """No leader known for the whole deadline (an election that does not end): the
    queued write times out as in Kafka's channel, REQUEST_TIMED_OUT (before:
    NOT_CONTROLLER)."""
    monkeypatch.setattr("riverbed.server.write_forwarding.FORWARD_RETRY_TIMEOUT_S", 0.3)

    async def main() -> None:
        quorum = follower_of(1)
        quorum.driver.node.leader_id = -1
        await asyncio.wait_for(quorum.alter_configs(AlterConfigsRequest(resources=[])), 20)

    with pytest.raises(ControllerError) as raised:
        asyncio.run(main())
    assert raised.value.code is ErrorCode.REQUEST_TIMED_OUT


def test_a_stalled_controller_is_given_up_after_one_attempts_timeout() -> None:
    """One attempt is bounded by ``controller.socket.timeout.ms`` (Kafka's channel:
    min(controller.socket.timeout.ms, retryTimeoutMs)), not the whole retry deadline: a
    controller that takes the request and stalls is given up after it, and the write goes
    again to the one that answers (before: the first attempt had the whole deadline)."""
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1)],
        timeout_ms=30_000,
    )

    async def create(quorum: QuorumMetadata) -> CreateTopicsResponse:
        quorum.channel.attempt_s = 1.0
        return await quorum.create_topics(request)

    # answers to spare: an attempt that a loaded machine lets time out is sent again
    script: list[Step] = [SILENT, *[ErrorCode.TOPIC_ALREADY_EXISTS] * 20]
    response, seen = run_against(script, create)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("t", ErrorCode.TOPIC_ALREADY_EXISTS)
    ]
    assert len(seen) >= 2


def test_a_write_the_active_controller_lost_mid_commit_goes_to_the_next_one() -> None:
    """This node was the active controller and lost its leadership while the operation's
    batch committed (the driver's NotLeaderError: the batch may still commit under the new
    leader). The write goes to the new controller, whose answer the client gets (before:
    NOT_CONTROLLER)."""

    async def main() -> tuple[Any, list[Message]]:
        fake = FakeController([ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
        quorum = follower_of(await fake.start())
        node = quorum.driver.node
        node.role, node.leader_id = Role.LEADER, quorum.node_id
        node.leader_state = SimpleNamespace(epoch_start_offset=5)

        async def resign_mid_commit(request: DeleteTopicsRequest) -> DeleteTopicsResponse:
            node.role, node.leader_id, node.leader_state = Role.FOLLOWER, CONTROLLER, None
            raise NotLeaderError(CONTROLLER, 4)

        quorum.service.delete_topics = resign_mid_commit  # type: ignore[method-assign]
        try:
            return await asyncio.wait_for(quorum.delete_topics(delete("t")), 20), fake.seen
        finally:
            await fake.close()

    response, seen = asyncio.run(main())
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("t", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert len(seen) == 1


def test_a_heartbeat_to_a_stalled_controller_gives_up_within_half_the_session(
    tmp_path: Path,
) -> None:
    """Kafka's broker lifecycle channel (registration, heartbeats, controlled shutdown)
    gives a request ``broker.session.timeout.ms`` / 2 (KAFKA-14392), not the controller
    channel's 30 s: a heartbeat sent to a controller that stopped answering (SIGSTOPped,
    cut off) must give up in time for the next one to reach the new controller before
    the session expires. Before, the heartbeat waited out 30 s, and the broker's session
    at the new controller rested on its metadata fetches alone."""
    built = quorum_of_one(tmp_path, "broker.session.timeout.ms=2000")
    assert built.lifecycle_attempt_s == 1.0  # min(controller.socket.timeout.ms, 2000 / 2)

    async def beat(quorum: QuorumMetadata) -> tuple[bool, float]:
        quorum.lifecycle_attempt_s = built.lifecycle_attempt_s
        started = time.monotonic()
        unfenced = await quorum.heartbeat(5, want_fence=False)
        return unfenced, time.monotonic() - started

    (unfenced, took_s), seen = run_against([SILENT], beat)
    assert not unfenced and len(seen) == 1
    assert took_s < 10  # ~1 s; the controller channel's attempt is 30 s
