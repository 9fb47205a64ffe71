"""AlterReplicaLogDirs (JBOD) on a real broker with two ``log.dirs``, driven by kafka-python.

Records produced before the move (confluent-kafka, acks=all), the replica moved to the
other dir with ``KafkaAdminClient.alter_replica_log_dirs``, records produced during and
after it, and every record read back; DescribeLogDirs lists the partition as a future
replica in the target dir while the copy runs (paced by
``replica.alter.log.dirs.io.max.bytes.per.second``) and in its new dir after the swap; the
move survives a restart; a path
that is not a log dir is LOG_DIR_NOT_FOUND and a partition without a replica here
REPLICA_NOT_AVAILABLE.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
TOPIC = "jbod"
VALUE_BYTES = 1000
MOVE_BYTES_PER_S = 1024 * 1024


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, list[str]]]:
    base = tmp_path_factory.mktemp("jbod")
    dirs = [str((base / "d1").resolve()), str((base / "d2").resolve())]
    proc = BrokerProcess(
        data_dir=base / "data",
        overrides={
            "log.dirs": ",".join(dirs),
            "num.partitions": "1",
            # ~5 s for the ~5 MB partition: DescribeLogDirs sees the future replica
            "replica.alter.log.dirs.io.max.bytes.per.second": str(MOVE_BYTES_PER_S),
        },
    )
    proc.start()
    try:
        yield proc, dirs
    finally:
        proc.close()


def produce(bootstrap: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **QUIET})
    errors: list[Any] = []
    for i in range(start, start + count):
        value = f"{i:08d}".encode() * (VALUE_BYTES // 8)
        p.produce(
            TOPIC, value=value, key=str(i).encode(), on_delivery=lambda e, m: e and errors.append(e)
        )
        p.poll(0)
    assert p.flush(30) == 0 and errors == []


def consume_all(bootstrap: str, expected: int) -> list[int]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **QUIET}
    )
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(int(m.key()))
        return got
    finally:
        c.close()


def where(admin: KafkaAdminClient) -> dict[str, list[dict[str, Any]]]:
    """log dir -> entries of partition 0 of TOPIC there."""
    [broker] = admin.describe_log_dirs({TOPIC: [0]})
    out: dict[str, list[dict[str, Any]]] = {}
    for d in broker["log_dirs"]:
        assert d["error_code"] == 0, d
        for t in d["topics"]:
            if t["name"] == TOPIC:
                out.setdefault(d["log_dir"], []).extend(t["partitions"])
    return out


def test_move_a_replica_between_log_dirs(two_dirs: tuple[BrokerProcess, list[str]]) -> None:
    broker, dirs = two_dirs
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics({TOPIC: {"num_partitions": 1, "replication_factor": 1}})
        produce(broker.bootstrap, 0, 5000)
        [(source, [entry])] = where(admin).items()
        assert entry["is_future_key"] is False and entry["partition_size"] > 5000 * VALUE_BYTES
        target = next(d for d in dirs if d != source)
        me = broker.node_id

        errors = admin.alter_replica_log_dirs(
            {
                TopicPartitionReplica(TOPIC, 0, me): target,
                TopicPartitionReplica(TOPIC, 7, me): target,
                TopicPartitionReplica("no-such-topic", 0, me): "/not/a/log/dir",
            }
        )
        assert errors == {
            TopicPartitionReplica(TOPIC, 0, me): NoError,
            TopicPartitionReplica(TOPIC, 7, me): ReplicaNotAvailableError,
            TopicPartitionReplica("no-such-topic", 0, me): LogDirNotFoundError,
        }
        # while the copy runs (paced by the rate) the target dir lists a future replica
        seen = where(admin)
        [future] = seen[target]
        assert future["is_future_key"] is True and future["offset_lag"] > 0, seen
        assert [x["is_future_key"] for x in seen[source]] == [False]
        produce(broker.bootstrap, 5000, 500)  # during the move
        assert any(e["is_future_key"] for e in where(admin).get(target, []))

        deadline = time.monotonic() + 30
        while (placed := where(admin)) != {target: placed.get(target, [])} or not placed:
            assert time.monotonic() < deadline, f"the replica did not move: {placed}"
            time.sleep(0.1)
        [moved] = placed[target]
        assert moved["is_future_key"] is False and moved["partition_size"] > 5500 * VALUE_BYTES
        assert os.path.isdir(Path(target) / f"{TOPIC}-0")
        assert not os.path.exists(Path(source) / f"{TOPIC}-0")
        log_text = broker.log_path.read_text()
        assert f"moved {TOPIC}-0 from {source} to {target}" in log_text
        assert "Traceback" not in log_text

        produce(broker.bootstrap, 5500, 500)  # after the move
        assert consume_all(broker.bootstrap, 6000) == list(range(6000))
    finally:
        admin.close()

    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        assert list(where(admin)) == [target]
        assert consume_all(broker.bootstrap, 6000) == list(range(6000))
    finally:
        admin.close()
