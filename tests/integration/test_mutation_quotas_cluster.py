"""Issue 20, controller mutation quotas (KIP-599) across brokers: the active controller
enforces ``controller_mutation_rate`` once for the whole cluster, as Kafka's ControllerApis
does, so a client cannot multiply its rate by spreading its CreateTopics over brokers.

Node 1 is the only voter (the active controller), node 2 a broker-only node that forwards
the client's CreateTopics / DeleteTopics to it in an Envelope carrying the client's
principal, client id and request version. The requests go through riverbed's wire client to
one chosen node each (Kafka's admin clients send them to the cluster's controller id).

``controller.quota.window.num=1``: the bucket's burst is one second of the rate. At 0.1
mutations/s a topic of 8 partitions leaves the bucket 7.9 tokens short: 79 s before the
client may mutate again, longer than the steps below take.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from riverbed.cli.main import main
from riverbed.cli.wire import WireClient
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QuorumCluster

RATE = 0.1
OWED_MS = int((8 - RATE) / RATE * 1000)  # the first topic's overdraft, in refill time
THROTTLED = int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
Topic = CreateTopicsRequest.CreatableTopic


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = QuorumCluster(
        tmp_path_factory.mktemp("mq-cluster"),
        1,
        overrides={"num.partitions": "1", "controller.quota.window.num": "1"},
    )
    try:
        c.start(timeout_s=60)
        c.add_broker(2, timeout_s=60)
        args = ["quotas", "alter", "-b", c.nodes[1].bootstrap, "--entity-type", "clients"]
        args += ["--entity-name", "spread", "--add-config", f"controller_mutation_rate={RATE}"]
        assert main(args) == 0
        yield c
    finally:
        c.stop()


def _create(
    cluster: QuorumCluster, node: int, version: int, name: str, partitions: int, client: str
) -> CreateTopicsResponse:
    """One CreateTopics at ``version`` on its own connection to ``node`` (a throttled
    connection is muted for its throttle)."""
    request = CreateTopicsRequest(
        topics=[Topic(name=name, num_partitions=partitions, replication_factor=1)],
        timeout_ms=int(scaled_s(30) * 1000),
    )
    with WireClient(cluster.nodes[node].bootstrap, client_id=client) as wire:
        answer = wire.request_at(ApiKey.CREATE_TOPICS, version, request)
    assert isinstance(answer, CreateTopicsResponse)
    return answer


def _codes(answer: CreateTopicsResponse) -> list[tuple[str, int]]:
    return [(t.name, t.error_code) for t in answer.topics]


def test_a_client_spreading_its_mutations_over_brokers_gets_the_rate_once(
    cluster: QuorumCluster,
) -> None:
    # through the active controller's own broker: a full bucket takes 8 partitions whole
    first = _create(cluster, 1, 7, "mq-spread-a", 8, "spread")
    assert _codes(first) == [("mq-spread-a", 0)]

    # through the other broker: the same client's bucket, at the controller, is empty
    # (per-broker buckets would have accepted it: node 2's was full)
    second = _create(cluster, 2, 7, "mq-spread-b", 1, "spread")
    assert _codes(second) == [("mq-spread-b", THROTTLED)]
    assert second.topics[0].error_message == "The throttling quota has been exceeded."
    assert 1_000 < second.throttle_time_ms <= OWED_MS

    # a permissive version (CreateTopics v5) through node 2: accepted, and throttled
    legacy = _create(cluster, 2, 5, "mq-spread-c", 1, "spread")
    assert _codes(legacy) == [("mq-spread-c", 0)]
    assert 1_000 < legacy.throttle_time_ms <= OWED_MS + 10_000

    # DeleteTopics v6 (strict) through node 2: refused, the topic stays
    with WireClient(cluster.nodes[2].bootstrap, client_id="spread") as wire:
        State = DeleteTopicsRequest.DeleteTopicState
        request = DeleteTopicsRequest(topics=[State(name="mq-spread-a")], timeout_ms=30_000)
        deleted = wire.request_at(ApiKey.DELETE_TOPICS, 6, request)
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in deleted.responses] == [("mq-spread-a", THROTTLED)]

    # the quota is the client's, not the forwarding broker's: another client id is free
    other = _create(cluster, 2, 7, "mq-other", 8, "other")
    assert _codes(other) == [("mq-other", 0)] and other.throttle_time_ms == 0

    with WireClient(cluster.nodes[2].bootstrap) as wire:
        listed = wire.request(ApiKey.METADATA, MetadataRequest(topics=None))
    assert isinstance(listed, MetadataResponse)
    names = {t.name for t in listed.topics}
    assert {"mq-spread-a", "mq-spread-c", "mq-other"} <= names
    assert "mq-spread-b" not in names
