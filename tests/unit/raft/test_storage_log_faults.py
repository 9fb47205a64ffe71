"""StorageRaftLog on a failing disk (riverbed.testing.faulty_files): a failed fsync of the
metadata log is never counted as durable, not even by a later fsync that succeeds."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from riverbed.raft.messages import Entry
from riverbed.raft.storage_log import StorageRaftLog
from riverbed.storage import LogDirError
from riverbed.storage.clock import ManualClock
from riverbed.storage.config import LogConfig
from riverbed.storage.log import PartitionLog
from riverbed.testing.faulty_files import FaultyFileIO


def entries(start: int, epoch: int, n: int) -> list[Entry]:
    return [Entry(start + i, epoch, f"set k{start + i} v".encode()) for i in range(n)]


def open_log(path: Path, io: FaultyFileIO | None = None, **kw: int) -> PartitionLog:
    extra: dict[str, object] = dict(kw)
    if io is not None:
        extra["io"] = io
    return PartitionLog(path, "__cluster_metadata", 0, LogConfig(), ManualClock(0), **extra)  # type: ignore[arg-type]


def test_failed_fsync_never_marks_entries_flushed(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    io = FaultyFileIO()
    log = StorageRaftLog(open_log(d, io))
    log.append(entries(0, 1, 3))
    log.flush(3)
    log.append(entries(3, 1, 2))
    io.fail_fsync(1, errno.EIO)
    with pytest.raises(LogDirError):
        log.flush(5)
    assert log.flushed_end_offset == 3
    io.heal()
    with pytest.raises(LogDirError):  # not retried as if nothing happened
        log.flush(5)
    with pytest.raises(LogDirError):
        log.append(entries(5, 1, 1))
    assert log.flushed_end_offset == 3 and log.storage.recovery_point == 3
    log.storage.abandon()
    reopened = StorageRaftLog(open_log(d, recovery_point=3))
    assert reopened.end_offset == 5  # recovery keeps the valid tail


def test_enospc_append_refused_and_later_appends_too(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    io = FaultyFileIO()
    log = StorageRaftLog(open_log(d, io))
    log.append(entries(0, 1, 2))
    io.fail_write(1, errno.ENOSPC, torn_bytes=10)
    with pytest.raises(LogDirError):
        log.append(entries(2, 1, 2))
    assert log.storage.log_end_offset == 2
    with pytest.raises(LogDirError):
        log.append(entries(2, 1, 2))
