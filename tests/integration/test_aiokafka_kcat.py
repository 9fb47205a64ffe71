"""aiokafka and Debian's kcat (librdkafka's command line), unmodified, against riverbed.

aiokafka: producer with every codec, consumer with assign/seek, offsets_for_times and
the admin client (create topics/partitions, alter and describe configs, delete). kcat:
produce with keys and headers in every codec, consume with formatted output, list
metadata.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    return admin


async def _consume(bootstrap: str, tp: TopicPartition, offset: int, expected: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, offset)
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            got += batch.get(tp, [])
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_produce_consume(
    broker: BrokerProcess, topic_name: str, codec: str | None
) -> None:
    async def main() -> None:
        admin = await _admin(broker.bootstrap)
        try:
            await admin.create_topics([NewTopic(topic_name, 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic_name,
                    key=b"k%d" % i,
                    value=None if i == 7 else b"v%d" % i,
                    headers=[("i", b"%d" % i)],
                    partition=0,
                )
                for i in range(100)
            ]
            metas = [await f for f in futures]
        finally:
            await producer.stop()
        assert [m.offset for m in metas] == list(range(100))
        tp = TopicPartition(topic_name, 0)
        got = await _consume(broker.bootstrap, tp, 40, 60)
        assert [r.offset for r in got] == list(range(40, 100))
        assert [(r.key, r.value, list(r.headers)) for r in got] == [
            (b"k%d" % i, None if i == 7 else b"v%d" % i, [("i", b"%d" % i)]) for i in range(40, 100)
        ]

    asyncio.run(main())


def test_aiokafka_admin_and_offsets_for_times(broker: BrokerProcess, topic_name: str) -> None:
    async def main() -> None:
        admin = await _admin(broker.bootstrap)
        try:
            await admin.create_topics([NewTopic(topic_name, 1, 1)])
            await admin.create_partitions({topic_name: NewPartitions(3)})
            await admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.TOPIC, topic_name, {"retention.bytes": "123456"}
                    )
                ]
            )
            [resp] = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic_name, {"retention.bytes": None})]
            )
            entries = {e[0]: e[1] for e in resp.resources[0][4]}
            assert entries == {"retention.bytes": "123456"}
            meta = await admin.describe_topics([topic_name])
            assert len(meta[0]["partitions"]) == 3
        finally:
            await admin.close()

        base = int(time.time() * 1000) - 10_000
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(
                    topic_name, value=b"x", partition=2, timestamp_ms=base + 1000 * i
                )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic_name, 2)
            found = await consumer.offsets_for_times({tp: base + 2500})
            assert found[tp].offset == 3 and found[tp].timestamp == base + 3000
            assert await consumer.end_offsets([tp]) == {tp: 5}
        finally:
            await consumer.stop()

        admin = await _admin(broker.bootstrap)
        try:
            await admin.delete_topics([topic_name])
            assert topic_name not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(main())


def _kcat(*args: str, stdin: str | None = None) -> str:
    assert KCAT is not None, "kcat is not installed (make sysdeps installs it)"
    out = subprocess.run(
        [KCAT, *args], input=stdin, capture_output=True, text=True, timeout=30, check=True
    )
    return out.stdout


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_consume(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    lines = "".join(f"key{i}:value {i}\n" for i in range(50))
    _kcat(
        "-b",
        broker.bootstrap,
        "-P",
        "-t",
        topic_name,
        "-K:",
        "-z",
        codec,
        "-H",
        "origin=kcat",
        stdin=lines,
    )
    out = _kcat(
        "-b",
        broker.bootstrap,
        "-C",
        "-t",
        topic_name,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%k|%s|%o|%h\n",
    )
    assert out.splitlines() == [f"key{i}|value {i}|{i}|origin=kcat" for i in range(50)]
    listing = _kcat("-b", broker.bootstrap, "-L", "-t", topic_name)
    assert f'topic "{topic_name}" with 1 partitions' in listing
    assert "leader 1, replicas: 1, isrs: 1" in listing
