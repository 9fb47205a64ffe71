"""Issue 20: SaslHandshake v0 against a real broker. After a v0 handshake Kafka's
clients send the SASL tokens as bare size-prefixed frames, not in SaslAuthenticate
requests (the pre-KIP-152 flow, still served by Kafka 4.x's authenticator). A PLAIN
login that way is answered with an empty frame and then serves requests as the user; a
wrong password closes the connection without an answer (v0 has no way to carry the error),
and other clients are served throughout. The sans-I/O core's part is unit-tested
(`tests/unit/security/test_sasl_server.py`); this is the shell's."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import MetadataRequest, SaslHandshakeRequest
from riverbed.security.plain import client_message
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.secure import (
    NO_INITIAL_REBALANCE_DELAY,
    SecureBroker,
    running_secure_broker,
)
from riverbed.testing.secure_clients import Wire, produce_consume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

USERS = {"admin": "admin-secret", "alice": "alice-pw"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"), USERS, {}, NO_INITIAL_REBALANCE_DELAY
    ) as broker:
        load_group_coordinators(broker.bootstrap("PLAINTEXT"))
        yield broker


def _v0_login(secure: SecureBroker, password: str) -> Wire:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    reply = wire.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
    assert reply.error_code == 0
    token = client_message("alice", password)
    wire.sock.sendall(struct.pack(">i", len(token)) + token)  # bare, no request header
    return wire


def _others_served(secure: SecureBroker, tag: str) -> None:
    sec = {"protocol": "SASL_PLAINTEXT", "mechanism": "PLAIN"}
    sec |= {"username": "alice", "password": "alice-pw"}
    values = [f"v0 {tag}".encode()]
    got = produce_consume(
        "confluent-kafka", secure.bootstrap("SASL_PLAINTEXT"), sec, f"sasl-v0-{tag}", values
    )
    assert got == values


def test_a_v0_plain_login_is_answered_with_an_empty_frame_then_served(
    secure: SecureBroker,
) -> None:
    wire = _v0_login(secure, "alice-pw")
    assert wire.recv_frame() == b""  # PLAIN's empty server answer, still a frame
    reply = wire.call(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    assert [b.node_id for b in reply.brokers] == [1]
    _others_served(secure, "after-login")


def test_a_v0_wrong_password_closes_without_an_answer(secure: SecureBroker) -> None:
    wire = _v0_login(secure, "not-it")
    assert wire.closed_by_broker()
    _others_served(secure, "after-refusal")
