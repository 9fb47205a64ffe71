"""Kafka 4's allow-list of OAUTHBEARER URLs (``org.apache.kafka.sasl.oauthbearer.allowed.urls``,
CVE-2025-27817): a JWKS URL not listed stops the listener's start with an error naming the
URL and the property; listed (exactly, after trimming) it is read. Default: nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riverbed.cli.server import set_process_properties
from riverbed.security.oauthbearer_urls import (
    ALLOWED_URLS_ENV,
    ALLOWED_URLS_PROPERTY,
    allowed_urls,
    url_refusal,
)
from riverbed.server.config import EMBEDDED_DEFAULTS, ConfigError, ServerConfig
from riverbed.server.listener_security import SIGNED_JWT_HANDLER, listener_security
from riverbed.testing.jwt import JwtIssuer

JWKS_KEY = "sasl.oauthbearer.jwks.endpoint.url"


def test_the_environment_name_of_kafkas_property() -> None:
    assert ALLOWED_URLS_PROPERTY == "org.apache.kafka.sasl.oauthbearer.allowed.urls"
    assert ALLOWED_URLS_ENV == "ORG_APACHE_KAFKA_SASL_OAUTHBEARER_ALLOWED_URLS"


def test_nothing_is_allowed_by_default() -> None:
    assert url_refusal(JWKS_KEY, "https://idp.example/jwks", allowed_urls({})) is not None
    assert url_refusal(JWKS_KEY, "file:///etc/passwd", allowed_urls({})) is not None


def test_entries_are_split_at_commas_trimmed_and_matched_exactly() -> None:
    allowed = allowed_urls({ALLOWED_URLS_ENV: " https://a.example/jwks , file:///keys/jwks.json"})
    assert url_refusal(JWKS_KEY, "https://a.example/jwks", allowed) is None
    assert url_refusal(JWKS_KEY, " file:///keys/jwks.json ", allowed) is None
    # no prefix or host matching: the URL itself must be listed
    assert url_refusal(JWKS_KEY, "https://a.example/jwks2", allowed) is not None
    assert url_refusal(JWKS_KEY, "https://a.example/", allowed) is not None


def test_the_refusal_names_the_url_the_config_and_the_property() -> None:
    message = url_refusal(JWKS_KEY, "https://idp.example/jwks", allowed_urls({}))
    assert message is not None
    assert "https://idp.example/jwks" in message
    assert JWKS_KEY in message
    assert ALLOWED_URLS_PROPERTY in message and ALLOWED_URLS_ENV in message


def _oauth_listener(jwks_url: str):
    props = {
        **EMBEDDED_DEFAULTS,
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        # Kafka: the inter-broker listener is the one named after this (default PLAINTEXT)
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": (
            SIGNED_JWT_HANDLER
        ),
        JWKS_KEY: jwks_url,
    }
    return listener_security(ServerConfig.from_props(props), "SASL_PLAINTEXT", "SASL_PLAINTEXT")


def _jwks_url(tmp_path: Path) -> str:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(JwtIssuer().jwks())
    return f"file://{jwks}"


def test_a_listener_with_a_jwks_url_not_allowed_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _jwks_url(tmp_path)
    monkeypatch.setenv(ALLOWED_URLS_ENV, "")
    monkeypatch.delenv(ALLOWED_URLS_ENV)
    with pytest.raises(ConfigError, match=ALLOWED_URLS_PROPERTY.replace(".", r"\.")) as err:
        _oauth_listener(url)
    assert err.value.key == JWKS_KEY and url in str(err.value)
    monkeypatch.setenv(ALLOWED_URLS_ENV, "https://elsewhere.example/jwks")
    with pytest.raises(ConfigError, match="cannot be accessed due to restrictions"):
        _oauth_listener(url)


def test_a_listener_with_an_allowed_jwks_url_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _jwks_url(tmp_path)
    monkeypatch.setenv(ALLOWED_URLS_ENV, f"https://other.example/jwks,{url}")
    security = _oauth_listener(url)
    assert security.oauthbearer_signed is not None
    assert set(security.oauthbearer_signed.keys) == {"rsa-1", "ec-1"}


def test_server_start_dash_d_sets_the_property(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOWED_URLS_ENV, "")  # restored after the test
    assert set_process_properties([f"{ALLOWED_URLS_PROPERTY}=https://idp.example/jwks"]) is None
    assert os.environ[ALLOWED_URLS_ENV] == "https://idp.example/jwks"
    refused = set_process_properties(["java.security.manager=allow"])
    assert refused is not None and ALLOWED_URLS_PROPERTY in refused
