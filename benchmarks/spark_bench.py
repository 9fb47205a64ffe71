"""The PySpark data source "riverbed": rows/s reading and writing, against a ceiling.

Run: ``.venv/bin/python -m benchmarks.spark_bench [--records N] [--repeat R] [--broker
riverbed|tansu | --bootstrap-server HOST:PORT]``

One ``local[2]`` SparkSession; the broker runs on 127.0.0.1 (riverbed through
riverbed.testing.cluster with data on disk by default). Steps, all in the same run:

1. write: ``spark.range(N)`` turned into 100-byte ``value`` rows, written with
   ``df.write.format("riverbed")`` to a 2-partition topic with the at-least-once sink (one
   idempotent producer per task, ``exactlyOnce=false``) and with the exactly-once sink
   (one transaction per task, prepared, committed by the driver: KIP-939) -- rows/s, the
   exactly-once sink as a ratio to the at-least-once one (goal >= 0.8), both against
   writing the same DataFrame to Spark's ``noop`` sink (what Spark alone costs);
2. read: ``spark.read.format("riverbed")`` of those N records into the ``noop`` sink, with
   the default reader (riverbed's own Fetch requests + the columnar decoder) and with
   ``reader=consumer`` (confluent-kafka record by record, the reader before issue 22) --
   rows/s, shown as ratios to each other and to the ceiling: a Python data source with the same schema and
   partition count whose ``read`` yields the same number of rows as prebuilt Arrow record
   batches of the same size (no Kafka client, no conversion): what any Python data
   source can reach in this Spark;
3. for context, the same records consumed by plain confluent-kafka consumers (one process
   per partition, as Spark runs one Python worker per task; no Spark, no Arrow): what the
   broker and the client deliver by themselves.

With ``--standalone`` it measures instead the same read (``riverbed -> noop``, best of
``--repeat``) on ``local[2]`` and on a Spark standalone cluster on loopback (a master and
two workers of 1 core / 512m each, riverbed.testing.spark_standalone, executors running
this interpreter), and prints the ratio standalone/local[2].

Not a test: nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from riverbed.spark.fetch import arrow_batch_rows_max
from riverbed.spark.schema import arrow_schema, source_schema

RECORD_BYTES = 100


class CeilingSource(DataSource):
    """Yields prebuilt Arrow batches of the riverbed schema (rows, partitions in options)."""

    @classmethod
    def name(cls) -> str:
        return "riverbed_ceiling"

    def schema(self) -> Any:
        return source_schema(False)

    def reader(self, schema: Any) -> DataSourceReader:
        return CeilingReader(int(self.options["rows"]), int(self.options["partitions"]))


class CeilingReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int) -> None:
        self.rows = rows
        self.parts = partitions

    def partitions(self) -> list[InputPartition]:
        share = self.rows // self.parts
        sizes = [share + (1 if i < self.rows % self.parts else 0) for i in range(self.parts)]
        return [InputPartition((i, n)) for i, n in enumerate(sizes)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import datetime as dt

        import pyarrow as pa

        index, rows = partition.value
        schema = arrow_schema(False)
        n = arrow_batch_rows_max
        now = dt.datetime.now(dt.UTC)
        full = pa.RecordBatch.from_arrays(
            [
                pa.array([None] * n, type=pa.binary()),
                pa.array([b"x" * RECORD_BYTES] * n, type=pa.binary()),
                pa.array(["bench"] * n, type=pa.string()),
                pa.array([index] * n, type=pa.int32()),
                pa.array(range(n), type=pa.int64()),
                pa.array([now] * n, type=schema.field("timestamp").type),
                pa.array([0] * n, type=pa.int32()),
            ],
            schema=schema,
        )
        done = 0
        while done < rows:
            take = min(n, rows - done)
            yield full if take == n else full.slice(0, take)
            done += take


@contextlib.contextmanager
def broker(kind: str, bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
    elif kind == "tansu":
        from benchmarks.broker_vs_tansu import tansu_broker

        with tansu_broker() as address:
            yield address
    else:
        from riverbed.testing.cluster import start_broker

        # two-phase commit (KIP-939) for the exactly-once sink
        node = start_broker(overrides={"transaction.two.phase.commit.enable": "true"})
        try:
            yield node.bootstrap
        finally:
            node.stop()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(60)


def records_in(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "spark-bench", "enable.auto.commit": False}
    )
    try:
        marks = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in range(partitions)
        ]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def consume_partition(bootstrap: str, topic: str, partition: int) -> tuple[int, float]:
    """Read every record of one partition with plain confluent-kafka: (count, seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    start = time.perf_counter()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "spark-bench-raw", "enable.auto.commit": False}
    )
    count = 0
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
        consumer.assign([TopicPartition(topic, partition, 0)])
        last = -1
        while last < end - 1:
            for m in consumer.consume(20_000, timeout=1.0):
                if m.error() is None:
                    m.value()
                    last = m.offset()
                    count += 1
    finally:
        consumer.close()
    return count, time.perf_counter() - start


