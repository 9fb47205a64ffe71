"""Partition leadership on a 3-node cluster of real riverbed processes (issue 11).

- a topic with replication factor 3 keeps 3 replicas led by the first; the followers
  answer Produce (v10: with the leader and its endpoint, KIP-951), Fetch (v12: with the
  leader) and ListOffsets with NOT_LEADER_OR_FOLLOWER, while a confluent-kafka producer
  and consumer bootstrapped at followers only work through the leader;
- PREFERRED ElectLeaders (confluent-kafka AdminClient, and riverbed's own client through
  a node that is not the active controller, which forwards it and answers once its own
  metadata shows the result): not needed while the preferred replica leads; after a
  SIGKILL moved leadership to the next ISR member and the preferred replica came back in
  sync, it moves leadership home, and a producer whose metadata still names the old
  leader is answered NOT_LEADER_OR_FOLLOWER there, redirected, and delivers to the new one;
- UNCLEAN ElectLeaders: when the only ISR member of a partition dies, the partition has
  no leader (clean elections pick from the ISR only) until an unclean election hands it
  to a live replica outside the ISR, which then takes writes.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.cli.wire import WireClient
from riverbed.metadata.partition_control import ELECTION_PREFERRED
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ElectLeadersRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.testing.quorum_cluster import QuorumCluster

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "5000",
}
#: Liveness bound for one wait on the cluster (not a timing under test).
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with QuorumCluster(tmp_path_factory.mktemp("leadership"), 3, overrides=OVERRIDES) as c:
        yield c.start(timeout_s=60)


def broker(cluster: QuorumCluster, node_id: int) -> str:
    return f"127.0.0.1:{cluster.ports[node_id][0]}"


def partitions(cluster: QuorumCluster, node_id: int, topic: str) -> dict[int, Any]:
    """Metadata of ``topic`` as node ``node_id`` answers it: partition -> its entry."""
    with WireClient(broker(cluster, node_id)) as client:
        reply: Any = client.request(
            ApiKey.METADATA,
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
            ),
        )
    (t,) = reply.topics
    return {p.partition_index: p for p in t.partitions} | {-1: t.topic_id}


def wait_partition(cluster: QuorumCluster, topic: str, index: int, cond: Any) -> Any:
    """Wait until every live node's metadata for ``topic``-``index`` satisfies ``cond``."""
    deadline = time.monotonic() + WAIT_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            views = [
                partitions(cluster, i, topic)[index]
                for i, node in cluster.nodes.items()
                if node.proc is not None and node.proc.poll() is None
            ]
            last = views
            if views and all(cond(p) for p in views):
                return views[0]
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{topic}-{index} never matched: {last}")


def produce_request(topic: str, index: int) -> ProduceRequest:
    P = ProduceRequest
    batch = build_batch([SimpleRecord(b"raw")], now_ms=int(time.time() * 1000))
    return P(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=index, records=batch)]
            )
        ],
    )


def fetch_request(topic: str, index: int) -> FetchRequest:
    F = FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[
                    F.FetchPartition(partition=index, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


def list_offsets_request(topic: str, index: int) -> ListOffsetsRequest:
    L = ListOffsetsRequest
    return L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=topic,
                partitions=[L.ListOffsetsPartition(partition_index=index, timestamp=-1)],
            )
        ],
    )


def live_bootstrap(cluster: QuorumCluster) -> str:
    return ",".join(
        broker(cluster, i)
        for i, node in cluster.nodes.items()
        if node.proc is not None and node.proc.poll() is None
    )


def elect(cluster: QuorumCluster, kind: Any, topic: str, index: int) -> Any:
    """The election's outcome for one partition: None (done) or its KafkaError. (A new
    admin client each time: librdkafka keeps calling a dead controller it cached.)"""
    admin = AdminClient({"bootstrap.servers": live_bootstrap(cluster)})
    tp = TopicPartition(topic, index)
    try:
        results = admin.elect_leaders(kind, [tp]).result(WAIT_S)
    except KafkaException as exc:
        return exc.args[0]
    (outcome,) = results.values()
    return outcome.args[0] if isinstance(outcome, KafkaException) else outcome


