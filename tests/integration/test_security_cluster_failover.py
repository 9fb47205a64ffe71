"""Issue 20: a 3-node SASL_SSL cluster with ACLs survives a leader kill with the
replication guarantees unchanged.

Every listener is SASL_SSL (`riverbed.testing.secure.secure_quorum`), Kafka's
StandardAuthorizer is on with ``allow.everyone.if.no.acl.found=false``: the brokers' login
and ``admin`` are super users, ``app`` holds literal ACLs on one topic and one group,
``mallory`` holds none. An idempotent acks=all producer writes while the partition's leader
is SIGKILLed, its followers paused at that moment: every record must be acknowledged, and once the killed node is back and in
the ISR a consumer reads exactly the acknowledged records, in order, once each. Denials
hold on the new leader and on the restarted node (its authorizer and SCRAM users rebuilt
from a metadata snapshot taken after the ACLs), and grants too: the restarted node describes the topic to ``app`` and hides it from
``mallory``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.secure import NO_INITIAL_REBALANCE_DELAY, secure_quorum
from riverbed.testing.secure_clients import librdkafka_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

USERS = {"admin": "admin-secret", "app": "app-secret", "mallory": "mallory-secret"}
TOPIC = "guarded"
GROUP = "guarded-readers"
#: Three nodes start at once and each waits for the quorum over TLS + SASL.
START_TIMEOUT_S = 120
TOPIC_AUTHORIZATION_FAILED = 29
#: How long the followers are paused before the leader is killed.
PAUSE_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    authorizer = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        "allow.everyone.if.no.acl.found": "false",
        # snapshots every few KiB of metadata: the restarted node loads its ACLs from one
        "metadata.log.max.record.bytes.between.snapshots": "4096",
        **NO_INITIAL_REBALANCE_DELAY,
    }
    c = secure_quorum(tmp_path_factory.mktemp("secure-failover"), USERS, authorizer, 4096)
    try:
        c.start(timeout_s=START_TIMEOUT_S)
        yield c
    finally:
        c.stop()


def _conf(cluster: QuorumCluster, user: str, bootstrap: str | None = None) -> dict[str, str]:
    sec = {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": user}
    sec |= {"password": USERS[user], "cafile": str(cluster.pki.ca)}  # type: ignore[attr-defined]
    return librdkafka_config(bootstrap or cluster.bootstrap_servers, sec)


def _pid(node: BrokerProcess) -> int:
    assert node.pid is not None, "a node of the cluster is not running"
    return node.pid


def _grant_app(cluster: QuorumCluster) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(_conf(cluster, "admin"))
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=60)
    allow = AclPermissionType.ALLOW
    literal = ResourcePatternType.LITERAL
    bindings = [
        AclBinding(ResourceType.TOPIC, TOPIC, literal, "User:app", "*", op, allow)
        for op in (AclOperation.WRITE, AclOperation.READ)
    ]
    bindings.append(
        AclBinding(ResourceType.GROUP, GROUP, literal, "User:app", "*", AclOperation.READ, allow)
    )
    for future in admin.create_acls(bindings).values():
        future.result(timeout=60)


def _snapshot_after_the_acls(cluster: QuorumCluster) -> None:
    """Write enough metadata after app's ACLs (ACLs for other principals) that every node
    takes a new snapshot, which therefore holds app's ACLs and the SCRAM users."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    dirs = [cluster.data_dir(i) / "__cluster_metadata-0" for i in cluster.ids]
    before = [set(d.glob("*.checkpoint")) for d in dirs]
    admin = AdminClient(_conf(cluster, "admin"))
    filler = [
        AclBinding(ResourceType.TOPIC, f"other-{i}", ResourcePatternType.LITERAL,
                   f"User:someone-{i}", "*", AclOperation.READ, AclPermissionType.ALLOW)
        for i in range(60)
    ]  # fmt: skip
    for future in admin.create_acls(filler).values():
        future.result(timeout=60)
    deadline = time.monotonic() + 60
    while not all(set(d.glob("*.checkpoint")) - old for d, old in zip(dirs, before, strict=True)):
        assert time.monotonic() < deadline, "a node took no snapshot after the ACLs"
        time.sleep(0.2)


def _leader_and_isr(cluster: QuorumCluster, bootstrap: str | None = None) -> tuple[int, list[int]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_conf(cluster, "admin", bootstrap))
    partition = admin.list_topics(TOPIC, timeout=20).topics[TOPIC].partitions[0]
    return partition.leader, sorted(partition.isrs)


def _denied_produce(cluster: QuorumCluster) -> list[int]:
    """mallory's produce to the topic: the delivery errors' codes."""
    from confluent_kafka import KafkaError, Producer

    codes: list[int] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        codes.append(0 if err is None else err.code())

    producer = Producer(_conf(cluster, "mallory") | {"message.timeout.ms": 20000})
    producer.produce(TOPIC, b"not yours", on_delivery=report)
    producer.flush(30)
    return codes


