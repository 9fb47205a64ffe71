"""Issue 20: every client over SSL, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
and SASL_SSL against one real broker with a listener of each protocol.

The broker's key stores vary by listener: PEM files (``ssl.keystore.location``) on SSL,
inline PEM (``listener.name.sasl_ssl.ssl.keystore.key`` / ``...certificate.chain``, a
per-listener override) on SASL_SSL. PLAIN users come from the listeners' JAAS configs; the
SCRAM users are created through AlterUserScramCredentials (confluent-kafka's admin client
on the PLAINTEXT listener) and must be described back. Each client produces records with
a unique topic and must read exactly them back over the secured connection (fetches over
TLS go through the TLS stream: a sendfile on the raw socket would corrupt it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.secure import (
    NO_INITIAL_REBALANCE_DELAY,
    SecureBroker,
    start_secure_broker,
)
from riverbed.testing.secure_clients import CLIENTS, produce_consume

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
SCRAM_USERS = {"scram256": ("SCRAM-SHA-256", "s256-pw"), "scram512": ("SCRAM-SHA-512", "s512-pw")}
_topics = itertools.count()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(
        tmp_path_factory.mktemp("pki"), USERS, SCRAM_USERS, NO_INITIAL_REBALANCE_DELAY
    )
    try:
        load_group_coordinators(broker.bootstrap("PLAINTEXT"))
        yield broker
    finally:
        broker.proc.close()


CASES = {
    "SSL": {"protocol": "SSL"},
    "SASL_PLAINTEXT-PLAIN": {"protocol": "SASL_PLAINTEXT", "mechanism": "PLAIN", "username": "alice", "password": "alice-pw"},
    "SASL_PLAINTEXT-SCRAM-SHA-256": {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-256", "username": "scram256", "password": "s256-pw"},
    "SASL_PLAINTEXT-SCRAM-SHA-512": {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512", "username": "scram512", "password": "s512-pw"},
    "SASL_SSL-SCRAM-SHA-256": {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-256", "username": "scram256", "password": "s256-pw"},
    "SASL_SSL-SCRAM-SHA-512": {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": "scram512", "password": "s512-pw"},
    "SASL_SSL-PLAIN": {"protocol": "SASL_SSL", "mechanism": "PLAIN", "username": "alice", "password": "alice-pw"},
}  # fmt: skip


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", list(CASES))
def test_client_over_secured_listener(secure: SecureBroker, case: str, client: str) -> None:
    sec = dict(CASES[case])
    if "SSL" in sec["protocol"]:
        sec["cafile"] = str(secure.pki.ca)
    topic = f"sec-{client}-{case}-{next(_topics)}".lower()
    # 64 KiB values: fetch responses carry real file ranges, several TLS records each
    values = [f"{client} {case} {i} ".encode() * 2000 for i in range(3)]
    got = produce_consume(client, secure.bootstrap(sec["protocol"]), sec, topic, values)
    assert got == values


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_oauthbearer_unsecured_jwt(secure: SecureBroker, listener: str) -> None:
    """librdkafka's unsecured JWT (sasl.oauthbearer.config principal=...) is accepted by
    Kafka's default validator; an expired one (lifeSeconds in the past is impossible, so a
    token without the principal claim) is refused."""
    from confluent_kafka import Consumer, KafkaError, Producer

    conf = {
        "bootstrap.servers": secure.bootstrap(listener),
        "security.protocol": listener,
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice scope=read",
    }
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(secure.pki.ca)
    topic = f"oauth-{listener.lower()}-{next(_topics)}"
    producer = Producer(conf)
    producer.produce(topic, b"bearer")
    assert producer.flush(30) == 0
    consumer = Consumer(conf | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = None
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
            break
    consumer.close()
    assert got == b"bearer"
    errors: list[KafkaError] = []
    bad = Producer(
        conf
        | {
            "sasl.oauthbearer.config": "principal=alice principalClaimName=user",
            "error_cb": errors.append,
        }
    )
    for _ in range(40):
        if errors:
            break
        bad.poll(0.25)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "no principal claim 'sub'" in errors[0].str()
