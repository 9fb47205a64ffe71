"""PySpark data source "riverbed": batch and streaming read and write of Kafka topics.

    from riverbed.spark import register
    register(spark)
    df = (spark.read.format("riverbed")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "clicks").load())

The schema, options and offsets JSON are those of Spark's Kafka source and sink; it works
against any Kafka-compatible cluster (riverbed first) through confluent-kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.spark.options import RiverbedOptionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT_NAME = "riverbed"

__all__ = ["FORMAT_NAME", "RiverbedOptionError", "register"]


def register(spark: SparkSession) -> None:
    """Register the data source under the format name "riverbed" on ``spark``."""
    from riverbed.spark.source import RiverbedDataSource

    spark.dataSource.register(RiverbedDataSource)
