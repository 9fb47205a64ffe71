"""The TLS handshake bound (64 at once, 10 s each) under a flood, against a real broker:
clients that open TCP and send no ClientHello, or only part of one, must not hold the
handshake slots a real client needs (before, the 65th connection waited for a stalled
one's 10 s to pass, and under a bigger flood gave up)."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import Wire

FLOOD = 100
#: far below the 10 s a stalled handshake may hold a slot
CONNECT_S_MAX = 2.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("pki"), {"admin": "admin-secret"}, {})
    try:
        yield broker
    finally:
        broker.proc.close()


def _context(secure: SecureBroker) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))
    ctx.check_hostname = False
    return ctx


def _real_client_seconds(secure: SecureBroker) -> float:
    """How long a real client takes to handshake and be answered ApiVersions."""
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=30)
    wire = Wire.__new__(Wire)
    wire.sock, wire.corr = _context(secure).wrap_socket(raw), 0
    try:
        reply = wire.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
        assert isinstance(reply, ApiVersionsResponse) and reply.error_code == 0
    finally:
        wire.sock.close()
    return time.monotonic() - started


def _client_hello(secure: SecureBroker) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _context(secure).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("sent", ["nothing", "part of a ClientHello"])
def test_a_flood_of_stalled_handshakes_does_not_starve_a_real_client(
    secure: SecureBroker, sent: str
) -> None:
    hello = _client_hello(secure)
    stalled = [socket.create_connection(("127.0.0.1", secure.ports["SSL"])) for _ in range(FLOOD)]
    try:
        if sent != "nothing":
            for s in stalled:
                s.sendall(hello[: len(hello) // 2])
        time.sleep(0.5)  # the broker has accepted them all
        took = [_real_client_seconds(secure) for _ in range(3)]
        assert max(took) < CONNECT_S_MAX, took
    finally:
        for s in stalled:
            s.close()
