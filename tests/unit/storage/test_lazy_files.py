"""Cheap partition creation: lazy partition.metadata and index files, crash safety of
the lazy files, LogManager creating logs outside its lock, and the first-start log line."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, LogDirError, LogManager, ManualClock, PartitionLog
from riverbed.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from riverbed.storage.segment import LogSegment, segment_file_name

T0 = 1_700_000_000_000
TOPIC_ID = "2rZ3qY3-Q8aWQ3h3V2n1sg"
OTHER_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
LOG0 = segment_file_name(0, ".log")


def batch(n: int = 3, ts: int = T0) -> bytes:
    return build_batch([SimpleRecord(b"v%d" % i, timestamp=ts + i) for i in range(n)])


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts os.fsync calls (they still happen)."""
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    yield calls


def names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


# ---- PartitionLog --------------------------------------------------------------------------


def test_new_log_opens_only_its_log_and_flushes_metadata_on_first_flush(
    tmp_path: Path, clock: ManualClock, fsyncs: list[int]
) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, "t", 0, LogConfig(), clock, topic_id=TOPIC_ID)
    assert names(d) == {LOG0}  # no partition.metadata, no index files yet
    assert fsyncs == []
    assert log.topic_id == TOPIC_ID
    log.flush()
    assert read_partition_metadata(d / PARTITION_METADATA) == TOPIC_ID
    assert names(d) == {LOG0, PARTITION_METADATA}  # an empty segment needs no indexes
    synced = len(fsyncs)
    assert synced >= 2  # the file and the partition dir (+ its parent: a new dir)
    log.flush()
    assert len(fsyncs) == synced  # written once: nothing dirty any more
    log.close()
    assert names(d) == {LOG0, PARTITION_METADATA}
    assert len(fsyncs) == synced  # closing an empty, flushed log syncs nothing


