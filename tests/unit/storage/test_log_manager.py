"""LogManager: load across log dirs, create/delete, scheduled flush/retention, checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, LogDirError, LogManager, ManualClock
from riverbed.storage.checkpoints import read_offset_checkpoint
from riverbed.storage.log_manager import CLEAN_SHUTDOWN_FILE, parse_partition_dir

T0 = 1_700_000_000_000


def batch(n: int = 2, ts: int = T0) -> bytes:
    return build_batch([SimpleRecord(b"v" * 20, timestamp=ts + i) for i in range(n)])


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("my-topic-3") == ("my-topic", 3)
    assert parse_partition_dir("a.b_c-0") == ("a.b_c", 0)
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir("t-x") is None
    assert parse_partition_dir("-1") is None


def test_create_spreads_over_dirs_and_reloads_after_clean_shutdown(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = LogManager(dirs, clock)
    logs = [m.get_or_create("orders", p, LogConfig(segment_bytes=300)) for p in range(4)]
    assert {m.log_dir_of("orders", p) for p in range(4)} == {d.resolve() for d in dirs}
    assert m.get_or_create("orders", 0) is logs[0]
    for i, plog in enumerate(logs):
        for _ in range(i + 1):
            plog.append_as_leader(batch(), leader_epoch=0)
        plog.update_high_watermark(plog.log_end_offset)
    logs[3].delete_records_before(2)
    sizes = m.dir_sizes()
    assert sum(sizes.values()) == sum(p.size_bytes for p in logs) > 0
    m.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        rp = read_offset_checkpoint(d / "recovery-point-offset-checkpoint")
        hw = read_offset_checkpoint(d / "replication-offset-checkpoint")
        assert rp == hw and all(v == 2 * (k[1] + 1) for k, v in rp.items())
    starts = read_offset_checkpoint(m.log_dir_of("orders", 3) / "log-start-offset-checkpoint")  # type: ignore[operator]
    assert starts[("orders", 3)] == 2
    with pytest.raises(LogDirError):
        m.get_or_create("orders", 9)

    m2 = LogManager(dirs, clock)
    for d in dirs:
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is detected
    for p in range(4):
        plog = m2.get("orders", p)
        assert plog is not None
        assert plog.log_end_offset == plog.high_watermark == 2 * (p + 1)
    assert m2.get("orders", 3).log_start_offset == 2  # type: ignore[union-attr]
    m2.shutdown()


def test_unclean_start_recovers_unflushed_tail(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d"], clock)
    plog = m.get_or_create("t", 0)
    for _ in range(5):
        plog.append_as_leader(batch(), leader_epoch=1)
    plog.flush()
    m.write_checkpoints()
    plog.append_as_leader(batch(), leader_epoch=1)
    path = plog.active_segment.log_path
    plog.abandon()  # crash: no clean-shutdown marker
    os.truncate(path, path.stat().st_size - 3)
    m2 = LogManager([tmp_path / "d"], clock)
    plog2 = m2.get("t", 0)
    assert plog2 is not None and plog2.log_end_offset == 10
    m2.shutdown()


def test_flush_due_runs_in_pool_and_honours_flush_messages(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d"], clock, flush_threads_max=1)
    plog = m.get_or_create("t", 0, LogConfig(flush_messages=4))
    plog.append_as_leader(batch(2), leader_epoch=0)
    assert m.flush_due(clock.now_ms()) == []
    info = plog.append_as_leader(batch(2), leader_epoch=0)
    assert info.flush_needed
    futures = m.flush_due(clock.now_ms())
    assert len(futures) == 1 and futures[0].result(timeout=10) == 4
    assert plog.recovery_point == 4
    m.shutdown()


def test_retention_and_delete_partition(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 10 * 86_400_000)
    m = LogManager([tmp_path / "d"], clock)
    plog = m.get_or_create("t", 0, LogConfig(retention_ms=86_400_000, file_delete_delay_ms=1000))
    for _ in range(3):
        plog.append_as_leader(batch(ts=T0), leader_epoch=0)
        plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    assert m.run_retention(clock.now_ms()) == 3
    assert plog.log_start_offset == 6
    starts = read_offset_checkpoint(tmp_path / "d" / "log-start-offset-checkpoint")
    assert starts[("t", 0)] == 6
    assert list((tmp_path / "d" / "t-0").glob("*.deleted"))
    clock.advance(1000)
    for fut in m.flush_due(clock.now_ms()):  # the unlinks run in the pool
        fut.result(timeout=10)
    assert not list((tmp_path / "d" / "t-0").glob("*.deleted"))

    assert m.delete("t", 0)
    assert m.get("t", 0) is None and not (tmp_path / "d" / "t-0").exists()
    pending = [p for p in (tmp_path / "d").iterdir() if p.name.endswith("-delete")]
    assert len(pending) == 1 and pending[0].name.startswith("t-0.")
    clock.advance(1000)
    for fut in m.flush_due(clock.now_ms()):  # the removal runs in the pool
        fut.result(timeout=10)
    assert not pending[0].exists()
    assert not m.delete("t", 0)
    m.shutdown()


def test_start_up_skips_metadata_log_and_removes_deleted_dirs(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "__cluster_metadata-0").mkdir(parents=True)
    (d / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(b"not ours")
    (d / "x-0.abc-delete").mkdir()
    (d / "junk").mkdir()
    m = LogManager([d], ManualClock(T0))
    assert m.all_logs() == {}
    assert not (d / "x-0.abc-delete").exists()
    assert (d / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes() == b"not ours"
    m.shutdown()


def test_corrupt_checkpoint_means_full_recovery(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d"], clock)
    plog = m.get_or_create("t", 0)
    plog.append_as_leader(batch(), leader_epoch=0)
    m.shutdown()
    (tmp_path / "d" / "recovery-point-offset-checkpoint").write_text("garbage")
    m2 = LogManager([tmp_path / "d"], clock)
    assert m2.get("t", 0).log_end_offset == 2  # type: ignore[union-attr]
    m2.shutdown()
    with pytest.raises(LogDirError):
        LogManager([], clock)


def test_appends_and_reads_while_the_pool_flushes(tmp_path: Path) -> None:
    """Flushes run in the pool while the caller keeps appending, rolling and reading."""
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d"], clock, flush_threads_max=2)
    plog = m.get_or_create("t", 0, LogConfig(segment_bytes=2000, flush_messages=6))
    futures = []
    points = []
    for i in range(300):
        plog.append_as_leader(batch(2, ts=T0 + i), leader_epoch=0)
        futures += m.flush_due(clock.now_ms())
        if i == 150:
            # Let the flushes started so far finish, however slow the disk is, so that a
            # second one is sure to start in the rest of the loop.
            for f in futures:
                f.result(timeout=30)
        if i % 7 == 0:
            assert plog.read(max(0, 2 * i - 10), 500).first_offset >= 0
        points.append(plog.recovery_point)
    for f in futures:
        assert f.result(timeout=30) <= plog.log_end_offset
    assert points == sorted(points)  # the recovery point only moves forward
    assert len(plog.segments) > 10 and len(futures) >= 2  # one flush in flight per log
    plog.flush()
    m.write_checkpoints()
    plog.abandon()  # crash after the final flush: nothing may be lost
    m2 = LogManager([tmp_path / "d"], clock)
    again = m2.get("t", 0)
    assert again is not None and again.log_end_offset == 600
    data = again.read(0, 1 << 20).read_bytes()
    assert len(data) == again.size_bytes
    m2.shutdown()


def test_unloadable_partition_is_a_clear_log_dir_error(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    m = LogManager([tmp_path / "d"], clock)
    m.get_or_create("t", 0).append_as_leader(batch(), leader_epoch=0)
    m.shutdown()
    seg = tmp_path / "d" / "t-0" / "00000000000000000000.log"
    seg.unlink()
    seg.mkdir()  # a directory where the segment file should be
    with pytest.raises(LogDirError) as e:
        LogManager([tmp_path / "d"], clock)
    assert "t-0" in str(e.value) and e.value.error_code == 56


def test_checkpoint_writes_do_not_pile_up_behind_a_stalled_disk(tmp_path: Path) -> None:
    """A checkpoint file whose previous write is still in flight is not queued again."""
    import threading

    clock = ManualClock(T0)
    m = LogManager(
        [tmp_path / "d"],
        clock,
        flush_threads_max=1,
        recovery_point_checkpoint_interval_ms=10,
        log_start_checkpoint_interval_ms=10,
        high_watermark_checkpoint_interval_ms=10,
    )
    gate = threading.Event()
    calls: list[str] = []
    real_write = m._write_checkpoint

    def stalled_write(name: str) -> None:
        calls.append(name)
        gate.wait(timeout=30)
        real_write(name)

    m._write_checkpoint = stalled_write  # type: ignore[method-assign]
    for _ in range(49):
        clock.advance(20)
        m.flush_due(clock.now_ms())
    gate.set()
    m._pool.submit(lambda: None).result(timeout=30)  # one worker, FIFO: the queue has drained
    assert len(calls) <= 3, calls  # one per checkpoint file, not one per interval
    m.shutdown()


def test_retention_and_segment_deletes_run_in_the_pool(tmp_path: Path) -> None:
    """Retention's index loads and the unlinks of deleted segments block on the disk:
    they run in the manager's bounded pool, never in the caller's (event loop) thread."""
    import threading

    from riverbed.testing.faulty_files import FaultyFileIO

    io = FaultyFileIO()
    clock = ManualClock(T0 + 10 * 86_400_000)
    seen: list[str] = []

    def hook(_plog: object, _seg: object) -> bool:
        seen.append(threading.current_thread().name)
        return True

    m = LogManager([tmp_path / "d"], clock, retention_hook=hook, io=io)
    plog = m.get_or_create("t", 0, LogConfig(retention_ms=86_400_000, file_delete_delay_ms=0))
    for _ in range(3):
        plog.append_as_leader(batch(ts=T0), leader_epoch=0)
        plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    io.calls.clear()
    fut = m.schedule_retention(clock.now_ms())
    assert fut is not None and fut.result(timeout=10) == 3
    me = threading.current_thread().name
    assert seen and all(name.startswith("riverbed-flush") for name in seen), seen
    for f in m.flush_due(clock.now_ms()):
        f.result(timeout=10)
    unlinks = [t for op, path, t in io.calls if op == "unlink" and ".deleted" in path]
    assert len(unlinks) >= 3 and me not in unlinks, unlinks
    assert all(t != me for _op, _path, t in io.calls), io.calls  # the renames too
    assert not list((tmp_path / "d" / "t-0").glob("*.deleted"))
    m.shutdown()


def test_the_clean_shutdown_marker_carries_the_broker_epoch(tmp_path: Path) -> None:
    """KIP-966: a clean shutdown writes the node's broker epoch in every log dir's marker;
    the next start reads it (PreviousBrokerEpoch of its registration), and any dir without
    a readable marker, or markers that disagree, mean an unclean shutdown (-1)."""
    clock = ManualClock(T0)
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    first = LogManager(dirs, clock)
    assert first.previous_broker_epoch == -1  # a new node
    first.shutdown(broker_epoch=42)
    second = LogManager(dirs, clock)
    assert second.previous_broker_epoch == 42
    second.shutdown(broker_epoch=43)
    (dirs[1] / CLEAN_SHUTDOWN_FILE).unlink()  # one dir was not shut down cleanly
    assert LogManager(dirs, clock).previous_broker_epoch == -1  # (and it crashes)
    for d, epoch in zip(dirs, (7, 8), strict=True):
        (d / CLEAN_SHUTDOWN_FILE).write_text(json.dumps({"version": 0, "brokerEpoch": epoch}))
    assert LogManager(dirs, clock).previous_broker_epoch == -1
    (dirs[0] / CLEAN_SHUTDOWN_FILE).write_text("not json")
    assert LogManager(dirs, clock).previous_broker_epoch == -1
