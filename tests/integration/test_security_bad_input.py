"""Issue 20's bad input against a real broker: wrong passwords, unknown mechanisms,
requests before authentication, oversized and malformed SASL tokens, a SCRAM final
message whose nonce leaves out the server's part, truncated and stalled TLS handshakes.
Each gets Kafka's answer (or the connection closes), and a well-behaved client is served
right after every one of them."""

from __future__ import annotations

import base64
import socket
import ssl
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslHandshakeRequest,
)
from riverbed.security.plain import client_message
from riverbed.security.scram import ScramMechanism
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.secure import (
    NO_INITIAL_REBALANCE_DELAY,
    SecureBroker,
    running_secure_broker,
)
from riverbed.testing.secure_clients import Wire, produce_consume

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
SCRAM_USERS = {"scram256": ("SCRAM-SHA-256", "s256-pw")}
DELAY_MS = 300


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"),
        USERS,
        SCRAM_USERS,
        {
            "connection.failed.authentication.delay.ms": str(DELAY_MS),
            # one listener narrower than the broker's sasl.enabled.mechanisms
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        }
        | NO_INITIAL_REBALANCE_DELAY,
    ) as broker:
        load_group_coordinators(broker.bootstrap("PLAINTEXT"))
        yield broker


def _closed_after_at_most(wire: Wire, limit: int) -> bool:
    """The broker closes the connection after sending at most ``limit`` bytes."""
    got = 0
    while got <= limit:
        try:
            chunk = wire.sock.recv(4096)
        except ConnectionResetError:
            return True
        if not chunk:
            return True
        got += len(chunk)
    return False


def _others_served(secure: SecureBroker, tag: str) -> None:
    """A well-behaved client authenticates and is served."""
    sec = {
        "protocol": "SASL_PLAINTEXT",
        "mechanism": "PLAIN",
        "username": "alice",
        "password": "alice-pw",
    }
    values = [f"after {tag}".encode()]
    topic = f"bad-input-{tag}-{time.monotonic_ns()}"
    assert (
        produce_consume("confluent-kafka", secure.bootstrap("SASL_PLAINTEXT"), sec, topic, values)
        == values
    )


def test_wrong_password_fails_after_the_delay(secure: SecureBroker) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    assert wire.handshake("PLAIN").error_code == 0
    started = time.monotonic()
    reply = wire.authenticate(client_message("alice", "wrong"))
    waited_ms = (time.monotonic() - started) * 1000
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert reply.error_message == "Authentication failed: Invalid username or password"
    assert waited_ms >= DELAY_MS * 0.9  # connection.failed.authentication.delay.ms
    assert wire.closed_by_broker()
    # SCRAM: wrong password and unknown user get the same generic message
    for user, password in (("scram256", "wrong"), ("nobody", "x")):
        wire = Wire(secure.ports["SASL_PLAINTEXT"])
        wire.handshake("SCRAM-SHA-256")
        from riverbed.security.scram import ScramClient

        client = ScramClient(ScramMechanism.SCRAM_SHA_256, user, password, "clientnonce")
        first = wire.authenticate(client.first_message())
        if first.error_code == 0:
            reply = wire.authenticate(client.final_message(first.auth_bytes))
        else:
            reply = first
        assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert reply.error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-256"
        )
        assert wire.closed_by_broker()
    _others_served(secure, "wrong-password")


