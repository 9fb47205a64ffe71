"""A durable ``RaftLog`` over ``riverbed.storage.PartitionLog`` (``__cluster_metadata-0``).

The metadata log on disk is a normal Kafka partition directory (segments, indexes,
``leader-epoch-checkpoint``); entries are written as record batches by
``raft.wire.entries_to_records`` (one record batch per raft batch, i.e. per controller
operation; LeaderChange as control batches) with ``append_as_follower`` so offsets and
epochs are kept exactly. Reading back, each record batch on disk is one raft batch: a log
written before operations were batches (when one batch could hold several appends, and
a truncation wrote kept entries back as a batch of their own) loads the same way. Reads are served from an
in-memory mirror (``MemoryLog``): the metadata log between two snapshots is small (KIP-630
bounds it with ``controller.snapshot.minimum.records``), and the raft core reads it on every
fetch. ``flush`` is the fsync (the shell runs it on a thread); a reopened log treats what
recovery kept on disk as flushed.
"""

from __future__ import annotations

from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import Entry, OffsetAndEpoch
from riverbed.raft.wire import entries_to_records, records_to_entries
from riverbed.storage.log import PartitionLog

LOAD_READ_BYTES = 4 * 1024 * 1024  # bytes per read while loading the log at start-up


class StorageRaftLog:
    def __init__(self, partition_log: PartitionLog, start_epoch: int = 0) -> None:
        """``start_epoch``: epoch of record ``log_start_offset - 1`` (the snapshot's)."""
        self.storage = partition_log
        self.mem = MemoryLog(partition_log.log_start_offset, start_epoch)
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        while offset < end:
            with partition_log.read(offset, LOAD_READ_BYTES) as result:
                data = result.read_bytes()
            loaded = [e for e in records_to_entries(data) if e.offset >= offset]
            if not loaded:
                break
            self.mem.append(loaded)
            offset = loaded[-1].offset + 1
        self.mem.flush(self.mem.end_offset)

    # --- views (the mirror) ------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self.mem.start_offset

    @property
    def start_epoch(self) -> int:
        return self.mem.start_epoch

    @property
    def end_offset(self) -> int:
        return self.mem.end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self.mem.flushed_end_offset

    @property
    def last_epoch(self) -> int:
        return self.mem.last_epoch

    def read(self, start: int, max_bytes: int, upper: int | None = None) -> tuple[Entry, ...]:
        return self.mem.read(start, max_bytes, upper)

    def entry(self, offset: int) -> Entry:
        return self.mem.entry(offset)

    def batch_start(self, offset: int) -> int:
        return self.mem.batch_start(offset)

    def epoch_at(self, offset: int) -> int:
        return self.mem.epoch_at(offset)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self.mem.end_offset_for_epoch(epoch)

    # --- writes (disk first, then the mirror) --------------------------------------------
    def append(self, entries: list[Entry]) -> None:
        if not entries:
            return
        self.storage.append_as_follower(entries_to_records(entries))
        self.mem.append(entries)

    def truncate_to(self, offset: int) -> None:
        offset = self.mem.batch_start(offset)  # whole batches go, as in storage
        if offset >= self.mem.end_offset:
            return
        # storage cuts below ``offset`` only when the first batch is partial (the log
        # start moved inside it): write back the entries of it we keep
        self.storage.truncate_to(offset)
        self.mem.truncate_to(offset)
        cut = self.storage.log_end_offset
        if cut < offset:
            kept = self.mem.read(max(cut, self.mem.start_offset), 1 << 62, upper=offset)
            if kept:
                self.storage.append_as_follower(entries_to_records(kept))
                self.storage.flush(offset)  # they were durable before the truncation
            else:
                self.storage.truncate_fully_and_start_at(offset)
        assert self.storage.log_end_offset == offset, (self.storage.log_end_offset, offset)

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        self.storage.truncate_fully_and_start_at(offset)
        self.mem.truncate_fully_and_start_at(offset, epoch)

    def delete_before(self, offset: int, epoch: int) -> None:
        if offset <= self.mem.start_offset:
            return
        if offset >= self.storage.log_end_offset:
            self.truncate_fully_and_start_at(offset, epoch)
            return
        # the raft high watermark is past every offset a snapshot covers
        self.storage.update_high_watermark(offset)
        self.storage.delete_records_before(offset)
        self.mem.delete_before(offset, epoch)

    def flush(self, end_offset: int) -> None:
        self.mark_flushed(self.flush_storage(end_offset))

    def flush_storage(self, end_offset: int) -> int:
        """The fsync alone (safe on a worker thread); returns the durable end offset."""
        return min(end_offset, self.storage.flush(end_offset))

    def mark_flushed(self, end_offset: int) -> None:
        """Back on the node's thread: record what ``flush_storage`` made durable."""
        self.mem.flush(min(end_offset, self.storage.recovery_point))

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove segment files deleted below the LBO once ``file.delete.delay.ms`` passed."""
        return self.storage.delete_expired_files(now_ms)

    def close(self) -> None:
        self.storage.close()
