"""OAUTHBEARER with Kafka's unsecured-JWT validation (riverbed.security.oauthbearer)."""

from __future__ import annotations

import json

import pytest

from riverbed.security.errors import SaslAuthenticationError
from riverbed.security.oauthbearer import (
    OAuthBearerUnsecuredServer,
    client_message,
    unsecured_token,
)

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS / 1000


def _server(**options: str) -> OAuthBearerUnsecuredServer:
    return OAuthBearerUnsecuredServer(options, NOW_MS)


def test_valid_token_authenticates_its_subject() -> None:
    server = _server()
    assert server.evaluate(client_message(unsecured_token("alice", NOW_S + 60, NOW_S))) == b""
    assert server.complete and server.authorization_id == "alice"
    server = _server(
        unsecuredValidatorPrincipalClaimName="user", unsecuredValidatorRequiredScope="read"
    )
    token = unsecured_token("x", NOW_S + 60, user="bob", scope="read write")
    server.evaluate(client_message(token, authzid="bob"))
    assert server.authorization_id == "bob"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (unsecured_token("alice", NOW_S - 1), "expired"),
        (unsecured_token("alice", NOW_S + 60, NOW_S + 30), "future"),
        (unsecured_token("", NOW_S + 60), "principal"),
        ("a.b.c", "unsecured"),
        ("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIiwiZXhwIjo5OTk5OTk5OTk5fQ.", "alg"),
    ],
)
def test_refused_tokens_get_the_error_challenge_then_fail(token: str, reason: str) -> None:
    server = _server()
    challenge = server.evaluate(client_message(token))
    assert json.loads(challenge)["status"] == "invalid_token"
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match=reason):
        server.evaluate(b"\x01")


def test_required_scope_and_authzid_and_malformed() -> None:
    server = _server(unsecuredValidatorRequiredScope="admin")
    assert b"invalid_token" in server.evaluate(
        client_message(unsecured_token("a", NOW_S + 60, scope="read"))
    )
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        _server().evaluate(client_message(unsecured_token("alice", NOW_S + 60), authzid="bob"))
    for bad in (b"", b"n,,auth=Bearer x", b"n,,\x01auth=Basic abc\x01\x01", b"\xff"):
        with pytest.raises(SaslAuthenticationError):
            _server().evaluate(bad)
