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
connection instead: `NodeConnection.session_ending` tells a caller, before a request,
that it is time.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import struct
from dataclasses import dataclass

from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import Message
from riverbed.security import sasl_client
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.tls import TLS_HANDSHAKE_TIMEOUT_MS

_SIZE = struct.Struct(">i")
#: Kafka's client re-authenticates at a random point of this part of the session lifetime
#: (SaslClientAuthenticator: 85-95%), so a fleet's renewals do not come at once.
RENEW_AT_FRACTION = (0.85, 0.95)
#: Where a connection's renewal point is drawn from unless a caller gives its own.
_RENEWAL_RANDOM = random.Random()
#: Largest answer accepted during the SASL login (a SCRAM server-first is ~100 bytes).
SASL_RESPONSE_BYTES_MAX = 65_536


@dataclass(frozen=True, slots=True)
class NodeConnection:
    """An authenticated connection and when its SASL session should be renewed."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    #: the event loop's time the session should be renewed by (None: it does not end)
    renew_by: float | None = None

    def session_ending(self, now: float) -> bool:
        """Whether the session should be renewed at ``now`` (event-loop time): a request
        sent later may find the server closing the connection."""
        return self.renew_by is not None and now >= self.renew_by


def renewal_time(now: float, lifetime_ms: int, rng: random.Random) -> float | None:
    """When a session of ``lifetime_ms`` begun at ``now`` should be renewed: at a random
    point of `RENEW_AT_FRACTION` of it, as Kafka's client (None: no lifetime)."""
    if lifetime_ms <= 0:
        return None
    return now + lifetime_ms / 1000 * rng.uniform(*RENEW_AT_FRACTION)


async def connect(
    host: str,
    port: int,
    security: ClientSecurity = PLAINTEXT_CLIENT,
    client_id: str = "riverbed",
    rng: random.Random = _RENEWAL_RANDOM,
) -> NodeConnection:
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
    if not security.mechanism:
        return NodeConnection(reader, writer)
    try:
        lifetime_ms = await _login(reader, writer, security, client_id)
    except BaseException:
        writer.close()
        raise
    now = asyncio.get_running_loop().time()
    return NodeConnection(reader, writer, renewal_time(now, lifetime_ms, rng))


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