def consume_all(bootstrap: str, topic: str, partitions: int) -> tuple[int, float]:
    """librdkafka alone: one process per partition (as Spark's Python workers), no Spark.

    Returns (records, seconds of the slowest reader), process start-up excluded.
    """
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(partitions) as pool:
        done = pool.starmap(consume_partition, [(bootstrap, topic, p) for p in range(partitions)])
    return sum(c for c, _ in done), max(t for _, t in done)


def timed(label: str, action: Any) -> float:
    start = time.perf_counter()
    action()
    took = time.perf_counter() - start
    print(f"  {label}: {took:.1f} s", flush=True)
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--broker", choices=("riverbed", "tansu"), default="riverbed")
    parser.add_argument("--bootstrap-server", default=None, help="use a running broker")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of the reads; the best time of each counts"
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="only the read, on a standalone cluster of two workers vs local[2] (ratio)",
    )
    args = parser.parse_args(argv)
    n, parts = args.records, args.partitions
    if args.standalone:
        return standalone_main(args)

    from pyspark.sql import functions as F

    from riverbed.spark.session import local_session

    spark = local_session("riverbed-spark-bench")
    spark.dataSource.register(CeilingSource)
    where = args.bootstrap_server or args.broker
    print(
        f"spark_bench: {n:,} records of {RECORD_BYTES} B, {parts} partitions, local[2], "
        f"broker {where}; {platform.machine()} x{os.cpu_count()}, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    try:
        with broker(args.broker, args.bootstrap_server) as bootstrap:
            topic = f"spark-bench-{int(time.time())}"
            create_topic(bootstrap, topic, parts)
            rows = spark.range(0, n, numPartitions=parts).select(
                F.expr(f"cast(lpad(cast(id as string), {RECORD_BYTES}, 'x') as binary)").alias(
                    "value"
                )
            )
            # Warm-up: JVM code paths and Python workers for both sources.
            warm = f"{topic}-warm"
            create_topic(bootstrap, warm, parts)
            small = spark.range(0, 20_000, numPartitions=parts).selectExpr(
                "cast(cast(id as string) as binary) as value"
            )
            small.write.format("riverbed").option("kafka.bootstrap.servers", bootstrap).option(
                "topic", warm
            ).mode("append").save()
            read_warm = (
                spark.read.format("riverbed")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", warm)
                .load()
            )
            read_warm.write.format("noop").mode("overwrite").save()
            spark.read.format("riverbed_ceiling").option("rows", "20000").option(
                "partitions", str(parts)
            ).load().write.format("noop").mode("overwrite").save()

            print("write", flush=True)
            t_noop_write = timed(
                "same rows -> noop", lambda: rows.write.format("noop").mode("overwrite").save()
            )
            t_write = timed(
                "same rows -> riverbed, at-least-once",
                lambda: (
                    rows.write.format("riverbed")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", topic)
                    .option("exactlyOnce", "false")
                    .mode("append")
                    .save()
                ),
            )
            t_write_eo = float("nan")
            if args.broker == "riverbed" or args.bootstrap_server:  # Tansu: no KIP-939
                eo_topic = f"{topic}-eo"
                create_topic(bootstrap, eo_topic, parts)
                t_write_eo = timed(
                    "same rows -> riverbed, exactly-once",
                    lambda: (
                        rows.write.format("riverbed")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("topic", eo_topic)
                        .option("exactlyOnce", "true")
                        .mode("append")
                        .save()
                    ),
                )
                stored = records_in(bootstrap, eo_topic, parts)
                assert stored >= n, f"{eo_topic} holds {stored} offsets, {n} were written"
            print("read", flush=True)
            source = (
                spark.read.format("riverbed")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .load()
            )
            ceiling = (
                spark.read.format("riverbed_ceiling")
                .option("rows", str(n))
                .option("partitions", str(parts))
                .load()
            )
            by_consumer = (
                spark.read.format("riverbed")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("reader", "consumer")
                .load()
            )
            reads = {
                "ceiling (prebuilt Arrow) -> noop": ceiling,
                "riverbed -> noop": source,
                "riverbed reader=consumer -> noop": by_consumer,
            }
            best = dict.fromkeys(reads, float("inf"))
            for _ in range(args.repeat):  # interleaved: a load spike hits one round, not one reader
                for label, df in reads.items():
                    took = timed(
                        label, lambda df=df: df.write.format("noop").mode("overwrite").save()
                    )
                    best[label] = min(best[label], took)
            t_ceiling, t_read, t_read_consumer = best.values()
            raw_records, t_raw = consume_all(bootstrap, topic, parts)
            print(f"  confluent-kafka consume only (no Spark): {t_raw:.1f} s", flush=True)
            assert raw_records == n, f"consumed {raw_records} records, {n} were written"
            stored = records_in(bootstrap, topic, parts)
            assert stored == n, f"the topic holds {stored} records, {n} were written"
    finally:
        spark.stop()

    def rate(t: float) -> str:
        return f"{n / t:>12,.0f} rows/s"

    print()
    print(f"write  riverbed sink          {rate(t_write)}   (noop sink: {rate(t_noop_write)})")
    print(f"write  exactly-once sink      {rate(t_write_eo)}")
    print(f"write ratio exactly-once/at-least-once  {t_write / t_write_eo:.3f}")
    print(f"write ratio exactly-once/noop           {t_noop_write / t_write_eo:.3f}")
    print(f"read   riverbed source        {rate(t_read)}")
    print(f"read   source reader=consumer {rate(t_read_consumer)}")
    print(f"read   ceiling (Arrow only)   {rate(t_ceiling)}")
    print(f"read   consume only, no Spark {rate(t_raw)}   (the broker + client limit)")
    print(f"read ratio riverbed/ceiling   {t_ceiling / t_read:.3f}")
    print(f"read ratio riverbed/consume   {t_raw / t_read:.3f}")
    print(f"read ratio riverbed/consumer reader  {t_read_consumer / t_read:.3f}")
    return 0


def best_read_s(spark: Any, bootstrap: str, topic: str, repeat: int, label: str) -> float:
    """Best time of ``repeat`` reads of ``topic`` into the noop sink (after a warm-up)."""
    df = (
        spark.read.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    df.limit(10).collect()  # warm-up: executors and their Python workers
    return min(
        timed(label, lambda: df.write.format("noop").mode("overwrite").save())
        for _ in range(repeat)
    )


def standalone_main(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    from riverbed.spark.session import local_session, spark_session
    from riverbed.testing.spark_standalone import StandaloneCluster

    n, parts = args.records, args.partitions
    print(
        f"spark_bench --standalone: {n:,} records of {RECORD_BYTES} B, {parts} partitions; "
        f"{platform.machine()} x{os.cpu_count()}, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with broker(args.broker, args.bootstrap_server) as bootstrap:
        topic = f"spark-bench-sa-{int(time.time())}"
        create_topic(bootstrap, topic, parts)
        spark = local_session("riverbed-spark-bench")
        try:
            value = F.expr(f"cast(lpad(cast(id as string), {RECORD_BYTES}, 'x') as binary)")
            spark.range(0, n, numPartitions=parts).select(value.alias("value")).write.format(
                "riverbed"
            ).option("kafka.bootstrap.servers", bootstrap).option("topic", topic).option(
                "exactlyOnce", "false"
            ).mode("append").save()
            t_local = best_read_s(
                spark, bootstrap, topic, args.repeat, "riverbed -> noop, local[2]"
            )
        finally:
            spark.stop()
        with StandaloneCluster(workers=2) as cluster:
            spark = spark_session("riverbed-spark-bench-standalone", cluster.master_url)
            try:
                t_sa = best_read_s(
                    spark, bootstrap, topic, args.repeat, "riverbed -> noop, standalone x2"
                )
            finally:
                spark.stop()
    print()
    print(f"read   local[2]               {n / t_local:>12,.0f} rows/s")
    print(f"read   standalone, 2 workers  {n / t_sa:>12,.0f} rows/s")
    print(f"read ratio standalone/local[2]  {t_local / t_sa:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
