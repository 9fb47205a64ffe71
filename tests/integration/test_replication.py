"""Replication on 3 real nodes with real clients (issue 12).

- SIGKILL of the partition leader during idempotent acks=all production: every record
  the producer saw acknowledged is readable after the fail-over and after the killed node
  restarts, at the offset it was acknowledged with, and no offset holds two records;
- SIGTERM of the leader: a controlled shutdown hands leadership to an in-sync replica
  before the process exits; once back in the ISR, preferred-leader balancing returns it;
- reassignment [1, 2] -> [2, 3] under production moves the data and deletes node 1's log;
- SIGSTOP of a follower for longer than ``replica.lag.time.max.ms``: the leader shrinks
  the ISR (AlterPartition), acks=all production goes on, and after SIGCONT the follower
  catches up and the ISR is whole again; each node's ``state-change.log`` records it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_quorum import OVERRIDES as QUORUM_OVERRIDES
from .test_quorum import wait_leader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LAG_MAX_MS = 2000
#: How often a Production's librdkafka reports its statistics (its request counts).
STATS_INTERVAL_MS = 100
OVERRIDES = {
    **QUORUM_OVERRIDES,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": str(LAG_MAX_MS),
    "replica.fetch.backoff.ms": "200",
    "broker.session.timeout.ms": "4000",
    "leader.imbalance.check.interval.seconds": "2",
    # any partition away from its preferred leader counts (the 50 __consumer_offsets
    # partitions would dilute one topic's share below the default 10 %)
    "leader.imbalance.per.broker.percentage": "0",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("replication"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def partition_state(
    admin: AdminClient, topic: str, via: str | None = None
) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, sorted ISR); ``via`` asks that one node (a fresh client whose
    only connection is to it: librdkafka would otherwise wait on a stopped node)."""
    if via is not None:
        admin = AdminClient({"bootstrap.servers": via})
    md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return md.leader, list(md.replicas), sorted(md.isrs)


def wait_for(what: str, check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # metadata from a node that is just starting
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def create_topic(cluster: QuorumCluster, topic: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)

    def whole() -> bool:
        leader, replicas, isr = partition_state(admin, topic)
        return leader > 0 and len(replicas) == 3 and isr == sorted(replicas)

    wait_for(f"{topic}: ISR = all 3 replicas", whole)
    return admin


def read_all(cluster: QuorumCluster, topic: str, end: int) -> dict[int, bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while len(got) < end and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                offset, value = msg.offset(), msg.value()
                if msg.error() is None and offset is not None and value is not None:
                    assert offset not in got, f"offset {offset} read twice"
                    got[offset] = value
    finally:
        consumer.close()
    return got


def restart_and_read(
    cluster: QuorumCluster, admin: AdminClient, topic: str, node: int, prod: Production
) -> dict[int, bytes]:
    """Start ``node`` again, wait until it is back in the ISR, read every acked offset."""
    cluster.nodes[node].start(60)
    wait_for(
        f"node {node} back in the ISR",
        lambda: partition_state(admin, topic)[2] == [1, 2, 3],
        60,
    )
    return read_all(cluster, topic, max(prod.acked.values()) + 1)


class Production:
    """An idempotent acks=all producer in a thread, recording every acknowledgement."""

    def __init__(self, cluster: QuorumCluster, topic: str, timeout_ms: int = 60000) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": timeout_ms,
                "statistics.interval.ms": STATS_INTERVAL_MS,
                "stats_cb": self._on_stats,
            }
        )
        self.topic = topic
        self.acked: dict[bytes, int] = {}
        self.errors: list[str] = []
        #: Produce requests sent so far, all brokers (librdkafka's statistics)
        self.produce_requests = 0
        self._produce_seen: dict[str, int] = {}
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_stats(self, stats_json: str) -> None:
        # librdkafka's per-broker counters restart when it drops a broker that left the
        # metadata (a fenced one) and adds it again: sum what each report adds
        for name, broker in json.loads(stats_json).get("brokers", {}).items():
            now = int(broker.get("req", {}).get("Produce", 0))
            last = self._produce_seen.get(name, 0)
            self.produce_requests += now - last if now >= last else now
            self._produce_seen[name] = now

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.value()] = msg.offset()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(
                    self.topic, f"m{self.sent}".encode(), callback=self._on_delivery
                )
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if self.sent % 50 else 0.01)
        self.producer.flush(90)

    def __enter__(self) -> Production:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(120)


