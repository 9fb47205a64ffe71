"""AlterPartitionReassignments / ListPartitionReassignments through the controller.

kafka-python's admin client (unmodified) against real riverbed processes:

- one node: a reassignment to the current replicas is a no-op answered NONE; a target
  naming an unregistered broker is INVALID_REPLICA_ASSIGNMENT for that partition, an
  unknown partition UNKNOWN_TOPIC_OR_PARTITION, and nothing is listed as moving;
- three nodes (the KRaft quorum of `riverbed.testing.quorum_cluster`): a move to another
  broker completes once the new replica is in sync; a shrink to the in-sync leader
  completes at once; a move to a broker that is down is listed (replicas = target + old,
  adding, removing) until it is cancelled. Sent to a broker that is not the active
  controller, the request is forwarded and the answer comes once that broker's metadata
  shows the move. DescribeQuorum asked of any broker is answered by the quorum leader.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError, UnknownTopicOrPartitionError

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    DescribeQuorumRequest,
    MetadataRequest,
)
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.quorum_cluster import QuorumCluster

pytestmark = pytest.mark.integration


def admin_for(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)


def replicas_of(admin: KafkaAdminClient, topic: str) -> dict[int, list[int]]:
    [desc] = admin.describe_topics([topic])
    return {p["partition_index"]: list(p["replica_nodes"]) for p in desc["partitions"]}


def call(port: int, key: int, version: int, body: Any) -> Any:
    header = RequestHeader(key, version, 7, "reassign-test")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_request(header, body))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            buf += chunk
    return decode_response(header, buf[4:])


def test_single_node_noop_and_errors(broker: BrokerProcess, topic_name: str) -> None:
    admin = admin_for(broker.bootstrap)
    try:
        admin.create_topics({topic_name: {"num_partitions": 2, "replication_factor": 1}})
        tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
        me = broker.node_id
        assert admin.alter_partition_reassignments({tp0: [me], tp1: [me]}) == {
            tp0: None,
            tp1: None,
        }
        assert admin.list_partition_reassignments() == {}
        assert replicas_of(admin, topic_name) == {0: [me], 1: [me]}

        missing = TopicPartition(topic_name, 7)
        result = admin.alter_partition_reassignments({tp0: [me, 99], missing: [me]})
        assert result == {
            tp0: InvalidReplicationAssignmentError,
            missing: UnknownTopicOrPartitionError,
        }
        assert admin.list_partition_reassignments() == {}
        assert replicas_of(admin, topic_name) == {0: [me], 1: [me]}
    finally:
        admin.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = QuorumCluster(Path(tmp_path_factory.mktemp("reassign")), 3)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def wait_for(what: str, check: Any, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_describe_quorum_through_every_broker(cluster: QuorumCluster) -> None:
    """DescribeQuorum on any broker listener is passed on to the quorum leader."""
    Q = DescribeQuorumRequest
    req = Q(
        topics=[
            Q.TopicData(
                topic_name="__cluster_metadata", partitions=[Q.PartitionData(partition_index=0)]
            )
        ]
    )
    leaders = set()
    for i in cluster.ids:
        resp = call(cluster.nodes[i].port, ApiKey.DESCRIBE_QUORUM, 1, req)
        [part] = resp.topics[0].partitions
        assert resp.error_code == 0 and part.error_code == 0, resp
        assert sorted(v.replica_id for v in part.current_voters) == cluster.ids
        leaders.add(part.leader_id)
    [leader] = leaders
    assert leader in cluster.ids


def test_three_node_reassignment(cluster: QuorumCluster) -> None:
    admin = admin_for(cluster.bootstrap_servers)
    try:
        wait_for("3 brokers", lambda: len(admin.describe_cluster()["brokers"]) == 3)
        controller = admin.describe_cluster()["controller_id"]
        a, b = (i for i in cluster.ids if i != controller)
        admin.create_topics(
            {
                "moving": {"assignments": {0: [a]}},
                "stuck": {"assignments": {0: [a]}},
                "shrinking": {"assignments": {0: [controller, a, b]}},
            }
        )
        wait_for("the topics", lambda: replicas_of(admin, "moving") == {0: [a]})

        # a move to another broker: accepted, and complete once the new replica is in sync
        tp = TopicPartition("moving", 0)
        assert admin.alter_partition_reassignments({tp: [b]}) == {tp: None}
        wait_for("the move to complete", lambda: replicas_of(admin, "moving") == {0: [b]})
        assert admin.list_partition_reassignments() == {}

        # shrinking to the in-sync leader completes at once
        [desc] = admin.describe_topics(["shrinking"])
        leader = desc["partitions"][0]["leader_id"]
        shrink = TopicPartition("shrinking", 0)
        assert admin.alter_partition_reassignments({shrink: [leader]}) == {shrink: None}
        assert admin.list_partition_reassignments() == {}  # the controller: done at once
        # a broker's Metadata shows it once that broker's image has the change
        wait_for("the shrink", lambda: replicas_of(admin, "shrinking") == {0: [leader]})

        # a target that cannot catch up (b is down) stays listed until it is cancelled
        cluster.kill(b)
        stuck = TopicPartition("stuck", 0)
        assert admin.alter_partition_reassignments({stuck: [a, b]}) == {stuck: None}
        assert admin.list_partition_reassignments() == {
            stuck: {"replicas": [a, b], "adding_replicas": [b], "removing_replicas": []}
        }
        assert admin.alter_partition_reassignments({stuck: None}) == {stuck: None}
        assert admin.list_partition_reassignments() == {}
        assert replicas_of(admin, "stuck") == {0: [a]}
    finally:
        admin.close()

    # through a broker that is not the active controller: forwarded, and answered once
    # that broker's own metadata shows the move
    R = AlterPartitionReassignmentsRequest
    req = R(
        timeout_ms=10000,
        topics=[
            R.ReassignableTopic(
                name="stuck",
                partitions=[R.ReassignablePartition(partition_index=0, replicas=[a, b])],
            )
        ],
    )
    port = cluster.nodes[a].port
    resp = call(port, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, req)
    assert [p.error_code for t in resp.responses for p in t.partitions] == [0]
    meta = call(
        port,
        ApiKey.METADATA,
        12,
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="stuck")]),
    )
    assert meta.topics[0].partitions[0].replica_nodes == [a, b]
