"""Kafka's SASL server state machine (SaslServerAuthenticator), sans-I/O.

Input: each frame a client sends before it is authenticated (the bytes after the int32
size). Output: a `Step` telling the shell what to write, whether to hand a request to the
broker (ApiVersions), and whether authentication is done or the connection must close.

States and Kafka's rules:

- ``handshake``: ApiVersions (once at a supported version; answered by the broker, so it lists the listener's
  APIs) or SaslHandshake. SaslHandshake names a mechanism: enabled -> NONE with the enabled
  list; v0 goes on with raw token frames (no Kafka header), v1 with SaslAuthenticate;
  not enabled -> UNSUPPORTED_SASL_MECHANISM with the enabled list, then close. Any other
  request closes the connection ("Unexpected Kafka request of type X during SASL
  handshake"): nothing but these three APIs is served before authentication.
- ``authenticate`` (v1): SaslAuthenticate carries one mechanism message; its answer goes
  back in ``auth_bytes``. A failure answers SASL_AUTHENTICATION_FAILED with a message and
  closes after ``connection.failed.authentication.delay.ms`` (`Step.delay_close`). Any
  other request is answered with its error response (ILLEGAL_SASL_STATE) and closes.
- ``raw`` (v0): each frame is a mechanism message, each answer a raw frame; a failure
  closes without an answer (v0 has no error field).
- done: `Step.principal` is set; the connection serves requests from now on.

The mechanism objects are made by a factory the shell passes (it knows the credentials and
draws the SCRAM server nonce).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from riverbed.protocol.api_versions import ApiKey, is_supported
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.headers import RequestHeader, decode_request, encode_response
from riverbed.protocol.messages import (
    Message,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from riverbed.security.errors import SaslAuthenticationError, SaslFailure
from riverbed.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")


class MechanismServer(Protocol):
    """One mechanism exchange: messages in, messages out (PlainServer, ScramServer)."""

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...

    def evaluate(self, response: bytes) -> bytes: ...


MechanismFactory = Callable[[str], MechanismServer]


@dataclass(frozen=True, slots=True)
class Step:
    """What the shell does with one frame, in this order: answer ``delegate`` with the
    broker's handler (ApiVersions), or write ``send`` (a whole frame, size included), or
    answer ``reject`` with its error response (ILLEGAL_SASL_STATE);
    then ``principal`` set: authenticated; ``close`` set: close the connection (after the
    failed-authentication delay when ``delay_close``; ``send`` goes out after the delay,
    as Kafka sends the failure response when the delayed close happens)."""

    send: bytes | None = None
    reject: tuple[RequestHeader, Message] | None = None
    delegate: tuple[RequestHeader, Message] | None = None
    principal: KafkaPrincipal | None = None
    close: str | None = None
    delay_close: bool = False


def generic_failure(mechanism: str) -> str:
    """Kafka's message for a failure whose reason the client must not learn."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class SaslServerAuthenticator:
    def __init__(
        self,
        enabled_mechanisms: Sequence[str],
        factory: MechanismFactory,
        session_lifetime_ms: int = 0,
    ) -> None:
        """``session_lifetime_ms``: ``connections.max.reauth.ms`` (KIP-368), told to the
        client in SaslAuthenticate v1+ (0: sessions do not expire)."""
        self.enabled = list(enabled_mechanisms)
        self.session_lifetime_ms = session_lifetime_ms
        self._factory = factory
        self.state = "handshake"
        self._api_versions_seen = False
        self._mechanism: MechanismServer | None = None
        self.mechanism_name = ""

    def on_frame(self, frame: bytes) -> Step:
        if self.state == "raw":
            return self._raw_token(frame)
        try:
            header, body = decode_request(frame)
        except ProtocolError as exc:
            self.state = "failed"
            return Step(close=f"malformed request during SASL {self.state}: {exc}")
        if self.state == "handshake":
            return self._handshake(header, body)
        if self.state == "authenticate":
            return self._authenticate(header, body)
        self.state = "failed"
        return Step(close=f"request in SASL state {self.state}")

    def _handshake(self, header: RequestHeader, body: Message) -> Step:
        if header.api_key == ApiKey.API_VERSIONS and not self._api_versions_seen:
            # an unsupported version is answered (UNSUPPORTED_VERSION, at v0) and the
            # client may ask again at a version it then knows we take, as in Kafka
            self._api_versions_seen = is_supported(ApiKey.API_VERSIONS, header.api_version)
            return Step(delegate=(header, body))
        if not isinstance(body, SaslHandshakeRequest):
            self.state = "failed"
            return Step(
                close=f"Unexpected Kafka request of type {_api_name(header.api_key)} "
                "during SASL handshake"
            )
        mechanism = body.mechanism
        if mechanism not in self.enabled:
            self.state = "failed"
            reply = SaslHandshakeResponse(
                error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=self.enabled
            )
            return Step(
                send=encode_response(header, reply),
                close=f"unsupported SASL mechanism {mechanism!r} (enabled: {self.enabled})",
            )
        self._mechanism = self._factory(mechanism)
        self.mechanism_name = mechanism
        self.state = "raw" if header.api_version == 0 else "authenticate"
        reply = SaslHandshakeResponse(error_code=0, mechanisms=self.enabled)
        return Step(send=encode_response(header, reply))

    def _authenticate(self, header: RequestHeader, body: Message) -> Step:
        if not isinstance(body, SaslAuthenticateRequest):
            self.state = "failed"
            return Step(
                reject=(header, body),
                close=f"Unexpected Kafka request of type {_api_name(header.api_key)} during "
                "SASL authentication",
            )
        assert self._mechanism is not None
        try:
            challenge = self._mechanism.evaluate(body.auth_bytes)
        except (SaslAuthenticationError, SaslFailure) as exc:
            self.state = "failed"
            message = (
                str(exc)
                if isinstance(exc, SaslAuthenticationError)
                else generic_failure(self.mechanism_name)
            )
            reply = SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED), error_message=message
            )
            return Step(
                send=encode_response(header, reply),
                close=f"SASL/{self.mechanism_name} authentication failed: {exc}",
                delay_close=True,
            )
        principal = self._done()
        lifetime = self.session_lifetime_ms if principal is not None else 0
        reply = SaslAuthenticateResponse(
            error_code=0, auth_bytes=challenge, session_lifetime_ms=lifetime
        )
        return Step(send=encode_response(header, reply), principal=principal)

    def _raw_token(self, frame: bytes) -> Step:
        assert self._mechanism is not None
        try:
            challenge = self._mechanism.evaluate(frame)
        except (SaslAuthenticationError, SaslFailure) as exc:
            self.state = "failed"
            return Step(
                close=f"SASL/{self.mechanism_name} authentication failed: {exc}",
                delay_close=True,
            )
        principal = self._done()
        # an empty answer is a frame too (Kafka sends PLAIN's empty challenge): the v0
        # client waits for it
        return Step(send=_SIZE.pack(len(challenge)) + challenge, principal=principal)

    def _done(self) -> KafkaPrincipal | None:
        mechanism = self._mechanism
        if mechanism is None or not mechanism.complete:
            return None
        self.state = "complete"
        return KafkaPrincipal.user(mechanism.authorization_id)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
