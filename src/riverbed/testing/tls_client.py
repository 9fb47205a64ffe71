"""A bare TLS client for a broker's TLS listener (tests of what a handshake admits):
`tls_connection` trusts a test CA and checks the host name, optionally presenting a
client certificate; `api_versions_round_trip` proves the connection is served."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, encode_request
from riverbed.protocol.messages import ApiVersionsRequest


def tls_connection(
    ca: Path,
    port: int,
    timeout_s: float,
    certfile: Path | None = None,
    keyfile: Path | None = None,
) -> ssl.SSLSocket:
    """A TLS connection to ``127.0.0.1:port`` as ``localhost``, trusting ``ca``; presenting
    ``certfile`` (its key in ``keyfile``, or in ``certfile`` too) when given."""
    context = ssl.create_default_context(cafile=str(ca))
    if certfile is not None:
        context.load_cert_chain(str(certfile), None if keyfile is None else str(keyfile))
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    return context.wrap_socket(raw, server_hostname="localhost")


def api_versions_round_trip(conn: ssl.SSLSocket, correlation_id: int) -> int:
    """An ApiVersions v0 request on ``conn``: the response's correlation id (AssertionError
    when the broker closes the connection instead)."""
    header = RequestHeader(int(ApiKey.API_VERSIONS), 0, correlation_id, "tls-client")
    conn.sendall(encode_request(header, ApiVersionsRequest()))
    size = struct.unpack(">i", _read(conn, 4))[0]
    return int(struct.unpack(">i", _read(conn, size)[:4])[0])


def _read(conn: ssl.SSLSocket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out
