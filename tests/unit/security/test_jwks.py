"""Signed JWTs for OAUTHBEARER (riverbed.security.jwks) against a JWKS."""

from __future__ import annotations

import pytest

from riverbed.security.jwks import JwksValidator, load_jwks
from riverbed.security.oauthbearer import (
    OAuthBearerUnsecuredServer,
    client_message,
    unsecured_token,
)
from riverbed.testing.jwt import JwtIssuer

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000


@pytest.fixture(scope="module")
def issuer() -> JwtIssuer:
    return JwtIssuer()


def _validator(issuer: JwtIssuer) -> JwksValidator:
    return JwksValidator(load_jwks(issuer.jwks()), audience=("riverbed",), issuer="https://idp")


def test_valid_rs256_and_es256(issuer: JwtIssuer) -> None:
    claims = {
        "sub": "svc",
        "exp": NOW_S + 60,
        "iat": NOW_S,
        "aud": ["riverbed"],
        "iss": "https://idp",
    }
    v = _validator(issuer)
    assert v.validate(issuer.token(claims), NOW_MS) == "svc"
    assert v.validate(issuer.token(claims, "ES256"), NOW_MS) == "svc"
    server = OAuthBearerUnsecuredServer({}, NOW_MS, v.validate)
    server.evaluate(client_message(issuer.token(claims)))
    assert server.complete and server.authorization_id == "svc"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"exp": NOW_S - 60}, "expired"),
        ({"aud": "other"}, "audience"),
        ({"iss": "https://evil"}, "issuer"),
        ({"sub": ""}, "principal"),
    ],
)
def test_bad_claims(issuer: JwtIssuer, change: dict[str, object], reason: str) -> None:
    claims = {"sub": "svc", "exp": NOW_S + 60, "aud": "riverbed", "iss": "https://idp"} | change
    with pytest.raises(ValueError, match=reason):
        _validator(issuer).validate(issuer.token(claims), NOW_MS)


def test_bad_signatures(issuer: JwtIssuer) -> None:
    claims = {"sub": "svc", "exp": NOW_S + 60, "aud": "riverbed", "iss": "https://idp"}
    v = _validator(issuer)
    other = JwtIssuer()
    with pytest.raises(ValueError, match="signature"):
        v.validate(other.token(claims), NOW_MS)  # signed by a key not in the JWKS
    token = issuer.token(claims)
    head, _body, sig = token.split(".")
    forged = issuer.token(claims | {"sub": "admin"}).split(".")[1]
    with pytest.raises(ValueError, match="signature"):
        v.validate(f"{head}.{forged}.{sig}", NOW_MS)
    with pytest.raises(ValueError, match="algorithm"):
        v.validate(unsecured_token("svc", NOW_S + 60), NOW_MS)  # alg none
    with pytest.raises(ValueError, match="no key"):
        v.validate(issuer.token(claims, kid="unknown"), NOW_MS)
    # the server answers a refused token with the error challenge
    server = OAuthBearerUnsecuredServer({}, NOW_MS, v.validate)
    assert b"invalid_token" in server.evaluate(client_message(unsecured_token("svc", NOW_S + 60)))
    assert not server.complete