def kill_leader_under_production(
    cluster: QuorumCluster, admin: AdminClient, topic: str, acks: int
) -> tuple[Production, int]:
    """SIGKILL the partition leader after ``acks`` acknowledgements of an idempotent
    acks=all producer; ``acks`` more after the fail-over. (production, killed leader)"""
    leader, _, _ = partition_state(admin, topic)
    with Production(cluster, topic) as prod:
        wait_for(f"{acks} acks before the kill", lambda: len(prod.acked) >= acks, 60)
        cluster.kill(leader)
        killed_at = len(prod.acked)

        def new_leader() -> bool:
            now, _, isr = partition_state(admin, topic)
            return now not in (-1, leader) and leader not in isr

        wait_for("a new leader without the killed node", new_leader)
        wait_for("acks after the fail-over", lambda: len(prod.acked) >= killed_at + acks, 90)
    assert not prod.errors, prod.errors[:5]
    return prod, leader


def test_acks_all_is_acknowledged_right_after_topic_creation(cluster: QuorumCluster) -> None:
    """A new partition's ISR is every live replica (Kafka's rule), so acks=all with
    min.insync.replicas=2 is acknowledged as soon as the topic exists. Retries are off:
    a NOT_ENOUGH_REPLICAS answer (the ISR was the leader alone until its followers
    caught up) fails the delivery instead of being retried away."""
    topic, partitions, per_partition = "acks-all-at-creation", 6, 5
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "linger.ms": 0,
            "message.timeout.ms": 30000,
        }
    )
    results: list[tuple[int, str | None]] = []

    def done(err: Any, msg: Any) -> None:
        results.append((msg.partition(), None if err is None else err.name()))

    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, b"v%d" % i, partition=p, on_delivery=done)
    assert producer.flush(60) == 0
    failed = [r for r in results if r[1] is not None]
    assert len(results) == partitions * per_partition and not failed, failed


def test_sigkill_leader_during_acks_all_loses_nothing_acknowledged(cluster: QuorumCluster) -> None:
    topic = "replicated-kill"
    admin = create_topic(cluster, topic)
    prod, leader = kill_leader_under_production(cluster, admin, topic, 2000)
    got = restart_and_read(cluster, admin, topic, leader, prod)
    missing = [(v, o) for v, o in prod.acked.items() if got.get(o) != v]
    assert not missing, (
        f"{len(missing)} of {len(prod.acked)} acknowledged records lost: {missing[:5]}"
    )
    values = list(got.values())
    assert len(values) == len(set(values))  # idempotence: no record written twice
    # the restarted node's copy equals the others' (it truncated its unreplicated tail)
    sizes = {
        i: sum(f.stat().st_size for f in (cluster.data_dir(i) / f"{topic}-0").glob("*.log"))
        for i in cluster.ids
    }
    assert len(set(sizes.values())) == 1, sizes


