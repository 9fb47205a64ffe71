"""Executor side, ``reader=consumer``: read one offset range with a confluent-kafka consumer.

A task gets ``[from_offset, until_offset)`` of one partition. It assigns a fresh
confluent-kafka consumer at ``from_offset`` and consumes up to ``arrow_batch_rows_max``
messages per call, turning each call's messages into one ``pyarrow.RecordBatch`` of the
schema in :mod:`riverbed.spark.schema`.

Termination never waits for an offset that does not exist: offsets missing inside the
range (compaction, transaction markers, aborted records) are simply not returned by the
broker, so the range is complete at the first message at or past ``until_offset - 1`` or
at partition EOF (``enable.partition.eof``: the fetch position reached the high
watermark, which was >= ``until_offset`` when the range was planned).

Data loss while reading: records deleted since planning surface as an offset-out-of-range
reset (``auto.offset.reset=error``) and a deleted topic as an unknown-partition error;
with ``failOnDataLoss=true`` the task fails naming the partition, otherwise it continues
from the log start (``auto.offset.reset=earliest``) or stops.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from riverbed.spark.client import (
    DataLossError,
    RiverbedSourceError,
    consumer_config,
    new_client,
    report_data_loss,
)
from riverbed.spark.offsets import OffsetRange
from riverbed.spark.schema import arrow_schema

# Messages per consume() call and so rows per Arrow batch.
arrow_batch_rows_max = 20_000
# librdkafka's prefetch queue per task (queued.max.messages.kbytes) unless kafka.* sets it:
# a few Arrow batches' worth ahead is enough to keep the task busy.
fetch_queue_kbytes_max = 16_384
# Longest single wait inside consume(); the overall stall limit is pollTimeoutMs.
_consume_wait_s = 0.5

# No record for this long: check whether the partition still exists.
_stall_check_s = 2.0
# Timeout of that metadata request.
_metadata_timeout_s = 10.0

# librdkafka's timestamp type codes -> Kafka's TimestampType ids used by Spark.
_TS_TYPE = {1: 0, 2: 1}

_LOST_TOPIC_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
}
_OUT_OF_RANGE_CODES = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}


def _to_batch(
    msgs: list[Any], topic: str, partition: int, schema: pa.Schema, headers: bool
) -> pa.RecordBatch:
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    ts_types = [_TS_TYPE.get(t, -1) for t, _ in stamps]
    columns: list[pa.Array] = [
        pa.array([m.key() for m in msgs], type=pa.binary()),
        pa.array([m.value() for m in msgs], type=pa.binary()),
        pa.array([topic] * n, type=pa.string()),
        pa.array([partition] * n, type=pa.int32()),
        pa.array([m.offset() for m in msgs], type=pa.int64()),
        pa.array([ts * 1000 for _, ts in stamps], type=pa.int64()).cast(
            schema.field("timestamp").type
        ),
        pa.array(ts_types, type=pa.int32()),
    ]
    if headers:
        columns.append(_headers_array(msgs, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers_array(msgs: list[Any], list_type: pa.DataType) -> pa.Array:
    offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    for m in msgs:
        hs = m.headers() or ()
        for k, v in hs:
            keys.append(k)
            values.append(v)
        offsets.append(len(keys))
    struct_type = list_type.value_type
    items = pa.StructArray.from_arrays(
        [pa.array(keys, type=pa.string()), pa.array(values, type=pa.binary())],
        fields=list(struct_type),
    )
    # As Spark's Kafka source: a record without headers has null headers, not [].
    empty = pa.array([a == b for a, b in itertools.pairwise(offsets)])
    return pa.ListArray.from_arrays(
        pa.array(offsets, type=pa.int32()), items, type=list_type, mask=empty
    )


def _partition_exists(consumer: Any, r: OffsetRange) -> bool:
    try:
        md = consumer.list_topics(r.topic, timeout=_metadata_timeout_s)
    except KafkaException:
        return True  # cannot tell; the poll timeout still bounds the wait
    topic = md.topics.get(r.topic)
    return topic is not None and topic.error is None and r.partition in topic.partitions


def _range_consumer(
    client_config: Mapping[str, str], r: OffsetRange, fail_on_data_loss: bool
) -> Any:
    """A consumer assigned to ``r``'s partition at its first offset."""
    config = consumer_config(
        client_config,
        **{
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest" if not fail_on_data_loss else "error",
        },
    )
    config.setdefault("queued.max.messages.kbytes", fetch_queue_kbytes_max)
    consumer = new_client(Consumer, config)
    try:
        consumer.assign([KafkaTopicPartition(r.topic, r.partition, r.from_offset)])
    except BaseException:
        consumer.close()
        raise
    return consumer


