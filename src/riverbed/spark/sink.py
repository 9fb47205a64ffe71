"""Writing DataFrames to a Kafka-compatible cluster (batch and streaming).

Columns (as in Spark's Kafka sink): ``value`` (binary or string) is required; ``key``
(binary or string), ``topic`` (string; the ``topic`` option overrides it), ``partition``
(int; null = the producer's partitioner), ``timestamp`` (timestamp, or long epoch ms;
null = now) and ``headers`` (array<struct<key:string,value:binary>>) are optional. Other
columns are ignored.

Exactly-once (option ``exactlyOnce``, the default of streaming writes): each task writes
its rows in a transaction that the driver commits with the batch, through KIP-939's
two-phase commit (:mod:`riverbed.spark.exactly_once`); read_committed readers see every
row of a batch once, or none of it. Options ``transactional.id.prefix`` (default
``riverbed-spark-<topic>``, ``riverbed-spark-batch-<topic>`` for batch writes; give each
query writing a topic its own),
``transaction.timeout.ms`` (how long a task's transaction may stay open before it is
prepared; default 60000) and ``exactlyOnce.commitLogTopic`` (where the driver records its
decisions; default ``__riverbed_spark_sink_commits``). Brokers need
``transaction.two.phase.commit.enable=true``.

At-least-once (``exactlyOnce=false``, the default of batch writes, as Spark's Kafka sink):
each Spark task owns one idempotent producer (``enable.idempotence=true``): retries inside
a task never duplicate or reorder records. A failed delivery fails the task with the
broker's error; Spark then retries the task, so the guarantee across task retries is
at-least-once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from riverbed.spark.client import check_login, new_client
from riverbed.spark.exactly_once import SinkCoordinator, write_task
from riverbed.spark.executor_import import ExecutorImportCheck
from riverbed.spark.options import RiverbedOptionError, WriteOptions, librdkafka_settings
from riverbed.spark.schema import HEADERS_TYPE

# How long a task waits for outstanding deliveries after its last row.
flush_timeout_s = 300.0
# Back-off when the producer's local queue (queue.buffering.max.messages) is full.
_queue_full_wait_s = 0.05


class RiverbedWriteError(RuntimeError):
    """A record could not be delivered; the message carries the broker's error."""


@dataclass
class RiverbedCommitMessage(WriterCommitMessage):
    records: int


def validate_write_schema(schema: StructType, options: WriteOptions) -> None:
    """Fail fast (on the driver) on a DataFrame the sink cannot write."""
    types = {f.name: f.dataType for f in schema.fields}
    problems: list[str] = []
    if "value" not in types:
        problems.append("required column 'value' not found")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (BinaryType, StringType)):
            problems.append(
                f"column '{name}' must be binary or string, not {types[name].simpleString()}"
            )
    if "topic" in types:
        if not isinstance(types["topic"], StringType):
            problems.append(f"column 'topic' must be string, not {types['topic'].simpleString()}")
    elif options.topic is None:
        problems.append("no 'topic' column and no 'topic' option: set one of them")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        problems.append(f"column 'partition' must be int, not {types['partition'].simpleString()}")
    if "timestamp" in types and not isinstance(types["timestamp"], (TimestampType, LongType)):
        problems.append(
            f"column 'timestamp' must be timestamp or long (epoch ms), not {types['timestamp'].simpleString()}"
        )
    if "headers" in types:
        h = types["headers"]
        element = h.elementType if isinstance(h, ArrayType) else None
        ok = isinstance(element, StructType)
        if isinstance(element, StructType):
            inner = {f.name: f.dataType for f in element.fields}
            ok = (
                set(inner) == {"key", "value"}
                and isinstance(inner["key"], StringType)
                and isinstance(inner["value"], (BinaryType, StringType))
            )
        if not ok:
            problems.append(
                f"column 'headers' must be {HEADERS_TYPE.simpleString()}, not {h.simpleString()}"
            )
    if problems:
        raise RiverbedOptionError("cannot write to riverbed: " + "; ".join(problems))


def _as_bytes(col: pa.Array | pa.ChunkedArray | None, n: int) -> list[Any]:
    if col is None:
        return [None] * n
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    values: list[Any] = col.to_pylist()
    return values


def _timestamps_ms(col: pa.Array | None, n: int) -> list[int]:
    if col is None:
        return [0] * n
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.timestamp("ms", tz=col.type.tz)).cast(pa.int64())
    return [0 if v is None else v for v in col.to_pylist()]


