"""Kafka's SASL server state machine (riverbed.security.sasl_server), frame by frame."""

from __future__ import annotations

import struct

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from riverbed.security.plain import PlainServer, client_message
from riverbed.security.principal import KafkaPrincipal
from riverbed.security.sasl_server import MechanismServer, SaslServerAuthenticator


def _auth() -> SaslServerAuthenticator:
    def factory(name: str) -> MechanismServer:
        assert name == "PLAIN"
        return PlainServer({"alice": "pw"})

    return SaslServerAuthenticator(["PLAIN", "SCRAM-SHA-256"], factory, now_ms=lambda: 0)


def _frame(api: ApiKey, version: int, body: object, corr: int = 1) -> tuple[RequestHeader, bytes]:
    header = RequestHeader(int(api), version, corr, "c")
    return header, encode_request(header, body)[4:]  # type: ignore[arg-type]


def test_v1_plain_success() -> None:
    auth = _auth()
    h, f = _frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    assert auth.on_frame(f).delegate is not None
    h, f = _frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    step = auth.on_frame(f)
    reply = decode_response(h, step.send[4:])  # type: ignore[index]
    assert isinstance(reply, SaslHandshakeResponse) and reply.error_code == 0
    assert reply.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
    body = SaslAuthenticateRequest(auth_bytes=client_message("alice", "pw"))
    h, f = _frame(ApiKey.SASL_AUTHENTICATE, 2, body)
    step = auth.on_frame(f)
    assert step.principal == KafkaPrincipal.user("alice") and step.close is None


def test_wrong_password_answers_then_closes_after_delay() -> None:
    auth = _auth()
    _, f = _frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    auth.on_frame(f)
    body = SaslAuthenticateRequest(auth_bytes=client_message("alice", "nope"))
    h, f = _frame(ApiKey.SASL_AUTHENTICATE, 1, body)
    step = auth.on_frame(f)
    reply = decode_response(h, step.send[4:])  # type: ignore[index]
    assert isinstance(reply, SaslAuthenticateResponse)
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message == "Authentication failed: Invalid username or password"
    assert step.close and step.delay_close and step.principal is None


def test_unknown_mechanism() -> None:
    auth = _auth()
    h, f = _frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
    step = auth.on_frame(f)
    reply = decode_response(h, step.send[4:])  # type: ignore[index]
    assert isinstance(reply, SaslHandshakeResponse)
    assert reply.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert step.close and "GSSAPI" in step.close


def test_requests_before_authentication_close() -> None:
    auth = _auth()
    _, f = _frame(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    step = auth.on_frame(f)
    assert step.close and "METADATA" in step.close and step.send is None
    # a second ApiVersions, and SaslAuthenticate before the handshake
    auth = _auth()
    _, f = _frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    auth.on_frame(f)
    assert auth.on_frame(f).close
    auth = _auth()
    _, f = _frame(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"x"))
    assert auth.on_frame(f).close
    # garbage
    assert _auth().on_frame(b"\x00\x01").close
    # Metadata during authentication: ILLEGAL_SASL_STATE answer, then close
    auth = _auth()
    _, f = _frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    auth.on_frame(f)
    _, f = _frame(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    step = auth.on_frame(f)
    assert step.reject is not None and step.close


def test_v0_raw_tokens() -> None:
    auth = _auth()
    _, f = _frame(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
    assert auth.on_frame(f).send
    step = auth.on_frame(client_message("alice", "pw"))
    assert step.principal == KafkaPrincipal.user("alice")
    assert step.send == struct.pack(">i", 0)  # PLAIN's empty answer is still a frame
    auth = _auth()
    auth.on_frame(f)
    step = auth.on_frame(client_message("alice", "bad"))
    assert step.close and step.send is None and step.delay_close


def test_session_lifetime_is_told_on_success_only() -> None:
    def factory(name: str) -> MechanismServer:
        return PlainServer({"alice": "pw"})

    for password, lifetime in (("pw", 5000), ("bad", 0)):
        auth = SaslServerAuthenticator(
            ["PLAIN"], factory, session_lifetime_ms=5000, now_ms=lambda: 0
        )
        _, f = _frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        auth.on_frame(f)
        body = SaslAuthenticateRequest(auth_bytes=client_message("alice", password))
        h, f = _frame(ApiKey.SASL_AUTHENTICATE, 2, body)
        reply = decode_response(h, auth.on_frame(f).send[4:])  # type: ignore[index]
        assert isinstance(reply, SaslAuthenticateResponse)
        assert reply.session_lifetime_ms == lifetime
