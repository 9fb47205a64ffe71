"""Setting up an accepted connection: the TLS handshake (bounded) and who the peer is.

PLAINTEXT and SASL_PLAINTEXT: the socket as is. SSL and SASL_SSL: the TLS handshake,
run with at most `tls.HandshakeLimiter`'s number at once and within its time limit
(waiting for a slot counts): a client that stalls or sends garbage is dropped with a log
line and never reaches the request path. SSL's principal is the client certificate's
mapped DN (``User:ANONYMOUS`` without one); SASL's comes later from the SASL gate.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time

from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.security.ssl_principal import NoMatchingRule
from riverbed.server.listener_security import ListenerSecurity
from riverbed.server.tls import HandshakeLimiter

log = logging.getLogger(__name__)


class SetupFailed(Exception):
    """The connection could not be set up (logged by the caller, then closed)."""


async def open_transport(
    csock: socket.socket,
    protocol: asyncio.StreamReaderProtocol,
    security: ListenerSecurity,
    limiter: HandshakeLimiter,
) -> tuple[asyncio.Transport, KafkaPrincipal]:
    """The connection's transport and its principal so far (SetupFailed, socket closed)."""
    loop = asyncio.get_running_loop()
    context = security.ssl_context
    if context is None:
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, csock)
        except OSError as exc:
            csock.close()
            raise SetupFailed(f"gone before it was set up: {exc}") from None
        return transport, ANONYMOUS
    deadline = time.monotonic() + limiter.timeout_ms / 1000
    try:
        await asyncio.wait_for(limiter.slots.acquire(), limiter.timeout_ms / 1000)
    except TimeoutError:
        csock.close()
        raise SetupFailed("no TLS handshake slot within the handshake time limit") from None
    try:
        remaining = max(0.001, deadline - time.monotonic())
        transport, _ = await asyncio.wait_for(
            loop.connect_accepted_socket(
                lambda: protocol, csock, ssl=context, ssl_handshake_timeout=remaining
            ),
            remaining + 1,
        )
    except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
        csock.close()
        raise SetupFailed(f"TLS handshake failed: {exc!r}") from None
    finally:
        limiter.slots.release()
    ssl_object = transport.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if security.sasl:
        return transport, ANONYMOUS
    try:
        return transport, security.tls_principal(der)
    except (NoMatchingRule, ValueError) as exc:
        transport.abort()
        raise SetupFailed(f"client certificate refused: {exc}") from None