def _take(
    msgs: list[Any], r: OffsetRange, next_offset: int, fail_on_data_loss: bool
) -> tuple[list[Any], int, bool]:
    """(the records of ``msgs`` inside the range, the next offset, is the range done?)."""
    name = f"{r.topic}-{r.partition}"
    good: list[Any] = []
    for m in msgs:
        err = m.error()
        if err is None:
            off: int = m.offset()
            if off >= r.until_offset:
                return good, next_offset, True
            if off >= next_offset:  # below: librdkafka re-delivery after a reset; yielded
                good.append(m)
                next_offset = off + 1
            continue
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            eof: int = m.offset()
            if eof < r.until_offset:
                report_data_loss(
                    fail_on_data_loss,
                    f"{name} ends at offset {eof} but offsets up to {r.until_offset - 1} "
                    "were planned (log truncated or topic recreated?).",
                )
            return good, next_offset, True
        if code in _OUT_OF_RANGE_CODES:
            if fail_on_data_loss:
                raise DataLossError(
                    f"Cannot fetch offset {next_offset} of {name}: it is out of range "
                    f"(deleted by retention or DeleteRecords): {err.str()}. Set the "
                    'source option "failOnDataLoss" to "false" to skip lost records.'
                )
            continue  # auto.offset.reset=earliest: the consumer carries on at the log start
        if code in _LOST_TOPIC_CODES:
            report_data_loss(fail_on_data_loss, f"{name} is gone ({err.str()}).")
            return good, next_offset, True
        if err.fatal() or not err.retriable():
            raise RiverbedSourceError(f"reading {name} at offset {next_offset} failed: {err.str()}")
    return good, next_offset, False


def read_range(
    client_config: Mapping[str, str],
    r: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches (never a record outside the range)."""
    if r.size <= 0:
        return
    schema = arrow_schema(include_headers)
    consumer = _range_consumer(client_config, r, fail_on_data_loss)
    name = f"{r.topic}-{r.partition}"
    try:
        next_offset = r.from_offset
        last_progress = last_check = time.monotonic()
        while next_offset < r.until_offset:
            # Ask for no more than the range still holds: consume() returns as soon as it
            # has that many (an EOF event counts), instead of waiting out its timeout.
            want = min(arrow_batch_rows_max, r.until_offset - next_offset)
            msgs: list[Any] = consumer.consume(num_messages=want, timeout=_consume_wait_s)
            good, next_offset, done = _take(msgs, r, next_offset, fail_on_data_loss)
            if good:
                last_progress = time.monotonic()
                yield _to_batch(good, r.topic, r.partition, schema, include_headers)
            if done:
                return
            if msgs:
                continue
            now = time.monotonic()
            stalled_s = now - last_progress
            if stalled_s > _stall_check_s and now - last_check > _stall_check_s:
                last_check = now
                if not _partition_exists(consumer, r):
                    # librdkafka reports no error for an assigned partition that vanished.
                    report_data_loss(fail_on_data_loss, f"{name} is gone (topic deleted?).")
                    return
            if stalled_s * 1000 > poll_timeout_ms:
                raise RiverbedSourceError(
                    f"no records from {name} at offset {next_offset} for {poll_timeout_ms} ms "
                    "(kafkaConsumer.pollTimeoutMs); is the broker reachable?"
                )
    finally:
        consumer.close()
