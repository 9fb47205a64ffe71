"""OAUTHBEARER with signed JWTs (issue 20): a listener configured with Kafka's
OAuthBearerValidatorCallbackHandler checks RS256 tokens against a JWKS file; confluent-
kafka logs in with a token from its ``oauth_cb``, an unsigned (alg none) token is
refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from riverbed.testing.jwt import JwtIssuer
from riverbed.testing.secure import SecureBroker, start_secure_broker

HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


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
    )
    try:
        yield broker, issuer
    finally:
        broker.proc.close()


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
