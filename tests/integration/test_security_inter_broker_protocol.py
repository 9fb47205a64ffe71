"""Issue 20: ``security.inter.broker.protocol`` chooses the listener brokers replicate
over, in a real 2-node cluster.

Each node has a PLAINTEXT listener (clients) and an SSL one, and names neither in
``inter.broker.listener.name``: ``security.inter.broker.protocol=SSL`` makes the listener
named SSL the inter-broker one (Kafka's rule; the config side is
tests/unit/server/test_inter_broker_listener.py). A replication-factor-2 topic with
``min.insync.replicas=2`` takes an acks=all produce (the follower fetched it) and the
SSL listeners, which no client uses, hold the brokers' connections.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.certs import make_pki
from riverbed.testing.cluster import free_port
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.secure import (
    NO_INITIAL_REBALANCE_DELAY,
    tls_overrides,
)

from .test_metrics import scrape, total
from .test_quorum import OVERRIDES as QUORUM_OVERRIDES
from .test_replication import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CONNECTIONS = "kafka_server_socket_server_metrics_connection_count"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    base = tmp_path_factory.mktemp("sibp")
    pki = make_pki(base / "pki")
    c = QuorumCluster(base / "nodes", 2, overrides=QUORUM_OVERRIDES)
    for i in c.ids:
        broker_port, controller_port = c.ports[i]
        ssl = f"SSL://127.0.0.1:{free_port()}"
        plain = f"PLAINTEXT://127.0.0.1:{broker_port}"
        c.nodes[i].extra_overrides.update(
            {
                "listeners": f"{plain},{ssl},CONTROLLER://127.0.0.1:{controller_port}",
                "advertised.listeners": f"{plain},{ssl}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
                "security.inter.broker.protocol": "SSL",
                "default.replication.factor": "2",
                "offsets.topic.replication.factor": "2",
                "min.insync.replicas": "2",
                **tls_overrides(pki),
                **NO_INITIAL_REBALANCE_DELAY,
            }
        )
    try:
        c.start()
        load_group_coordinators(c.nodes[1].bootstrap)
        yield c
    finally:
        c.stop()


def test_replication_runs_over_the_listener_the_protocol_names(cluster: QuorumCluster) -> None:
    bootstrap = cluster.bootstrap_servers  # the PLAINTEXT listeners
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("sibp", 1, 2)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [f"over SSL {i}".encode() for i in range(20)]
    delivered: list[object] = []
    for v in values:
        producer.produce("sibp", v, on_delivery=lambda err, _msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * len(values)  # acks=all with min.insync.replicas=2
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "sibp", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["sibp"])
    got: list[bytes] = []
    try:
        while len(got) < len(values):
            msg = consumer.poll(30)
            assert msg is not None, got
            if msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values
    # only brokers connect to the SSL listeners (the follower's fetcher among them)
    wait_for(
        "inter-broker connections on the SSL listeners",
        lambda: (
            sum(
                total(scrape(cluster.nodes[i].http_url), CONNECTIONS, listener="SSL")
                for i in cluster.ids
            )
            >= 1
        ),
    )
