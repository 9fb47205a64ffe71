"""KIP-368 re-authentication (``connections.max.reauth.ms``) against a real broker.

SaslAuthenticate tells the client its session lifetime; librdkafka (confluent-kafka)
re-authenticates on the same connection before it ends and keeps producing; a client
that does not re-authenticate is disconnected at its next request after expiry; a
re-authentication as another user closes the connection."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import MetadataRequest, MetadataResponse, SaslAuthenticateRequest
from riverbed.security.plain import client_message
from riverbed.testing.secure import SecureBroker, running_secure_broker
from riverbed.testing.secure_clients import Wire

USERS = {"admin": "admin-secret", "alice": "alice-pw", "bob": "bob-pw"}
SCRAM_USERS = {"scram512": ("SCRAM-SHA-512", "s512-pw")}
REAUTH_MS = 1500


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"),
        USERS,
        SCRAM_USERS,
        {"listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS)},
    ) as broker:
        yield broker


def _login(secure: SecureBroker, user: str, password: str) -> Wire:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert wire.handshake("PLAIN").error_code == 0
    reply = wire.authenticate(client_message(user, password))
    assert reply.error_code == 0
    assert reply.session_lifetime_ms == REAUTH_MS
    return wire


def test_expired_session_is_closed_and_reauthentication_renews_it(secure: SecureBroker) -> None:
    wire = _login(secure, "alice", "alice-pw")
    assert isinstance(
        wire.call(ApiKey.METADATA, 12, MetadataRequest(topics=None)), MetadataResponse
    )
    renewed = _login(secure, "alice", "alice-pw")
    time.sleep(REAUTH_MS / 1000 * 0.6)
    # re-authenticate on the same connection: a new session
    assert renewed.handshake("PLAIN").error_code == 0
    assert renewed.authenticate(client_message("alice", "alice-pw")).error_code == 0
    time.sleep(REAUTH_MS / 1000 * 0.6)  # past the first session's end, inside the second
    assert isinstance(
        renewed.call(ApiKey.METADATA, 12, MetadataRequest(topics=None)), MetadataResponse
    )
    # the one that did not re-authenticate is closed at its next request
    wire.send(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    assert wire.closed_by_broker()


def test_reauthentication_as_another_user_closes(secure: SecureBroker) -> None:
    wire = _login(secure, "alice", "alice-pw")
    assert wire.handshake("PLAIN").error_code == 0
    wire.send(
        ApiKey.SASL_AUTHENTICATE,
        2,
        SaslAuthenticateRequest(auth_bytes=client_message("bob", "bob-pw")),
    )
    got = b""
    try:
        while True:
            chunk = wire.sock.recv(4096)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    assert len(got) < 1024  # at most the SaslAuthenticate answer, then the close


def test_confluent_kafka_reauthenticates_and_keeps_producing(secure: SecureBroker) -> None:
    from confluent_kafka import Producer

    log_before = secure.proc.log_path.read_text()
    expired_before = log_before.count("SASL session expired")
    reauth_before = log_before.count("re-authenticated as User:scram512 (SASL/SCRAM-SHA-512)")
    conf = {
        "bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "scram512",
        "sasl.password": "s512-pw",
    }
    producer = Producer(conf)
    delivered: list[object] = []
    deadline = time.monotonic() + REAUTH_MS / 1000 * 4
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
        sent += 1
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert len(delivered) == sent and all(err is None for err in delivered)
    # no connection of this producer outlived its session: it re-authenticated in time
    log_after = secure.proc.log_path.read_text()
    assert log_after.count("SASL session expired") == expired_before
    reauths = log_after.count("re-authenticated as User:scram512 (SASL/SCRAM-SHA-512)")
    assert reauths > reauth_before
