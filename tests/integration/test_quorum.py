"""A 3-node KRaft quorum of real riverbed processes (`riverbed.testing.quorum_cluster`).

One cluster (module fixture) with frequent metadata snapshots and fast elections:

- produce + consume with confluent-kafka across partitions led by different nodes;
- SIGKILL of the Raft leader while an AdminClient keeps creating topics (retrying): a
  new leader is elected within seconds (DescribeQuorum), and after every node restarts
  every topic whose creation was acknowledged is still there, on every node;
- a follower whose data dir is removed restarts empty, downloads a snapshot from the leader
  (FetchSnapshot: its log says it loaded one, and a ``.checkpoint`` it did not write sits in
  its metadata dir) and then serves the same metadata (topics, ids, partitions, leaders).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import subprocess
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.cli.main import main
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
)
from riverbed.raft.messages import DescribeQuorumRequest
from riverbed.server.raft_transport import KafkaRaftTransport
from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QuorumCluster

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.snapshot.minimum.records": "40",
    "metadata.log.max.record.bytes.between.snapshots": "4096",
    "max.replication.lag.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
}
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
#: Seconds the quorum may take to elect a new leader after the old one is killed.
FAILOVER_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("quorum"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def describe(cluster: QuorumCluster, node_id: int) -> Any:
    host, port = cluster.controller(node_id).split(":")

    async def go() -> Any:
        transport = KafkaRaftTransport(-1, {0: (host, int(port))})
        try:
            return await asyncio.wait_for(transport.send(0, DescribeQuorumRequest()), 3)
        finally:
            await transport.close()

    return asyncio.run(go())


def leader_of(cluster: QuorumCluster, among: list[int]) -> tuple[int, int] | None:
    """(leader id, epoch) agreed by the leader itself, or None."""
    for i in among:
        try:
            reply = describe(cluster, i)
        except Exception:
            continue
        if reply.error_code == 0 and reply.leader_id in among:
            return reply.leader_id, reply.leader_epoch
    return None


def wait_leader(cluster: QuorumCluster, among: list[int], timeout_s: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = leader_of(cluster, among)
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no leader among {among} within {timeout_s}s")


def metadata_of(port: int) -> dict[str, Any]:
    """Metadata v12 straight from one node: brokers, and per topic (id, {partition: leader})."""
    header = RequestHeader(3, 12, 7, "quorum-test")
    frame = encode_request(header, MetadataRequest(topics=None))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", _read(sock, 4))[0]
        reply: Any = decode_response(header, _read(sock, size))
    return {
        "brokers": sorted((b.node_id, b.port) for b in reply.brokers),
        "topics": {
            t.name: (t.topic_id, sorted((p.partition_index, p.leader_id) for p in t.partitions))
            for t in reply.topics
        },
    }


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def wait_metadata(port: int, cond: Any, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = metadata_of(port)
            if cond(last):
                return last
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"metadata on port {port} never matched: {last}")


def test_produce_and_consume_across_nodes(cluster: QuorumCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("events", 3, 1)])["events"].result(30)
    port = cluster.ports[1][0]
    md = wait_metadata(port, lambda m: "events" in m["topics"])
    leaders = {leader for _p, leader in md["topics"]["events"][1]}
    assert leaders == {1, 2, 3}  # the controller spread the partitions over the brokers
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    sent = {f"k{i}".encode(): f"v{i}".encode() for i in range(60)}
    for key, value in sent.items():
        producer.produce("events", value=value, key=key)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "quorum-test",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition("events", p, 0) for p in range(3)])
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got[msg.key()] = msg.value()
    consumer.close()
    assert got == sent


def test_kcat_auto_creates_through_a_follower(cluster: QuorumCluster) -> None:
    """kcat produces to a topic that does not exist through one node only: the node forwards
    the auto-creation to the active controller and serves the new topic."""
    assert KCAT is not None, "kcat is not installed (make sysdeps installs it)"
    leader, _epoch = wait_leader(cluster, list(cluster.ids), 15)
    follower = next(i for i in cluster.ids if i != leader)
    bootstrap = f"127.0.0.1:{cluster.ports[follower][0]}"
    lines = "".join(f"value {i}\n" for i in range(20))
    subprocess.run(
        [
            KCAT,
            "-b",
            bootstrap,
            "-P",
            "-t",
            "auto-kcat",
            "-X",
            "topic.metadata.refresh.interval.ms=200",
        ],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    expected = sorted(f"value {i}" for i in range(20))
    # the node kcat's consumer asks first may not have applied the new topic yet (it
    # answers UNKNOWN_TOPIC and kcat exits): read again until the deadline
    deadline = time.monotonic() + scaled_s(60)
    while True:
        read = subprocess.run(
            [KCAT, "-b", cluster.bootstrap_servers, "-C", "-t", "auto-kcat", "-e", "-q", "-f", "%s\\n"],
            capture_output=True,
            timeout=scaled_s(60),
        )  # fmt: skip
        out = read.stdout.decode()
        if (read.returncode == 0 and sorted(out.splitlines()) == expected) or (
            time.monotonic() > deadline
        ):
            break
        time.sleep(0.5)
    assert read.returncode == 0, read.stderr.decode()[-2000:]
    assert sorted(out.splitlines()) == expected
    for i in cluster.ids:  # every node serves the topic, led by one of them
        md = wait_metadata(cluster.ports[i][0], lambda m: "auto-kcat" in m["topics"])
        assert md["topics"]["auto-kcat"][1][0][1] in cluster.ids


def test_metadata_names_a_live_broker_as_controller(cluster: QuorumCluster) -> None:
    """As Kafka's KRaft brokers: the controller id is a live broker (each forwards
    controller requests), here the answering node itself, not the quorum leader."""
    wait_leader(cluster, list(cluster.ids), 15)
    for i in cluster.ids:
        header = RequestHeader(3, 12, 9, "quorum-test")
        with socket.create_connection(("127.0.0.1", cluster.ports[i][0]), timeout=5) as sock:
            sock.sendall(encode_request(header, MetadataRequest(topics=[])))
            size = struct.unpack(">i", _read(sock, 4))[0]
            reply: Any = decode_response(header, _read(sock, size))
        assert reply.controller_id == i
        assert sorted(b.node_id for b in reply.brokers) == list(cluster.ids)


def test_brokers_list_marks_the_quorum_leader_as_controller(
    cluster: QuorumCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """`riverbed brokers list` marks the active controller (the Raft leader), not the
    Metadata response's controller id, which each node answers with its own id."""
    leader, _epoch = wait_leader(cluster, list(cluster.ids), 15)
    for i in cluster.ids:
        capsys.readouterr()
        assert main(["brokers", "list", "-b", f"127.0.0.1:{cluster.ports[i][0]}", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert sorted(r["id"] for r in rows) == list(cluster.ids)
        assert [r["id"] for r in rows if r["controller"]] == [leader]


def request_to(port: int, api_key: int, version: int, body: Any) -> Any:
    header = RequestHeader(api_key, version, 11, "quorum-test")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_request(header, body))
        size = struct.unpack(">i", _read(sock, 4))[0]
        return decode_response(header, _read(sock, size))


def test_writes_through_a_follower_are_forwarded(cluster: QuorumCluster) -> None:
    """Metadata writes sent to a follower reach the active controller; the follower answers
    with the controller's result once its own replica shows it (errors come back as such)."""
    leader, _epoch = wait_leader(cluster, list(cluster.ids), 15)
    port = cluster.ports[next(i for i in cluster.ids if i != leader)][0]
    CT = CreateTopicsRequest
    created = request_to(
        port,
        19,
        5,
        CT(
            topics=[
                CT.CreatableTopic(name="fwd-a", num_partitions=2, replication_factor=1),
                CT.CreatableTopic(name="bad name!", num_partitions=1, replication_factor=1),
            ],
            timeout_ms=30000,
        ),
    )
    codes = {t.name: t.error_code for t in created.topics}
    assert codes == {"fwd-a": 0, "bad name!": int(ErrorCode.INVALID_TOPIC_EXCEPTION)}
    assert len(metadata_of(port)["topics"]["fwd-a"][1]) == 2  # no wait: already applied here
    CP = CreatePartitionsRequest
    grown = request_to(
        port,
        37,
        3,
        CP(topics=[CP.CreatePartitionsTopic(name="fwd-a", count=4)], timeout_ms=30000),
    )
    assert [r.error_code for r in grown.results] == [0]
    assert len(metadata_of(port)["topics"]["fwd-a"][1]) == 4
    deleted = request_to(port, 20, 5, DeleteTopicsRequest(topic_names=["fwd-a"], timeout_ms=30000))
    assert [(r.name, r.error_code) for r in deleted.responses] == [("fwd-a", 0)]
    assert "fwd-a" not in metadata_of(port)["topics"]


def test_leader_killed_during_topic_creation(cluster: QuorumCluster) -> None:
    ids = list(cluster.ids)
    old_leader, old_epoch = wait_leader(cluster, ids, 15)
    acked: list[str] = []
    errors: list[str] = []
    stop = threading.Event()

    def create_loop() -> None:
        conf = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "topic.metadata.refresh.interval.ms": 500,
        }
        admin = AdminClient(conf)
        i = 0
        while not stop.is_set():
            name = f"failover-{i}"
            try:
                admin.create_topics([NewTopic(name, 1, 1)], request_timeout=5)[name].result(10)
                acked.append(name)
                i += 1
            except KafkaException as exc:
                if "already exists" in str(exc):  # an earlier try of this name committed
                    acked.append(name)
                    i += 1
                else:
                    # a client retries with fresh metadata (the controller moved)
                    errors.append(str(exc))
                    admin = AdminClient(conf)
                    time.sleep(0.1)

    thread = threading.Thread(target=create_loop)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(acked) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= 5, "no topic creation acknowledged before the kill"
        cluster.kill(old_leader)
        killed_at = time.monotonic()
        survivors = [i for i in ids if i != old_leader]
        new_leader, new_epoch = wait_leader(cluster, survivors, FAILOVER_S)
        failover_s = time.monotonic() - killed_at
        assert new_leader != old_leader and new_epoch > old_epoch
        count = len(acked)
        deadline = time.monotonic() + 30
        while len(acked) < count + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= count + 5, f"creations stopped after the failover: {errors[-3:]}"
        # the dead broker's session expires: it is fenced and no longer offered to clients
        port = cluster.ports[new_leader][0]
        md = wait_metadata(port, lambda m: old_leader not in [b for b, _ in m["brokers"]])
        assert [b for b, _ in md["brokers"]] == survivors
    finally:
        stop.set()
        thread.join(60)
    print(f"new leader {new_leader} (epoch {new_epoch}) {failover_s:.2f}s after the kill")

    cluster.start_nodes([old_leader], timeout_s=60)
    cluster.stop()  # every node down, then all back up
    cluster.start(timeout_s=60)
    for i in ids:
        md = wait_metadata(cluster.ports[i][0], lambda m: set(acked) <= set(m["topics"]))
        assert set(acked) <= set(md["topics"])
        # every broker registered again (unfenced), and every acknowledged topic has a leader
        md = wait_metadata(
            cluster.ports[i][0],
            lambda m: (
                [b for b, _ in m["brokers"]] == ids
                and all(leader in ids for t in acked for _p, leader in m["topics"][t][1])
            ),
        )