def test_sigstop_follower_shrinks_and_expands_the_isr(cluster: QuorumCluster) -> None:
    topic = "replicated-stop"
    admin = create_topic(cluster, topic)
    leader, replicas, _ = partition_state(admin, topic)
    follower = next(r for r in replicas if r != leader)
    pid = cluster.nodes[follower].pid
    assert pid is not None
    via = f"127.0.0.1:{cluster.ports[leader][0]}"
    with Production(cluster, topic) as prod:
        wait_for("acks before the stop", lambda: len(prod.acked) >= 500, 60)
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped_at = len(prod.acked)
            wait_for(
                f"ISR without the stopped follower {follower}",
                lambda: follower not in partition_state(admin, topic, via)[2],
                LAG_MAX_MS / 1000 + 20,
            )
            wait_for("acks while it is stopped", lambda: len(prod.acked) >= stopped_at + 1000, 60)
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(
            f"follower {follower} back in the ISR",
            lambda: partition_state(admin, topic, via)[2] == [1, 2, 3],
            60,
        )
    assert not prod.errors, prod.errors[:5]
    # the leader's state-change.log tells the story (Kafka's state-change logger)
    log_text = Path(cluster.data_dir(leader) / "state-change.log").read_text()
    assert "become-leader" in log_text and "shrink" in log_text and "expand with" in log_text
    follower_log = Path(cluster.data_dir(follower) / "state-change.log").read_text()
    assert f"become-follower of {leader}" in follower_log
    assert f"broker {follower} received {topic}-0: leader {leader}" in follower_log


def test_reassignment_moves_the_data_under_production(cluster: QuorumCluster) -> None:
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient

    topic = "replicated-move"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, 1, replica_assignment=[[1, 2]])
    admin.create_topics([new])[topic].result(30)
    wait_for(f"{topic}: ISR [1, 2]", lambda: partition_state(admin, topic)[2] == [1, 2])
    mover = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20000)
    tp = KafkaTopicPartition(topic, 0)
    try:
        with Production(cluster, topic) as prod:
            wait_for("acks before the move", lambda: len(prod.acked) >= 1000, 60)
            assert mover.alter_partition_reassignments({tp: [2, 3]}) == {tp: None}

            def moved() -> bool:
                leader, replicas, isr = partition_state(admin, topic)
                return replicas == [2, 3] and isr == [2, 3] and leader in (2, 3)

            wait_for("the move to [2, 3] completed", moved, 60)
            assert mover.list_partition_reassignments() == {}
            at_move = len(prod.acked)
            wait_for("acks after the move", lambda: len(prod.acked) >= at_move + 1000, 60)
    finally:
        mover.close()
    assert not prod.errors, prod.errors[:5]
    end = max(prod.acked.values()) + 1
    got = read_all(cluster, topic, end)
    missing = [(v, o) for v, o in prod.acked.items() if got.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:5]}"
    # the removed replica's log is deleted; the added one holds the same data as 2
    wait_for("node 1's log deleted", lambda: not (cluster.data_dir(1) / f"{topic}-0").exists())

    def size(i: int) -> int:
        return sum(f.stat().st_size for f in (cluster.data_dir(i) / f"{topic}-0").glob("*.log"))

    wait_for("node 3 caught up with node 2", lambda: size(3) == size(2) > 0)


def test_sigterm_of_the_leader_moves_leadership_before_it_stops(cluster: QuorumCluster) -> None:
    topic = "replicated-term"
    admin = create_topic(cluster, topic)
    leader, _, _ = partition_state(admin, topic)
    via = next(f"127.0.0.1:{cluster.ports[i][0]}" for i in cluster.ids if i != leader)
    with Production(cluster, topic) as prod:
        wait_for("acks before the stop", lambda: len(prod.acked) >= 1000, 60)
        cluster.nodes[leader].stop()  # SIGTERM: a controlled shutdown first
        stopped = time.monotonic()
        # the others already name a new leader (without it, only the session timeout of
        # 4 s would fence the stopped node and elect one)
        wait_for(
            "a new leader named right after the stop",
            lambda: partition_state(admin, topic, via)[0] not in (-1, leader),
            2.0,
        )
        assert time.monotonic() - stopped < 2.0
        at_stop = len(prod.acked)
        wait_for("acks after the stop", lambda: len(prod.acked) >= at_stop + 1000, 60)
    assert not prod.errors, prod.errors[:5]
    log_text = (cluster.node_dir(leader) / f"broker-{leader}.log").read_text()
    assert "controlled shutdown complete" in log_text
    # the active controller logged the election it decided, with its epochs
    new_leader = partition_state(admin, topic, via)[0]
    decided = rf"controller \d+ decided {topic}-0: leader {new_leader} at leader epoch \d+, "
    decided += r"partition epoch \d+, .*\(was leader " + str(leader)
    assert any(
        re.search(decided, (cluster.data_dir(i) / "state-change.log").read_text())
        for i in cluster.ids
    ), decided
    got = restart_and_read(cluster, admin, topic, leader, prod)
    assert all(got.get(o) == v for v, o in prod.acked.items())
    # preferred-leader balancing (auto.leader.rebalance.enable) hands it back its leadership
    preferred = partition_state(admin, topic)[1][0]
    assert preferred == leader
    wait_for(
        "leadership back on the preferred replica",
        lambda: partition_state(admin, topic)[0] == leader,
        20,
    )


