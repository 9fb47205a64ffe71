"""How a node's metadata writes reach the active controller: run there, or forwarded to it
and sent again until one answers (`WriteForwarding`, the `MetadataWrites` of
`riverbed.server.quorum.QuorumMetadata`).

The *active controller* is the Raft leader once its epoch has started: the high watermark
has passed the epoch's start offset (the LeaderChange record), so every record of earlier
epochs is committed and applied and the image it computes against is current. Only then
does it run a metadata operation locally (the first active leader also writes the bootstrap
records). Any other node forwards the operation's request to the leader's controller
endpoint (one short-lived connection per forwarded request; wire format: Kafka framing at
the highest version riverbed speaks; a client's CreateTopics, DeleteTopics and
CreatePartitions go at the client's version in an Envelope with its principal, for the
active controller's mutation quota: `riverbed.server.forwarding`) and then waits, bounded
by ``FORWARD_APPLY_WAIT_S``, until its own replica of the image shows the result, so a
client that created a topic through a follower sees it there next. A forward the
controller did not answer, or answered NOT_CONTROLLER, goes again to the next active
controller (Kafka's forwarding channel; `WriteForwarding._write`), each attempt bounded by
``controller.socket.timeout.ms``; only when none answered by `FORWARD_RETRY_TIMEOUT_S` from
the first send does the operation fail with REQUEST_TIMED_OUT (Kafka's ForwardingManager:
``onTimeout`` answers ``getErrorResponse(new TimeoutException())``; clients retry it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from riverbed.metadata.controller import ControllerError
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import Message
from riverbed.raft.node import NotLeaderError
from riverbed.server.controller_channel import ControllerChannel, expect_response
from riverbed.server.forwarding import Origin
from riverbed.server.metadata_writes import MetadataWrites
from riverbed.server.metrics.traffic import error_codes
from riverbed.server.raft_driver import RaftDriver

log = logging.getLogger("riverbed.server.quorum")

#: Seconds a metadata write is sent again (to each next active controller) before it fails
#: with REQUEST_TIMED_OUT: Kafka's forwarding channel's ``retryTimeoutMs`` (60000, fixed in
#: BrokerServer; not a config in Kafka either).
FORWARD_RETRY_TIMEOUT_S = 60.0
#: Seconds a follower waits for its replica to show a forwarded operation's result.
FORWARD_APPLY_WAIT_S = 10.0
#: Seconds an operation on a just-elected leader waits for its epoch to start.
ACTIVATION_WAIT_S = 5.0
#: How often the controller loop (`riverbed.server.quorum`) looks at the Raft role
#: (bootstrap on activation), and a wait for an active controller looks again.
CONTROLLER_POLL_S = 0.05
ResponseT = TypeVar("ResponseT", bound=Message)


def _not_controller(response: Message) -> bool:
    """Did the controller refuse ``response``'s request as not (or no longer) active?
    (Kafka's channel looks for NOT_CONTROLLER in the response's ``errorCounts``.)"""
    return ErrorCode.NOT_CONTROLLER.name in error_codes(response)


def _forward_timed_out(api_key: int) -> ControllerError:
    """A metadata write no active controller answered within `FORWARD_RETRY_TIMEOUT_S`:
    REQUEST_TIMED_OUT (retriable), as Kafka's ForwardingManager answers one its channel
    timed out (not NOT_CONTROLLER: this node does not know the write was not done)."""
    return ControllerError(
        ErrorCode.REQUEST_TIMED_OUT,
        f"no active controller answered api_key={api_key} within {FORWARD_RETRY_TIMEOUT_S} s",
    )


class WriteForwarding(MetadataWrites):
    """`MetadataWrites` run on the active controller, here or forwarded to it (retried to
    the next one), and waited for until this node's replica shows them."""

    node_id: int
    driver: RaftDriver
    #: One request to another voter's controller listener
    channel: ControllerChannel
    #: Set at every image this node's service publishes (`_wait_until` wakes on it)
    _image_changed: asyncio.Event

    async def _wait_active_or_leader(self, deadline: float | None = None) -> int:
        """-1 when this node is the active controller, else the leader to forward to;
        NotLeaderError when there is neither by ``deadline`` (monotonic; default
        `ACTIVATION_WAIT_S` from now)."""
        if deadline is None:
            deadline = time.monotonic() + ACTIVATION_WAIT_S
        while True:
            if self.is_active():
                return -1
            leader = self.driver.node.leader_id
            if leader >= 0 and leader != self.node_id:
                return leader
            if time.monotonic() >= deadline:
                raise NotLeaderError(leader, self.driver.node.epoch)
            await asyncio.sleep(CONTROLLER_POLL_S)

    async def _write(
        self,
        api_key: int,
        request: Message,
        response_type: type[ResponseT],
        settled: Callable[[ResponseT], bool] | None = None,
        origin: Origin | None = None,
    ) -> ResponseT:
        """Run locally on the active controller, else forward; ``settled(response)`` says
        when this node's replica shows a forwarded result; ``origin``: the client the
        write acts for (its mutation quota; forwarded in an Envelope).

        As Kafka's broker-to-controller channel (``NodeToControllerRequestThread``): a
        request the controller did not answer (connection refused, reset or closed
        mid-request, timed out) or answered NOT_CONTROLLER goes again, to whichever
        controller is active next, until `FORWARD_RETRY_TIMEOUT_S` from the first send,
        then fails with REQUEST_TIMED_OUT (`_forward_timed_out`), as Kafka's
        ForwardingManager answers a request its channel timed out. One
        that the old controller applied before it died gets the natural answer from the
        new one (CreateTopics TOPIC_ALREADY_EXISTS, DeleteTopics UNKNOWN_TOPIC_OR_PARTITION,
        CreatePartitions INVALID_PARTITIONS, ElectLeaders ELECTION_NOT_NEEDED, DeleteAcls
        no matching binding; the config, quota, SCRAM upsert, CreateAcls and feature writes
        set a state and apply again unchanged; AllocateProducerIds takes a fresh block):
        never a success for something not done, and no NOT_CONTROLLER to clients that do
        not retry it (librdkafka's DeleteTopics hands it back)."""
        deadline = time.monotonic() + FORWARD_RETRY_TIMEOUT_S
        while True:
            try:
                # waits out an election (the whole deadline, not `ACTIVATION_WAIT_S`): a
                # loaded quorum can take longer than that to elect after its leader died
                leader = await self._wait_active_or_leader(deadline)
            except NotLeaderError:
                raise _forward_timed_out(api_key) from None
            try:
                if leader < 0:
                    # NotLeaderError here: leadership moved while the operation committed
                    return expect_response(await self._run_for(request, origin), response_type)
                attempt_s = min(self.channel.attempt_s, deadline - time.monotonic())
                attempt_s = max(attempt_s, CONTROLLER_POLL_S)
                answer = await self.channel.forward(leader, api_key, request, attempt_s, origin)
                response = expect_response(answer, response_type)
                if not _not_controller(response):
                    break
            except NotLeaderError as exc:  # not answered, or the controller resigned mid-way
                log.debug("write api_key=%s via %d: %r; sending again", api_key, leader, exc)
            if time.monotonic() >= deadline:
                raise _forward_timed_out(api_key)
            await asyncio.sleep(CONTROLLER_POLL_S)  # Kafka's reconnect back-off (50 ms)
        if settled is not None:
            await self._wait_until(lambda: settled(response))
        return response

    async def _wait_until(self, settled: Callable[[], bool]) -> None:
        deadline = time.monotonic() + FORWARD_APPLY_WAIT_S
        while True:
            # cleared before the check: an image published after it wakes the wait below
            self._image_changed.clear()
            if settled() or time.monotonic() >= deadline:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._image_changed.wait(), 0.2)
