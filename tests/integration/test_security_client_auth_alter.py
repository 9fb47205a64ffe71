"""``ssl.client.auth`` altered on a running broker (a per-broker dynamic config in Kafka's
documentation: ``listener.name.<l>.ssl.client.auth`` or plain ``ssl.client.auth`` on the
broker's own resource) through confluent-kafka's IncrementalAlterConfigs: new TLS
connections get the new mode, connections opened before keep theirs. Switched to
``required``, a client without a certificate is refused and one with a certificate of the
trusted CA is served. (The cluster default refuses it: tests/unit/metadata/test_controller.py;
confluent-kafka cannot name that resource.)"""

from __future__ import annotations

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

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.certs import server_keystore
from riverbed.testing.cluster import scaled_s
from riverbed.testing.secure import SecureBroker, running_secure_broker
from riverbed.testing.tls_client import api_versions_round_trip, tls_connection

LISTENER_KEY = "listener.name.ssl.ssl.client.auth"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    # the SSL listener has a trust store (the test CA) and ssl.client.auth=none
    with running_secure_broker(tmp_path_factory.mktemp("auth"), {"admin": "pw"}, {}) as b:
        yield b


@pytest.fixture(scope="module")
def client_cert(broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A key and certificate (one PEM file) signed by the broker's CA."""
    return server_keystore(broker.pki, tmp_path_factory.mktemp("client") / "alice.pem", "alice")


def _tls(broker: SecureBroker, cert: Path | None) -> ssl.SSLSocket:
    return tls_connection(broker.pki.ca, broker.ports["SSL"], scaled_s(15), cert)


def _served(broker: SecureBroker, cert: Path | None) -> bool:
    """A new connection (presenting ``cert`` when given) answers ApiVersions."""
    try:
        with _tls(broker, cert) as conn:
            return api_versions_round_trip(conn, 5) == 5
    except (ssl.SSLError, ConnectionError, AssertionError):
        return False  # refused: under TLS 1.3 the server's alert comes after the handshake


def _alter(broker: SecureBroker, key: str, value: str | None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    resource = ConfigResource(ResourceType.BROKER, "1")
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource.add_incremental_config(ConfigEntry(key, value, incremental_operation=op))
    admin.incremental_alter_configs([resource])[resource].result(timeout=scaled_s(30))


def _wait(condition: object, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + scaled_s(20)
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_client_auth_switched_to_required_refuses_clients_without_a_certificate(
    broker: SecureBroker, client_cert: Path
) -> None:
    assert _served(broker, None)
    opened = _tls(broker, None)  # set up under ssl.client.auth=none
    try:
        assert api_versions_round_trip(opened, 1) == 1
        _alter(broker, LISTENER_KEY, "required")
        _wait(lambda: not _served(broker, None), "a client without a certificate is served")
        assert _served(broker, client_cert)
        # the connection opened before keeps its mode and is still served
        assert api_versions_round_trip(opened, 2) == 2
    finally:
        opened.close()
    # back to none: certificate-less clients are served again
    _alter(broker, LISTENER_KEY, "none")
    _wait(lambda: _served(broker, None), "a client without a certificate is still refused")


def test_plain_ssl_client_auth_on_the_broker_applies_where_no_listener_value_is_set(
    broker: SecureBroker, client_cert: Path
) -> None:
    _alter(broker, LISTENER_KEY, None)
    _alter(broker, "ssl.client.auth", "required")
    _wait(lambda: not _served(broker, None), "plain ssl.client.auth=required not applied")
    assert _served(broker, client_cert)
    # the listener's own value comes first (Kafka's valuesWithPrefixOverride)
    _alter(broker, LISTENER_KEY, "requested")
    _wait(lambda: _served(broker, None), "listener.name.ssl.ssl.client.auth not first")
    _alter(broker, LISTENER_KEY, None)
    _alter(broker, "ssl.client.auth", None)
    assert _served(broker, None)


def test_an_unknown_client_auth_mode_is_refused(broker: SecureBroker) -> None:
    with pytest.raises(KafkaException) as info:
        _alter(broker, LISTENER_KEY, "always")
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_CONFIG, error
    assert "ssl.client.auth" in error.str(), error
    assert _served(broker, None)
