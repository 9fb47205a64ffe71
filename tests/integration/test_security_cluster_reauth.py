"""KIP-368 inside a cluster: with ``connections.max.reauth.ms`` on every listener, the
nodes' own SASL connections (replica fetchers on the brokers' SASL_SSL listener with
SCRAM-SHA-512, Raft on the controller listener with PLAIN) renew their sessions before
they end, as Kafka's brokers re-authenticate theirs. Before, no node renewed: every such
connection was closed by its peer at its first request after the session ("its SASL
session expired" every few seconds here, hourly with a 1 h setting), and acks=all
produces waited for the fetchers to reconnect."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.secure import secure_quorum
from riverbed.testing.secure_clients import librdkafka_config

APP = ("app", "app-secret")
REAUTH_MS = 3000
START_TIMEOUT_S = 120  # three nodes over TLS + SASL on a loaded 2-core machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = secure_quorum(
        tmp_path_factory.mktemp("reauth-cluster"),
        {APP[0]: APP[1]},
        {"connections.max.reauth.ms": str(REAUTH_MS)},
    )
    try:
        c.start(timeout_s=START_TIMEOUT_S)
        yield c
    finally:
        c.stop()


def test_the_nodes_renew_their_own_sessions(cluster: QuorumCluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    sec = {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": APP[0]}
    sec |= {"password": APP[1], "cafile": str(cluster.pki.ca)}  # type: ignore[attr-defined]
    conf = librdkafka_config(cluster.bootstrap_servers, sec)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("renewed", 1, 3)])["renewed"].result(timeout=60)
    producer = Producer(conf | {"acks": "all"})
    errors: list[object] = []
    deadline = time.monotonic() + REAUTH_MS / 1000 * 5
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("renewed", b"v", on_delivery=lambda err, _m: err and errors.append(err))
        sent += 1
        producer.poll(0.2)
    assert producer.flush(60) == 0 and not errors, errors
    expired = {
        i: cluster.nodes[i].log_path.read_text().count("its SASL session expired")
        for i in cluster.ids
    }
    assert expired == dict.fromkeys(cluster.ids, 0), expired
