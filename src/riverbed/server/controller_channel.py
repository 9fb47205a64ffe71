"""The controller channel's client side: one request from this node to another voter's
controller listener (Kafka's NodeToControllerChannelManager, one attempt of it).

Wire format: Kafka framing (``int32 size``, request header, body) at the highest version
riverbed speaks, one short-lived connection per request (secured as the controller
listener is: ``controller.listener.names``' security protocol, SASL mechanism
``sasl.mechanism.controller.protocol``). A client's CreateTopics, DeleteTopics and
CreatePartitions go in an Envelope carrying its principal and client id, for the active
controller's mutation quota (`riverbed.server.forwarding`). Retrying, and choosing the
next active controller, is the caller's
(`riverbed.server.write_forwarding.WriteForwarding._write`).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import TypeVar

from riverbed.metadata.controller import ControllerError
from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import EnvelopeResponse, Message
from riverbed.raft.node import NotLeaderError
from riverbed.server.client_login import ClientSecurity
from riverbed.server.forwarding import (
    ENVELOPED_APIS,
    EnvelopeError,
    Origin,
    unwrap_response,
    wrap_request,
)
from riverbed.server.inter_broker import connect

log = logging.getLogger(__name__)

#: Largest response frame accepted from the active controller.
FORWARD_RESPONSE_BYTES_MAX = 16 * 1024 * 1024
_SIZE = struct.Struct(">i")
ResponseT = TypeVar("ResponseT", bound=Message)


def expect_response(response: Message, response_type: type[ResponseT]) -> ResponseT:
    """``response`` as the type its request promises (a mismatch is a bug: it halts)."""
    if not isinstance(response, response_type):
        raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
    return response


class ControllerChannel:
    """Requests from node ``node_id`` to the controller listeners of ``voters``."""

    def __init__(
        self,
        node_id: int,
        voters: dict[int, tuple[str, int]],
        security: ClientSecurity,
        attempt_s: float,
        epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.voters = voters
        self.security = security
        #: one attempt's bound: ``controller.socket.timeout.ms`` (Kafka's channel: the
        #: request timeout is min(controller.socket.timeout.ms, retryTimeoutMs))
        self.attempt_s = attempt_s
        #: the Raft epoch this node knows, named in a NotLeaderError
        self.epoch = epoch

    async def forward(
        self,
        leader: int,
        api_key: int,
        request: Message,
        timeout_s: float | None = None,
        origin: Origin | None = None,
    ) -> Message:
        """Send ``request`` to ``leader``'s controller listener; its decoded response.
        NotLeaderError when it is not answered within ``timeout_s`` (refused, reset, closed
        or silent: the caller retries, or its client does). A client's CreateTopics /
        DeleteTopics / CreatePartitions (``origin`` given) goes in an Envelope
        (`riverbed.server.forwarding`); an envelope the controller refused is
        UNKNOWN_SERVER_ERROR to the client, as Kafka's ForwardingManager answers.
        ``timeout_s`` defaults to `attempt_s`."""
        if timeout_s is None:
            timeout_s = self.attempt_s
        if origin is None or api_key not in ENVELOPED_APIS:
            return await self._exchange(leader, api_key, request, timeout_s)
        envelope = wrap_request(api_key, request, origin)
        answer = await self._exchange(leader, ApiKey.ENVELOPE, envelope, timeout_s)
        try:
            return unwrap_response(api_key, origin, expect_response(answer, EnvelopeResponse))
        except EnvelopeError as exc:
            log.warning("forwarded api_key=%s: %s", api_key, exc)
            raise ControllerError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from None

    async def _exchange(
        self, leader: int, api_key: int, request: Message, timeout_s: float
    ) -> Message:
        host, port = self.voters[leader]
        version = SUPPORTED_VERSIONS[ApiKey(api_key)][1]
        header = RequestHeader(api_key, version, 1, f"riverbed-forward-{self.node_id}")

        async def exchange() -> Message:
            login = await connect(host, port, self.security, header.client_id or "")
            reader, writer = login.reader, login.writer
            try:
                writer.write(encode_request(header, request))
                await writer.drain()
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 4 <= size <= FORWARD_RESPONSE_BYTES_MAX:
                    raise ConnectionError(f"controller response frame of {size} bytes")
                return decode_response(header, await reader.readexactly(size))
            finally:
                writer.close()

        try:
            return await asyncio.wait_for(exchange(), timeout_s)
        except (OSError, asyncio.IncompleteReadError) as exc:  # TimeoutError is an OSError
            raise NotLeaderError(leader, self.epoch()) from exc