def test_isr_below_min_insync_replicas_refuses_acks_all(cluster: QuorumCluster) -> None:
    # the topic asks for all 3 replicas in sync; one broker down leaves 2 (with 3 combined
    # nodes two down would also lose the metadata quorum, so the ISR could not shrink)
    topic = "replicated-minisr"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, 1, 3, config={"min.insync.replicas": "3"})
    admin.create_topics([new])[topic].result(30)
    wait_for(f"{topic}: ISR = 3", lambda: len(partition_state(admin, topic)[2]) == 3)
    leader, replicas, _ = partition_state(admin, topic)
    follower = next(r for r in replicas if r != leader)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    delivered: list[Any] = []
    p.produce(topic, b"before", on_delivery=lambda e, m: delivered.append(e))
    p.flush(30)
    assert delivered == [None]
    cluster.kill(follower)
    try:
        wait_for("the ISR shrinks to 2", lambda: len(partition_state(admin, topic)[2]) == 2)
        refused = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "retries": 0,
                "message.timeout.ms": 10000,
            }
        )
        errors: list[Any] = []
        refused.produce(topic, b"refused", on_delivery=lambda e, m: errors.append(e))
        refused.flush(30)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS, errors
        one = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1"})
        acks_one: list[Any] = []
        one.produce(topic, b"acks=1", on_delivery=lambda e, m: acks_one.append(e))
        one.flush(30)
        assert acks_one == [None]  # min.insync.replicas only binds acks=all
    finally:
        cluster.nodes[follower].start(60)


def test_topic_deleted_while_a_broker_is_down_is_removed_when_it_returns(
    cluster: QuorumCluster,
) -> None:
    topic = "replicated-deleted"
    create_topic(cluster, topic)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    p.produce(topic, b"x")
    p.flush(30)
    # a node other than the active controller (a DeleteTopics right after killing the
    # active controller is another test's subject)
    controller = wait_leader(cluster, list(cluster.ids), 15)[0]
    down = next(i for i in sorted(cluster.ids, reverse=True) if i != controller)
    part_dir = cluster.data_dir(down) / f"{topic}-0"
    wait_for(f"node {down} holds a replica", lambda: part_dir.is_dir())
    cluster.kill(down)
    # a new client of the live nodes (librdkafka keeps calling a dead controller it cached)
    live = ",".join(f"127.0.0.1:{cluster.ports[i][0]}" for i in cluster.ids if i != down)
    fresh = AdminClient({"bootstrap.servers": live})
    fresh.delete_topics([topic])[topic].result(30)
    cluster.nodes[down].start(60)
    wait_for("the stray log removed at start-up", lambda: not part_dir.exists(), 30)


