"""Compaction of one partition log (mixed into PartitionLog); the rules are in `cleaner`.

Reads happen outside the logs' locks through fds the local log duplicates under its own
(appends and fetches go on meanwhile); only the swap of a rewritten segment takes the
locks (unified, then local: :meth:`LocalLog.replace_segments`), and it is skipped when
the segment changed in between (deleted by retention, truncated).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from riverbed.storage.checkpoints import fsync_dir
from riverbed.storage.cleaner import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    CleanStats,
    OffsetMap,
    clean_segment,
    last_batches_by_producer,
    map_segment,
)
from riverbed.storage.cleaner_txns import CleanerTxns
from riverbed.storage.log_base import LogBase, log
from riverbed.storage.log_files import Cleanable
from riverbed.storage.segment import LogSegment, segment_file_name
from riverbed.storage.txn_index import AbortedTxn

#: Offsets in a segment are relative to its base as int32 (index entries).
INT32_MAX = 2**31 - 1

__all__ = ["CleanResult", "LogCleaning"]

#: Called with a byte count after every read or write (the cleaner's I/O throttle).
Throttle = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class CleanResult:
    #: The next cleaning's first dirty offset (the cleaner checkpoint).
    first_dirty: int
    #: every read (the map, the producers' last batches, the copy: the throttled I/O)
    bytes_read: int
    bytes_written: int
    segments_swapped: int
    stats: CleanStats
    #: the bytes of the segments the copy pass read (Kafka's CleanerStats.bytesRead,
    #: over which cleaner-recopy-percent is taken)
    bytes_copied_from: int = 0


class _IoCount:
    """Bytes read and written by one cleaning, through the throttle."""

    def __init__(self, throttle: Throttle) -> None:
        self.throttle = throttle
        self.read = 0
        self.written = 0

    def __call__(self, n: int, *, read: bool = False) -> None:
        if read:
            self.read += n
        else:
            self.written += n
        self.throttle(n)


class LogCleaning(LogBase):
    """`cleanable_segments` and `clean` (see the module docstring)."""

    def cleanable_segments(self, now_ms: int) -> list[Cleanable]:
        """Closed segments entirely below the high watermark whose records are all older
        than ``min.compaction.lag.ms``, from the log start."""
        with self._lock:
            # never past the last stable offset: every transaction cleaned has ended
            # (Kafka's firstUncleanableDirtyOffset)
            hw = self._high_watermark
            state = self.producer_state
            upper = hw if state is None else state.last_stable_offset(hw)
            return self._local.cleanable(upper, self.config.min_compaction_lag_ms, now_ms)

    def _aborted(self, start: int, end: int) -> list[AbortedTxn]:
        with self._lock:
            return self._local.aborted_transactions(start, end)

    def dirty_ratio(self, first_dirty: int, now_ms: int) -> tuple[float, int]:
        """(dirty bytes / cleanable bytes, dirty bytes) from ``first_dirty``."""
        cleanable = self.cleanable_segments(now_ms)
        total = sum(c.size for c in cleanable)
        dirty = sum(c.size for c in cleanable if c.end_offset > first_dirty)
        return (dirty / total if total else 0.0), dirty

    def _read_segment(self, seg: LogSegment) -> bytes | None:
        found = self._local.dup_segment_fd(seg)
        if found is None:
            return None
        fd, size = found
        try:
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)

    def clean(
        self,
        first_dirty: int,
        offset_map: OffsetMap,
        now_ms: int,
        throttle: Throttle,
        *,
        expire_tombstones: bool = False,
    ) -> CleanResult | None:
        """One cleaning pass from ``first_dirty``; None when nothing is dirty (unless
        ``expire_tombstones``: tombstones past their delete horizon are due)."""
        cleanable = self.cleanable_segments(now_ms)
        first_dirty = max(first_dirty, self.log_start_offset)
        dirty = [c for c in cleanable if c.end_offset > first_dirty]
        if not dirty and not (expire_tombstones and cleanable):
            return None
        offset_map.clear()
        io = _IoCount(throttle)
        map_end = first_dirty
        end = cleanable[-1].end_offset if cleanable else first_dirty
        map_txns = CleanerTxns.of(self._aborted(first_dirty, end))
        for c, data in self._segment_bytes(dirty, io):
            start = max(first_dirty, c.segment.base_offset)
            map_end, whole = map_segment(data, start, offset_map, map_txns)
            if not whole:
                break
            map_end = c.end_offset
        if dirty and map_end <= first_dirty:
            log.warning(
                "%s: log.cleaner.dedupe.buffer.size holds %d keys, fewer than one batch "
                "needs: nothing cleaned", self.name, offset_map.capacity,
            )  # fmt: skip
            return None
        targets = [c for c in cleanable if c.segment.base_offset < max(map_end, first_dirty)]
        # one segment in memory at a time: a header pass for the producers' last batches,
        # then read, rewrite and swap each segment
        last_batch_of = last_batches_by_producer(d for _c, d in self._segment_bytes(targets, io))
        stats = CleanStats()
        swapped = before = after = 0
        txns = CleanerTxns.of(self._aborted(targets[0].segment.base_offset, end) if targets else [])
        for group in self._groups(targets):
            datas = [d for _c, d in self._segment_bytes(group, io)]
            if len(datas) != len(group):
                continue  # a segment went away meanwhile (retention): next time
            txns.retained_aborts = []
            cleaned = b"".join(
                clean_segment(d, offset_map, now_ms, self.config.delete_retention_ms,
                              last_batch_of, stats, txns)
                for d in datas
            )  # fmt: skip
            size = sum(len(d) for d in datas)
            before += size
            after += size
            if len(group) == 1 and cleaned == datas[0]:
                continue
            io(len(cleaned))
            if self._swap(group, cleaned, txns.retained_aborts):
                swapped += 1
                after += len(cleaned) - size
        log.info(
            "%s: cleaned offsets [%d, %d): %d segment group(s) rewritten, %d records and %d "
            "tombstones removed, %d -> %d bytes",
            self.name, first_dirty, map_end, swapped, stats.records_dropped,
            stats.tombstones_dropped, before, after,
        )  # fmt: skip
        return CleanResult(map_end, io.read, io.written, swapped, stats, before)

    def _segment_bytes(
        self, cleanables: list[Cleanable], io: _IoCount
    ) -> Iterator[tuple[Cleanable, bytes]]:
        for c in cleanables:
            data = self._read_segment(c.segment)
            if data is not None:
                io(len(data), read=True)
                yield c, data

    def _groups(self, targets: list[Cleanable]) -> list[list[Cleanable]]:
        """Runs of consecutive segments that fit one segment once merged (Kafka's
        groupSegmentsBySize: at most segment.bytes, offsets relative to an int32)."""
        out: list[list[Cleanable]] = []
        run: list[Cleanable] = []
        size = 0
        for c in targets:
            fits = (
                bool(run)
                and size + c.size <= self.config.segment_bytes
                and c.end_offset - 1 - run[0].segment.base_offset <= INT32_MAX
            )
            if run and not fits:
                out.append(run)
                run, size = [], 0
            run.append(c)
            size += c.size
        if run:
            out.append(run)
        return out

    def _swap(self, group: list[Cleanable], data: bytes, aborts: list[AbortedTxn]) -> bool:
        """Replace the group's segments by one holding ``data`` (see the cleaner
        docstring), with ``aborts`` (the aborted transactions whose markers it kept) in
        its txn index; False when one of them changed meanwhile."""
        first = group[0].segment
        base = segment_file_name(first.base_offset, ".log")
        cleaned = self.directory / (base + CLEANED_SUFFIX)
        swap = self.directory / (base + SWAP_SUFFIX)
        fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(cleaned, swap)
        fsync_dir(self.directory)  # the commit point: recovery completes the swap from here on
        with self._lock:
            if not self._local.replace_segments(group, swap):
                return False
            with self._failing_dir("txn index of a cleaned segment"):
                for e in aborts:
                    self._local.append_txn_index(e)
        fsync_dir(self.directory)
        return True
