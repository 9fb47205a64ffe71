"""Raft RPCs over Kafka's wire protocol: the client side (``KafkaRaftTransport``) and the
server-side entry point (``serve_raft_request``) for the controller listener.

Client: one TCP connection per peer (``controller.quorum.voters`` endpoints), requests
pipelined and matched to responses by correlation id (Kafka framing: int32 size, request
header v1/v2 by flexible version, ``riverbed.protocol.headers``). At most
``inflight_requests_max`` requests wait per connection; a response larger than
``response_bytes_max`` or any I/O error closes the connection and fails its waiters with
``ConnectionError`` (the raft node retries after its request timeout); the next send
reconnects.

Server: the network layer decodes a frame with ``headers.decode_request`` and, for the raft
API keys (``RAFT_API_KEYS``; Fetch when it names ``__cluster_metadata``), awaits
``serve_raft_request(driver, api_key, message)`` and encodes the returned message with
``headers.encode_response``.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Mapping

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.headers import (
    RequestHeader,
    decode_response,
    encode_request,
    peek_correlation_id,
)
from riverbed.protocol.messages import FetchRequest as WireFetchRequest
from riverbed.protocol.messages import Message
from riverbed.raft import wire
from riverbed.raft.messages import Request, Response
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.inter_broker import NodeConnection, connect
from riverbed.server.raft_driver import RaftDriver
from riverbed.server.supervise import supervise
from riverbed.storage.layout import METADATA_TOPIC

RAFT_API_KEYS = frozenset(
    {
        wire.API_VOTE,
        wire.API_BEGIN_QUORUM_EPOCH,
        wire.API_END_QUORUM_EPOCH,
        wire.API_DESCRIBE_QUORUM,
        wire.API_FETCH_SNAPSHOT,
    }
)
_SIZE = struct.Struct(">i")


def is_raft_fetch(api_key: int, message: Message) -> bool:
    """A Fetch for the metadata partition (served by raft, not the broker's fetch path)."""
    if api_key != wire.API_FETCH or not isinstance(message, WireFetchRequest):
        return False
    topics = message.topics
    return len(topics) == 1 and (
        topics[0].topic == METADATA_TOPIC or topics[0].topic_id == wire.METADATA_TOPIC_ID
    )


async def serve_raft_request(driver: RaftDriver, api_key: int, message: Message) -> Message:
    """Decode, hand to the driver, encode the reply (``RaftWireError`` on malformed input)."""
    request = wire.decode_request(api_key, message)
    response = await driver.handle_request(-1, request)
    return wire.encode_response(response)


class _Connection:
    def __init__(
        self, login: NodeConnection, response_bytes_max: int, fault_handler: FaultHandler
    ) -> None:
        self.login = login
        self.reader, self.writer = login.reader, login.writer
        self.response_bytes_max = response_bytes_max
        self.waiting: dict[int, tuple[RequestHeader, asyncio.Future[Message]]] = {}
        self.next_correlation_id = 1
        #: replaced by a new connection (its SASL session ends): it closes once answered
        self.retiring = False
        # a lost or garbled connection fails its waiters (the raft node retries); any
        # other error of the reader is a fault
        self.task = supervise("raft connection reader", self._read_loop(), fault_handler)

    async def _read_loop(self) -> None:
        error: Exception = ConnectionError("connection closed")
        try:
            while True:
                (size,) = _SIZE.unpack(await self.reader.readexactly(4))
                if not 4 <= size <= self.response_bytes_max:
                    raise ProtocolError(f"response frame of {size} bytes")
                frame = await self.reader.readexactly(size)
                entry = self.waiting.pop(peek_correlation_id(frame), None)
                if entry is None:
                    continue  # a reply to a request we gave up on
                header, fut = entry
                if not fut.done():
                    try:
                        fut.set_result(decode_response(header, frame))
                    except ProtocolError as exc:
                        fut.set_exception(ConnectionError(f"bad response: {exc}"))
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
            error = ConnectionError(str(exc) or type(exc).__name__)
        finally:
            self.fail(error)

    def fail(self, error: Exception) -> None:
        for _, fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(error)
        self.waiting.clear()
        self.writer.close()

    @property
    def closed(self) -> bool:
        return self.task.done()

    @property
    def usable(self) -> bool:
        """Open, and its SASL session (KIP-368) not yet due for renewal."""
        if self.closed or self.retiring:
            return False
        return not self.login.session_ending(asyncio.get_running_loop().time())

    def retire(self) -> None:
        """Take no new requests; close once those in flight are answered."""
        self.retiring = True
        if not self.waiting:
            self.writer.close()


class KafkaRaftTransport:
    def __init__(
        self,
        node_id: int,
        endpoints: Mapping[int, tuple[str, int]],
        *,
        inflight_requests_max: int = 64,
        response_bytes_max: int = 64 * 1024 * 1024,
        connect_timeout_s: float = 2.0,
        fault_handler: FaultHandler | None = None,
        security: ClientSecurity = PLAINTEXT_CLIENT,
    ) -> None:
        self.node_id = node_id
        #: how to reach the controller listener of the other voters (TLS, SASL login)
        self.security = security
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self.endpoints = dict(endpoints)
        self.inflight_requests_max = inflight_requests_max
        self.response_bytes_max = response_bytes_max
        self.connect_timeout_s = connect_timeout_s
        self.client_id = f"riverbed-raft-{node_id}"
        self._connections: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def _connection(self, dest: int) -> _Connection:
        conn = self._connections.get(dest)
        if conn is not None and conn.usable:
            return conn
        lock = self._connecting.setdefault(dest, asyncio.Lock())
        async with lock:
            conn = self._connections.get(dest)
            if conn is not None and conn.usable:
                return conn
            if conn is not None and not conn.closed:
                conn.retire()  # a new login before the peer's SASL session ends
            try:
                host, port = self.endpoints[dest]
            except KeyError:
                raise ConnectionError(f"no endpoint for node {dest}") from None
            login = await asyncio.wait_for(
                connect(host, port, self.security, self.client_id), self.connect_timeout_s
            )
            conn = _Connection(login, self.response_bytes_max, self.fault_handler)
            self._connections[dest] = conn
            return conn

    async def send(self, dest: int, request: Request) -> Response:
        api_key, version, message = wire.encode_request(request)
        conn = await self._connection(dest)
        if len(conn.waiting) >= self.inflight_requests_max:
            raise ConnectionError(
                f"{self.inflight_requests_max} requests already in flight to node {dest}"
            )
        corr = conn.next_correlation_id
        conn.next_correlation_id = corr + 1 if corr < 2**31 - 1 else 1
        header = RequestHeader(api_key, version, corr, self.client_id)
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        conn.waiting[corr] = (header, fut)
        try:
            conn.writer.write(encode_request(header, message))
            await conn.writer.drain()
            reply = await fut
        except OSError as exc:
            conn.fail(ConnectionError(str(exc)))
            raise ConnectionError(str(exc)) from None
        finally:
            conn.waiting.pop(corr, None)
            if conn.retiring and not conn.waiting:
                conn.writer.close()
        return wire.decode_response(api_key, reply)

    async def close(self) -> None:
        for conn in self._connections.values():
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await conn.task
        self._connections.clear()
