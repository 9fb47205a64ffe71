"""SimDisk (riverbed.testing.sim_disk): what a crash leaves of a real PartitionLog's files.

The replication simulation's lossy crashes are only as good as this model: a process
crash keeps every write, a power loss keeps what an fsync covered (the recovered log ends
at the last flush, a torn tail is cut by recovery), a replaced disk keeps nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage.clock import ManualClock
from riverbed.storage.config import LogConfig
from riverbed.storage.log_manager import LogManager
from riverbed.testing.sim_disk import SimDisk


def _append(lm: LogManager, values: range) -> None:
    plog = lm.get_or_create("t", 0, LogConfig())
    for v in values:
        plog.append_as_leader(bytearray(build_batch([SimpleRecord(str(v).encode())])), 0)


def _reopen(root: Path, disk: SimDisk) -> int:
    lm = LogManager([root], ManualClock(0), io=disk)
    plog = lm.get("t", 0)
    return -1 if plog is None else plog.log_end_offset


def test_process_crash_keeps_every_write(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path / "d")
    lm = LogManager([disk.root], ManualClock(0), io=disk)
    _append(lm, range(10))
    for plog in lm.all_logs().values():
        plog.abandon()
    disk.process_crash()
    assert _reopen(disk.root, disk) == 10


def test_power_loss_keeps_what_was_flushed(tmp_path: Path) -> None:
    for seed in range(20):  # with and without a torn tail
        disk = SimDisk(tmp_path / f"d{seed}")
        lm = LogManager([disk.root], ManualClock(0), io=disk)
        _append(lm, range(6))
        plog = lm.get("t", 0)
        assert plog is not None
        plog.flush()
        lm.write_checkpoints()
        _append(lm, range(6, 10))
        plog.abandon()
        assert disk.power_loss(random.Random(seed)) > 0
        # the flushed six survive; a torn part of the tail is never more than whole batches
        assert _reopen(disk.root, disk) in range(6, 10)
        disk.process_crash()


def test_power_loss_before_any_fsync_loses_the_files(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path / "d")
    fd = disk.open(disk.root / "f", os.O_RDWR | os.O_CREAT)
    disk.pwrite(fd, b"abc", 0)
    disk.close(fd)
    disk.power_loss(random.Random(0))
    assert not (disk.root / "f").exists()


def test_rename_of_a_synced_file_is_durable_of_an_unsynced_one_is_not(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path / "d")
    for name, sync in (("a", True), ("b", False)):
        fd = disk.open(disk.root / f"{name}.tmp", os.O_WRONLY | os.O_CREAT)
        disk.write(fd, b"new")
        if sync:
            disk.fsync(fd)
        disk.close(fd)
        disk.replace(disk.root / f"{name}.tmp", disk.root / name)
    disk.power_loss(random.Random(0))
    assert (disk.root / "a").read_bytes() == b"new"
    assert not (disk.root / "b").exists()


def test_replaced_disk_is_empty(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path / "d")
    lm = LogManager([disk.root], ManualClock(0), io=disk)
    _append(lm, range(3))
    lm.shutdown()
    disk.replace_disk()
    assert _reopen(disk.root, disk) == -1
