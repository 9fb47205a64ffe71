"""Setting up an accepted connection: the TLS handshake (bounded) and who the peer is.

PLAINTEXT and SASL_PLAINTEXT: the socket as is. SSL and SASL_SSL: the TLS handshake,
run with at most `tls.HandshakeLimiter`'s number at once and within its time limit
(waiting for the ClientHello and for a slot counts): a client that stalls or sends garbage
is dropped with a log line and never reaches the request path. A connection takes a slot
only once its whole ClientHello record has arrived (peeked, not read), so clients that
open TCP and send nothing, or part of a ClientHello, cost no slot and cannot starve real
clients of them. SSL's principal is the client certificate's
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
from riverbed.server.tls import HANDSHAKE_REFUSAL, DirectSSLObject, HandshakeLimiter

log = logging.getLogger(__name__)


#: TLS record: content type 22 (handshake), then version (2 bytes) and length (2 bytes)
_HANDSHAKE_RECORD = 0x16
_RECORD_HEADER = 5
#: a record's body is at most 2^14 bytes (plus what a compressed or protected one may add)
_PEEK_BYTES = _RECORD_HEADER + 2**14 + 2048
#: how often a part-sent ClientHello is looked at again (the socket stays readable while
#: its bytes are only peeked, so readiness cannot tell when more arrive)
_PEEK_PAUSE_S = (0.005, 0.1)


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
        await asyncio.wait_for(client_hello_arrived(csock), limiter.timeout_ms / 1000)
    except TimeoutError:
        csock.close()
        raise SetupFailed("no ClientHello within the handshake time limit") from None
    except OSError as exc:
        csock.close()
        raise SetupFailed(f"gone before its ClientHello: {exc!r}") from None
    try:
        remaining = max(0.001, deadline - time.monotonic())
        await asyncio.wait_for(limiter.slots.acquire(), remaining)
    except TimeoutError:
        csock.close()
        raise SetupFailed("no TLS handshake slot within the handshake time limit") from None
    made: list[DirectSSLObject] = []
    HANDSHAKE_REFUSAL.set(made)  # this task's own context
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
        # a refusal whose alert went out first ends with the client's close: its reason
        why = next((m.refusal for m in made if m.refusal is not None), exc)
        raise SetupFailed(f"TLS handshake failed: {why!r}") from None
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


async def client_hello_arrived(csock: socket.socket) -> None:
    """Return once the first TLS record (the ClientHello) is whole in ``csock``'s buffer,
    or what arrived is no TLS handshake record (the handshake then fails at once); the
    bytes stay unread for the handshake. ConnectionError when the client left."""
    await _readable(csock)
    pause = _PEEK_PAUSE_S[0]
    while True:
        try:
            head = csock.recv(_PEEK_BYTES, socket.MSG_PEEK)
        except BlockingIOError:
            await _readable(csock)
            continue
        if not head:
            raise ConnectionError("closed before its ClientHello")
        if head[0] != _HANDSHAKE_RECORD:
            return
        if len(head) >= _RECORD_HEADER and len(head) >= _RECORD_HEADER + int.from_bytes(
            head[3:5], "big"
        ):
            return
        await asyncio.sleep(pause)
        pause = min(pause * 2, _PEEK_PAUSE_S[1])


async def _readable(csock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(csock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(csock.fileno())