def test_delete_topics_right_after_killing_the_active_controller(cluster: QuorumCluster) -> None:
    """A client asking right after the kill is told a live broker as controller (as
    Kafka's KRaft brokers answer), which forwards to whichever controller is elected next
    (retrying while the dead one refuses connections); with the dead quorum leader named,
    librdkafka waited for it (> 30 s)."""
    topic = "replicated-deleted-failover"
    create_topic(cluster, topic)
    controller = wait_leader(cluster, list(cluster.ids), 15)[0]
    live = ",".join(f"127.0.0.1:{cluster.ports[i][0]}" for i in cluster.ids if i != controller)
    cluster.kill(controller)
    started = time.monotonic()
    # a new client: its first Metadata comes before the survivors elect a new leader
    admin = AdminClient({"bootstrap.servers": live})
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(40)
        elapsed = time.monotonic() - started
        assert topic not in admin.list_topics(timeout=10).topics
    finally:
        cluster.nodes[controller].start(60)
    assert elapsed < 30, f"DeleteTopics took {elapsed:.1f} s after the controller's kill"


def test_leaders_elect_cli(cluster: QuorumCluster) -> None:
    import json
    import subprocess
    import sys

    topic = "replicated-cli"
    create_topic(cluster, topic)
    cmd = [sys.executable, "-m", "riverbed.cli.main", "leaders", "elect", "--preferred"]
    cmd += ["--topic", topic, "-b", cluster.bootstrap_servers, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["topic"] == topic and row["partition"] == 0
    assert row["result"].startswith("ELECTION_NOT_NEEDED")  # the preferred replica leads
    bad = subprocess.run(
        [*cmd[:6], "--partition", "0", "-b", cluster.bootstrap_servers],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "--partition needs --topic" in bad.stderr


def test_topics_describe_shows_epoch_isr_moves_and_lag(cluster: QuorumCluster) -> None:
    import json
    import subprocess
    import sys

    topic = "replicated-describe"
    admin = create_topic(cluster, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(50):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    cmd = [sys.executable, "-m", "riverbed.cli.main", "topics", "describe", "--topic", topic]
    cmd += ["-b", cluster.bootstrap_servers]

    def describe() -> Any:
        done = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        ((part,),) = [t["partitions"] for t in json.loads(done.stdout)]
        return part

    def caught_up() -> Any:
        part = describe()
        return part["lag"] and all(lag == 0 for lag in part["lag"].values()) and part

    first = wait_for("every replica's lag 0", caught_up)
    leader, replicas, isr = partition_state(admin, topic)
    assert first["leader"] == leader and first["replicas"] == replicas
    assert sorted(first["isr"]) == isr == sorted(replicas)
    assert first["adding_replicas"] == [] and first["removing_replicas"] == []
    assert set(first["lag"]) == {str(r) for r in replicas}
    # the epoch the leader itself received (its state-change.log)
    log_text = Path(cluster.data_dir(leader) / "state-change.log").read_text()
    epochs = re.findall(rf"received {topic}-0: leader {leader} at leader epoch (\d+)", log_text)
    assert epochs and first["leader_epoch"] == int(epochs[-1])
    table = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    assert "epoch" in table.stdout and f"{leader}:0" in table.stdout, table.stdout


def test_partitions_reassign_cli_generate_execute_verify(
    cluster: QuorumCluster, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    topic = "replicated-plan"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(30)
    wait_for(f"{topic}: ISR [1, 2]", lambda: partition_state(admin, topic)[2] == [1, 2])
    base = [sys.executable, "-m", "riverbed.cli.main", "partitions", "reassign"]
    boot = ["-b", cluster.bootstrap_servers]

    def run(*extra: str) -> Any:
        done = subprocess.run([*base, *extra, *boot], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = run(
        "--generate",
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        "2,3",
        "--json",
    )
    assert generated["current"]["partitions"] == [
        {"topic": topic, "partition": 0, "replicas": [1, 2]}
    ]
    (proposed,) = generated["proposed"]["partitions"]
    assert sorted(proposed["replicas"]) == [2, 3]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(generated["proposed"]))
    # --wait: one JSON document once the move is complete (no progress bar in --json)
    executed = run("--execute", "--reassignment-json-file", str(plan), "--wait", "--json")
    assert executed["results"] == [{"topic": topic, "partition": 0, "result": "ok"}]
    assert executed["rollback"]["partitions"][0]["replicas"] == [1, 2]
    assert executed["verify"] == [{"topic": topic, "partition": 0, "status": "complete"}]
    assert sorted(partition_state(admin, topic)[1]) == [2, 3]
    (row,) = run("--verify", "--reassignment-json-file", str(plan), "--json")
    assert row["status"] == "complete"


def test_leader_replication_throttle_slows_a_reassignment(
    cluster: QuorumCluster, tmp_path: Path
) -> None:
    """leader.replication.throttled.rate on the leader + the topic's
    leader.replication.throttled.replicas: an adding replica (outside the ISR) copies at
    most rate * time + one second's burst."""
    import json
    import subprocess
    import sys

    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic, leader, adding = "replicated-throttled", 3, 2
    rate, records, size = 250_000, 1500, 1000  # 1.5 MB at 250 kB/s: >= 5 s after the burst
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    configs = {"leader.replication.throttled.replicas": f"0:{leader}", "min.insync.replicas": "1"}
    new = NewTopic(topic, 1, replica_assignment=[[leader]], config=configs)
    admin.create_topics([new])[topic].result(30)
    wait_for(f"{topic}: led by {leader}", lambda: partition_state(admin, topic)[0] == leader)
    # small batches: a throttled read still returns one whole batch
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "1", "batch.size": 16384}
    )
    for i in range(records):
        producer.produce(topic, os.urandom(size), key=str(i).encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    entry = ConfigEntry(
        "leader.replication.throttled.rate",
        str(rate),
        incremental_operation=AlterConfigOpType.SET,
    )
    res = ConfigResource(ResourceType.BROKER, str(leader), incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)
    try:
        started = time.monotonic()
        plan = tmp_path / "plan.json"
        moves = [{"topic": topic, "partition": 0, "replicas": [leader, adding]}]
        plan.write_text(json.dumps({"version": 1, "partitions": moves}))
        cmd = [sys.executable, "-m", "riverbed.cli.main", "partitions", "reassign", "--execute"]
        cmd += ["--reassignment-json-file", str(plan), "-b", cluster.bootstrap_servers]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        # mid-move, topics describe shows the adding replica and its lag
        describe = [sys.executable, "-m", "riverbed.cli.main", "topics", "describe"]
        describe += ["--topic", topic, "-b", cluster.bootstrap_servers, "--json"]

        def lagging() -> Any:
            out = subprocess.run(describe, capture_output=True, text=True, timeout=60)
            ((part,),) = [t["partitions"] for t in json.loads(out.stdout)]
            return (part["lag"].get(str(adding)) or 0) > 0 and part

        # each describe is a CLI process: on a loaded machine a few take the 10 s; the
        # throttled move itself lasts >= 5 s, so a lag is still there to be seen
        mid = wait_for("the adding replica's lag", lagging, scaled_s(10))
        assert mid["adding_replicas"] == [adding] and mid["removing_replicas"] == []
        assert mid["replicas"] == [leader, adding] and mid["isr"] == [leader]
        assert mid["lag"][str(leader)] == 0
        wait_for(
            "the throttled move to complete",
            lambda: partition_state(admin, topic)[1:] == ([leader, adding], [2, 3]),
            60,
        )
        elapsed = time.monotonic() - started
    finally:
        entry = ConfigEntry(
            "leader.replication.throttled.rate", "", incremental_operation=AlterConfigOpType.DELETE
        )
        res = ConfigResource(ResourceType.BROKER, str(leader), incremental_configs=[entry])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(30)
    floor = (records * size - rate) / rate
    assert elapsed >= floor * 0.8, f"{elapsed:.1f} s for a copy throttled to >= {floor:.1f} s"
