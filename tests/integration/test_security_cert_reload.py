"""Issue 20: a listener's certificate replaced on a running broker (Kafka's dynamic
listener SSL configs) through IncrementalAlterConfigs / AlterConfigs from confluent-kafka's
AdminClient on the broker resource: new TLS connections get the new certificate, a
connection opened before keeps working, and a key store that cannot be used is refused
with INVALID_CONFIG naming the problem while the certificate in use stays."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from cryptography import x509

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.certs import encrypted_keystore, make_pki, server_keystore
from riverbed.testing.cluster import scaled_s
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.tls_client import api_versions_round_trip, tls_connection

KEYSTORE = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    # a client certificate is asked for, and checked against the trust store when given
    requested = {"listener.name.ssl.ssl.client.auth": "requested"}
    secure = start_secure_broker(
        tmp_path_factory.mktemp("reload"), {"admin": "admin-pw"}, {}, requested
    )
    try:
        yield secure
    finally:
        secure.proc.close()


def _tls(broker: SecureBroker, client: tuple[Path, Path] | None = None) -> ssl.SSLSocket:
    """A TLS connection to the SSL listener, trusting the test CA, host name checked;
    presenting ``client`` (key file, certificate file) when given."""
    key, cert = client if client is not None else (None, None)
    return tls_connection(broker.pki.ca, broker.ports["SSL"], scaled_s(15), cert, key)


def _serial(conn: ssl.SSLSocket) -> str:
    cert = conn.getpeercert()
    assert cert is not None
    return str(cert["serialNumber"])


def _new_connection_serial(broker: SecureBroker) -> str:
    with _tls(broker) as conn:
        return _serial(conn)


def _alter(
    broker: SecureBroker, value: str, *, incremental: bool = True, key: str = KEYSTORE
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    resource = ConfigResource(ResourceType.BROKER, "1")
    if incremental:
        resource.add_incremental_config(
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        )
        future = admin.incremental_alter_configs([resource])[resource]
    else:
        resource.set_config(key, value)
        future = admin.alter_configs([resource])[resource]
    future.result(timeout=scaled_s(30))


def _refused(broker: SecureBroker, value: str) -> str:
    with pytest.raises(KafkaException) as info:
        _alter(broker, value)
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_CONFIG, error
    return str(error.str())


def _wait_for_serial(broker: SecureBroker, old: str) -> str:
    deadline = time.monotonic() + scaled_s(20)
    while (serial := _new_connection_serial(broker)) == old:
        assert time.monotonic() < deadline, "new connections still get the old certificate"
        time.sleep(0.1)
    return serial


def test_a_replaced_certificate_serves_new_connections_and_old_ones_stay(
    broker: SecureBroker, tmp_path: Path
) -> None:
    opened = _tls(broker)
    try:
        first = _serial(opened)
        assert api_versions_round_trip(opened, 1) == 1
        renewed = server_keystore(broker.pki, tmp_path / "renewed.pem")
        _alter(broker, str(renewed))
        second = _wait_for_serial(broker, first)
        renewed_serial = x509.load_pem_x509_certificate(renewed.read_bytes()).serial_number
        assert int(second, 16) == renewed_serial  # (getpeercert pads to whole bytes)
        # the connection opened before keeps its session and is still served
        assert api_versions_round_trip(opened, 2) == 2
        assert _serial(opened) == first
    finally:
        opened.close()
    # legacy AlterConfigs as well
    third = server_keystore(broker.pki, tmp_path / "third.pem")
    _alter(broker, str(third), incremental=False)
    assert _wait_for_serial(broker, second) != second


def test_a_bad_key_store_is_refused_and_the_certificate_stays(
    broker: SecureBroker, tmp_path: Path
) -> None:
    before = _new_connection_serial(broker)
    missing = tmp_path / "missing.pem"
    assert str(missing) in _refused(broker, str(missing))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert "cannot load the key store" in _refused(broker, str(garbage))
    # Kafka's default: the certificate's subject may not change (ssl.allow.dn.changes)
    other = server_keystore(broker.pki, tmp_path / "other.pem", cn="elsewhere")
    assert "DistinguishedName does not match" in _refused(broker, str(other))
    assert _new_connection_serial(broker) == before


def test_a_replaced_trust_store_admits_clients_of_a_new_ca(
    broker: SecureBroker, tmp_path: Path
) -> None:
    """``ssl.client.auth=requested``: a client certificate of a CA the listener does not
    trust fails the handshake until the trust store holds that CA too."""
    other = make_pki(tmp_path / "other", {"partner": "partners"}, ca_cn="partners CA")
    client = other.client("partner")

    def admitted() -> bool:
        try:
            with _tls(broker, client) as conn:
                return api_versions_round_trip(conn, 7) == 7
        except (ssl.SSLError, ConnectionError, AssertionError):
            return False  # refused: TLS 1.3 closes after the handshake

    assert not admitted()
    bundle = tmp_path / "trust.pem"
    bundle.write_text(broker.pki.ca.read_text() + other.ca.read_text())
    _alter(broker, str(bundle), key="listener.name.ssl.ssl.truststore.location")
    deadline = time.monotonic() + scaled_s(20)
    while not admitted():
        assert time.monotonic() < deadline, "the new CA's client is still refused"
        time.sleep(0.1)


def _serial_at(broker: SecureBroker, listener: str) -> int:
    """The serial number of the certificate a new TLS connection to ``listener`` gets."""
    context = ssl.create_default_context(cafile=str(broker.pki.ca))
    raw = socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=scaled_s(15))
    with context.wrap_socket(raw, server_hostname="localhost") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_an_inline_key_listener_refuses_a_location_and_takes_a_new_inline_key(
    broker: SecureBroker, tmp_path: Path
) -> None:
    """SASL_SSL's key store is inline (``ssl.keystore.key`` + ``.certificate.chain``): a
    ``ssl.keystore.location`` for it would be a second key store, which Kafka's
    DefaultSslEngineFactory refuses (before, it was accepted and silently ignored: the old
    certificate stayed); replacing the inline key and chain in one request works."""
    before = _serial_at(broker, "SASL_SSL")
    renewed = server_keystore(broker.pki, tmp_path / "inline.pem")
    key = "listener.name.sasl_ssl.ssl.keystore.location"
    with pytest.raises(KafkaException) as info:
        _alter(broker, str(renewed), key=key)
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_CONFIG, error
    assert "Both SSL key store location and separate private key are specified" in error.str()
    assert _serial_at(broker, "SASL_SSL") == before
    # the new key and certificate inline, both in one IncrementalAlterConfigs
    text = renewed.read_text()
    cert_at = text.index("-----BEGIN CERTIFICATE-----")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    resource = ConfigResource(ResourceType.BROKER, "1")
    for name, value in (("key", text[:cert_at]), ("certificate.chain", text[cert_at:])):
        resource.add_incremental_config(
            ConfigEntry(
                f"listener.name.sasl_ssl.ssl.keystore.{name}",
                " ".join(value.splitlines()),
                incremental_operation=AlterConfigOpType.SET,
            )
        )
    admin.incremental_alter_configs([resource])[resource].result(timeout=scaled_s(30))
    wanted = x509.load_pem_x509_certificate(renewed.read_bytes()).serial_number
    deadline = time.monotonic() + scaled_s(20)
    while _serial_at(broker, "SASL_SSL") != wanted:
        assert time.monotonic() < deadline, "new connections still get the old certificate"
        time.sleep(0.1)


def test_a_key_store_openssl_cannot_read_is_refused_naming_the_problem(
    broker: SecureBroker, tmp_path: Path
) -> None:
    """A PKCS12 file at a PEM location and an encrypted key without ssl.key.password were
    answered UNKNOWN_SERVER_ERROR; they are INVALID_CONFIG naming what to fix, and the
    listener keeps its certificate."""
    before = _new_connection_serial(broker)
    assert "ssl.keystore.type=PKCS12" in _refused(broker, str(broker.pki.server_p12))
    encrypted = encrypted_keystore(broker.pki, tmp_path / "encrypted.pem", "keypw")
    assert "set ssl.key.password" in _refused(broker, str(encrypted))
    assert _new_connection_serial(broker) == before
