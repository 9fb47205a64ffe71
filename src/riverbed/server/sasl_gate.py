"""The SASL gate of a SASL_PLAINTEXT / SASL_SSL connection: the asyncio shell around
`riverbed.security.sasl_server.SaslServerAuthenticator`.

Before any request reaches the broker, the connection's frames go one at a time through
the authenticator (no pipelining: Kafka's authenticator mutes the channel while it
answers). Frames above ``sasl.server.max.receive.size`` close the connection (Kafka:
"Invalid SASL packet size"), as does a client silent for ``connections.max.idle.ms``.
ApiVersions is answered by the broker's own handler, so it lists the listener's APIs.
A failed authentication waits ``connection.failed.authentication.delay.ms`` before it
sends SASL_AUTHENTICATION_FAILED and closes (Kafka delays the close and the failure
response together, which slows password guessing without holding a request slot).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import Message
from riverbed.security.principal import KafkaPrincipal
from riverbed.security.sasl_server import SaslServerAuthenticator, Step
from riverbed.server.listener_security import ListenerSecurity

if TYPE_CHECKING:
    from riverbed.server.network import Connection

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")


async def _read_frame(conn: Connection, limit: int) -> bytes | None:
    idle_s = conn.server.connections_max_idle_ms / 1000
    try:
        head = await asyncio.wait_for(conn.reader.readexactly(4), idle_s)
        (size,) = _SIZE.unpack(head)
        if size < 0 or size > limit:
            log.warning(
                "closing connection from %s: SASL frame of %d bytes outside 0..%d "
                "(sasl.server.max.receive.size)",
                conn.peer,
                size,
                limit,
            )
            return None
        return await asyncio.wait_for(conn.reader.readexactly(size), idle_s)
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return None


async def _answer(conn: Connection, step: Step) -> None:
    from riverbed.server.broker.error_response import error_response
    from riverbed.server.network import RequestContext

    codec = conn.server.codec
    if step.delegate is not None:
        header, body = step.delegate
        ctx = RequestContext(
            header, conn.peer, conn.listener_name, conn.connection_id, int(time.time() * 1000)
        )
        response = await conn.server.handler(ctx, body)
        if isinstance(response, Message):
            conn.writer.write(codec.encode_response(header, response))
    if step.reject is not None:
        header, body = step.reject
        reply = error_response(
            header.api_key, body, response_body_version(header), ErrorCode.ILLEGAL_SASL_STATE
        )
        conn.writer.write(codec.encode_response(header, reply))


async def authenticate(conn: Connection, security: ListenerSecurity) -> KafkaPrincipal | None:
    """Run the exchange; the authenticated principal, or None once the connection must
    close (the reason is logged)."""
    auth = SaslServerAuthenticator(security.mechanisms, security.mechanism_server)
    while True:
        frame = await _read_frame(conn, security.sasl_receive_bytes_max)
        if frame is None:
            return None
        step = auth.on_frame(frame)
        await _answer(conn, step)
        if step.close is not None:
            if step.delay_close:
                await asyncio.sleep(security.failed_authentication_delay_ms / 1000)
            if step.send is not None:
                conn.writer.write(step.send)
            log.warning("closing connection from %s: %s", conn.peer, step.close)
            await _drain(conn)
            return None
        if step.send is not None:
            conn.writer.write(step.send)
        if not await _drain(conn):
            return None
        if step.principal is not None:
            log.debug(
                "%s authenticated as %s (SASL/%s)", conn.peer, step.principal, auth.mechanism_name
            )
            return step.principal


async def _drain(conn: Connection) -> bool:
    try:
        await conn.writer.drain()
        return True
    except (ConnectionError, OSError):
        return False