def _first_client_error(conf: dict[str, object]) -> KafkaError | None:
    """The first error a confluent-kafka producer with ``conf`` reports (its logins run in
    the background; errors reach ``error_cb`` through poll), or None within 15 s."""
    from confluent_kafka import Producer

    errors: list[KafkaError] = []
    producer = Producer(conf | {"error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors[0] if errors else None


def test_wrong_password_seen_by_a_real_client(secure: SecureBroker) -> None:
    conf: dict[str, object] = {
        "bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "scram256",
        "sasl.password": "not-it",
    }
    error = _first_client_error(conf)
    assert error is not None and error.code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in error.str()


def test_unknown_mechanism(secure: SecureBroker) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    reply = wire.handshake("GSSAPI")
    assert reply.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert reply.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert wire.closed_by_broker()
    _others_served(secure, "unknown-mechanism")


def test_a_mechanism_enabled_on_another_listener_only(secure: SecureBroker) -> None:
    """SASL_SSL enables only SCRAM-SHA-256 (``listener.name.sasl_ssl.sasl.enabled.mechanisms``):
    PLAIN, which SASL_PLAINTEXT takes, is refused there with the listener's own list, and
    SCRAM-SHA-256 is served."""
    conf: dict[str, object] = {
        "bootstrap.servers": secure.bootstrap("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(secure.pki.ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }
    error = _first_client_error(conf)
    assert error is not None and error.code() == KafkaError._AUTHENTICATION
    assert "broker's supported mechanisms: SCRAM-SHA-256 (" in error.str()
    sec = {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-256", "cafile": str(secure.pki.ca)}
    sec |= {"username": "scram256", "password": "s256-pw"}
    values = [b"scram on the narrow listener"]
    topic = f"narrow-listener-{time.monotonic_ns()}"
    got = produce_consume("confluent-kafka", secure.bootstrap("SASL_SSL"), sec, topic, values)
    assert got == values
    _others_served(secure, "narrow-listener")


def test_requests_before_authentication_close_the_connection(secure: SecureBroker) -> None:
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    reply = wire.call(
        ApiKey.API_VERSIONS,
        3,
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    assert reply.error_code == 0  # ApiVersions is served before authentication
    wire.send(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    assert wire.closed_by_broker()
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    wire.handshake("PLAIN")
    wire.send(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    # Kafka answers it with its error response (ILLEGAL_SASL_STATE) and closes
    assert _closed_after_at_most(wire, 1024)
    _others_served(secure, "before-auth")


def test_oversized_and_malformed_tokens(secure: SecureBroker) -> None:
    # a frame above sasl.server.max.receive.size (524288) before authentication
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    wire.sock.sendall(struct.pack(">i", 600_000) + b"\x00" * 1024)
    assert wire.closed_by_broker()
    # v0 raw token frames: an oversized one
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    wire.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
    wire.sock.sendall(struct.pack(">i", 10_000_000))
    assert wire.closed_by_broker()
    # malformed PLAIN and SCRAM messages
    for mechanism, token in (
        ("PLAIN", b"no-separators"),
        ("SCRAM-SHA-256", b"\xff\xfe garbage"),
        ("SCRAM-SHA-256", b"n,,n=scram256"),
    ):
        wire = Wire(secure.ports["SASL_PLAINTEXT"])
        wire.handshake(mechanism)
        reply = wire.authenticate(token)
        assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, (mechanism, token)
        assert reply.error_message
        assert wire.closed_by_broker()
    # garbage where a request header should be
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    wire.sock.sendall(struct.pack(">i", 3) + b"\x01\x02\x03")
    assert wire.closed_by_broker()
    _others_served(secure, "malformed")


def test_scram_final_nonce_without_the_server_part(secure: SecureBroker) -> None:
    """The final message repeats only the client's own nonce: refused, even though the
    proof is computed correctly over that message."""
    mech = ScramMechanism.SCRAM_SHA_256
    wire = Wire(secure.ports["SASL_PLAINTEXT"])
    wire.handshake(mech.mechanism_name)
    first = wire.authenticate(b"n,,n=scram256,r=clientonly")
    assert first.error_code == 0
    server_first = first.auth_bytes.decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    assert fields["r"].startswith("clientonly") and len(fields["r"]) > len("clientonly")
    salted = mech.salted_password("s256-pw", base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = "c=biws,r=clientonly"
    auth = f"n=scram256,r=clientonly,{server_first},{without_proof}".encode()
    client_key = mech.hmac(salted, b"Client Key")
    signature = mech.hmac(mech.hash(client_key), auth)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    reply = wire.authenticate(f"{without_proof},p={proof.decode()}".encode())
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert wire.closed_by_broker()
    _others_served(secure, "scram-nonce")


def test_truncated_and_stalled_tls_handshakes(secure: SecureBroker) -> None:
    port = secure.ports["SSL"]
    # a ClientHello cut short, then the client goes away
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    cut = socket.create_connection(("127.0.0.1", port))
    cut.sendall(hello[: len(hello) // 2])
    cut.close()
    # garbage instead of a ClientHello: the broker drops it
    junk = Wire(port)
    junk.sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
    assert _closed_after_at_most(junk, 1024)  # (a TLS alert may come first)
    # half-open handshakes that never finish hold no one else up
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        for s in stalled:
            s.sendall(hello[:10])
        sec = {"protocol": "SSL", "cafile": str(secure.pki.ca)}
        values = [b"served while handshakes stall"]
        topic = f"tls-stall-{time.monotonic_ns()}"
        assert (
            produce_consume("kafka-python", secure.bootstrap("SSL"), sec, topic, values) == values
        )
    finally:
        for s in stalled:
            s.close()
    _others_served(secure, "tls")
