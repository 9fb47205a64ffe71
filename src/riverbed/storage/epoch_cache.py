"""The leader-epoch cache of a partition: leader epoch -> first offset of that epoch.

Persisted as ``leader-epoch-checkpoint`` in the partition dir (format in
:mod:`riverbed.storage.checkpoints`), rewritten atomically on every change. With
``sync_assign=False`` (what a partition log uses, as Kafka does since KAFKA-15046: its
``truncateFromEndAsyncFlush`` / ``truncateFromStartAsyncFlush``) every change (a new
leader epoch, a truncation from the end or the start, a clear) is written without fsync so
neither the first append of a new leader nor a follower's truncation waits for the disk;
:attr:`LeaderEpochCache.unsynced` then tells the log's next flush (on its worker thread)
to fsync the file before the recovery point moves. A file that a crash left behind with
entries past the recovered log end, or before its start, is trimmed when the log loads
(``truncate_from_end`` / ``truncate_from_start`` at recovery). Entries
strictly increase in both epoch and start offset (KIP-101). Followers use
:meth:`LeaderEpochCache.end_offset_for` (OffsetForLeaderEpoch) to find where their log
diverges from the leader's.

Thread safety: the cache is changed on the event loop (a new leader assigns its epoch, a
follower truncates) and in the log's pool threads (retention and DeleteRecords move its
start; a flush syncs its file). Every query and change, with the checkpoint rewrite that
goes with it, runs under the cache's own lock, so two rewrites of the ``.tmp`` file never
interleave and the file always matches the entries. Callers never take it; the partition
log may hold its own lock while calling in (the cache calls out to nothing).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from riverbed.storage.checkpoints import (
    CheckpointError,
    fsync_dir,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from riverbed.storage.file_io import OS_FILE_IO, FileIO

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class LeaderEpochCache:
    """Sorted (epoch, start offset) entries, optionally backed by a checkpoint file."""

    def __init__(
        self,
        path: Path | None,
        *,
        sync: bool = True,
        sync_assign: bool = True,
        io: FileIO = OS_FILE_IO,
    ) -> None:
        self.path = path
        self._lock = threading.RLock()  # every query and change (see the module doc)
        self._io = io
        self._sync = sync
        self._sync_assign = sync_assign
        self.unsynced = False  # written since its last fsync (only with sync_assign=False)
        self.unreadable = False  # the file was corrupt: the log rebuilds it from batches
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if path is not None:
            try:
                entries = read_epoch_checkpoint(path)
            except CheckpointError as e:
                # Kafka rebuilds the cache from the log on a bad file; so do we (the
                # partition log re-assigns epochs from batch headers during recovery).
                log.warning("ignoring corrupt leader epoch checkpoint: %s", e)
                entries = []
                self.unreadable = True
            ordered = all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(entries))
            if not ordered:
                log.warning("ignoring unordered leader epoch checkpoint %s", path)
                entries = []
                self.unreadable = True
            for epoch, start in entries:
                self._add(epoch, start)

    # ---- queries -------------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch)
            if i < len(self._epochs) and self._epochs[i] == epoch:
                return self._starts[i]
            return None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds ``offset`` (UNDEFINED_EPOCH before the first)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it (Kafka's rules).

        - unknown or empty -> (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        - the latest epoch -> (epoch, log end offset);
        - otherwise the largest known epoch <= ``epoch`` and the start offset of the first
          epoch after it (``epoch`` itself when it precedes every known epoch).
        """
        with self._lock:
            if epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epoch == self._epochs[-1]:
                return epoch, log_end_offset
            higher = bisect.bisect_right(self._epochs, epoch)
            if higher >= len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = higher - 1
            if floor < 0:
                return epoch, self._starts[higher]
            return self._epochs[floor], self._starts[higher]

    # ---- changes -------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when the cache changed.

        Entries with an epoch >= ``epoch`` or a start offset >= ``start_offset`` are
        replaced (a new leader's history wins), as in Kafka.
        """
        with self._lock:
            if epoch < 0:
                return False
            if self._epochs and self._epochs[-1] == epoch and start_offset >= self._starts[-1]:
                return False
            if self._epochs and epoch < self._epochs[-1] and start_offset >= self._starts[-1]:
                # an older epoch appearing after a newer one cannot be placed; ignore it
                log.warning(
                    "ignoring leader epoch %d at %d after epoch %d",
                    epoch,
                    start_offset,
                    self._epochs[-1],
                )
                return False
            while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
                self._epochs.pop()
                self._starts.pop()
            self._add(epoch, start_offset)
            self._persist(sync=self._sync_assign)
            return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to it)."""
        with self._lock:
            i = bisect.bisect_left(self._starts, end_offset)
            if i < len(self._starts):
                del self._epochs[i:], self._starts[i:]
                self._persist(sync=self._sync_assign)

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: drop older entries, keep the one covering it."""
        with self._lock:
            i = bisect.bisect_right(self._starts, start_offset) - 1
            if i < 0:
                return
            changed = i > 0 or self._starts[i] != start_offset
            del self._epochs[:i], self._starts[:i]
            self._starts[0] = start_offset
            if changed:
                self._persist(sync=self._sync_assign)

    def prepend(self, entries: Sequence[tuple[int, int]]) -> None:
        """Older history before the first entry (e.g. a tiered log's remote range):
        entries starting before it with a lower epoch go first; one with the first
        entry's epoch moves that entry's start back. The rest is ignored."""
        with self._lock:
            first_epoch = self._epochs[0] if self._epochs else None
            first_start = self._starts[0] if self._starts else None
            older: list[tuple[int, int]] = []
            for epoch, start in entries:
                if first_start is not None and start >= first_start:
                    break
                if first_epoch is not None and epoch > first_epoch:
                    break
                if older and (epoch <= older[-1][0] or start <= older[-1][1]):
                    continue  # not increasing (overlapping remote segments)
                older.append((epoch, start))
            if not older:
                return
            if first_epoch is not None and older[-1][0] == first_epoch:
                self._starts[0] = older.pop()[1]
            self._epochs[:0] = [e for e, _ in older]
            self._starts[:0] = [s for _, s in older]
            self._persist(sync=self._sync_assign)

    def clear(self) -> None:
        with self._lock:
            if self._epochs:
                self._epochs.clear()
                self._starts.clear()
                self._persist(sync=self._sync_assign)

    def _add(self, epoch: int, start: int) -> None:
        if self._epochs:
            assert epoch > self._epochs[-1] and start > self._starts[-1], (
                f"epoch entry ({epoch}, {start}) does not follow "
                f"({self._epochs[-1]}, {self._starts[-1]})"
            )
        self._epochs.append(epoch)
        self._starts.append(start)

    def _persist(self, *, sync: bool = True) -> None:
        if self.path is not None:
            synced = self._sync and sync
            write_epoch_checkpoint(self.path, self.entries(), sync=synced, io=self._io)
            if self._sync:
                self.unsynced = not synced

    def take_unsynced(self) -> bool:
        """True (once) when the file was written without fsync since the last call."""
        with self._lock:
            was, self.unsynced = self.unsynced, False
            return was

    def mark_unsynced(self) -> None:
        """A flush that took :meth:`take_unsynced` failed: the next one syncs again."""
        with self._lock:
            self.unsynced = True

    def sync_file(self, *, sync_dir: bool = True) -> None:
        """fsync the checkpoint file (written earlier without fsync) and its dir.

        ``sync_dir=False``: the caller fsyncs the partition dir itself afterwards. Not
        under the lock: a change meanwhile renames a new file over this one and marks
        the cache unsynced again, so the next flush syncs that (and no change waits for
        a disk).
        """
        if self.path is None:
            return
        try:
            fd = self._io.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # cleared since: a synced rewrite or a deleted log
        try:
            self._io.fsync(fd)
        finally:
            self._io.close(fd)
        if sync_dir:
            fsync_dir(self.path.parent, self._io)
