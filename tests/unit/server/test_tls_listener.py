"""TLS listeners of the network layer: handshakes are bounded in time and number, the
principal comes from the client certificate, and a TLS connection never uses sendfile."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
import types
from pathlib import Path

import pytest

from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.server import _tlsread  # type: ignore[attr-defined]
from riverbed.server.config import EMBEDDED_DEFAULTS, ServerConfig
from riverbed.server.listener_security import listener_security
from riverbed.server.network import RequestContext, SocketServer
from riverbed.server.tls import HandshakeLimiter
from riverbed.testing.certs import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):
    return make_pki(tmp_path_factory.mktemp("pki"), {"alice": "eng", "mallory": "ops"})


def _security(pki, **extra: str):
    props = {
        **EMBEDDED_DEFAULTS,
        "listeners": "SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        # Kafka: the inter-broker listener is the one named after this (default PLAINTEXT)
        "security.inter.broker.protocol": "SSL",
        "listener.security.protocol.map": "SSL:SSL,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.server_p12),
        "ssl.keystore.password": "test-store-password",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(pki.ca_p12),
        "ssl.truststore.password": "test-store-password",
        **extra,
    }
    config = ServerConfig.from_props(props)
    return listener_security(config, "SSL", "SSL")


async def _serve(security, limiter: HandshakeLimiter | None = None):
    seen: list[RequestContext] = []

    async def handler(ctx, body):
        from riverbed.protocol.api_versions import SUPPORTED_VERSIONS
        from riverbed.server.broker.cluster_info import api_versions_response

        seen.append(ctx)
        return api_versions_response(ctx, SUPPORTED_VERSIONS)

    server = SocketServer(handler)
    if limiter is not None:
        server.handshakes = limiter
    _host, port = await server.listen("SSL", "127.0.0.1", 0, security=security)
    return server, port, seen


async def _api_versions(port: int, ctx: ssl.SSLContext) -> None:
    from riverbed.protocol.headers import RequestHeader, encode_request
    from riverbed.protocol.messages import ApiVersionsRequest

    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
    )
    writer.write(encode_request(RequestHeader(18, 0, 1, "t"), ApiVersionsRequest()))
    await writer.drain()
    size = int.from_bytes(await reader.readexactly(4), "big")
    await reader.readexactly(size)
    writer.close()


def _client_ctx(pki, name: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if name is not None:
        key, crt = pki.client(name)
        ctx.load_cert_chain(str(crt), str(key))
    return ctx


def test_principal_from_client_certificate_and_mapping_rules(pki) -> None:
    security = _security(
        pki,
        **{
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=eng,O=riverbed$/$1/U",
        },
    )

    async def run() -> list[RequestContext]:
        server, port, seen = await _serve(security)
        try:
            await _api_versions(port, _client_ctx(pki, "alice"))
            await _api_versions(port, _client_ctx(pki, None))
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError, ssl.SSLError)):
                await _api_versions(port, _client_ctx(pki, "mallory"))  # no rule applies
        finally:
            await server.stop()
        return seen

    seen = asyncio.run(run())
    assert [ctx.principal for ctx in seen] == [KafkaPrincipal("User", "ALICE"), ANONYMOUS]


def test_stalled_handshakes_are_closed_and_bounded(pki) -> None:
    security = _security(pki)

    async def run() -> tuple[float, bool]:
        server, port, _ = await _serve(security, HandshakeLimiter(concurrent_max=2, timeout_ms=300))
        try:
            stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
            for s in stalled:
                s.setblocking(False)
            started = time.monotonic()
            closed: set[int] = set()
            while len(closed) < len(stalled) and time.monotonic() - started < 5:
                await asyncio.sleep(0.05)
                for i, s in enumerate(stalled):
                    try:
                        if s.recv(1) == b"":
                            closed.add(i)
                    except BlockingIOError:
                        pass
                    except ConnectionError:
                        closed.add(i)
            elapsed = time.monotonic() - started
            await _api_versions(port, _client_ctx(pki, None))  # still serving
            for s in stalled:
                s.close()
            return elapsed, len(closed) == len(stalled)
        finally:
            await server.stop()

    elapsed, all_closed = asyncio.run(run())
    assert all_closed and elapsed < 2.0


def test_stop_does_not_wait_for_stalled_handshakes(pki, monkeypatch) -> None:
    """A connection still in its TLS handshake has nothing in flight: a stop cancels it
    rather than spend the shutdown grace on it (make test: 5 s per node stopped after
    a stalled-handshake test)."""
    from riverbed.server import socket_server

    monkeypatch.setattr(socket_server, "SHUTDOWN_GRACE_MS", 600_000)
    security = _security(pki)

    async def run() -> bytes:
        limiter = HandshakeLimiter(concurrent_max=2, timeout_ms=600_000)
        server, port, _ = await _serve(security, limiter)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        await asyncio.sleep(0.1)
        await asyncio.wait_for(server.stop(), 30)  # not the handshake's 600 s
        try:  # closed with our bytes unread: a reset, or an end of stream
            closed = await asyncio.wait_for(reader.read(), 5)
        except ConnectionResetError:
            closed = b""
        writer.close()
        return closed

    assert asyncio.run(run()) == b""


def test_tls_connection_never_uses_sendfile(pki, monkeypatch) -> None:
    """Connection.tls is set on a TLS listener (the fetch path checks it before sendfile)."""
    from riverbed.server import network

    security = _security(pki)
    made: list[network.Connection] = []
    original = network.Connection.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(network.Connection, "__init__", spy)

    async def run() -> None:
        server, port, _ = await _serve(security)
        try:
            await _api_versions(port, _client_ctx(pki, None))
        finally:
            await server.stop()

    asyncio.run(run())
    assert made and all(conn.tls for conn in made)


def test_bad_tls_config_names_the_key(pki, tmp_path: Path) -> None:
    from riverbed.server.config import ConfigError

    with pytest.raises(ConfigError, match=r"ssl\.keystore\.location"):
        _security(pki, **{"ssl.keystore.location": str(tmp_path / "missing.p12")})
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.type"):
        _security(pki, **{"ssl.keystore.type": "JKS"})
    with pytest.raises(ConfigError, match="truststore"):
        props = {
            **EMBEDDED_DEFAULTS,
            "listeners": "SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            # Kafka: the inter-broker listener is the one named after this (default PLAINTEXT)
            "security.inter.broker.protocol": "SSL",
            "controller.listener.names": "CONTROLLER",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.client.auth": "required",
        }
        listener_security(ServerConfig.from_props(props), "SSL", "SSL")


def test_listener_reads_records_through_the_c_reader(pki) -> None:
    """A listener's TLS connections decrypt through `_tlsread`'s C ``read`` and ``pending``
    (the event loop calls ``read`` until WantRead): every complete record in one read, into
    a buffer or not, the rest of a short read next, WantRead when empty."""
    context = _security(pki).ssl_context
    assert context is not None
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = context.wrap_bio(s_in, s_out, server_side=True)
    client = _client_ctx(pki, None).wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(4):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert isinstance(server.read, types.BuiltinMethodType)
    assert isinstance(server.read.__self__, _tlsread.Reader)
    assert server.pending.__self__ is server.read.__self__
    for record in (b"v" * 1046, b"h" * 32, b"w" * 1046):  # librdkafka: one record each
        client.write(record)
    s_in.write(c_out.read())
    buf = bytearray(1060)
    got = server.read(4096, memoryview(buf))
    assert bytes(buf[:got]) == b"v" * 1046 + b"h" * 14
    assert server.read(10) == b"h" * 10
    assert server.pending() == 8
    assert server.read(4096) == b"h" * 8 + b"w" * 1046
    with pytest.raises(ssl.SSLWantReadError):
        server.read(4096)


def test_a_client_hello_in_two_parts_still_handshakes(pki) -> None:
    """A connection takes a handshake slot once its whole ClientHello has arrived (peeked):
    one sent in two parts 300 ms apart is waited for, then served."""
    security = _security(pki)

    async def run() -> bytes:
        server, port, _ = await _serve(security)
        try:
            return await asyncio.to_thread(_split_hello_api_versions, pki, port)
        finally:
            await server.stop()

    assert len(asyncio.run(run())) > 0


def _split_hello_api_versions(pki, port: int) -> bytes:
    from riverbed.protocol.headers import RequestHeader, encode_request
    from riverbed.protocol.messages import ApiVersionsRequest

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _client_ctx(pki, None).wrap_bio(incoming, outgoing, server_hostname="localhost")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def pump() -> None:
        data = outgoing.read()
        if data:
            sock.sendall(data)

    with sock:
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        sock.sendall(hello[:20])
        time.sleep(0.3)
        sock.sendall(hello[20:])
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pump()
                incoming.write(sock.recv(65536))
        tls.write(encode_request(RequestHeader(18, 0, 1, "t"), ApiVersionsRequest()))
        pump()
        while True:
            try:
                return tls.read(65536)
            except ssl.SSLWantReadError:
                incoming.write(sock.recv(65536))
