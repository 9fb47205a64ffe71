"""Streaming reads: admission control under availableNow, restart from a checkpoint."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import riverbed_read

pytestmark = pytest.mark.spark


class BatchLog:
    """A foreachBatch sink that keeps (batch id, [(partition, offset, value)]) in order."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r.partition, r.offset, bytes(r.value)) for r in df.collect()]
        with self._lock:
            self.batches.append((batch_id, sorted(rows)))

    def records(self) -> list[tuple[int, int, bytes]]:
        return [rec for _, rows in self.batches for rec in rows]


def _run_available_now(
    spark: Any, bootstrap: str, checkpoint: Path, sink: BatchLog, **options: str
) -> None:
    query = (
        riverbed_read(spark, bootstrap, stream=True, **options)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "availableNow query did not finish in 120 s"
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def test_available_now_honours_max_offsets_per_trigger(
    spark: Any,
    bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    produce: Callable[..., None],
) -> None:
    topic = new_topic(2)
    produce(topic, [{"value": f"v{i}".encode(), "partition": i % 2} for i in range(50)])
    sink = BatchLog()
    _run_available_now(
        spark,
        bootstrap,
        tmp_path / "ckpt",
        sink,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="20",
    )
    # Equal backlogs of 25: each trigger admits 10 + 10 until the last 5 + 5.
    sizes = [len(rows) for _, rows in sink.batches]
    assert sizes == [20, 20, 10]
    per_partition = [sorted({p for p, _, _ in rows}) for _, rows in sink.batches]
    assert per_partition == [[0, 1]] * 3
    assert sorted(sink.records()) == sorted((i % 2, i // 2, f"v{i}".encode()) for i in range(50))


def test_restart_from_checkpoint_reads_every_record_exactly_once(
    spark: Any,
    bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    produce: Callable[..., None],
) -> None:
    topic = new_topic(2)
    checkpoint = tmp_path / "ckpt"
    produce(topic, [{"value": f"a{i}".encode(), "partition": i % 2} for i in range(10)])
    sink = BatchLog()
    # The default startingOffsets of a stream is latest; earliest reads what is there.
    _run_available_now(
        spark, bootstrap, checkpoint, sink, subscribe=topic, startingOffsets="earliest"
    )
    first = len(sink.records())
    assert first == 10
    # The checkpoint holds Spark's Kafka offsets JSON: next offset per partition, string keys.
    offsets_log = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    source_offsets = json.loads(offsets_log[-1].read_text().splitlines()[-1])
    assert source_offsets == {topic: {"0": 5, "1": 5}}
    produce(topic, [{"value": f"b{i}".encode(), "partition": i % 3 % 2} for i in range(7)])
    # startingOffsets is ignored on restart: the checkpoint decides where to resume.
    _run_available_now(
        spark, bootstrap, checkpoint, sink, subscribe=topic, startingOffsets="latest"
    )
    recs = sink.records()
    assert len(recs) == 17
    assert len(set(recs)) == 17
    assert sorted(v for _, _, v in recs[first:]) == sorted(f"b{i}".encode() for i in range(7))
    # A partition added while the query was down is read from its beginning.
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_partitions([NewPartitions(topic, 3)]).values():
        fut.result(30)
    produce(topic, [{"value": f"c{i}".encode(), "partition": 2} for i in range(3)])
    _run_available_now(spark, bootstrap, checkpoint, sink, subscribe=topic)
    recs = sink.records()
    assert len(recs) == len(set(recs)) == 20
    assert sorted(recs[17:]) == [(2, i, f"c{i}".encode()) for i in range(3)]
    # Nothing new: a further run plans no batch at all.
    batches = len(sink.batches)
    _run_available_now(spark, bootstrap, checkpoint, sink, subscribe=topic)
    assert len(sink.batches) == batches
