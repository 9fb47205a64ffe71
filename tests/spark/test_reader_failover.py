"""The columnar reader follows leadership on a 3-node cluster of real riverbed processes:
a fetch sent to a follower (NOT_LEADER_OR_FOLLOWER) goes to the leader after fresh
metadata, and a range read while its leader is SIGKILLed finishes on the new leader with
every record exactly once, in order."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.spark import fetch_reader
from riverbed.spark.fetch_reader import PartitionClient
from riverbed.spark.offsets import OffsetRange
from riverbed.spark.options import fetch_settings
from riverbed.testing.quorum_cluster import QuorumCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OVERRIDES = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "5000",
}
RECORDS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with QuorumCluster(tmp_path_factory.mktemp("reader"), 3, overrides=OVERRIDES) as c:
        yield c.start(timeout_s=60)


def _topic(cluster: QuorumCluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for fut in admin.create_topics([NewTopic(name, 1, 3)]).values():
        fut.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(name, f"v{i}".encode())
        if i % 500 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0


def _settings(cluster: QuorumCluster) -> Any:
    # small fetches: the range takes many requests, so the leader can change in between
    return fetch_settings(
        {"bootstrap.servers": cluster.bootstrap_servers, "max.partition.fetch.bytes": "2000"}
    )


def _values(batches: Any) -> list[bytes]:
    return [v for b in batches for v in b.column("value").to_pylist()]


def test_a_fetch_at_a_follower_goes_to_the_leader(
    cluster: QuorumCluster, caplog: pytest.LogCaptureFixture
) -> None:
    _topic(cluster, "follow")
    client = PartitionClient(_settings(cluster), "follow", 0)
    assert client.refresh() and client.leader is not None
    leader = client.leader
    client.leader = next(n for n in cluster.ids if n != leader)  # stale: a follower
    r = OffsetRange("follow", 0, 0, RECORDS)
    with caplog.at_level(logging.INFO, logger=fetch_reader.__name__):
        try:
            values = _values(fetch_reader._read(client, r, False, True, 60_000))
        finally:
            client.close()
    assert values == [f"v{i}".encode() for i in range(RECORDS)]
    assert "NOT_LEADER_OR_FOLLOWER; refreshing its leader" in caplog.text
    assert client.leader == leader


def test_a_range_read_across_a_leader_kill(cluster: QuorumCluster) -> None:
    _topic(cluster, "failover")
    probe = PartitionClient(_settings(cluster), "failover", 0)
    assert probe.refresh() and probe.leader is not None
    old_leader = probe.leader
    probe.close()
    client = PartitionClient(_settings(cluster), "failover", 0)
    batches = fetch_reader._read(
        client, OffsetRange("failover", 0, 0, RECORDS), False, True, 90_000
    )
    try:
        first = next(batches)
        cluster.kill(old_leader)
        values = _values([first, *batches])
    finally:
        client.close()
    assert values == [f"v{i}".encode() for i in range(RECORDS)]
    assert client.leader not in (None, old_leader)
