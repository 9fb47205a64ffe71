"""Issue 20 seams found by an audit, proved against real broker processes:

- "replayed SCRAM messages ... rejected with a clear error, the broker serving everyone
  else": a SCRAM client-final captured from a successful login is replayed on a new
  connection, after a fresh client-first and after the captured client-first verbatim;
  both get SASL_AUTHENTICATION_FAILED with a message and the connection closes, while a
  confluent-kafka client is still served.
- A PEM trust store given inline on a listener (``listener.name.<l>.ssl.truststore.type=PEM``
  with ``ssl.truststore.certificates``, the PEM text itself, as Kafka) with
  ``ssl.client.auth=required``: a client certificate signed by that CA is served, one
  signed by another CA (of the same name) is refused.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import SaslAuthenticateRequest, SaslAuthenticateResponse
from riverbed.security.sasl_client import login
from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.testing.certs import Pki, make_pki
from riverbed.testing.cluster import BrokerProcess, free_port
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.secure import (
    NO_INITIAL_REBALANCE_DELAY,
    SecureBroker,
    plaintext_and_ssl_listeners,
    running_secure_broker,
)
from riverbed.testing.secure_clients import Wire, librdkafka_config, produce_consume

MECH = ScramMechanism.SCRAM_SHA_512
USER, PASSWORD = "scram512", "s512-pw"
INVALID_CREDENTIALS = (
    "Authentication failed during authentication due to invalid credentials with "
    "SASL mechanism SCRAM-SHA-512"
)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"),
        {"admin": "admin-secret", "alice": "alice-pw"},
        {USER: (MECH.mechanism_name, PASSWORD)},
        {"connection.failed.authentication.delay.ms": "100"} | NO_INITIAL_REBALANCE_DELAY,
    ) as broker:
        load_group_coordinators(broker.bootstrap("PLAINTEXT"))
        yield broker


def _captured_login(port: int) -> tuple[bytes, bytes]:
    """A full, successful SCRAM login (riverbed's own client, `sasl_client.login`, which
    checks the server's signature) over a raw connection: its (client-first, client-final)."""
    wire = Wire(port)
    sent: list[bytes] = []
    steps = login(MECH.mechanism_name, USER, PASSWORD, secrets.token_urlsafe(18))
    step = next(steps)
    try:
        while True:
            api, version, body = step
            if isinstance(body, SaslAuthenticateRequest):
                sent.append(bytes(body.auth_bytes))
            step = steps.send(wire.call(api, version, body))
    except StopIteration:
        pass  # logged in: the generator returned the session lifetime
    wire.sock.close()
    assert len(sent) == 2, sent
    return sent[0], sent[1]


def _refused(wire: Wire, token: bytes) -> None:
    reply = wire.call(36, 2, SaslAuthenticateRequest(auth_bytes=token))
    assert isinstance(reply, SaslAuthenticateResponse)
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED  # 58
    assert reply.error_message == INVALID_CREDENTIALS
    assert wire.closed_by_broker()


def test_replayed_scram_final_message_is_refused(secure: SecureBroker) -> None:
    port = secure.ports["SASL_PLAINTEXT"]
    captured_first, captured_final = _captured_login(port)
    # a new exchange with a fresh client nonce, then the captured final message
    wire = Wire(port)
    assert wire.handshake(MECH.mechanism_name).error_code == 0
    fresh = ScramClient(MECH, USER, "password unknown to the attacker", secrets.token_urlsafe(18))
    first = wire.authenticate(fresh.first_message())
    assert first.error_code == 0
    _refused(wire, captured_final)
    # the whole exchange replayed verbatim: the server's nonce is new, so it still fails
    wire = Wire(port)
    assert wire.handshake(MECH.mechanism_name).error_code == 0
    first = wire.authenticate(captured_first)
    assert first.error_code == 0
    _refused(wire, captured_final)
    # everyone else is served, the replayed user too
    sec = {"protocol": "SASL_PLAINTEXT", "mechanism": MECH.mechanism_name}
    sec |= {"username": USER, "password": PASSWORD}
    values = [b"served after a replay"]
    topic = f"scram-replay-{time.monotonic_ns()}"
    assert produce_consume("confluent-kafka", f"127.0.0.1:{port}", sec, topic, values) == values


def _flat(pem: str) -> str:
    """PEM text as one properties line (Kafka's inline stores take it so)."""
    return " ".join(pem.splitlines())


@pytest.fixture(scope="module")
def inline_trust(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Pki, Pki]]:
    """A broker whose SSL listener requires client certificates and trusts ``trusted``'s CA,
    given only inline; ``impostor`` is another CA with the same name."""
    trusted = make_pki(tmp_path_factory.mktemp("trusted"), {"alice": "eng"})
    impostor = make_pki(tmp_path_factory.mktemp("impostor"), {"mallory": "eng"})
    ssl_port = free_port()
    proc = BrokerProcess()
    proc.extra_overrides.update(
        plaintext_and_ssl_listeners(proc, ssl_port)
        | {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(trusted.server_pem),
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.certificates": _flat(trusted.ca.read_text()),
            "num.partitions": "1",
        }
        | NO_INITIAL_REBALANCE_DELAY
    )
    with proc:
        load_group_coordinators(proc.bootstrap)
        yield ssl_port, trusted, impostor


def _client_sec(server: Pki, client: Pki, name: str) -> dict[str, str]:
    key, crt = client.client(name)
    return {"protocol": "SSL", "cafile": str(server.ca), "certfile": str(crt), "keyfile": str(key)}


def test_inline_pem_truststore_on_a_listener(inline_trust: tuple[int, Pki, Pki]) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    port, trusted, impostor = inline_trust
    bootstrap = f"127.0.0.1:{port}"
    values = [b"signed by the inline CA"]
    got = produce_consume(
        "confluent-kafka", bootstrap, _client_sec(trusted, trusted, "alice"), "inline-ca", values
    )
    assert got == values
    # the impostor CA's certificate: the TLS handshake fails, no metadata
    conf = librdkafka_config(bootstrap, _client_sec(trusted, impostor, "mallory"))
    errors: list[KafkaError] = []
    producer = Producer(conf | {"log_level": 0, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=2)  # the refusal comes at the first connection
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)  # error callbacks are served by poll
    # refused in the TLS exchange (the broker's alert), not timed out
    assert errors and errors[0].code() == KafkaError._TRANSPORT, errors
    assert "SSL" in errors[0].str(), errors
    values = [b"alice still served"]
    got = produce_consume(
        "confluent-kafka", bootstrap, _client_sec(trusted, trusted, "alice"), "inline-ca-2", values
    )
    assert got == values
