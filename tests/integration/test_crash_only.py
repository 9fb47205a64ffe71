"""Crash-only, with a real node process: a committed metadata record that does not replay
halts the node with one FATAL line naming the cause and exit code 1 (it never serves a
state that diverges from its log); once the bad record is gone, a restart recovers and
every acknowledged record is still there."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from riverbed.metadata.records import encode_record
from riverbed.protocol.messages import PartitionRecord
from riverbed.protocol.records import SimpleRecord, build_batch, valid_prefix
from riverbed.server.fault_handler import FATAL_EXIT_CODE
from riverbed.storage.log_manager import METADATA_PARTITION_DIR
from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

#: Liveness bound for the halt (not a timing under test).
HALT_WAIT_S = 30.0


def _last_segment(data_dir: Path) -> Path:
    return sorted((data_dir / METADATA_PARTITION_DIR).glob("*.log"))[-1]


def _append_unreplayable_record(segment: Path) -> int:
    """Append one well-formed batch (valid CRC, next offset, current epoch) whose record
    names a topic id the image does not have; returns the segment's old size."""
    data = segment.read_bytes()
    good, headers = valid_prefix(data)
    assert good == len(data) and headers
    record = PartitionRecord(partition_id=0, topic_id=uuid.uuid4(), replicas=[1], isr=[1], leader=1)
    batch = build_batch(
        [SimpleRecord(value=encode_record(record))],
        base_offset=headers[-1].next_offset,
        partition_leader_epoch=headers[-1].partition_leader_epoch,
    )
    with segment.open("ab") as f:
        f.write(batch)
    return len(data)


def test_a_record_that_fails_to_apply_halts_the_node_and_a_restart_recovers(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "data")
    try:
        broker.start()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("kept", 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        for i in range(5):
            producer.send("kept", f"v{i}".encode()).get(timeout=10)
        producer.close()
        assert broker.stop() == 0

        segment = _last_segment(broker.data_dir)
        good_size = _append_unreplayable_record(segment)
        with pytest.raises(Exception, match="exited with code 1"):
            broker.start(timeout_s=HALT_WAIT_S)
        out = broker.log_tail()
        fatal = [line for line in out.splitlines() if line.startswith("FATAL riverbed node 1:")]
        assert len(fatal) == 1, out
        assert "state machine apply of offsets" in fatal[0]
        assert "failed to replay" in fatal[0] and "unknown topic id" in fatal[0]
        assert "ready:" not in out

        # the operator removes the bad record (it and what was written after it)
        with segment.open("r+b") as f:
            f.truncate(good_size)
        broker.start()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        tp = TopicPartition("kept", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        consumer.close()
        assert got == [f"v{i}".encode() for i in range(5)]
    finally:
        broker.close()


#: Loaded by the child through PYTHONPATH: the AlterPartition sender's loop raises an
#: error no site expects (the injection is the test's; the node code is unchanged).
_BREAK_THE_SENDER = """
from riverbed.server.replication import manager

async def _broken(self):
    raise RuntimeError("injected: the AlterPartition sender broke")

manager.ReplicaManager._alter_loop = _broken
"""


def test_an_unexpected_error_in_the_alter_partition_sender_halts_the_process(
    tmp_path: Path,
) -> None:
    """Before issue 18 the sender was a bare task: its error vanished with it and the node
    served on, unable to change any ISR. Now: one FATAL line, exit code 1."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(_BREAK_THE_SENDER)
    pythonpath = os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p)
    broker = BrokerProcess(data_dir=tmp_path / "data", env={"PYTHONPATH": pythonpath})
    broker.start()
    try:
        assert broker.proc is not None
        assert broker.proc.wait(HALT_WAIT_S) == FATAL_EXIT_CODE
        fatal = [line for line in broker.log_tail().splitlines() if line.startswith("FATAL")]
        assert fatal == [
            "FATAL riverbed node 1: AlterPartition sender failed: "
            "RuntimeError: injected: the AlterPartition sender broke"
        ]
    finally:
        broker.close()
