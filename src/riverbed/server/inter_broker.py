"""riverbed's own outgoing connections (replica fetchers, Raft, forwarding, registration):
TCP, then TLS and a SASL login when the target listener demands them.

The SASL login is Kafka's client side: SaslHandshake v1 naming the mechanism, then
SaslAuthenticate v2 exchanges (PLAIN: one message; SCRAM: client-first, client-final and
the server signature checked). Any refusal is a ConnectionError: every caller already
treats a failed connection as retriable (with back-off).
"""

from __future__ import annotations

import asyncio
import secrets
import struct

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    Message,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from riverbed.security.errors import SaslFailure
from riverbed.security.plain import client_message
from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.server.listener_security import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.tls import TLS_HANDSHAKE_TIMEOUT_MS

_SIZE = struct.Struct(">i")
#: Largest answer accepted during the SASL login (a SCRAM server-first is ~100 bytes).
SASL_RESPONSE_BYTES_MAX = 65_536


async def connect(
    host: str,
    port: int,
    security: ClientSecurity = PLAINTEXT_CLIENT,
    client_id: str = "riverbed",
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An authenticated connection to ``host:port`` (ConnectionError/OSError if refused)."""
    if security.ssl_context is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await asyncio.open_connection(
            host,
            port,
            ssl=security.ssl_context,
            server_hostname=host,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_MS / 1000,
        )
    if security.mechanism:
        try:
            await _login(reader, writer, security, client_id)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    header: RequestHeader,
    body: Message,
) -> Message:
    writer.write(encode_request(header, body))
    await writer.drain()
    try:
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 4 <= size <= SASL_RESPONSE_BYTES_MAX:
            raise ConnectionError(f"SASL response frame of {size} bytes")
        return decode_response(header, await reader.readexactly(size))
    except asyncio.IncompleteReadError:
        raise ConnectionError("connection closed during the SASL login") from None


async def _authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str, data: bytes
) -> bytes:
    header = RequestHeader(int(ApiKey.SASL_AUTHENTICATE), 2, 2, client_id)
    reply = await _exchange(reader, writer, header, SaslAuthenticateRequest(auth_bytes=data))
    assert isinstance(reply, SaslAuthenticateResponse)
    if reply.error_code:
        raise ConnectionError(f"SASL authentication failed: {reply.error_message}")
    return reply.auth_bytes


async def _login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    security: ClientSecurity,
    client_id: str,
) -> None:
    header = RequestHeader(int(ApiKey.SASL_HANDSHAKE), 1, 1, client_id)
    reply = await _exchange(
        reader, writer, header, SaslHandshakeRequest(mechanism=security.mechanism)
    )
    assert isinstance(reply, SaslHandshakeResponse)
    if reply.error_code:
        raise ConnectionError(
            f"SASL mechanism {security.mechanism} refused (server enables {reply.mechanisms})"
        )
    if security.mechanism == "PLAIN":
        await _authenticate(
            reader, writer, client_id, client_message(security.username, security.password)
        )
        return
    mechanism = ScramMechanism.from_name(security.mechanism)
    assert mechanism is not None
    client = ScramClient(mechanism, security.username, security.password, secrets.token_urlsafe(18))
    try:
        server_first = await _authenticate(reader, writer, client_id, client.first_message())
        final = client.final_message(server_first)
        client.verify_server_final(await _authenticate(reader, writer, client_id, final))
    except SaslFailure as exc:
        raise ConnectionError(f"SCRAM login failed: {exc}") from None
