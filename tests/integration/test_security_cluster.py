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
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.testing.certs import make_pki
from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.secure import jaas_plain, jaas_scram, tls_overrides
from riverbed.testing.secure_clients import librdkafka_config

BROKER_LOGIN = ("broker", "broker-secret")
APP = ("app", "app-secret")


def _node_overrides(cluster: QuorumCluster, node_id: int, pki_dir: Path) -> dict[str, str]:
    from riverbed.testing.certs import Pki

    del pki_dir
    broker_port, controller_port = cluster.ports[node_id]
    pki: Pki = cluster.pki  # type: ignore[attr-defined]
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{broker_port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas_scram(BROKER_LOGIN),
        "listener.name.controller.plain.sasl.jaas.config": jaas_plain(
            {BROKER_LOGIN[0]: BROKER_LOGIN[1]}, BROKER_LOGIN
        ),
        "default.replication.factor": "3",
        "offsets.topic.replication.factor": "3",
        "min.insync.replicas": "2",
        **tls_overrides(pki),
    }


def _format_with_scram(cluster: QuorumCluster, node_id: int) -> None:
    """``riverbed storage format --add-scram`` with the node's own configuration."""
    proc = cluster.nodes[node_id]
    config = cluster.node_dir(node_id) / "server.properties"
    config.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{k}={v}" for k, v in proc.overrides().items()]
    config.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [
            sys.executable, "-m", "riverbed.cli.main", "storage", "format", "-c", str(config),
            "--cluster-id", cluster.cluster_id,
            "--add-scram", f"SCRAM-SHA-512=[name={BROKER_LOGIN[0]},password={BROKER_LOGIN[1]}]",
            "--add-scram", f"SCRAM-SHA-512=[name={APP[0]},password={APP[1]},iterations=8192]",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (cluster.data_dir(node_id) / "bootstrap.records").exists()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    base = tmp_path_factory.mktemp("secure-cluster")
    c = QuorumCluster(base / "nodes", 3)
    c.pki = make_pki(base / "pki")  # type: ignore[attr-defined]
    for i in c.ids:
        c.nodes[i].extra_overrides.update(_node_overrides(c, i, base / "pki"))
        _format_with_scram(c, i)
    try:
        c.start()
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
            KCAT, "-b", cluster.controller(1), "-L", "-m", "5",
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