def _headers(col: pa.Array | None, n: int) -> list[Any]:
    if col is None:
        return [None] * n
    out: list[Any] = []
    for hs in col.to_pylist():
        if not hs:
            out.append(None)
            continue
        out.append(
            [
                (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                for h in hs
                if h
            ]
        )
    return out


Row = tuple[str, int, Any, Any, int, Any]  # topic, partition (-1: any), key, value, ts, headers


def rows_of(options: WriteOptions, batch: pa.RecordBatch) -> Iterator[Row]:
    """Each row of ``batch`` as (topic, partition, key, value, timestamp ms, headers)."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> Any:
        return batch.column(names.index(name)) if name in names else None

    if options.topic is not None:
        topics: list[Any] = [options.topic] * n
    else:
        topics = column("topic").to_pylist()
        if None in topics:
            raise RiverbedWriteError("a row has a null 'topic' and no 'topic' option is set")
    pcol = column("partition")
    parts = [-1 if p is None else p for p in pcol.to_pylist()] if pcol is not None else [-1] * n
    return zip(
        topics,
        parts,
        _as_bytes(column("key"), n),
        _as_bytes(column("value"), n),
        _timestamps_ms(column("timestamp"), n),
        _headers(column("headers"), n),
        strict=True,
    )


def produce_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of ``batches``; return the count once all are acknowledged."""
    first_error: list[tuple[KafkaError, str, int]] = []

    def on_error(err: KafkaError | None, msg: Any) -> None:
        if err is not None and not first_error:
            first_error.append((err, msg.topic(), msg.partition()))

    producer = new_client(Producer, producer_config(options, on_error))
    produce = producer.produce
    count = 0
    for batch in batches:
        for topic, partition, key, value, ts, headers in rows_of(options, batch):
            while True:
                try:
                    produce(topic, value, key, partition=partition, timestamp=ts, headers=headers)
                    break
                except BufferError:
                    producer.poll(_queue_full_wait_s)
                except KafkaException as e:
                    err = e.args[0]
                    raise RiverbedWriteError(
                        f"delivery to {topic}-{partition} failed: {err.name()}: {err.str()}"
                    ) from e
            if first_error:
                break
        count += batch.num_rows
        producer.poll(0)
        if first_error:
            break
    remaining = producer.flush(flush_timeout_s)
    if first_error:
        err, topic, partition = first_error[0]
        raise RiverbedWriteError(
            f"delivery to {topic}-{partition} failed: {err.name()}: {err.str()}"
        )
    if remaining:
        raise RiverbedWriteError(f"{remaining} records still undelivered after {flush_timeout_s} s")
    return count


def check_producer_config(options: WriteOptions) -> None:
    """Fail on the driver, before any task runs, on a client setting librdkafka rejects."""
    new_client(Producer, producer_config(options, lambda _err, _msg: None))


def producer_config(options: WriteOptions, on_error: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"enable.idempotence": True, "linger.ms": 5}
    config.update(librdkafka_settings(options.client_config))
    config["on_delivery"] = on_error
    config["delivery.report.only.error"] = True
    return config


#: ``kafka.*`` settings the exactly-once sink's own client obeys, besides its security
#: settings (``security.protocol``, ``sasl.*``, ``ssl.*``: `riverbed.cli.client_security`).
_EXACTLY_ONCE_CLIENT_SETTINGS = frozenset({"bootstrap.servers", "client.id", "isolation.level"})
_SECURITY_PREFIXES = ("security.protocol", "sasl.", "ssl.")


class _ProducingWriter:
    """What the batch and the streaming writer share: checks on the driver (and the
    exactly-once sink's recovery), then each task produces its Arrow batches. The writers
    travel to executors through ExecutorImportCheck (an executor's Python without
    riverbed fails saying how to install it, as for the source's classes)."""

    def __init__(self, options: WriteOptions, schema: StructType, streaming: bool) -> None:
        options = options.with_default_exactly_once(streaming)
        validate_write_schema(schema, options)
        self.options = options
        self.coordinator: SinkCoordinator | None = None
        check_login(options.client_config)
        if not options.exactly_once:
            check_producer_config(options)
            return
        other = sorted(
            k
            for k in options.client_config
            if k not in _EXACTLY_ONCE_CLIENT_SETTINGS and not k.startswith(_SECURITY_PREFIXES)
        )
        if other:
            raise RiverbedOptionError(
                "the exactly-once sink does not support option(s) "
                + ", ".join(f"'kafka.{k}'" for k in other)
                + " yet; set exactlyOnce=false to write at-least-once"
            )
        self.coordinator = SinkCoordinator(options)
        self.coordinator.start()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.coordinator is None:
            return RiverbedCommitMessage(produce_batches(self.options, iterator))
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition_id = ctx.partitionId() if ctx is not None else 0
        return write_task(self.options, iterator, partition_id)


class RiverbedWriter(ExecutorImportCheck, _ProducingWriter, DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.coordinator is not None:
            self.coordinator.commit(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # At-least-once: records already delivered stay. Exactly-once: none is visible.
        if self.coordinator is not None:
            self.coordinator.abort(messages)


class RiverbedStreamWriter(ExecutorImportCheck, _ProducingWriter, DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.coordinator is not None:
            self.coordinator.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.coordinator is not None:
            self.coordinator.abort(messages)
