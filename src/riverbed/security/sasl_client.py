"""Kafka's client side of a SASL login, sans-I/O: the requests to send and the checks of
each answer, for riverbed's own connections (`riverbed.server.inter_broker`) and the
CLI's wire client (`riverbed.cli.wire`), which drive it over their own sockets.

SaslHandshake v1 naming the mechanism, then SaslAuthenticate v2 exchanges: PLAIN sends one
message; SCRAM (RFC 5802) client-first, client-final, and the server's signature checked.
`login` is a generator: it yields ``(api key, version, request)`` and is sent each
response; a refusal raises `SaslLoginError`; it returns the session lifetime the server
told (KIP-368, ms; 0: the session does not end).
"""

from __future__ import annotations

from collections.abc import Generator

from riverbed.protocol.api_versions import ApiKey
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

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 2

#: (api key, api version, request body)
LoginStep = tuple[int, int, Message]


class SaslLoginError(Exception):
    """The server refused the mechanism or the credentials, or failed the SCRAM proof."""


def _authenticate(data: bytes) -> Generator[LoginStep, Message, SaslAuthenticateResponse]:
    reply = yield (
        int(ApiKey.SASL_AUTHENTICATE),
        AUTHENTICATE_VERSION,
        SaslAuthenticateRequest(auth_bytes=data),
    )
    if not isinstance(reply, SaslAuthenticateResponse):
        raise SaslLoginError(f"unexpected answer {type(reply).__name__} to SaslAuthenticate")
    if reply.error_code:
        raise SaslLoginError(f"SASL authentication failed: {reply.error_message}")
    return reply


def login(
    mechanism: str, username: str, password: str, nonce: str
) -> Generator[LoginStep, Message, int]:
    """The login of ``username`` with ``mechanism`` (PLAIN, SCRAM-SHA-256/512); ``nonce``
    is SCRAM's client nonce (random, printable)."""
    reply = yield (
        int(ApiKey.SASL_HANDSHAKE),
        HANDSHAKE_VERSION,
        SaslHandshakeRequest(mechanism=mechanism),
    )
    if not isinstance(reply, SaslHandshakeResponse):
        raise SaslLoginError(f"unexpected answer {type(reply).__name__} to SaslHandshake")
    if reply.error_code:
        raise SaslLoginError(
            f"SASL mechanism {mechanism} refused (server enables {reply.mechanisms})"
        )
    if mechanism == "PLAIN":
        done = yield from _authenticate(client_message(username, password))
        return done.session_lifetime_ms
    scram = ScramMechanism.from_name(mechanism)
    if scram is None:
        raise SaslLoginError(f"riverbed cannot log in with SASL mechanism {mechanism}")
    client = ScramClient(scram, username, password, nonce)
    try:
        first = yield from _authenticate(client.first_message())
        final = yield from _authenticate(client.final_message(bytes(first.auth_bytes)))
        client.verify_server_final(bytes(final.auth_bytes))
    except SaslFailure as exc:
        raise SaslLoginError(f"SCRAM login failed: {exc}") from None
    return final.session_lifetime_ms
