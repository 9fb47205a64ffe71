"""Issue 20, SASL: a non-default ``sasl.server.max.receive.size`` (4096) is honoured by a
real broker. A SaslAuthenticate frame carrying a 5,000-byte token is above it: the
connection is closed without an answer and the broker logs why; a 4,000-byte token is
under it and goes to the mechanism (PLAIN, a wrong password: SASL_AUTHENTICATION_FAILED).
Other clients are served throughout. (test_security_bad_input.py covers the default.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import SaslAuthenticateRequest
from riverbed.security.plain import client_message
from riverbed.testing.secure import SecureBroker, running_secure_broker
from riverbed.testing.secure_clients import Wire

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
RECEIVE_MAX = 4096
TOPIC = "receive-size"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("receive-size"),
        USERS,
        {},
        {
            "sasl.server.max.receive.size": str(RECEIVE_MAX),
            "connection.failed.authentication.delay.ms": "0",
        },
    ) as broker:
        broker.create_topics([TOPIC])
        yield broker


def _plain_token(total_bytes: int) -> bytes:
    """A PLAIN message for alice, of ``total_bytes``, whose password is wrong."""
    token = client_message("alice", "")
    return client_message("alice", "x" * (total_bytes - len(token)))


def _others_served(secure: SecureBroker) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    wire.plain_login("alice", USERS["alice"])
    assert wire.produce(TOPIC, 100).responses[0].partition_responses[0].error_code == 0


def test_a_token_above_the_configured_size_closes_the_connection(secure: SecureBroker) -> None:
    token = _plain_token(5000)
    assert len(token) == 5000
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert wire.handshake("PLAIN").error_code == 0
    wire.send(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
    assert wire.closed_by_broker()  # no answer: closed for the frame's size
    logged = re.findall(
        rf"SASL frame of (\d+) bytes outside 0\.\.{RECEIVE_MAX} \(sasl.server.max.receive.size\)",
        secure.proc.log_text(),
    )
    assert [int(size) > 5000 for size in logged] == [True]  # the frame: header and token
    _others_served(secure)


def test_a_token_under_the_configured_size_reaches_the_mechanism(secure: SecureBroker) -> None:
    token = _plain_token(4000)
    assert len(token) == 4000
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert wire.handshake("PLAIN").error_code == 0
    reply = wire.authenticate(token)
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message  # the mechanism's reason: the password
    assert wire.closed_by_broker()
    _others_served(secure)
