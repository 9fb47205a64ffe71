"""--command-config: Kafka's client security properties (or librdkafka's) rendered for
confluent-kafka and for riverbed's own wire client, from one normalized form."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from riverbed.cli.client_security import (
    ClientSecurityError,
    librdkafka_config,
    wire_security,
)
from riverbed.testing.certs import PKI_PASSWORD, Pki, make_pki

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="admin" password="s3cret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), {"alice": "users"})


def java_props(pki: Pki) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": JAAS,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }


def test_kafka_properties_become_librdkafka_settings(pki: Pki) -> None:
    conf = librdkafka_config({**java_props(pki), "client.id": "tool"})
    assert conf["sasl.username"] == "admin" and conf["sasl.password"] == "s3cret"
    assert conf["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert conf["client.id"] == "tool"  # anything else passes as it is
    assert not {k for k in conf if k.startswith(("ssl.truststore", "sasl.jaas"))}


def test_kafka_properties_secure_the_wire_client(pki: Pki) -> None:
    security = wire_security(java_props(pki))
    assert (security.mechanism, security.username, security.password) == (
        "SCRAM-SHA-512",
        "admin",
        "s3cret",
    )
    assert security.ssl_context is not None
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert security.ssl_context.check_hostname  # https, the default


def test_librdkafka_names_work_for_both(pki: Pki) -> None:
    key, crt = pki.client("alice")
    props = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(crt),
        "ssl.key.location": str(key),
        "ssl.endpoint.identification.algorithm": "",
    }
    conf = librdkafka_config(props)
    assert "BEGIN CERTIFICATE" in conf["ssl.ca.pem"] and "PRIVATE KEY" in conf["ssl.key.pem"]
    assert "BEGIN CERTIFICATE" in conf["ssl.certificate.pem"]
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    security = wire_security(props)
    assert security.ssl_context is not None and not security.ssl_context.check_hostname
    assert security.mechanism == ""


def test_pkcs12_trust_store_is_given_to_librdkafka_as_pem(pki: Pki) -> None:
    conf = librdkafka_config(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(pki.ca_p12),
            "ssl.truststore.password": PKI_PASSWORD,
        }
    )
    assert "BEGIN CERTIFICATE" in conf["ssl.ca.pem"]


def test_what_the_wire_client_cannot_do_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ClientSecurityError, match=r"sasl\.mechanism=GSSAPI"):
        wire_security({"security.protocol": "SASL_PLAINTEXT"})
    with pytest.raises(ClientSecurityError, match="needs a login"):
        wire_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ClientSecurityError, match="not a Kafka protocol"):
        wire_security({"security.protocol": "TLS"})
    with pytest.raises(ClientSecurityError, match=r"sasl\.jaas\.config"):
        librdkafka_config({"sasl.jaas.config": "Broken required username="})
    # librdkafka's own mechanisms still reach librdkafka
    assert librdkafka_config({"sasl.mechanism": "OAUTHBEARER"})["sasl.mechanism"] == "OAUTHBEARER"


def test_a_commands_security_ends_with_the_command(pki: Pki, tmp_path: Path) -> None:
    """The CLI run in-process (tests, `riverbed dev`) must not leave one command's
    --command-config credentials to the wire clients opened after it."""
    import argparse

    from riverbed.cli import wire
    from riverbed.cli.common import run_guarded

    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in java_props(pki).items()))
    seen: list[str] = []

    def command(args: argparse.Namespace) -> int:
        seen.append(wire.current_security().protocol)
        return 0

    assert run_guarded(command)(argparse.Namespace(command_config=str(config))) == 0
    assert seen == ["SASL_SSL"]
    assert wire.current_security().protocol == "PLAINTEXT"


def test_a_bad_command_config_fails_only_that_command(tmp_path: Path) -> None:
    import argparse

    from riverbed.cli import wire
    from riverbed.cli.common import run_guarded

    missing = argparse.Namespace(command_config=str(tmp_path / "absent.properties"))
    assert run_guarded(lambda args: 0)(missing) == 1
    assert wire.current_security().protocol == "PLAINTEXT"


def test_cipher_suites_in_a_command_config_are_a_list(pki: Pki) -> None:
    """``ssl.cipher.suites`` is comma-separated in a properties file, as Kafka reads it: a
    known suite restricts the wire client's TLS 1.2 ciphers, an unknown one is named."""
    props = {**java_props(pki), "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
    security = wire_security(props)
    assert security.ssl_context is not None
    names = {c["name"] for c in security.ssl_context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-RSA-AES128-GCM-SHA256"}
    with pytest.raises(Exception, match="TLS_NO_SUCH_SUITE"):
        wire_security({**props, "ssl.cipher.suites": "TLS_NO_SUCH_SUITE, TLS_AES_128_GCM_SHA256"})
