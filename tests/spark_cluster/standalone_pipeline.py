"""Reads a topic on the Spark master given (batch, then streaming with a checkpoint), and
writes through the exactly-once sink (a batch write of local rows, a streaming copy).

Run by tests/spark_cluster/test_standalone.py through ``riverbed pipeline run --master``;
writes what it read (or the error the job failed with) as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

APP_NAME = "riverbed-standalone-test"


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def values(df: Any) -> list[str]:
    return sorted(bytes(r.value).decode() for r in df.select("value").collect())


def read_stream(spark: Any, bootstrap: str, topic: str, workdir: Path) -> None:
    query = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")  # a stream's default is latest
        .load()
        .select("value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def copy_stream(spark: Any, bootstrap: str, topic: str, out_topic: str, workdir: Path) -> None:
    """``topic`` to ``out_topic`` through the exactly-once sink (the streaming default):
    tasks on the workers' executors write and prepare, the driver commits."""
    query = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
        .writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out_topic)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def write_local(spark: Any, bootstrap: str, topic: str, count: int) -> None:
    """``count`` rows made on the executors (no riverbed source) written all-or-nothing."""
    (
        spark.range(0, count, numPartitions=2)
        .selectExpr("CONCAT('w', CAST(id AS STRING)) AS value")
        .write.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("exactlyOnce", "true")
        .mode("append")
        .save()
    )


def copy_twice(spark: Any, args: argparse.Namespace, first: int) -> list[str]:
    """``--topic`` copied to ``--copy-to`` through the exactly-once sink twice from one
    checkpoint (``--copy-more`` records from ``v<first>`` produced in between); what a
    read_committed read of ``--copy-to`` then returns."""
    copy_stream(spark, args.bootstrap_server, args.topic, args.copy_to, args.copy_dir)
    produce(args.bootstrap_server, args.topic, first, args.copy_more)
    copy_stream(spark, args.bootstrap_server, args.topic, args.copy_to, args.copy_dir)
    reader = spark.read.format("riverbed").option("kafka.bootstrap.servers", args.bootstrap_server)
    return values(reader.option("subscribe", args.copy_to).load())  # read_committed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stream-dir", type=Path, help="also read as a stream, twice")
    parser.add_argument("--more", type=int, default=0, help="records produced between")
    parser.add_argument("--executor-python", help="spark.pyspark.python of the executors")
    parser.add_argument("--write-local", type=int, default=0, help="rows written first")
    parser.add_argument("--copy-to", help="copy --topic here through the exactly-once sink")
    parser.add_argument("--copy-dir", type=Path, help="the copy's checkpoint directory")
    parser.add_argument("--copy-more", type=int, default=0, help="produced between copies")
    args = parser.parse_args(argv)
    from riverbed.spark.session import local_session
    from riverbed.testing.spark_standalone import QUICK_START_JAVA_OPTS

    conf = {
        "spark.task.maxFailures": "1",
        # a loaded machine starts Python workers slowly ("failed to connect back")
        "spark.python.authenticate.socketTimeout": "120s",
        # the driver's and the executors' JVMs live for one short run: C1 and the serial
        # collector start them sooner (the jobs and what they check are the same)
        "spark.driver.extraJavaOptions": QUICK_START_JAVA_OPTS,
        "spark.executor.extraJavaOptions": QUICK_START_JAVA_OPTS,
    }
    if args.executor_python:
        conf["spark.pyspark.python"] = args.executor_python
    spark = local_session(APP_NAME, **conf)
    result: dict[str, Any] = {"master": spark.sparkContext.master}
    try:
        if args.write_local:  # to the copy's target (or --topic: the job is to fail)
            try:
                write_local(
                    spark, args.bootstrap_server, args.copy_to or args.topic, args.write_local
                )
            except Exception as exc:
                result["write_error"] = str(exc)
        reader = spark.read.format("riverbed").option(
            "kafka.bootstrap.servers", args.bootstrap_server
        )
        result["batch"] = values(reader.option("subscribe", args.topic).load())
        tracker = spark.sparkContext._jsc.sc().statusTracker()
        result["executors"] = len(tracker.getExecutorInfos()) - 1  # less the driver
        produced = len(result["batch"])
        if args.stream_dir:
            read_stream(spark, args.bootstrap_server, args.topic, args.stream_dir)
            produce(args.bootstrap_server, args.topic, produced, args.more)
            produced += args.more
            read_stream(spark, args.bootstrap_server, args.topic, args.stream_dir)
            result["stream"] = values(spark.read.parquet(str(args.stream_dir / "out")))
        if args.copy_to:
            result["copied"] = copy_twice(spark, args, produced)
    except Exception as exc:  # the test reads the job's error from the JSON
        result["error"] = str(exc)
    finally:
        args.out.write_text(json.dumps(result))
        spark.stop()
    return 1 if "error" in result else 0
