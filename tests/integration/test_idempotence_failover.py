"""Idempotence across a leader fail-over on 3 replicated nodes (issue 14).

An idempotent acks=all producer keeps producing while the partition leader is
SIGKILLed: the new leader checks sequences against producer state it rebuilt from the
batches it replicated as a follower (the same header-only update a leader runs), so the
producer's retries of batches the old leader had replicated are acknowledged as
duplicates. Read back: every value once, in the order it was produced, and
DescribeProducers on the new leader shows the producer at its last sequence.
"""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.cli.producers import describe
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_replication import OVERRIDES, create_topic, kill_leader_under_production, read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("idem-failover"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def test_no_duplicates_no_reordering_across_leader_sigkill(cluster: QuorumCluster) -> None:
    topic = "idempotent-failover"
    admin = create_topic(cluster, topic)
    prod, leader = kill_leader_under_production(cluster, admin, topic, 1000)
    end = max(prod.acked.values()) + 1
    got = read_all(cluster, topic, end)
    values = [got[o] for o in sorted(got)]
    numbers = [int(v[1:]) for v in values]
    assert len(numbers) == len(set(numbers)), "a record was written twice"
    assert numbers == sorted(numbers), "records reordered"
    assert all(got.get(o) == v for v, o in prod.acked.items())
    # the new leader's producer state: one producer, at the last record's sequence
    survivors = ",".join(f"127.0.0.1:{cluster.ports[i][0]}" for i in cluster.ids if i != leader)
    (row,) = describe(survivors, topic, [0])
    (producer,) = row["producers"]
    if producer["producer_epoch"] == 0:  # (a client may bump its epoch after a timeout)
        assert producer["last_sequence"] == len(numbers) - 1
    else:
        assert 0 <= producer["last_sequence"] < len(numbers)
