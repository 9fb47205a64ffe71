"""Issue 20: a principal mapped from a client certificate is the one ACLs decide for.

One broker with Kafka's StandardAuthorizer (``allow.everyone.if.no.acl.found=false``), a
PLAINTEXT listener whose User:ANONYMOUS is the super user that administers, and an SSL
listener requiring client certificates, mapped by ``ssl.principal.mapping.rules`` from
``CN=<name>,OU=eng,O=riverbed`` to ``User:<name>``. alice's certificate maps to User:alice,
which holds WRITE and READ on one topic; bob's maps to User:bob, which holds nothing. The
ACLs are the only difference between the two, so a rule that decided for the DN instead of
the mapped name, or for User:ANONYMOUS, would let both or neither through.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from riverbed.testing.certs import Pki, make_pki
from riverbed.testing.cluster import BrokerProcess, free_port
from riverbed.testing.secure import pkcs12_stores, plaintext_and_ssl_listeners
from riverbed.testing.secure_clients import librdkafka_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RULES = "RULE:^CN=([a-z]+),OU=eng,O=riverbed$/$1/,DEFAULT"
TOPIC = "mtls-guarded"
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki, int]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"), {"alice": "eng", "bob": "eng"})
    ssl_port = free_port()
    proc = BrokerProcess()
    proc.extra_overrides.update(
        plaintext_and_ssl_listeners(proc, ssl_port)
        | pkcs12_stores(pki)
        | {
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.principal.mapping.rules": RULES,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }
    )
    proc.start()
    try:
        yield proc, pki, ssl_port
    finally:
        proc.close()


def _grant_alice(proc: BrokerProcess) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=60)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            TOPIC,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.READ)
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=60)


def _produce_codes(pki: Pki, port: int, who: str) -> list[int]:
    """One record produced over mTLS with ``who``'s certificate: the delivery's error code
    (0 when written)."""
    from confluent_kafka import KafkaError, Producer

    key, crt = pki.client(who)
    sec = {"protocol": "SSL", "cafile": str(pki.ca), "certfile": str(crt), "keyfile": str(key)}
    codes: list[int] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        codes.append(0 if err is None else err.code())

    producer = Producer(librdkafka_config(f"127.0.0.1:{port}", sec) | {"message.timeout.ms": 20000})
    producer.produce(TOPIC, f"from {who}".encode(), on_delivery=report)
    producer.flush(30)
    return codes


def test_acls_decide_for_the_principal_mapped_from_the_certificate(
    broker: tuple[BrokerProcess, Pki, int],
) -> None:
    proc, pki, port = broker
    _grant_alice(proc)
    assert _produce_codes(pki, port, "alice") == [0]
    assert _produce_codes(pki, port, "bob") == [TOPIC_AUTHORIZATION_FAILED]
