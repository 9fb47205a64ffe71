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
import ssl
import struct
import time
from typing import TYPE_CHECKING

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import Message
from riverbed.security.principal import KafkaPrincipal
from riverbed.security.sasl_server import SaslServerAuthenticator, Step
from riverbed.server.listener_security import ListenerSecurity
from riverbed.server.tls import tls_record_hint

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
                "(sasl.server.max.receive.size)%s",
                conn.peer,
                size,
                limit,
                tls_record_hint(size),
            )
            return None
        return await asyncio.wait_for(conn.reader.readexactly(size), idle_s)
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return None
    except ssl.SSLError as exc:  # e.g. a refused renegotiation
        log.warning("closing connection from %s: TLS error: %s", conn.peer, exc)
        return None


def _wall_ms() -> int:
    return int(time.time() * 1000)


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


async def authenticate(
    conn: Connection,
    security: ListenerSecurity,
    first_frame: bytes | None = None,
    previous: tuple[KafkaPrincipal, str] | None = None,
) -> tuple[Step, str] | None:
    """Run the exchange (from ``first_frame`` when the caller read it; ``previous``: the
    session a re-authentication renews); its last step (principal, session lifetime) and
    the mechanism, or None once the connection must close (reason logged)."""
    auth = SaslServerAuthenticator(
        security.mechanisms,
        security.mechanism_server,
        security.reauth_ms,
        reauth_ms=security.reauth_ms_by_mechanism,
        previous=previous,
        now_ms=_wall_ms,
    )
    while True:
        frame = first_frame or await _read_frame(conn, security.sasl_receive_bytes_max)
        first_frame = None
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
            return step, auth.mechanism_name


async def _drain(conn: Connection) -> bool:
    try:
        await conn.writer.drain()
        return True
    except (ConnectionError, OSError):
        return False


#: Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: a SaslHandshake sooner
#: after the last re-authentication began is an ordinary (illegal) request.
MIN_REAUTH_INTERVAL_S = 1.0


class SaslSession:
    """A SASL connection's session (KIP-368 re-authentication, ``connections.max.reauth.ms``).

    The first authentication runs before any request. When the session has an end (the
    lifetime `SaslServerAuthenticator` computes: ``connections.max.reauth.ms`` of the
    mechanism and an OAUTHBEARER token's expiry), the client learns it from
    SaslAuthenticate (v1+) and re-authenticates in its request stream: a SaslHandshake is
    then run through the gate again once every earlier response is out (Kafka's
    authenticator takes the channel for it); the mechanism and the principal must not
    change. As in Kafka's SocketServer, a SaslHandshake when the session has no end, or
    within a second of the last re-authentication, is served as a request
    (ILLEGAL_SASL_STATE), and a request other than SaslHandshake after the session ended
    closes the connection (clients of SaslAuthenticate v0 cannot re-authenticate).
    """

    def __init__(self, conn: Connection, security: ListenerSecurity) -> None:
        self.conn = conn
        self.security = security
        self.principal: KafkaPrincipal | None = None
        self.mechanism = ""
        self.expires_ms: int | None = None
        self._last_reauth = 0.0  # time.monotonic() when the last re-authentication began

    async def start(self, first_frame: bytes | None = None) -> KafkaPrincipal | None:
        previous = (self.principal, self.mechanism) if self.principal is not None else None
        done = await authenticate(self.conn, self.security, first_frame, previous)
        if done is None or done[0].principal is None:
            return None
        step, mechanism = done
        if previous is not None:
            log.info(
                "%s re-authenticated as %s (SASL/%s)", self.conn.peer, step.principal, mechanism
            )
        self.principal, self.mechanism = step.principal, mechanism
        lifetime = step.session_lifetime_ms
        self.expires_ms = None if lifetime is None else int(time.time() * 1000) + lifetime
        return step.principal

    async def screen(self, frame: bytes) -> bool | None:
        """Before a request is served: True = serve it, None = it was a re-authentication
        (done), False = close the connection."""
        api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
        if api_key == ApiKey.SASL_HANDSHAKE and self._may_reauthenticate():
            self._last_reauth = time.monotonic()
            await self.conn.wait_answered()
            return None if await self.start(frame) is not None else False
        if self.expires_ms is not None and int(time.time() * 1000) > self.expires_ms:
            log.warning(
                "closing connection from %s: its SASL session expired (connections.max.reauth.ms)",
                self.conn.peer,
            )
            return False
        return True

    def _may_reauthenticate(self) -> bool:
        if self.expires_ms is None:
            return False
        return not (
            self._last_reauth and time.monotonic() - self._last_reauth < MIN_REAUTH_INTERVAL_S
        )
