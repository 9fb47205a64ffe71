"""Structured Streaming: clicks per page per minute (event-time window + watermark).

Reads the ``clicks`` topic with the riverbed source, windows on the record timestamp (the
click's CreateTime), keeps windows open for ``--watermark`` of lateness and emits each
closed window once (append mode) to two sinks, each its own exactly-once-checkpointed
query:

* the riverbed topic ``page-counts``: key = page, value = JSON
  ``{"window_start": ..., "window_end": ..., "page": ..., "clicks": n}``, record timestamp =
  window end (at-least-once: a retried micro-batch may write a window again);
* Parquet files under ``--output``/parquet (Spark's file sink: exactly once).

By default both queries run with ``trigger(availableNow=True)``: they process what is in
the topic now and stop (windows newer than the watermark stay open for the next run,
which resumes from the checkpoints). ``--continuous`` keeps them running.

    riverbed pipeline run examples/page_counts_stream.py --output /tmp/page-counts
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

CLICK_SCHEMA = "user string, page string, ts long"


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)


def page_counts(spark: Any, bootstrap: str, topic: str, watermark: str) -> Any:
    """The streaming DataFrame of (window_start, window_end, page, clicks)."""
    from pyspark.sql import functions as F

    clicks = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50000")
        .load()
        .select(
            F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("click"),
            F.col("timestamp"),
        )
        .select("click.page", "timestamp")
    )
    return (
        clicks.withWatermark("timestamp", watermark)
        .groupBy(F.window("timestamp", "1 minute"), F.col("page"))
        .agg(F.count("*").alias("clicks"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            "clicks",
        )
    )


def run(
    spark: Any,
    bootstrap: str,
    output: Path,
    topic: str = "clicks",
    out_topic: str = "page-counts",
    watermark: str = "2 minutes",
    continuous: bool = False,
) -> list[Any]:
    """Start both queries; unless ``continuous``, wait for them and return them."""
    from pyspark.sql import functions as F

    counts = page_counts(spark, bootstrap, topic, watermark)
    to_topic = counts.select(
        F.col("page").alias("key"),
        F.to_json(F.struct("window_start", "window_end", "page", "clicks")).alias("value"),
        F.col("window_end").alias("timestamp"),
    )

    def trigger(writer: Any) -> Any:
        return (
            writer.trigger(processingTime="10 seconds")
            if continuous
            else writer.trigger(availableNow=True)
        )

    queries = [
        trigger(
            to_topic.writeStream.format("riverbed")
            .outputMode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out_topic)
            .option("checkpointLocation", str(output / "checkpoints" / "topic"))
        ).start(),
        trigger(
            counts.writeStream.format("parquet")
            .outputMode("append")
            .option("path", str(output / "parquet"))
            .option("checkpointLocation", str(output / "checkpoints" / "parquet"))
        ).start(),
    ]
    if continuous:
        return queries
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name or q.id} failed: {q.exception()}")
    return queries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--out-topic", default="page-counts")
    parser.add_argument("--output", type=Path, default=None, help="Parquet + checkpoints dir")
    parser.add_argument("--watermark", default="2 minutes")
    parser.add_argument("--continuous", action="store_true", help="run until Ctrl-C")
    args = parser.parse_args(argv)
    output = args.output or Path(tempfile.mkdtemp(prefix="page-counts-"))

    from riverbed.spark.session import local_session

    ensure_topic(args.bootstrap_server, args.out_topic, 1)
    spark = local_session("page-counts")
    try:
        queries = run(
            spark,
            args.bootstrap_server,
            output,
            args.topic,
            args.out_topic,
            args.watermark,
            args.continuous,
        )
        if args.continuous:
            print(f"running; Parquet under {output / 'parquet'}; Ctrl-C to stop")
            try:
                spark.streams.awaitAnyTermination()
            finally:
                for q in queries:
                    q.stop()
        result = spark.read.parquet(str(output / "parquet"))
        print(f"{result.count()} closed (window, page) counts in {output / 'parquet'}:")
        result.orderBy("window_start", "page").show(20, truncate=False)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
