"""KIP-368 at its seams, against a real broker, compared with Kafka's SaslServerAuthenticator
and SocketServer:

- a re-authentication as another principal is answered SASL_AUTHENTICATION_FAILED
  ("Cannot change principals during re-authentication from User.alice: User.bob"), then
  the connection closes; with another mechanism the handshake is answered but the next
  frame closes the connection without an answer (Kafka's REAUTH_BAD_MECHANISM);
- an OAUTHBEARER session ends with its token: the lifetime told is the smaller of
  ``connections.max.reauth.ms`` and the token's time left, and without
  ``connections.max.reauth.ms`` the token's time left alone (a request after it closes
  the connection);
- ``listener.name.<l>.<mechanism>.connections.max.reauth.ms`` overrides the listener's;
- a SaslHandshake after authentication when the session has no end, or within a second
  of the last re-authentication, is a plain request: ILLEGAL_SASL_STATE, the connection
  serves on (as on a PLAINTEXT listener; SaslAuthenticate gets Kafka's message);
- a failed re-authentication says "during re-authentication".
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from riverbed.security.oauthbearer import client_message as oauth_message
from riverbed.security.oauthbearer import unsecured_token
from riverbed.security.plain import client_message
from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.testing.secure import SecureBroker, running_secure_broker
from riverbed.testing.secure_clients import Wire

USERS = {"admin": "admin-secret", "alice": "alice-pw", "bob": "bob-pw"}
SCRAM_USERS = {"s256": ("SCRAM-SHA-256", "s256-pw"), "gone": ("SCRAM-SHA-512", "gone-pw")}
REAUTH_MS = 3000
SCRAM256_REAUTH_MS = 7000


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"),
        USERS,
        SCRAM_USERS,
        {
            "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": str(
                SCRAM256_REAUTH_MS
            ),
        },
    ) as broker:
        yield broker


class TlsWire(Wire):
    def __init__(self, port: int, cafile: str) -> None:
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.check_hostname = False
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))
        self.corr = 0


def _plain(wire: Wire, user: str) -> SaslAuthenticateResponse:
    assert wire.handshake("PLAIN").error_code == 0
    return wire.authenticate(client_message(user, USERS[user]))


def _scram(wire: Wire, mechanism: ScramMechanism, user: str, password: str) -> int:
    """The session lifetime of a SCRAM login (AssertionError naming the failure)."""
    assert wire.handshake(mechanism.mechanism_name).error_code == 0
    client = ScramClient(mechanism, user, password, "clientnonce")
    first = wire.authenticate(client.first_message())
    assert first.error_code == 0, first.error_message
    final = wire.authenticate(client.final_message(first.auth_bytes))
    assert final.error_code == 0, final.error_message
    return final.session_lifetime_ms


def _alive(wire: Wire) -> bool:
    return isinstance(
        wire.call(ApiKey.METADATA, 12, MetadataRequest(topics=None)), MetadataResponse
    )


def test_reauthentication_as_another_principal_is_refused_with_kafkas_error(
    secure: SecureBroker,
) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert _plain(wire, "alice").error_code == 0
    time.sleep(1.1)  # Kafka re-authenticates at most once a second
    assert wire.handshake("PLAIN").error_code == 0
    reply = wire.authenticate(client_message("bob", "bob-pw"))
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )
    assert reply.session_lifetime_ms == 0
    assert wire.closed_by_broker()


def test_reauthentication_with_another_mechanism_closes_without_an_answer(
    secure: SecureBroker,
) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert _plain(wire, "alice").error_code == 0
    time.sleep(1.1)
    # Kafka answers the handshake, then closes at the SaslAuthenticate
    assert wire.handshake("OAUTHBEARER").error_code == 0
    wire.send(
        ApiKey.SASL_AUTHENTICATE,
        2,
        SaslAuthenticateRequest(
            auth_bytes=oauth_message(unsecured_token("alice", time.time() + 60))
        ),
    )
    assert wire.closed_by_broker()
    log = secure.proc.log_path.read_text()
    assert (
        "SASL mechanism 'OAUTHBEARER' requested by client is not supported for "
        "re-authentication of mechanism 'PLAIN'" in log
    )


def test_an_oauthbearer_session_ends_with_its_token(secure: SecureBroker) -> None:
    # with connections.max.reauth.ms: the smaller of it and the token's time left
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert wire.handshake("OAUTHBEARER").error_code == 0
    reply = wire.authenticate(oauth_message(unsecured_token("carol", time.time() + 2)))
    assert reply.error_code == 0
    assert 1000 < reply.session_lifetime_ms <= 2000
    # without it (SASL_SSL): the token's time left, and the connection ends with it
    wire = TlsWire(secure.ports["SASL_SSL"], str(secure.pki.ca))
    assert wire.handshake("OAUTHBEARER").error_code == 0
    reply = wire.authenticate(oauth_message(unsecured_token("carol", time.time() + 2)))
    assert reply.error_code == 0
    assert 1000 < reply.session_lifetime_ms <= 2000
    assert _alive(wire)
    time.sleep(2.2)
    wire.send(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    assert wire.closed_by_broker()


def test_a_per_mechanism_reauth_override(secure: SecureBroker) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert _scram(wire, ScramMechanism.SCRAM_SHA_256, "s256", "s256-pw") == SCRAM256_REAUTH_MS
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert _plain(wire, "alice").session_lifetime_ms == REAUTH_MS


def test_a_handshake_after_authentication_without_a_session_end_is_illegal(
    secure: SecureBroker,
) -> None:
    wire = TlsWire(secure.ports["SASL_SSL"], str(secure.pki.ca))
    assert _plain(wire, "alice").session_lifetime_ms == 0
    reply = wire.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert isinstance(reply, SaslHandshakeResponse)
    assert reply.error_code == ErrorCode.ILLEGAL_SASL_STATE
    body = SaslAuthenticateRequest(auth_bytes=client_message("alice", "alice-pw"))
    again = wire.call(ApiKey.SASL_AUTHENTICATE, 2, body)
    assert isinstance(again, SaslAuthenticateResponse)
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert again.error_message == (
        "SaslAuthenticate request received after successful authentication"
    )
    assert _alive(wire)
    # a PLAINTEXT listener answers the same (a SASL client on a PLAINTEXT port)
    plain = Wire(secure.ports["PLAINTEXT"])
    assert plain.handshake("PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_reauthentication_at_most_once_a_second(secure: SecureBroker) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert _plain(wire, "alice").error_code == 0
    assert _plain(wire, "alice").error_code == 0  # the first re-authentication
    assert wire.handshake("PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert _alive(wire)


def test_a_deleted_scram_user_fails_its_reauthentication(secure: SecureBroker) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._scram import ScramMechanism as Mech
    from confluent_kafka.admin._scram import UserScramCredentialDeletion

    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert _scram(wire, ScramMechanism.SCRAM_SHA_512, "gone", "gone-pw") == REAUTH_MS
    admin = AdminClient({"bootstrap.servers": secure.bootstrap("PLAINTEXT")})
    deletion = UserScramCredentialDeletion("gone", Mech.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(timeout=30)
    time.sleep(1.1)
    assert wire.handshake("SCRAM-SHA-512").error_code == 0
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, "gone", "gone-pw", "clientnonce")
    reply = wire.authenticate(client.first_message())
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message == (
        "Authentication failed during re-authentication due to invalid credentials with "
        "SASL mechanism SCRAM-SHA-512"
    )
    assert wire.closed_by_broker()