def test_close_writes_metadata_and_restart_reads_it(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "t-0"
    PartitionLog(d, "t", 0, LogConfig(), clock, topic_id=TOPIC_ID).close()
    assert read_partition_metadata(d / PARTITION_METADATA) == TOPIC_ID
    log = PartitionLog(d, "t", 0, LogConfig(), clock, clean_shutdown=True)
    assert log.topic_id == TOPIC_ID
    log.close()
    # a new topic id (topic re-created) is recorded and written on the next flush
    log = PartitionLog(d, "t", 0, LogConfig(), clock, clean_shutdown=True, topic_id=OTHER_TOPIC_ID)
    assert log.topic_id == OTHER_TOPIC_ID
    assert read_partition_metadata(d / PARTITION_METADATA) == TOPIC_ID
    log.flush()
    assert read_partition_metadata(d / PARTITION_METADATA) == OTHER_TOPIC_ID
    log.close()


def test_crash_before_first_flush_loads_and_rebuilds(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "t-0"
    cfg = LogConfig(index_interval_bytes=1)  # an index entry per batch
    log = PartitionLog(d, "t", 0, cfg, clock, topic_id=TOPIC_ID)
    for i in range(5):
        log.append_as_leader(batch(ts=T0 + 10 * i), leader_epoch=0)
    log.abandon()  # crash: nothing flushed, no metadata, no index files written
    assert names(d) == {LOG0, "leader-epoch-checkpoint"}
    log = PartitionLog(d, "t", 0, cfg, clock, clean_shutdown=False)
    assert log.topic_id is None  # lost with the crash; the next get_or_create records it
    assert log.log_end_offset == 15
    assert log.read(0, 1 << 20).read_bytes() != b""
    found = log.offset_for_timestamp(T0 + 21)
    assert found is not None and found.offset == 7
    log.close()
    assert {segment_file_name(0, ".index"), segment_file_name(0, ".timeindex")} <= names(d)
    log = PartitionLog(d, "t", 0, cfg, clock, clean_shutdown=True)
    assert log.active_segment.offset_index.size_bytes == 4 * 8  # not the first batch
    assert log.active_segment.time_index.size_bytes == 5 * 12
    log.close()


def test_empty_log_restarts_cleanly_without_index_files(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "t-0"
    PartitionLog(d, "t", 0, LogConfig(), clock).close()
    assert names(d) == {LOG0}
    log = PartitionLog(d, "t", 0, LogConfig(segment_bytes=100), clock, clean_shutdown=True)
    log.append_as_leader(batch(), leader_epoch=0)
    log.append_as_leader(batch(), leader_epoch=0)  # rolls: segment 0 becomes inactive
    assert len(log.segments) == 2
    # an inactive segment always has both index files (a missing one would mean rebuild)
    assert {segment_file_name(0, ".index"), segment_file_name(0, ".timeindex")} <= names(d)
    assert segment_file_name(3, ".index") not in names(d)
    log.close()


def test_stale_index_files_are_truncated_by_a_new_segment(tmp_path: Path) -> None:
    (tmp_path / segment_file_name(0, ".index")).write_bytes(b"\x01" * 80)
    (tmp_path / segment_file_name(0, ".timeindex")).write_bytes(b"\x02" * 120)
    seg = LogSegment.create(
        tmp_path, 0, index_interval_bytes=4096, max_index_bytes=1024, created_ms=T0
    )
    assert seg.offset_index.size_bytes == 0 and seg.time_index.size_bytes == 0
    data = bytearray(batch())
    from riverbed.protocol.records import parse_header

    seg.append(memoryview(data), parse_header(data))
    seg.on_become_inactive()
    assert (tmp_path / segment_file_name(0, ".index")).read_bytes() == b""
    timeindex = (tmp_path / segment_file_name(0, ".timeindex")).read_bytes()
    assert len(timeindex) == 12 and int.from_bytes(timeindex[:8], "big") == T0 + 2
    seg.close_files()


# ---- LogManager ----------------------------------------------------------------------------


def test_crashed_manager_loads_lazily_created_partitions(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d"], clock)
    for p in range(3):
        m.get_or_create("t", p, topic_id=TOPIC_ID).append_as_leader(batch(), leader_epoch=0)
    for plog in m.all_logs().values():
        plog.abandon()  # crash before any flush
    m2 = LogManager([tmp_path / "d"], clock)
    assert sorted(m2.all_logs()) == [("t", 0), ("t", 1), ("t", 2)]
    for p in range(3):
        plog = m2.get_or_create("t", p, topic_id=TOPIC_ID)
        assert plog.log_end_offset == 3 and plog.topic_id == TOPIC_ID
    m2.shutdown()
    pdir = tmp_path / "d" / "t-1"
    assert read_partition_metadata(pdir / PARTITION_METADATA) == TOPIC_ID


def test_get_or_create_builds_logs_outside_the_manager_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d1", tmp_path / "d2"], clock)
    release = threading.Event()
    entered = threading.Event()
    opened: list[tuple[str, int]] = []
    real_open = m._open_log

    def slow_open(d: Path, key: tuple[str, int], config: LogConfig, **kw: object) -> PartitionLog:
        opened.append(key)
        if key == ("slow", 0):
            entered.set()
            assert release.wait(10)
        return real_open(d, key, config, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(m, "_open_log", slow_open)
    results: list[PartitionLog] = []
    first = threading.Thread(target=lambda: results.append(m.get_or_create("slow", 0)))
    first.start()
    assert entered.wait(10)
    # while "slow-0" is being built: other creations, lookups and scheduled work go on
    fast = m.get_or_create("fast", 0)
    assert m.log_dir_of("fast", 0) != m.log_dir_of("slow", 0)  # the reservation counts
    assert m.get("slow", 0) is None
    assert set(m.all_logs()) == {("fast", 0)}
    m.flush_due(clock.now_ms())
    assert m.run_retention(clock.now_ms()) == 0
    second = threading.Thread(target=lambda: results.append(m.get_or_create("slow", 0)))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waits for the first creation instead of building another
    release.set()
    first.join(10)
    second.join(10)
    assert len(results) == 2 and results[0] is results[1] is m.get("slow", 0)
    assert opened.count(("slow", 0)) == 1
    assert fast is m.get("fast", 0)
    m.shutdown()


def test_delete_and_shutdown_wait_for_a_creation_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = LogManager([tmp_path / "d"], ManualClock(T0))
    release = threading.Event()
    entered = threading.Event()
    real_open = m._open_log

    def slow_open(d: Path, key: tuple[str, int], config: LogConfig, **kw: object) -> PartitionLog:
        entered.set()
        assert release.wait(10)
        return real_open(d, key, config, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(m, "_open_log", slow_open)
    creator = threading.Thread(target=m.get_or_create, args=("t", 0))
    creator.start()
    assert entered.wait(10)
    deleted: list[bool] = []
    deleter = threading.Thread(target=lambda: deleted.append(m.delete("t", 0)))
    deleter.start()
    deleter.join(0.2)
    assert deleter.is_alive() and not deleted  # a delete cannot miss the log being built
    release.set()
    creator.join(10)
    deleter.join(10)
    assert deleted == [True] and m.get("t", 0) is None
    assert not (tmp_path / "d" / "t-0").exists()
    # shutdown: no creation starts once closed, running ones finish first
    release.clear()
    entered.clear()
    creator = threading.Thread(target=m.get_or_create, args=("t", 1))
    creator.start()
    assert entered.wait(10)
    stopper = threading.Thread(target=m.shutdown)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()
    release.set()
    creator.join(10)
    stopper.join(10)
    assert not stopper.is_alive()
    # the log created meanwhile was closed and checkpointed with the others
    checkpoint = read_offset_checkpoint(tmp_path / "d" / "recovery-point-offset-checkpoint")
    assert checkpoint == {("t", 1): 0}
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()
    with pytest.raises(LogDirError, match="shut down"):
        m.get_or_create("t", 2)


def test_failed_creation_releases_its_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = LogManager([tmp_path / "d"], ManualClock(T0))
    real_open = m._open_log
    fail = [True]

    def flaky_open(d: Path, key: tuple[str, int], config: LogConfig, **kw: object) -> PartitionLog:
        if fail[0]:
            fail[0] = False
            raise LogDirError("disk on fire")
        return real_open(d, key, config, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(m, "_open_log", flaky_open)
    with pytest.raises(LogDirError, match="disk on fire"):
        m.get_or_create("t", 0)
    assert m.log_dir_of("t", 0) is None and m.get("t", 0) is None
    plog = m.get_or_create("t", 0)
    assert m.get("t", 0) is plog
    m.shutdown()


def test_not_shut_down_cleanly_is_logged_only_with_logs_to_recover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="riverbed.storage")
    clock = ManualClock(T0)
    dirs = [tmp_path / "d"]

    def claims_recovery() -> bool:
        found = any("not shut down cleanly" in r.getMessage() for r in caplog.records)
        caplog.clear()
        return found

    m = LogManager(dirs, clock)  # brand-new dir: nothing to recover
    assert not claims_recovery()
    m.get_or_create("t", 0).append_as_leader(batch(), leader_epoch=0)
    for plog in m.all_logs().values():
        plog.abandon()  # crash: no clean-shutdown marker
    m = LogManager(dirs, clock)
    assert claims_recovery()
    m.shutdown()
    m = LogManager(dirs, clock)  # after a clean shutdown
    assert not claims_recovery()
    m.shutdown()


# ---- leader-epoch-checkpoint off the append path -------------------------------------------


def test_new_leader_epoch_is_written_without_fsync_and_synced_by_flush(
    tmp_path: Path, clock: ManualClock, fsyncs: list[int]
) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, "t", 0, LogConfig(), clock)
    log.flush()
    before = len(fsyncs)
    log.append_as_leader(batch(), leader_epoch=4)
    assert len(fsyncs) == before  # the produce path does not wait for the disk
    assert read_epoch_checkpoint(d / LEADER_EPOCH_CHECKPOINT) == [(4, 0)]
    assert log.epoch_cache.unsynced
    log.flush()
    assert not log.epoch_cache.unsynced
    # the .log, the checkpoint and the partition dir
    assert len(fsyncs) >= before + 3
    assert log.recovery_point == 3
    log.close()


def test_corrupt_epoch_checkpoint_rebuilds_epochs_from_the_whole_log(
    tmp_path: Path, clock: ManualClock
) -> None:
    d = tmp_path / "t-0"
    log = PartitionLog(d, "t", 0, LogConfig(segment_bytes=100), clock)
    log.append_as_leader(batch(), leader_epoch=0)
    log.append_as_leader(batch(), leader_epoch=3)
    log.append_as_leader(batch(), leader_epoch=5)
    assert len(log.segments) == 3
    log.close()
    (d / LEADER_EPOCH_CHECKPOINT).write_text("0\n2\n0 0\ngarbage\n")
    # a clean shutdown with everything below the recovery point: the epochs of the old
    # segments come back from their batch headers anyway
    log = PartitionLog(d, "t", 0, LogConfig(), clock, recovery_point=9, clean_shutdown=True)
    assert log.epoch_cache.entries() == [(0, 0), (3, 3), (5, 6)]
    assert log.end_offset_for_epoch(3) == (3, 6)
    log.close()
    assert read_epoch_checkpoint(d / LEADER_EPOCH_CHECKPOINT) == [(0, 0), (3, 3), (5, 6)]
