"""The leader-epoch cache under one lock (issue 18 defect 8).

A partition's leader-epoch cache is changed on the event loop (a new leader assigns its
epoch through ``PartitionReplicaLog``) and in a pool thread (retention and DeleteRecords
move its start). Every change and the checkpoint file it rewrites must happen under one
lock, or the two rewrites of ``leader-epoch-checkpoint.tmp`` interleave: one rename finds
its ``.tmp`` gone (an OSError that takes the log dir offline) and the file on disk no
longer matches the cache in memory. The interleaving is forced with a file-I/O hook: the
retention thread runs while the event loop's rewrite has its ``.tmp`` open.
"""

from __future__ import annotations

import threading
from pathlib import Path

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.replication.replica_log import PartitionReplicaLog
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.checkpoints import read_epoch_checkpoint
from riverbed.storage.file_io import FileIO, StrPath

T0 = 1_700_000_000_000
# How long the hook lets the retention thread run inside the event loop's rewrite: with
# one lock it blocks until the rewrite ends (the join just times out); without, it ends
# at once.
RETENTION_JOIN_S = 0.5


class InterleavingIO(FileIO):
    """Runs ``hook`` once, right after the next open of the epoch checkpoint's ``.tmp``."""

    def __init__(self) -> None:
        self.hook: threading.Thread | None = None

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        hook, self.hook = self.hook, None
        if hook is not None and str(path).endswith("leader-epoch-checkpoint.tmp"):
            hook.start()
            hook.join(RETENTION_JOIN_S)
        return fd


def batch(base: int, epoch: int) -> bytes:
    records = [SimpleRecord(b"v%d" % i) for i in range(2)]
    return build_batch(records, base_offset=base, now_ms=T0, partition_leader_epoch=epoch)


def test_retention_during_a_new_leaders_epoch_assign_keeps_file_and_cache_equal(
    tmp_path: Path,
) -> None:
    io = InterleavingIO()
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0), io=io)
    for base, epoch in ((0, 1), (2, 2), (4, 3)):
        plog.append_as_follower(batch(base, epoch))
    plog.update_high_watermark(plog.log_end_offset)
    errors: list[BaseException] = []

    def retention() -> None:  # what the pool thread does: DeleteRecords before 3
        try:
            plog.delete_records_before(3)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    pool_thread = threading.Thread(target=retention)
    io.hook = pool_thread
    try:
        PartitionReplicaLog(plog).assign_epoch(4, plog.log_end_offset)  # the event loop
    except OSError as e:
        errors.append(e)
    pool_thread.join(RETENTION_JOIN_S * 10)
    assert not pool_thread.is_alive(), "retention never finished"
    assert errors == []
    assert plog.log_start_offset == 3
    expected = [(2, 3), (3, 4), (4, 6)]
    assert plog.epoch_cache.entries() == expected
    assert read_epoch_checkpoint(tmp_path / "t-0" / "leader-epoch-checkpoint") == expected
    plog.close()