def test_wiped_node_catches_up_from_a_snapshot(cluster: QuorumCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    names = [f"snap-{i}" for i in range(30)]  # enough records for several snapshots
    for _name, future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).items():
        future.result(30)
    leader, _epoch = wait_leader(cluster, list(cluster.ids), 15)
    leader_port = cluster.ports[leader][0]
    reference = wait_metadata(leader_port, lambda m: set(names) <= set(m["topics"]))
    leader_dir = cluster.data_dir(leader) / "__cluster_metadata-0"
    deadline = time.monotonic() + 20
    while not list(leader_dir.glob("*.checkpoint")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(leader_dir.glob("*.checkpoint")), "the leader wrote no snapshot"

    victim = next(i for i in cluster.ids if i != leader)
    node = cluster.nodes[victim]
    node.stop()
    cluster.wipe(victim)
    assert not cluster.data_dir(victim).exists()
    cluster.start_nodes([victim], timeout_s=60)
    port = cluster.ports[victim][0]
    same = wait_metadata(port, lambda m: m["topics"] == reference["topics"])
    assert same["topics"] == reference["topics"]
    assert same["brokers"] == reference["brokers"]
    since_start = node._log_text()  # this start's output
    assert "loaded metadata snapshot" in since_start.split("ready:")[0]  # before it was ready
    snaps = list((cluster.data_dir(victim) / "__cluster_metadata-0").glob("*.checkpoint"))
    assert snaps, "the wiped node keeps no snapshot"


def test_broker_only_node_joins_as_an_observer(cluster: QuorumCluster) -> None:
    """A ``process.roles=broker`` node follows the metadata log as a Raft observer,
    registers, is given partitions by the controller and takes produce requests; it shows
    up as an observer in DescribeQuorum. (Last: its shutdown fences it.)"""
    observer = cluster.add_broker(4, timeout_s=60)
    try:
        leader, _epoch = wait_leader(cluster, [1, 2, 3], 15)
        reply = describe(cluster, leader)
        assert [o.replica_id for o in reply.observers] == [4]
        assert sorted(v.replica_id for v in reply.current_voters) == [1, 2, 3]
        admin = AdminClient({"bootstrap.servers": observer.bootstrap})
        admin.create_topics([NewTopic("on-four", 8, 1)])["on-four"].result(30)
        md = wait_metadata(cluster.ports[4][0], lambda m: "on-four" in m["topics"])
        assert [b for b, _ in md["brokers"]] == [1, 2, 3, 4]
        assert {leader for _p, leader in md["topics"]["on-four"][1]} == {1, 2, 3, 4}
        producer = Producer({"bootstrap.servers": observer.bootstrap, "acks": "all"})
        for p in range(8):
            producer.produce("on-four", value=b"x", partition=p)
        assert producer.flush(30) == 0
    finally:
        observer.stop()
