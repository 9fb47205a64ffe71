"""OAUTHBEARER with signed JWTs (issue 20): a listener configured with Kafka's
OAuthBearerValidatorCallbackHandler checks RS256 tokens against a JWKS file or an https
endpoint (trusted through a CA of the JAAS options, refreshed); confluent-kafka logs in
with a token from its ``oauth_cb``, an unsigned (alg none) token is refused.

At the edges (Kafka's jose4j consumer: ``exp`` and ``iat`` required, ``nbf`` checked, each
with ``sasl.oauthbearer.clock.skew.seconds``, 30): each refused token is answered
SASL_AUTHENTICATION_FAILED with a message naming why, and an accepted one's session ends
with its ``exp``."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.protocol.errors import ErrorCode
from riverbed.security.oauthbearer import client_message
from riverbed.security.oauthbearer_urls import ALLOWED_URLS_ENV, ALLOWED_URLS_PROPERTY
from riverbed.testing.certs import make_pki
from riverbed.testing.cluster import BrokerStartError, scaled_s
from riverbed.testing.https_server import Document, serve_https
from riverbed.testing.jwt import JwtIssuer
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import Wire

HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
PREFIX = "listener.name.sasl_plaintext."
#: the https JWKS broker's sasl.oauthbearer.jwks.endpoint.refresh.ms (Kafka's default)
REFRESH_MS = 3_600_000
SKEW_S = 30


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureBroker, JwtIssuer]]:
    issuer = JwtIssuer()
    base = tmp_path_factory.mktemp("oauth")
    jwks = base / "jwks.json"
    jwks.write_text(issuer.jwks())
    broker = start_secure_broker(
        base / "pki",
        {"admin": "admin-secret"},
        {"scram256": ("SCRAM-SHA-256", "pw")},
        {
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": HANDLER,
            "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
            "sasl.oauthbearer.expected.audience": "riverbed",
        },
        {ALLOWED_URLS_ENV: f"file://{jwks}"},
    )
    try:
        yield broker, issuer
    finally:
        broker.proc.close()


def test_a_jwks_url_not_allowed_stops_the_start(tmp_path: Path) -> None:
    """Kafka 4's default: no OAUTHBEARER URL is read unless the process property
    org.apache.kafka.sasl.oauthbearer.allowed.urls lists it; the node says which URL and
    which property instead of starting."""
    jwks = tmp_path / "jwks.json"
    jwks.write_text(JwtIssuer().jwks())
    with pytest.raises(BrokerStartError) as err:
        broker = start_secure_broker(
            tmp_path / "pki",
            {"admin": "admin-secret"},
            {},
            {
                f"{PREFIX}oauthbearer.sasl.server.callback.handler.class": HANDLER,
                "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
            },
            {ALLOWED_URLS_ENV: "https://other.example/jwks"},
        )
        broker.proc.close()
    message = str(err.value)
    assert f"Invalid value file://{jwks} for configuration sasl.oauthbearer.jwks" in message
    assert ALLOWED_URLS_PROPERTY in message, message


def _conf(broker: SecureBroker, token_of: object) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": token_of,
    }


def test_signed_token_is_accepted(signed: tuple[SecureBroker, JwtIssuer]) -> None:
    from confluent_kafka import Producer

    broker, issuer = signed

    def token(_config: str) -> tuple[str, float]:
        exp = time.time() + 300
        claims = {"sub": "svc", "exp": int(exp), "iat": int(time.time()), "aud": "riverbed"}
        return issuer.token(claims), exp

    producer = Producer(_conf(broker, token))
    producer.produce("oauth-signed", b"signed")
    assert producer.flush(30) == 0


def test_unsigned_or_wrong_audience_is_refused(signed: tuple[SecureBroker, JwtIssuer]) -> None:
    from confluent_kafka import KafkaError, Producer

    broker, issuer = signed
    from riverbed.security.oauthbearer import unsecured_token

    cases = {
        "unsigned": lambda _c: (unsecured_token("svc", time.time() + 300), time.time() + 300),
        "audience": lambda _c: (
            issuer.token({"sub": "svc", "exp": int(time.time()) + 300, "aud": "other"}),
            time.time() + 300,
        ),
    }
    for name, token_of in cases.items():
        errors: list[KafkaError] = []
        producer = Producer(_conf(broker, token_of) | {"error_cb": errors.append})
        for _ in range(40):
            if errors:
                break
            producer.poll(0.25)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, (name, errors)


@pytest.fixture(scope="module")
def https_idp(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SecureBroker, Document, JwtIssuer]]:
    """A broker whose JWKS comes from an https endpoint (a local aiohttp server with a
    certificate of its own CA), trusted through the OAUTHBEARER JAAS options."""
    issuer = JwtIssuer()
    base = tmp_path_factory.mktemp("oauth-https")
    idp = make_pki(base / "idp")
    document = Document(issuer.jwks())
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'ssl.truststore.type="PEM" ssl.truststore.location="{idp.ca}";'
    )
    with serve_https(idp, document) as url:
        broker = start_secure_broker(
            base / "pki",
            {"admin": "admin-secret"},
            {},
            {
                f"{PREFIX}oauthbearer.sasl.server.callback.handler.class": HANDLER,
                f"{PREFIX}oauthbearer.sasl.jaas.config": jaas,
                "sasl.oauthbearer.jwks.endpoint.url": url,
                "sasl.oauthbearer.jwks.endpoint.refresh.ms": str(REFRESH_MS),
                "sasl.oauthbearer.expected.audience": "riverbed",
            },
            {ALLOWED_URLS_ENV: url},
        )
        try:
            yield broker, document, issuer
        finally:
            broker.proc.close()


def _logs_in(broker: SecureBroker, issuer: JwtIssuer) -> bool:
    """A producer with a token of ``issuer``: True when its record is delivered, False
    when the broker refuses the login."""
    from confluent_kafka import KafkaError, Producer

    def token(_config: str) -> tuple[str, float]:
        exp = time.time() + 300
        claims = {"sub": "svc", "exp": int(exp), "iat": int(time.time()), "aud": "riverbed"}
        return issuer.token(claims), exp

    errors: list[KafkaError] = []
    producer = Producer(_conf(broker, token) | {"error_cb": errors.append})
    delivered: list[bool] = []
    producer.produce("oauth-https", b"v", on_delivery=lambda err, _m: delivered.append(not err))
    deadline = time.monotonic() + scaled_s(30)
    while not delivered and not errors:
        assert time.monotonic() < deadline, "neither delivered nor refused"
        producer.poll(0.1)
    producer.purge()
    return bool(delivered) and delivered[0]


def test_a_jwks_from_an_https_endpoint_and_its_rotation(
    https_idp: tuple[SecureBroker, Document, JwtIssuer],
) -> None:
    broker, document, issuer = https_idp
    assert _logs_in(broker, issuer)
    # the identity provider rotates to a key of a new kid: the broker refuses its first
    # token (an unknown kid) and refreshes at once, long before its hourly refresh
    rotated = JwtIssuer(rsa_kid="rsa-2")
    fetched = document.requests
    document.body = rotated.jwks()
    assert not _logs_in(broker, rotated)
    deadline = time.monotonic() + scaled_s(20)
    while not _logs_in(broker, rotated):
        assert time.monotonic() < deadline, "the rotated key was never fetched"
    assert document.requests > fetched
    assert not _logs_in(broker, issuer)  # the old key is gone with its JWKS


def _login(broker: SecureBroker, token: str) -> tuple[int, str | None, int]:
    """(error code, error message, session lifetime) of an OAUTHBEARER login; a refused
    token gets Kafka's error challenge, and the client's %x01 ends the exchange."""
    wire = Wire(broker.ports["SASL_PLAINTEXT"])
    assert wire.handshake("OAUTHBEARER").error_code == 0
    reply = wire.authenticate(client_message(token))
    if reply.error_code == 0 and reply.auth_bytes:
        reply = wire.authenticate(b"\x01")
    return reply.error_code, reply.error_message, reply.session_lifetime_ms


class FromNow(int):
    """A time claim given as seconds from the moment the token is made: parameters are
    built when the tests are collected, maybe many minutes before this test runs."""


def _claims(**changes: object) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {"sub": "svc", "exp": now + 300, "iat": now, "aud": "riverbed"}
    claims.update({k: now + v if isinstance(v, FromNow) else v for k, v in changes.items()})
    return {k: v for k, v in claims.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"nbf": FromNow(10 * SKEW_S)}, "the token is not valid yet (nbf)"),
        ({"iat": None}, "no issued-at time (iat) claim"),
        ({"iat": FromNow(10 * SKEW_S)}, "the token was issued in the future (iat)"),
        ({"aud": "someone-else"}, "the token's audience (aud) is not expected"),
        ({"exp": FromNow(-10 * SKEW_S)}, "the token has expired"),
    ],
)
def test_a_refused_token_names_its_reason(
    signed: tuple[SecureBroker, JwtIssuer], changes: dict[str, object], reason: str
) -> None:
    broker, issuer = signed
    code, message, _ = _login(broker, issuer.token(_claims(**changes)))
    assert (code, message) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        f"Authentication failed: {reason}",
    )


def test_an_algorithm_not_allowed_is_refused(signed: tuple[SecureBroker, JwtIssuer]) -> None:
    broker, issuer = signed
    token = issuer.token(_claims())
    _header, claims, signature = token.split(".")
    hs = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "kid": "rsa-1"}).encode())
    forged = f"{hs.rstrip(b'=').decode()}.{claims}.{signature}"
    code, message, _ = _login(broker, forged)
    assert (code, message) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "Authentication failed: JWT algorithm 'HS256' is not accepted",
    )


def test_nbf_within_the_clock_skew_and_a_session_that_ends_with_exp(
    signed: tuple[SecureBroker, JwtIssuer],
) -> None:
    broker, issuer = signed
    now = int(time.time())
    token = issuer.token(_claims(nbf=now + SKEW_S // 2, exp=now + 60))
    code, message, lifetime = _login(broker, token)
    assert (code, message) == (0, None)
    assert 55_000 < lifetime <= 60_000
