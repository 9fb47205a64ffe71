"""riverbed's own outgoing connections (replica fetchers, Raft, forwarding, registration):
TCP, then TLS and a SASL login when the target listener demands them.

The SASL login is Kafka's client side: SaslHandshake v1 naming the mechanism, then
SaslAuthenticate v2 exchanges (PLAIN: one message; SCRAM: client-first, client-final and
the server signature checked), `riverbed.security.sasl_client`. Any refusal is a ConnectionError: every caller already
treats a failed connection as retriable (with back-off).

KIP-368: when the server tells a session lifetime (``connections.max.reauth.ms``), the
server closes the connection at its first request after the session ends. Kafka's
clients re-authenticate in band at 85-95% of the lifetime; riverbed's connections, which
pipeline requests (Raft) or hold one at a time (replica fetchers), log in again on a new
connection instead: `session_ending` tells a caller, before a request, that it is time.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import struct
import weakref

from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import Message
from riverbed.security import sasl_client
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.tls import TLS_HANDSHAKE_TIMEOUT_MS

_SIZE = struct.Struct(">i")
#: Kafka's client re-authenticates at a random point of this part of the session lifetime
#: (SaslClientAuthenticator: 85-95%), so a fleet's renewals do not come at once.
RENEW_AT_FRACTION = (0.85, 0.95)
#: writer -> the event loop's time its session should be renewed by
_RENEW_BY: weakref.WeakKeyDictionary[asyncio.StreamWriter, float] = weakref.WeakKeyDictionary()
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
            lifetime_ms = await _login(reader, writer, security, client_id)
        except BaseException:
            writer.close()
            raise
        if lifetime_ms > 0:
            renew_in_s = lifetime_ms / 1000 * random.uniform(*RENEW_AT_FRACTION)
            _RENEW_BY[writer] = asyncio.get_running_loop().time() + renew_in_s
    return reader, writer


def session_ending(writer: asyncio.StreamWriter) -> bool:
    """Whether the SASL session of the connection ``writer`` belongs to should be renewed
    now (a request sent later may find the server closing the connection)."""
    renew_by = _RENEW_BY.get(writer)
    return renew_by is not None and asyncio.get_running_loop().time() >= renew_by


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


async def _login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    security: ClientSecurity,
    client_id: str,
) -> int:
    """Log in; the session lifetime the server told (ms, 0: no end)."""
    steps = sasl_client.login(
        security.mechanism, security.username, security.password, secrets.token_urlsafe(18)
    )
    try:
        api_key, version, body = next(steps)
        for correlation_id in itertools.count(1):
            header = RequestHeader(api_key, version, correlation_id, client_id)
            reply = await _exchange(reader, writer, header, body)
            api_key, version, body = steps.send(reply)
    except StopIteration as done:
        return int(done.value or 0)
    except sasl_client.SaslLoginError as exc:
        raise ConnectionError(str(exc)) from None
    raise AssertionError("unreachable")  # itertools.count() never ends
