"""A follower restarted with an empty log inside its old session is never elected (issue 18,
defect 2), on real processes with a real idempotent acks=all producer.

A 3-voter controller quorum (nodes 1-3) with broker-only nodes 4 (L) and 5 (F), so that
stopping and killing them never takes the quorum away; the partition is on [L, F, T] with
T = 1 and min.insync.replicas=2. After 10,000 acknowledged records, F is SIGKILLed, its
partition directory deleted (a replaced disk, or a tail lost with the page cache) and
started again at once, within its old broker session; L is SIGSTOPped past the session
timeout. Before the fix F registered and was unfenced at once, kept its ISR seat, was
elected when L was fenced (it comes before T in the assignment) and T followed its empty
log: the 10,000 records were gone. Now F's registration is refused until its old session
expires (the controller fences it, out of the ISR), it registers as an unclean shutdown,
and T leads with every record.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.quorum_cluster import QuorumCluster

from .test_quorum import OVERRIDES as QUORUM_OVERRIDES
from .test_replication import partition_state, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RECORDS = 10_000
SESSION_MS = 15_000  # long enough that F is back well inside its old session (a slow start: ~10 s)
TOPIC = "restart-registration"
OVERRIDES = {
    **QUORUM_OVERRIDES,
    "broker.session.timeout.ms": str(SESSION_MS),
    "min.insync.replicas": "2",
    "replica.fetch.backoff.ms": "200",
    "auto.leader.rebalance.enable": "false",
    # the session path under test: with the early fence the killed F is fenced (out of the
    # ISR) before it is back, and its registration is never refused (test_early_fence.py)
    "riverbed.broker.early.fence.enable": "false",
}


LEADER, FOLLOWER, SURVIVOR = 4, 5, 1  # L and F broker-only: the quorum stays whole


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("restart-registration"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        c.add_brokers([LEADER, FOLLOWER], timeout_s=60)
        yield c
    finally:
        for node in (FOLLOWER, LEADER):  # broker-only nodes first, while the quorum is up
            if node in c.nodes:
                c.nodes[node].stop()
        c.stop()


def _produce_acked(bootstrap: str) -> dict[int, bytes]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )
    acked: dict[int, bytes] = {}
    errors: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.offset()] = msg.value()

    for i in range(RECORDS):
        while True:
            try:
                producer.produce(TOPIC, b"r%d" % i, partition=0, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors and len(acked) == RECORDS, (errors[:3], len(acked))
    return acked


def _read(bootstrap: str, end: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while len(got) < end and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.1):  # the last call waits it out
                offset, value = msg.offset(), msg.value()
                if msg.error() is None and offset is not None and value is not None:
                    got[offset] = value
    finally:
        consumer.close()
    return got


def test_a_follower_restarted_empty_in_its_session_is_not_elected(cluster: QuorumCluster) -> None:
    stalled, restarted, survivor = LEADER, FOLLOWER, SURVIVOR
    via_survivor = f"127.0.0.1:{cluster.ports[survivor][0]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(TOPIC, 1, replica_assignment=[[stalled, restarted, survivor]])
    admin.create_topics([new])[TOPIC].result(30)
    wait_for(
        "the ISR is all three replicas, led by the first",
        lambda: partition_state(admin, TOPIC) == (stalled, [stalled, restarted, survivor],
                                                  sorted([stalled, restarted, survivor])),
    )  # fmt: skip
    acked = _produce_acked(cluster.bootstrap_servers)

    # F: SIGKILL, its partition directory gone, started again at once (inside its session)
    cluster.kill(restarted)
    shutil.rmtree(cluster.data_dir(restarted) / f"{TOPIC}-0")
    started: list[BaseException] = []

    def start() -> None:
        try:
            cluster.nodes[restarted].start(90)  # ready = registered and unfenced
        except BaseException as exc:  # reported by the assertion below
            started.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    pid = cluster.nodes[stalled].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # L stalls past the session timeout
    try:
        starter.join(120)
        assert not starter.is_alive() and not started, started
        # its registration was refused while its old session lived
        assert "DUPLICATE_BROKER_REGISTRATION" in cluster.nodes[restarted].log_path.read_text()
        wait_for(
            f"{survivor}, which holds every record, leads",
            lambda: partition_state(admin, TOPIC, via_survivor)[0] == survivor,
            60,
        )
        got = _read(via_survivor, RECORDS)
        lost = [o for o, v in acked.items() if got.get(o) != v]
        assert not lost, f"{len(lost)} of {RECORDS} acknowledged records lost"
        # what happened on F: it followed, never led (its state-change.log says each)
        text = Path(cluster.data_dir(restarted) / "state-change.log").read_text()
        assert f"{TOPIC}-0 become-follower of {survivor}" in text
        lines = [line for line in text.splitlines() if f"{TOPIC}-0 become-leader" in line]
        assert not lines, lines
        # and it catches up from the survivor and rejoins the ISR
        wait_for(
            f"{restarted} back in the ISR",
            lambda: restarted in partition_state(admin, TOPIC, via_survivor)[2],
            60,
        )
    finally:
        os.kill(pid, signal.SIGCONT)
