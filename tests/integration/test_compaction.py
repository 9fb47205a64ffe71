"""Log compaction on a real broker: the background cleaner keeps the latest value per key,
drops tombstones after delete.retention.ms (and keeps them readable until then), and
keyless records are refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.storage.checkpoints import read_offset_checkpoint
from riverbed.storage.cleaner import CLEANER_CHECKPOINT
from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
#: Records written after the first compaction (~40 KB: several closed 4 KB segments).
LATER_RECORDS = 300
#: Bound on the wait for the cleaner pass that covers them.
CLEANING_WAIT_S = 30.0


@pytest.fixture(scope="module")
def cbroker() -> Iterator[BrokerProcess]:
    with BrokerProcess(overrides={"log.cleaner.backoff.ms": "100"}) as proc:
        yield proc


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.monotonic()}",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, lo)])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not out or out[-1][0] < hi - 1):
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            out.append((msg.offset(), msg.key(), msg.value()))
    c.close()
    return out


def test_the_cleaner_keeps_the_latest_value_per_key_and_drops_old_tombstones(
    cbroker: BrokerProcess,
) -> None:
    b = cbroker.bootstrap
    topic = "compacted"
    admin = AdminClient({"bootstrap.servers": b, **QUIET})
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1000",
    }
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(20)
    # batches well below segment.bytes (a larger one is RECORD_LIST_TOO_LARGE)
    p = Producer({"bootstrap.servers": b, "linger.ms": 0, "batch.size": 1500, **QUIET})
    model: dict[bytes, bytes | None] = {}
    for i in range(600):
        key = b"k%d" % (i % 20)
        value = None if i in (41, 42) else b"v%d" % i  # tombstones, then new values
        p.produce(topic, value, key=key)
        model[key] = value
    assert p.flush(10) == 0
    produced = 600
    deadline = time.monotonic() + 30
    got = read_all(b, topic)
    while len(got) > produced // 2 and time.monotonic() < deadline:
        time.sleep(0.3)
        got = read_all(b, topic)
    assert len(got) <= produced // 2, "the cleaner did not compact the closed segments"
    latest = {k: v for _o, k, v in got}
    assert latest == model  # the last value of every key is still there
    assert [o for o, _k, _v in got] == sorted({o for o, _k, _v in got})  # offsets kept
    # k1 and k2 deleted: their tombstones go in a cleaning after delete.retention.ms
    p.produce(topic, None, key=b"k1")
    p.produce(topic, None, key=b"k2")
    for i in range(300):  # more data: the tombstones' segment closes, the cleaner runs again
        p.produce(topic, b"w%d" % i, key=b"k%d" % (3 + i % 10))
    assert p.flush(10) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        keys = [k for _o, k, _v in read_all(b, topic)]
        if b"k1" not in keys and b"k2" not in keys:
            break
        time.sleep(0.5)
    assert b"k1" not in keys and b"k2" not in keys


def test_keyless_records_are_refused_on_a_compacted_topic(cbroker: BrokerProcess) -> None:
    b = cbroker.bootstrap
    topic = "compacted-keyless"
    admin = AdminClient({"bootstrap.servers": b, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[
        topic
    ].result(20)
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": b, "enable.idempotence": False, "retries": 0, **QUIET})
    p.produce(topic, b"no key", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)  # its own batch: one keyless record fails the whole batch
    p.produce(topic, b"keyed", key=b"k", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    assert errors[1] is None


def test_tombstones_stay_readable_from_the_start_until_delete_retention_ms(
    cbroker: BrokerProcess,
) -> None:
    """A consumer reading a compacted topic from the start within delete.retention.ms
    sees each deleted key's tombstone (so it learns of the delete), not its old values."""
    b = cbroker.bootstrap
    topic = "compacted-long-retention"
    admin = AdminClient({"bootstrap.servers": b, **QUIET})
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "86400000",
    }
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(20)
    p = Producer({"bootstrap.servers": b, "linger.ms": 0, "batch.size": 1500, **QUIET})
    model: dict[bytes, bytes | None] = {}
    for i in range(400):
        key = b"k%d" % (i % 10)
        value = None if i >= 390 and i % 2 == 0 else b"v%d" % i  # k0, k2, ... deleted last
        p.produce(topic, value, key=key)
        model[key] = value
    for i in range(300):  # ~40 KB more: the tombstones' segment closes and gets cleaned
        value = b"w%d-" % i + b"x" * 100
        p.produce(topic, value, key=b"other%d" % (i % 5))
        model[b"other%d" % (i % 5)] = value
    assert p.flush(10) == 0
    deadline = time.monotonic() + 30
    got = read_all(b, topic)
    while len(got) > 60 and time.monotonic() < deadline:
        time.sleep(0.3)
        got = read_all(b, topic)
    assert len(got) <= 60, "the cleaner did not compact the closed segments"
    # Every pass rewrites the whole cleanable log, the tombstones' segment too: write
    # more (closing segments), then wait for a pass that mapped it (the cleaner
    # checkpoint's first dirty offset past its start). A tombstone dropped before
    # delete.retention.ms would be gone after that pass.
    marks = Consumer({"bootstrap.servers": b, "group.id": "marks", **QUIET})
    _lo, later_start = marks.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    marks.close()
    for i in range(LATER_RECORDS):
        value = b"y%d-" % i + b"x" * 100
        p.produce(topic, value, key=b"later%d" % (i % 5))
        model[b"later%d" % (i % 5)] = value
    assert p.flush(10) == 0
    checkpoint = cbroker.data_dir / CLEANER_CHECKPOINT
    deadline = time.monotonic() + CLEANING_WAIT_S
    while read_offset_checkpoint(checkpoint).get((topic, 0), -1) <= later_start:
        assert time.monotonic() < deadline, "no cleaning pass covered the later records"
        time.sleep(0.1)
    got = read_all(b, topic)
    assert {k: v for _o, k, v in got} == model
    deleted = {k for k, v in model.items() if v is None}
    assert deleted == {b"k0", b"k2", b"k4", b"k6", b"k8"}
    tombstones = [k for _o, k, v in got if v is None]
    assert sorted(tombstones) == sorted(deleted)  # each kept, once, within retention
    assert not [k for _o, k, v in got if k in deleted and v is not None]  # old values gone
