"""Issue 20: a 3-node SASL_SSL cluster whose own traffic authenticates.

Every listener is SASL_SSL: the brokers' listener (clients, replica fetchers) with
SCRAM-SHA-512 as ``sasl.mechanism.inter.broker.protocol``, the controller listener (Raft,
forwarding, registration, heartbeats) with PLAIN as ``sasl.mechanism.controller.protocol``
(SCRAM cannot secure the controllers: its credentials live in the log they replicate, as
in Kafka). The SCRAM users exist from the first start: ``riverbed storage format
--add-scram`` on every node. A topic with replication factor 3 and min.insync.replicas 2
takes an acks=all produce (so followers fetched over authenticated connections), every
replica is in the ISR, and a consumer reads everything back.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.secure import NO_INITIAL_REBALANCE_DELAY, secure_quorum
from riverbed.testing.secure_clients import librdkafka_config

APP = ("app", "app-secret")
#: Three nodes start at once and each waits for the quorum over TLS + SASL: on a loaded
#: 2-core machine that takes longer than one broker's default 30 s.
START_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    base = tmp_path_factory.mktemp("secure-cluster")
    c = secure_quorum(base, {APP[0]: APP[1]}, NO_INITIAL_REBALANCE_DELAY, iterations=8192)
    try:
        c.start(timeout_s=START_TIMEOUT_S)
        yield c
    finally:
        c.stop()


def test_sasl_ssl_cluster_replicates_with_acks_all(cluster: QuorumCluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    pki = cluster.pki  # type: ignore[attr-defined]
    sec = {
        "protocol": "SASL_SSL",
        "mechanism": "SCRAM-SHA-512",
        "username": APP[0],
        "password": APP[1],
        "cafile": str(pki.ca),
    }
    conf = librdkafka_config(cluster.bootstrap_servers, sec)
    admin = AdminClient(conf)
    topic = "replicated-secure"
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(timeout=60)
    producer = Producer(conf | {"acks": "all", "enable.idempotence": True})
    delivered: list[str] = []
    for i in range(200):
        producer.produce(
            topic, f"v{i}".encode(), on_delivery=lambda err, msg: delivered.append(str(err))
        )
    assert producer.flush(60) == 0
    assert delivered == ["None"] * 200
    # every replica caught up: the followers fetched over SASL_SSL with SCRAM
    deadline = time.monotonic() + 30
    isrs: list[list[int]] = []
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        isrs = [sorted(p.isrs) for p in md.partitions.values()]
        if all(isr == [1, 2, 3] for isr in isrs):
            break
        time.sleep(0.5)
    assert isrs == [[1, 2, 3], [1, 2, 3]]
    consumer = Consumer(conf | {"group.id": "secure-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(got) < 200 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.add(msg.value())  # type: ignore[arg-type]
    finally:
        consumer.close()
    assert got == {f"v{i}".encode() for i in range(200)}


def test_controller_listener_refuses_an_unauthenticated_peer(cluster: QuorumCluster) -> None:
    """A client without the controllers' PLAIN login cannot talk to the quorum."""
    from riverbed.testing.secure_clients import KCAT

    assert KCAT is not None
    pki = cluster.pki  # type: ignore[attr-defined]
    done = subprocess.run(
        [
            KCAT, "-b", cluster.controller(1), "-L", "-m", "2",
            "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=broker", "-X", "sasl.password=wrong",
            "-X", f"ssl.ca.location={pki.ca}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "Invalid username or password" in done.stderr, done.stderr[-2000:]
