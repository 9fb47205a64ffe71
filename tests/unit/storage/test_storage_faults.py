"""Storage faults (fsyncgate): a failed write or fsync takes the log dir offline for good.

Faults come from riverbed.testing.faulty_files.FaultyFileIO, injected through the
storage layer's file seam (``io=``); the restarts use the plain os layer (a healthy disk).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.storage import LogConfig, LogDirError, LogManager, ManualClock, PartitionLog
from riverbed.storage.checkpoints import read_offset_checkpoint
from riverbed.storage.errors import KAFKA_STORAGE_ERROR
from riverbed.storage.log_manager import CLEAN_SHUTDOWN_FILE
from riverbed.testing.faulty_files import FaultyFileIO

T0 = 1_700_000_000_000


def batch(n: int = 2, ts: int = T0, size: int = 20) -> bytes:
    return build_batch([SimpleRecord(b"v" * size, timestamp=ts + i) for i in range(n)])


def open_log(d: Path, io: FaultyFileIO | None = None, **kw: object) -> PartitionLog:
    extra: dict[str, object] = dict(kw)
    if io is not None:
        extra["io"] = io
    return PartitionLog(d / "t-0", "t", 0, LogConfig(), ManualClock(T0), **extra)  # type: ignore[arg-type]


def offsets(plog: PartitionLog) -> list[int]:
    data = plog.read(plog.log_start_offset, 1 << 30).read_bytes()
    return [h.base_offset for _, h in iter_batches(data)]


def test_failed_fsync_is_never_retried_as_success(tmp_path: Path) -> None:
    io = FaultyFileIO()
    plog = open_log(tmp_path, io)
    for _ in range(3):
        plog.append_as_leader(batch(), leader_epoch=0)
    assert plog.flush() == 6
    plog.append_as_leader(batch(), leader_epoch=0)
    io.fail_fsync(1, errno.EIO)
    with pytest.raises(LogDirError) as failed:
        plog.flush()
    assert failed.value.error_code == KAFKA_STORAGE_ERROR
    assert plog.offline and plog.recovery_point == 6
    # the disk "works" again: a second fsync would succeed over pages the kernel may
    # have dropped, so it must not be tried, and the recovery point must not move
    io.heal()
    with pytest.raises(LogDirError, match="offline"):
        plog.flush()
    assert plog.recovery_point == 6
    with pytest.raises(LogDirError, match="offline"):
        plog.append_as_leader(batch(), leader_epoch=0)
    with pytest.raises(LogDirError):
        plog.read(0, 1 << 20)
    assert not plog.flush_due(T0 + 10**9)
    plog.close()  # writes nothing to the failed dir

    # restart on a healthy disk: recovered from the recovery point, nothing lost
    again = open_log(tmp_path, recovery_point=6)
    assert again.log_end_offset == 8 and offsets(again) == [0, 2, 4, 6]
    again.close()


def test_enospc_write_leaves_no_partial_batch_and_refuses_later_appends(tmp_path: Path) -> None:
    io = FaultyFileIO()
    plog = open_log(tmp_path, io)
    plog.append_as_leader(batch(), leader_epoch=0)
    size = plog.active_segment.size
    io.fail_write(1, errno.ENOSPC, torn_bytes=30)
    with pytest.raises(LogDirError, match="No space left"):
        plog.append_as_leader(batch(size=500), leader_epoch=0)
    assert plog.log_end_offset == 2
    assert plog.active_segment.log_path.stat().st_size == size  # the partial batch was cut
    # space freed meanwhile: still nothing is appended to an offline dir
    with pytest.raises(LogDirError, match="offline"):
        plog.append_as_leader(batch(), leader_epoch=0)
    assert plog.log_end_offset == 2
    plog.abandon()
    again = open_log(tmp_path)
    assert offsets(again) == [0] and again.log_end_offset == 2
    again.close()


def test_torn_write_on_a_dead_disk_is_cut_by_recovery(tmp_path: Path) -> None:
    io = FaultyFileIO()
    plog = open_log(tmp_path, io)
    for _ in range(2):
        plog.append_as_leader(batch(), leader_epoch=0)
    size = plog.active_segment.size
    io.fail_write(1, errno.EIO, torn_bytes=40, sticky=True)  # nothing can clean up after it
    with pytest.raises(LogDirError):
        plog.append_as_leader(batch(), leader_epoch=0)
    assert plog.active_segment.log_path.stat().st_size == size + 40  # torn bytes stay
    plog.close()
    again = open_log(tmp_path)  # unclean: recovery validates and cuts the torn batch
    assert offsets(again) == [0, 2] and again.log_end_offset == 4
    again.append_as_leader(batch(), leader_epoch=1)
    assert offsets(again) == [0, 2, 4]
    again.close()


def test_failed_log_dir_goes_offline_others_serve_on(tmp_path: Path) -> None:
    d1, d2 = (tmp_path / "d1").resolve(), (tmp_path / "d2").resolve()
    io = FaultyFileIO(under=d1)
    handler = RecordingFaultHandler()
    clock = ManualClock(T0)
    m = LogManager([d1, d2], clock, io=io, halt=handler.handle_fault)
    a = m.get_or_create("a", 0)
    b = m.get_or_create("b", 0)
    c = m.get_or_create("c", 0)
    assert [m.log_dir_of(t, 0) for t in "abc"] == [d1, d2, d1]
    for plog in (a, b, c):
        plog.append_as_leader(batch(), leader_epoch=0)
        plog.flush()
    m.write_checkpoints()
    a.append_as_leader(batch(), leader_epoch=0)
    io.fail_fsync(1, errno.EIO)
    with pytest.raises(LogDirError):
        a.flush()
    assert set(m.offline_dirs()) == {d1} and handler.faults == []
    io.heal()
    # every partition of the dir is offline, not only the one that failed
    with pytest.raises(LogDirError, match="offline"):
        c.append_as_leader(batch(), leader_epoch=0)
    b.append_as_leader(batch(), leader_epoch=0)  # the other dir serves on
    assert m.get_or_create("d", 0) is not None and m.log_dir_of("d", 0) == d2
    m.write_checkpoints()
    assert read_offset_checkpoint(d1 / "recovery-point-offset-checkpoint")[("a", 0)] == 2
    m.flush_due(clock.now_ms())  # closes the offline logs' files
    assert a.closed and c.closed
    m.shutdown()
    assert (d2 / CLEAN_SHUTDOWN_FILE).exists() and not (d1 / CLEAN_SHUTDOWN_FILE).exists()

    m2 = LogManager([d1, d2], clock)  # healthy again: d1 is recovered
    a2 = m2.get("a", 0)
    assert a2 is not None and offsets(a2) == [0, 2] and not m2.offline_dirs()
    m2.shutdown()


def test_last_online_log_dir_failing_halts_the_node(tmp_path: Path) -> None:
    handler = RecordingFaultHandler()
    io = FaultyFileIO()
    m = LogManager([tmp_path / "d"], ManualClock(T0), io=io, halt=handler.handle_fault)
    plog = m.get_or_create("t", 0)
    io.fail_write(1, errno.ENOSPC)
    with pytest.raises(FaultHalt):
        plog.append_as_leader(batch(), leader_epoch=0)
    assert len(handler.faults) == 1
    what, cause = handler.faults[0]
    assert "last online log dir" in what and isinstance(cause, OSError)


def test_metadata_log_dir_failing_halts_even_with_other_dirs_online(tmp_path: Path) -> None:
    d1, d2 = (tmp_path / "d1").resolve(), (tmp_path / "d2").resolve()
    handler = RecordingFaultHandler()
    io = FaultyFileIO(under=d1)
    m = LogManager([d1, d2], ManualClock(T0), io=io, halt=handler.handle_fault, metadata_log_dir=d1)
    plog = m.get_or_create("t", 0)
    assert m.log_dir_of("t", 0) == d1
    plog.append_as_leader(batch(), leader_epoch=0)
    io.fail_fsync(1)
    with pytest.raises(FaultHalt):
        plog.flush()
    assert "metadata log dir" in handler.faults[0][0]


def test_failed_checkpoint_write_takes_the_dir_offline(tmp_path: Path) -> None:
    io = FaultyFileIO()
    m = LogManager([tmp_path / "d1", tmp_path / "d2"], ManualClock(T0), io=io)
    m.get_or_create("t", 0)
    io.fail_write(1, errno.EIO)
    m.write_checkpoints()
    assert len(m.offline_dirs()) == 1
    m.shutdown()
