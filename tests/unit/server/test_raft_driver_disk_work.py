"""Disk work that can block leaves the event loop and the locks (issue 11).

Deletes of segment files below the metadata log's start run on a worker thread, outside
the Raft driver's lock and outside the partition log's lock: a stalled unlink neither
freezes the event loop nor holds up appends, fetches or reads meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.raft.roles import Role
from riverbed.raft.storage_log import StorageRaftLog
from riverbed.server.raft_driver import RaftDriver
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.file_io import FileIO
from riverbed.testing.raft_kv import KV

from .test_raft_driver import wait_for
from .test_raft_driver_faults import ONE, NoPeers

T0 = 1_700_000_000_000


def test_raft_file_cleanup_blocks_neither_loop_nor_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    started = threading.Event()
    returned = threading.Event()

    def stalled_cleanup(self: StorageRaftLog, now_ms: int) -> int:
        started.set()
        release.wait(6)  # a disk that takes its time with the unlinks
        returned.set()
        return 0

    monkeypatch.setattr(StorageRaftLog, "delete_expired_files", stalled_cleanup)

    async def main() -> int:
        driver = RaftDriver(1, ONE, tmp_path, NoPeers(), KV())
        try:
            await driver.start()  # the timer loop starts with a file cleanup
            await wait_for(lambda: driver.node.role is Role.LEADER)
            await asyncio.to_thread(started.wait, 5)
            assert started.is_set()
            last = await driver.append([b"set k v"], timeout_s=3)
            assert not returned.is_set(), "the append waited for the file cleanup"
            return last
        finally:
            release.set()
            await driver.close()

    assert asyncio.run(main()) >= 0


def test_partition_log_unlinks_outside_its_lock(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    release = threading.Event()
    unlinking = threading.Event()

    class SlowUnlink(FileIO):
        def unlink(self, path: Path, *, missing_ok: bool = True) -> None:
            if path.name.endswith(".deleted"):
                unlinking.set()
                release.wait(10)
            super().unlink(path, missing_ok=missing_ok)

    log = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock, io=SlowUnlink())
    batch = build_batch([SimpleRecord(b"v")], now_ms=T0)
    log.append_as_leader(batch, leader_epoch=0)
    log.roll()
    log.append_as_leader(build_batch([SimpleRecord(b"w")], now_ms=T0), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(1)  # the first segment goes (renamed *.deleted)
    assert list((tmp_path / "t-0").glob("*.deleted"))
    clock.advance(LogConfig().file_delete_delay_ms + 1)
    sweeper = threading.Thread(target=log.delete_expired_files, args=(clock.now_ms(),))
    sweeper.start()
    try:
        assert unlinking.wait(5)
        done = threading.Event()
        reader = threading.Thread(target=lambda: (log.read(1, 1 << 20).close(), done.set()))
        reader.start()
        assert done.wait(2), "a read waited for the unlinks (they ran under the log's lock)"
    finally:
        release.set()
        sweeper.join()
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    log.close()