def _visible_topics(cluster: QuorumCluster, user: str, bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_conf(cluster, user, bootstrap))
    return set(admin.list_topics(timeout=20).topics)


class _Writer:
    """An idempotent acks=all producer writing numbered records until stopped; every
    delivery report is kept (value, error, offset)."""

    def __init__(self, cluster: QuorumCluster) -> None:
        from confluent_kafka import Producer

        conf = _conf(cluster, "app") | {"acks": "all", "enable.idempotence": True}
        self.producer = Producer(conf | {"linger.ms": 2})
        self.reports: list[tuple[bytes, str | None, int]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: object, msg: object) -> None:
        self.reports.append((msg.value(), None if err is None else str(err), msg.offset()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(TOPIC, f"r{self.sent:06d}".encode(), on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0.001)

    def start(self) -> None:
        self._thread.start()

    def failed(self) -> list[tuple[bytes, str | None, int]]:
        return [r for r in list(self.reports) if r[1] is not None]

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.producer.flush(180)


def test_a_leader_kill_loses_nothing_acknowledged_and_acls_still_hold(
    cluster: QuorumCluster,
) -> None:
    from confluent_kafka import Consumer

    _grant_app(cluster)
    _snapshot_after_the_acls(cluster)
    assert _denied_produce(cluster) == [TOPIC_AUTHORIZATION_FAILED]
    writer = _Writer(cluster)
    writer.start()
    deadline = time.monotonic() + 60
    while len(writer.reports) < 200:  # writing through the leader before it dies
        assert time.monotonic() < deadline, "the first 200 records were not acknowledged"
        time.sleep(0.05)
    killed, isr = _leader_and_isr(cluster)
    assert isr == [1, 2, 3]
    # The leader dies while its followers are paused (a stalled VM, a long GC): records
    # it appended then are on no other replica, so any of them acknowledged would be lost.
    followers = [cluster.nodes[i] for i in cluster.ids if i != killed]
    try:
        for node in followers:
            os.kill(_pid(node), signal.SIGSTOP)
        time.sleep(PAUSE_S)  # the producer keeps sending to the leader meanwhile
        cluster.kill(killed)
    finally:
        for node in followers:
            os.kill(_pid(node), signal.SIGCONT)
    acked_at_kill = len(writer.reports)
    deadline = time.monotonic() + 90
    while len(writer.reports) < acked_at_kill + 300:  # and through its successor
        failed = writer.failed()
        assert not failed, f"{len(failed)} records failed, first: {failed[:3]}"
        assert time.monotonic() < deadline, "no records acknowledged after the leader's kill"
        time.sleep(0.05)
    assert writer.stop() == 0, "records left unacknowledged"
    failed = writer.failed()
    assert failed == [], f"{len(failed)} records failed, first: {failed[:3]}"
    assert len(writer.reports) == writer.sent
    leader, isr = _leader_and_isr(cluster)
    assert leader != killed and killed not in isr and len(isr) == 2
    # the new leader's authorizer: still no write for mallory
    assert _denied_produce(cluster) == [TOPIC_AUTHORIZATION_FAILED]

    cluster.start_nodes([killed], timeout_s=START_TIMEOUT_S)
    deadline = time.monotonic() + 90
    while _leader_and_isr(cluster)[1] != [1, 2, 3]:
        assert time.monotonic() < deadline, "the restarted node did not rejoin the ISR"
        time.sleep(0.5)
    # the restarted node rebuilt its ACLs and SCRAM users from its snapshot: it logs both
    # users in and describes the topic to app only
    assert "loaded metadata snapshot" in cluster.nodes[killed]._log_text().split("ready:")[0]
    alone = f"127.0.0.1:{cluster.ports[killed][0]}"
    assert TOPIC in _visible_topics(cluster, "app", alone)
    assert TOPIC not in _visible_topics(cluster, "mallory", alone)

    acked = sorted(writer.reports, key=lambda r: r[2])
    assert [r[2] for r in acked] == list(range(len(acked))), "offsets with gaps or repeats"
    expected = [f"r{i:06d}".encode() for i in range(writer.sent)]
    assert [r[0] for r in acked] == expected, "acknowledged out of order"
    consumer = Consumer(
        _conf(cluster, "app") | {"group.id": GROUP, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(msg.value())  # type: ignore[arg-type]
        time.sleep(1)  # anything past the acknowledged records would show up now
        while (msg := consumer.poll(0.2)) is not None:
            if msg.error() is None:
                got.append(msg.value())  # type: ignore[arg-type]
    finally:
        consumer.close()
    assert got == expected, f"read {len(got)} records, acknowledged {len(expected)}"
