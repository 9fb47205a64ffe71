"""A log dir on a small tmpfs fills up under a real broker (storage faults, fsyncgate).

The broker has two log dirs: the metadata log and one partition on the big disk, one
partition on an 8 MiB tmpfs (a loop-mounted ext4 image where tmpfs cannot be mounted),
partly taken by a filler file. Producing to the small dir's partition until the disk is
full must:

- answer KAFKA_STORAGE_ERROR to the producer (never a hang, never a crash);
- take only that log dir offline: DescribeLogDirs shows its error, the other dir's
  partition and the metadata log (a new topic) keep working;
- lose nothing acknowledged: after a restart with the filler removed (space freed) every
  acknowledged record is read back, and the partition takes appends again.

Mounting needs root (as the tests run in CI); the test unmounts what it mounted.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
SMALL_DISK_BYTES = 8 * 1024 * 1024
FILLER_BYTES = 5 * 1024 * 1024
STORAGE_ERROR = 56


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[Path]:
    """An 8 MiB file system mounted at ``where``: tmpfs, else a loop-mounted ext4 image."""
    where.mkdir(parents=True)
    tried = _run("mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_BYTES}", "tmpfs", str(where))
    if tried.returncode != 0:
        image = where.parent / "small.img"
        with open(image, "wb") as f:
            f.truncate(SMALL_DISK_BYTES)
        mkfs = _run("mkfs.ext4", "-q", "-F", str(image))
        loop = _run("mount", "-o", "loop", str(image), str(where))
        if mkfs.returncode != 0 or loop.returncode != 0:
            pytest.fail(
                "this test mounts a small file system and needs root with mount rights: "
                f"tmpfs failed ({tried.stderr.strip()}), loop ext4 failed "
                f"({mkfs.stderr.strip()} {loop.stderr.strip()})"
            )
    try:
        yield where
    finally:
        _run("umount", "-l", str(where))


def produce_until_error(bootstrap: str, topic: str, partition: int) -> tuple[list[bytes], Any]:
    """Produce 64 KiB records one by one (acks=all, no retries) until one fails."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "linger.ms": 0,
            **QUIET,
        }
    )
    acked: list[bytes] = []
    results: list[Any] = []
    for i in range(10 * SMALL_DISK_BYTES // 65536):
        value = b"%06d" % i + bytes(65530)
        p.produce(
            topic, value=value, partition=partition, on_delivery=lambda e, m: results.append(e)
        )
        p.flush(20)
        assert len(results) == i + 1, "no delivery report"
        if results[i] is not None:
            return acked, results[i]
        acked.append(value)
    raise AssertionError("the small disk never filled up")


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes) -> Any:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, **QUIET})
    results: list[Any] = []
    p.produce(topic, value=value, partition=partition, on_delivery=lambda e, m: results.append(e))
    p.flush(20)
    return results[0] if results else "no delivery report"


def consume(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes | None]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **QUIET}
    )
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        return got
    finally:
        c.close()


def log_dirs(bootstrap: str) -> dict[str, tuple[int, set[tuple[str, int]]]]:
    """DescribeLogDirs: log dir -> (error code, hosted partitions)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [response] = admin.describe_log_dirs()
    finally:
        admin.close()
    out = {}
    for r in response["log_dirs"]:
        parts = {(t["name"], p["partition_index"]) for t in r["topics"] for p in t["partitions"]}
        out[r["log_dir"]] = (r["error_code"], parts)
    return out


def test_full_log_dir_goes_offline_others_serve_restart_recovers(tmp_path: Path) -> None:
    big = (tmp_path / "big").resolve()
    big.mkdir()
    with small_disk(tmp_path / "small") as small:
        small = small.resolve()
        broker = BrokerProcess(
            data_dir=big,
            overrides={"log.dirs": f"{big},{small}", "metadata.log.dir": str(big)},
        )
        try:
            broker.start()
            bootstrap = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
            for fut in admin.create_topics([NewTopic("spread", 2, 1)]).values():
                fut.result(15)
            placement = log_dirs(bootstrap)
            [on_small] = [p for t, p in placement[str(small)][1] if t == "spread"]
            [on_big] = [p for t, p in placement[str(big)][1] if t == "spread"]
            (small / "filler").write_bytes(bytes(FILLER_BYTES))

            acked, error = produce_until_error(bootstrap, "spread", on_small)
            assert acked, "nothing was acknowledged before the disk filled up"
            assert error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
            # the dir is offline: every later produce is refused, even with space free
            assert produce_one(bootstrap, "spread", on_small, b"x").code() == (
                KafkaError.KAFKA_STORAGE_ERROR
            )
            dirs = log_dirs(bootstrap)
            assert dirs[str(small)][0] == STORAGE_ERROR and dirs[str(big)][0] == 0
            # the other log dir and the metadata log serve on
            assert produce_one(bootstrap, "spread", on_big, b"big-1") is None
            for fut in admin.create_topics([NewTopic("after-full", 1, 1)]).values():
                fut.result(15)
            assert consume(bootstrap, "spread", on_big, 1) == [b"big-1"]
            assert broker.proc is not None and broker.proc.poll() is None

            assert broker.stop() == 0
            (small / "filler").unlink()  # free space, then restart: recovered
            broker.start()
            bootstrap = broker.bootstrap
            got = consume(bootstrap, "spread", on_small, len(acked))
            assert len(got) == len(acked) and got == acked
            assert produce_one(bootstrap, "spread", on_small, b"after-restart") is None
            assert log_dirs(bootstrap)[str(small)][0] == 0
        finally:
            broker.close()
            shutil.rmtree(small / "spread-0", ignore_errors=True)
