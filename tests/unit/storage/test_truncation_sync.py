"""A truncation waits for no fsync (Kafka's truncateFromEndAsyncFlush, KAFKA-15046).

A follower truncating its log (or the Raft metadata log truncating a divergent suffix)
runs on the caller's thread: the rewritten leader-epoch checkpoint is written without
fsync and the log's next flush, on its worker thread, makes it durable before the recovery
point moves. A crash in between leaves an older checkpoint, which loading trims to the
recovered log.
"""

from __future__ import annotations

from pathlib import Path

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.checkpoints import read_epoch_checkpoint
from riverbed.storage.file_io import FileIO

T0 = 1_700_000_000_000


class CountingIO(FileIO):
    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


def batch(base: int, epoch: int) -> bytes:
    records = [SimpleRecord(b"v%d" % i) for i in range(2)]
    return build_batch(records, base_offset=base, now_ms=T0, partition_leader_epoch=epoch)


def test_truncation_does_not_fsync_and_the_next_flush_does(tmp_path: Path) -> None:
    io = CountingIO()
    log = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0), io=io)
    for base, epoch in ((0, 1), (2, 2), (4, 3)):
        log.append_as_follower(batch(base, epoch))
    log.flush()
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    assert read_epoch_checkpoint(checkpoint) == [(1, 0), (2, 2), (3, 4)]
    before = io.fsyncs
    assert log.truncate_to(2)  # a diverging follower drops epochs 2 and 3
    assert io.fsyncs == before, "the truncation waited for an fsync"
    assert read_epoch_checkpoint(checkpoint) == [(1, 0)]  # written, not yet synced
    log.append_as_follower(batch(2, 4))
    log.flush()
    assert io.fsyncs > before and not log.epoch_cache.unsynced
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0))
    assert reopened.epoch_cache.entries() == [(1, 0), (4, 2)]
    reopened.close()


def test_a_stale_checkpoint_after_a_crash_is_trimmed_to_the_log(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0))
    for base, epoch in ((0, 1), (2, 2), (4, 3)):
        log.append_as_follower(batch(base, epoch))
    log.flush()
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    stale = checkpoint.read_bytes()
    assert log.truncate_to(2)
    log.close()
    checkpoint.write_bytes(stale)  # the unsynced rewrite was lost in a crash
    reopened = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0))
    assert reopened.log_end_offset == 2
    assert reopened.epoch_cache.entries() == [(1, 0)]
    assert reopened.end_offset_for_epoch(1) == (1, 2)
    reopened.close()
