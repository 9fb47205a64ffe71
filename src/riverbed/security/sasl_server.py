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

KIP-368 (Kafka's ReauthInfo): the session lifetime is ``connections.max.reauth.ms`` of the
mechanism, the time left of the credential when the mechanism has one (OAUTHBEARER's
token ``exp``), or the smaller of both; `Step.session_lifetime_ms` is None when the session
never ends. A re-authentication (``previous`` principal and mechanism) must keep both:
another principal fails ("Cannot change principals during re-authentication ..."),
another mechanism is answered at the handshake and closes at the next frame, unanswered.

The mechanism objects are made by a factory the shell passes (it knows the credentials and
draws the SCRAM server nonce).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping, Sequence
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

    @property
    def credential_expires_ms(self) -> int | None:
        """When the credential expires (epoch ms: OAUTHBEARER's token), else None."""

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
    #: with ``principal``: how long the session lasts (ms), None when it never ends
    session_lifetime_ms: int | None = None


def generic_failure(mechanism: str, reauthenticating: bool = False) -> str:
    """Kafka's message for a failure whose reason the client must not learn."""
    during = "re-authentication" if reauthenticating else "authentication"
    return (
        f"Authentication failed during {during} due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class SaslServerAuthenticator:
    def __init__(
        self,
        enabled_mechanisms: Sequence[str],
        factory: MechanismFactory,
        session_lifetime_ms: int = 0,
        *,
        reauth_ms: Mapping[str, int] | None = None,
        previous: tuple[KafkaPrincipal, str] | None = None,
        now_ms: Callable[[], int],
    ) -> None:
        """``session_lifetime_ms``: ``connections.max.reauth.ms`` (KIP-368), told to the
        client in SaslAuthenticate v1+ (0: sessions do not expire); ``reauth_ms``: its
        value per mechanism where it differs; ``previous``: the principal and mechanism
        of the session a re-authentication renews; ``now_ms``: the wall clock in ms (the
        shell's: a core reads no clock), for a credential's time left."""
        self.enabled = list(enabled_mechanisms)
        self.session_lifetime_ms = session_lifetime_ms
        self._reauth_ms = dict(reauth_ms or {})
        self.previous = previous
        self._now_ms = now_ms
        self._bad_mechanism = ""
        self._factory = factory
        self.state = "handshake"
        self._api_versions_seen = False
        self._mechanism: MechanismServer | None = None
        self.mechanism_name = ""

    def on_frame(self, frame: bytes) -> Step:
        if self.state == "bad_mechanism":
            self.state = "failed"
            return Step(close=self._bad_mechanism, delay_close=True)
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
        reply = SaslHandshakeResponse(error_code=0, mechanisms=self.enabled)
        if self.previous is not None and mechanism != self.previous[1]:
            # Kafka answers the handshake and fails at the next frame, unanswered
            self.state = "bad_mechanism"
            self._bad_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.previous[1]}'"
            )
            return Step(send=encode_response(header, reply))
        self._mechanism = self._factory(mechanism)
        self.mechanism_name = mechanism
        self.state = "raw" if header.api_version == 0 else "authenticate"
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
            principal = self._done()
        except (SaslAuthenticationError, SaslFailure) as exc:
            self.state = "failed"
            message = (
                str(exc)
                if isinstance(exc, SaslAuthenticationError)
                else generic_failure(self.mechanism_name, self.previous is not None)
            )
            reply = SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED), error_message=message
            )
            return Step(
                send=encode_response(header, reply),
                close=f"SASL/{self.mechanism_name} authentication failed: {exc}",
                delay_close=True,
            )
        lifetime = self._session_lifetime() if principal is not None else None
        reply = SaslAuthenticateResponse(
            error_code=0, auth_bytes=challenge, session_lifetime_ms=lifetime or 0
        )
        return Step(
            send=encode_response(header, reply), principal=principal, session_lifetime_ms=lifetime
        )

    def _raw_token(self, frame: bytes) -> Step:
        assert self._mechanism is not None
        try:
            challenge = self._mechanism.evaluate(frame)
            principal = self._done()
        except (SaslAuthenticationError, SaslFailure) as exc:
            self.state = "failed"
            return Step(
                close=f"SASL/{self.mechanism_name} authentication failed: {exc}",
                delay_close=True,
            )
        lifetime = self._session_lifetime() if principal is not None else None
        # an empty answer is a frame too (Kafka sends PLAIN's empty challenge): the v0
        # client waits for it
        return Step(
            send=_SIZE.pack(len(challenge)) + challenge,
            principal=principal,
            session_lifetime_ms=lifetime,
        )

    def _done(self) -> KafkaPrincipal | None:
        """The principal once the exchange is complete (SaslAuthenticationError when a
        re-authentication names another one)."""
        mechanism = self._mechanism
        if mechanism is None or not mechanism.complete:
            return None
        principal = KafkaPrincipal.user(mechanism.authorization_id)
        if self.previous is not None and principal != self.previous[0]:
            before = self.previous[0]
            raise SaslAuthenticationError(
                "Cannot change principals during re-authentication from "
                f"{before.type}.{before.name}: "
                f"{principal.type}.{principal.name}"
            )
        self.state = "complete"
        return principal

    def _session_lifetime(self) -> int | None:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: None = no end."""
        reauth = self._reauth_ms.get(self.mechanism_name, self.session_lifetime_ms)
        expires = self._mechanism.credential_expires_ms if self._mechanism else None
        if expires is None:
            return reauth if reauth > 0 else None
        left = max(0, expires - self._now_ms())
        return min(left, reauth) if reauth > 0 else left


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
