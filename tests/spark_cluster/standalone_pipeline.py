"""Reads a topic on the Spark master given (batch, then streaming with a checkpoint).

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stream-dir", type=Path, help="also read as a stream, twice")
    parser.add_argument("--more", type=int, default=0, help="records produced between")
    parser.add_argument("--executor-python", help="spark.pyspark.python of the executors")
    args = parser.parse_args(argv)
    from riverbed.spark.session import local_session

    conf = {"spark.task.maxFailures": "1"}
    if args.executor_python:
        conf["spark.pyspark.python"] = args.executor_python
    spark = local_session(APP_NAME, **conf)
    result: dict[str, Any] = {"master": spark.sparkContext.master}
    try:
        reader = spark.read.format("riverbed").option(
            "kafka.bootstrap.servers", args.bootstrap_server
        )
        result["batch"] = values(reader.option("subscribe", args.topic).load())
        tracker = spark.sparkContext._jsc.sc().statusTracker()
        result["executors"] = len(tracker.getExecutorInfos()) - 1  # less the driver
        if args.stream_dir:
            read_stream(spark, args.bootstrap_server, args.topic, args.stream_dir)
            produce(args.bootstrap_server, args.topic, len(result["batch"]), args.more)
            read_stream(spark, args.bootstrap_server, args.topic, args.stream_dir)
            result["stream"] = values(spark.read.parquet(str(args.stream_dir / "out")))
    except Exception as exc:  # the test reads the job's error from the JSON
        result["error"] = str(exc)
    finally:
        args.out.write_text(json.dumps(result))
        spark.stop()
    return 1 if "error" in result else 0