def test_followers_refuse_clients_and_name_the_leader(cluster: QuorumCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"].result(WAIT_S)
    p = wait_partition(cluster, "rf3", 0, lambda p: p.leader_id > 0)
    leader, epoch = p.leader_id, p.leader_epoch
    # the full assignment, led by its first replica (the preferred one), which is in sync
    assert sorted(p.replica_nodes) == [1, 2, 3] and leader == p.replica_nodes[0]
    assert leader in p.isr_nodes
    followers = [i for i in cluster.ids if i != leader]
    for f in followers:
        with WireClient(broker(cluster, f)) as client:
            assert client.version(ApiKey.PRODUCE) >= 10 and client.version(ApiKey.FETCH) >= 12
            produced: Any = client.request(ApiKey.PRODUCE, produce_request("rf3", 0))
            part = produced.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
                leader,
                epoch,
            )
            assert [(e.node_id, e.host, e.port) for e in produced.node_endpoints] == [
                (leader, "127.0.0.1", cluster.ports[leader][0])
            ]
            fetched: Any = client.request(ApiKey.FETCH, fetch_request("rf3", 0))
            part = fetched.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not part.records
            assert part.current_leader.leader_id == leader
            listed: Any = client.request(ApiKey.LIST_OFFSETS, list_offsets_request("rf3", 0))
            assert listed.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    # real clients that only know followers: metadata sends them to the leader
    at_followers = ",".join(broker(cluster, f) for f in followers)
    producer = Producer({"bootstrap.servers": at_followers, "acks": "all"})
    sent = [f"v{i}".encode() for i in range(50)]
    for value in sent:
        producer.produce("rf3", value=value, partition=0)
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer(
        {"bootstrap.servers": at_followers, "group.id": "rf3", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("rf3", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == sent


def elect_through(cluster: QuorumCluster, node_id: int, kind: int, topic: str, index: int) -> int:
    """ElectLeaders sent to ``node_id``'s broker listener; the partition's error code."""
    EL = ElectLeadersRequest
    req = EL(
        election_type=kind,
        topic_partitions=[EL.TopicPartitions(topic=topic, partitions=[index])],
        timeout_ms=int(WAIT_S * 1000),
    )
    with WireClient(broker(cluster, node_id)) as client:
        reply: Any = client.request(ApiKey.ELECT_LEADERS, req)
    assert reply.error_code == 0, reply
    (result,) = reply.replica_election_results
    return int(result.partition_result[0].error_code)


def retry(attempt: Any, done: Any) -> Any:
    """``attempt()`` until ``done(result)`` or WAIT_S; the last result."""
    deadline = time.monotonic() + WAIT_S
    result = attempt()
    while not done(result) and time.monotonic() < deadline:
        time.sleep(0.2)
        result = attempt()
    return result


def _active_controller(cluster: QuorumCluster) -> int:
    """The quorum leader (Metadata's controller id names a live broker, not it)."""
    from .test_quorum import wait_leader

    alive = [i for i, n in cluster.nodes.items() if n.proc and n.proc.poll() is None]
    return wait_leader(cluster, alive, 15)[0]


def produce_requests_by_broker(stats: dict[str, Any]) -> dict[int, int]:
    """Produce requests a librdkafka client sent, per broker node id (its statistics)."""
    out: dict[int, int] = {}
    for b in stats["brokers"].values():
        if b.get("nodeid", -1) >= 0:
            out[b["nodeid"]] = int(b.get("req", {}).get("Produce", 0))
    return out


def consume(
    cluster: QuorumCluster, topic: str, index: int, count: int, until: bytes | None = None
) -> list[bytes]:
    """The partition's values from offset 0: ``count`` of them, or up to ``until``."""
    consumer = Consumer(
        {
            "bootstrap.servers": live_bootstrap(cluster),
            "group.id": f"read-{topic}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, index, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
            if msg.value() == until:
                break
    consumer.close()
    return got


def test_preferred_election_moves_leadership_home_and_redirects_a_stale_producer(
    cluster: QuorumCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    # partition 0 is preferred on node 1; partition 1, led by 2, gives a client the
    # topic's metadata
    new = NewTopic("moved", 2, replica_assignment=[[1, 2, 3], [2, 3, 1]])
    admin.create_topics([new])["moved"].result(WAIT_S)
    wait_partition(cluster, "moved", 0, lambda p: p.leader_id == 1)
    first = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(10):
        first.produce("moved", value=f"a{i}".encode(), partition=0)
    assert first.flush(WAIT_S) == 0
    wait_partition(cluster, "moved", 0, lambda p: sorted(p.isr_nodes) == [1, 2, 3])
    assert elect(cluster, ElectionType.PREFERRED, "moved", 0).code() == (
        KafkaError.ELECTION_NOT_NEEDED
    )

    cluster.kill(1)  # a clean election: the next in-sync replica in assignment order
    wait_partition(cluster, "moved", 0, lambda p: p.leader_id == 2)
    cluster.start_nodes([1], timeout_s=60)
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "topic.metadata.refresh.interval.ms": 600_000,  # keep the stale view
            "statistics.interval.ms": 100,
            "stats_cb": lambda s: stats.append(json.loads(s)),
        }
    )
    for i in range(10):
        producer.produce("moved", value=f"b{i}".encode(), partition=0)  # led by 2
    producer.produce("moved", value=b"warm", partition=1)
    assert producer.flush(WAIT_S) == 0  # the producer now knows: moved-0 is led by 2
    producer.poll(0.5)  # a statistics report after the warm-up
    before = produce_requests_by_broker(stats[-1])

    # node 1 catches up and rejoins the ISR (replication); meanwhile the preferred replica
    # is not available. Through a node that is not the active controller: it forwards the
    # election and answers once its own metadata shows the new leader.
    via = next(i for i in cluster.ids if i != _active_controller(cluster))
    code = retry(
        lambda: elect_through(cluster, via, ELECTION_PREFERRED, "moved", 0),
        lambda c: c != ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    )
    assert code == 0
    assert partitions(cluster, via, "moved")[0].leader_id == 1
    wait_partition(cluster, "moved", 0, lambda p: p.leader_id == 1)

    delivered: list[Any] = []
    producer.produce(
        "moved", value=b"home", partition=0, on_delivery=lambda e, m: delivered.append((e, m))
    )
    assert producer.flush(WAIT_S) == 0
    ((error, msg),) = delivered
    assert error is None and msg.offset() == 20
    producer.poll(0.5)  # one more statistics report
    after = produce_requests_by_broker(stats[-1])
    sent = {b: after.get(b, 0) - before.get(b, 0) for b in after}
    # the stale produce went to 2 (which answered NOT_LEADER_OR_FOLLOWER), then to 1
    assert sent.get(2, 0) >= 1 and sent.get(1, 0) >= 1, (before, after)
    expected = [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(10)]
    assert consume(cluster, "moved", 0, 21) == [*expected, b"home"]


def test_unclean_election_of_a_partition_whose_isr_died(cluster: QuorumCluster) -> None:
    """On a broker-only node 4 and node 3 (the quorum of 1, 2, 3 keeps a majority)."""
    cluster.add_broker(4, timeout_s=60)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic("lost", 1, replica_assignment=[[4, 3]])
    admin.create_topics([new])["lost"].result(WAIT_S)
    wait_partition(cluster, "lost", 0, lambda p: p.leader_id == 4)
    cluster.kill(3)  # fenced: it leaves the ISR
    wait_partition(cluster, "lost", 0, lambda p: p.isr_nodes == [4])
    cluster.kill(4)  # the last ISR member: no clean election is possible
    p = wait_partition(cluster, "lost", 0, lambda p: p.leader_id == -1)
    assert p.isr_nodes == [4]
    cluster.start_nodes([3], timeout_s=60)
    # back, but outside the ISR: it could lack acknowledged records, so it stays a follower
    p = wait_partition(cluster, "lost", 0, lambda p: p.leader_id == -1)
    assert p.isr_nodes == [4]
    outcome = elect(cluster, ElectionType.PREFERRED, "lost", 0)
    assert outcome is not None
    assert outcome.code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    outcome = elect(cluster, ElectionType.UNCLEAN, "lost", 0)
    assert outcome is None, outcome
    p = wait_partition(cluster, "lost", 0, lambda p: p.leader_id == 3)
    assert p.isr_nodes == [3]
    producer = Producer({"bootstrap.servers": live_bootstrap(cluster), "acks": "all"})
    producer.produce("lost", value=b"after", partition=0)
    assert producer.flush(WAIT_S) == 0
    assert consume(cluster, "lost", 0, 1_000, until=b"after")[-1:] == [b"after"]
