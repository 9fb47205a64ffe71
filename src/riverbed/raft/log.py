"""The replicated log as the raft node sees it, and an in-memory implementation.

The node writes through a ``RaftLog``: ``append``/``truncate_*``/``delete_before`` take
effect in the log's memory view at once (a file-backed log writes them to the page cache);
durability is separate: the node emits ``FlushLog(end_offset)``, the shell calls
``log.flush(end_offset)`` (the fsync, possibly on a thread) and then feeds
``node.on_log_flushed(end_offset)``. Only flushed entries count toward the high watermark,
and a crash keeps exactly the flushed prefix. Truncations are durable when they return
(Kafka truncates the segment file), so a crash never resurrects truncated entries.

Entries form record batches (``Entry.batch_end`` ends one; one ``append`` of the leader is
one batch). A batch is all or nothing: ``read`` returns whole batches only (the first one
even when it is larger than ``max_bytes``, as Kafka's fetch does), ``truncate_to`` removes
the whole batch holding its offset (Kafka's segment truncation does the same), and
``flush`` vouches for whole batches only, so a crash never keeps half of one.
``batch_start`` is where the node aligns its high watermark.

Layout (KIP-630 names)::

    log begin offset (LBO) = start_offset          end_offset (LEO)
            v                                            v
     ... snapshot ...| e[LBO] | e[LBO+1] | ... | e[LEO-1] |
    start_epoch = epoch of record LBO-1 (the snapshot's epoch), 0 for an empty log at 0.
"""

from __future__ import annotations

from typing import Protocol

from riverbed.raft.messages import Entry, OffsetAndEpoch
from riverbed.storage.epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int: ...
    @property
    def start_epoch(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def flushed_end_offset(self) -> int: ...
    @property
    def last_epoch(self) -> int: ...

    def append(self, entries: list[Entry]) -> None: ...
    def truncate_to(self, offset: int) -> None: ...
    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None: ...
    def delete_before(self, offset: int, epoch: int) -> None: ...
    def flush(self, end_offset: int) -> None: ...
    def read(self, start: int, max_bytes: int, upper: int | None = None) -> tuple[Entry, ...]: ...
    def entry(self, offset: int) -> Entry: ...
    def batch_start(self, offset: int) -> int: ...
    def epoch_at(self, offset: int) -> int: ...
    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch: ...


class MemoryLog:
    """A RaftLog in memory with a flushed prefix; ``durable_copy`` is what survives a crash."""

    def __init__(self, start_offset: int = 0, start_epoch: int = 0) -> None:
        self._start = start_offset
        self._start_epoch = start_epoch
        self._entries: list[Entry] = []
        self._flushed = start_offset
        # leader epoch -> its first offset in the log (storage's cache, no file): the one
        # end-offset-for-epoch lookup, as KRaft's log uses the partition's cache
        self._epochs = LeaderEpochCache(None)
        # bumped by every truncation: an fsync that began before one may not cover the
        # entries written after it (the simulation uses this to stay conservative)
        self.truncations = 0

    # --- views -------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def start_epoch(self) -> int:
        return self._start_epoch

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self._start_epoch

    def entries(self) -> list[Entry]:
        return list(self._entries)

    def entry(self, offset: int) -> Entry:
        if not self._start <= offset < self.end_offset:
            raise IndexError(f"offset {offset} outside [{self._start}, {self.end_offset})")
        return self._entries[offset - self._start]

    def epoch_at(self, offset: int) -> int:
        """Epoch of the record at ``offset`` (``start_epoch`` for ``start_offset - 1``)."""
        if offset == self._start - 1:
            return self._start_epoch
        return self.entry(offset).epoch

    def batch_start(self, offset: int) -> int:
        """The largest batch boundary <= ``offset`` (the base of the batch holding it);
        the log's start and end offsets are boundaries."""
        if offset >= self.end_offset:
            return self.end_offset
        if offset <= self._start:
            return self._start
        i = offset - self._start
        entries = self._entries
        while i > 0 and not entries[i - 1].batch_end:
            i -= 1
        return self._start + i

    def read(self, start: int, max_bytes: int, upper: int | None = None) -> tuple[Entry, ...]:
        """Whole batches from ``start`` within ``max_bytes``, all of them below ``upper``
        (default LEO); the first batch even when it alone exceeds ``max_bytes``."""
        end = self.end_offset if upper is None else min(upper, self.end_offset)
        if start < self._start or start >= end:
            return ()
        entries = self._entries
        stop = end - self._start
        first = i = start - self._start
        size = 0
        while i < stop:
            j, batch_size = i, 0
            while True:  # one batch: [i, j)
                e = entries[j]
                batch_size += e.size
                j += 1
                if e.batch_end or j == len(entries):
                    break
            if j > stop or (i > first and size + batch_size > max_bytes):
                break
            size += batch_size
            i = j
        return tuple(entries[first:i])

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's KafkaMetadataLog.endOffsetForEpoch: the largest epoch <= ``epoch`` in
        the log and the offset where it ends (the leader epoch cache's answer); below every
        epoch of the log, the snapshot at the LBO stands for the older ones; (-1, -1) when
        ``epoch`` is older than that snapshot too."""
        if epoch >= self.last_epoch:
            return OffsetAndEpoch(self.end_offset, self.last_epoch)
        found, end = self._epochs.end_offset_for(epoch, self.end_offset)
        if found != UNDEFINED_EPOCH and self._epochs.start_offset_of(found) is not None:
            return OffsetAndEpoch(end, found)
        if self._start_epoch <= epoch:
            return OffsetAndEpoch(self._start, self._start_epoch)
        return OffsetAndEpoch(-1, -1)

    # --- mutations ---------------------------------------------------------------------
    def append(self, entries: list[Entry]) -> None:
        assert not self._entries or self._entries[-1].batch_end, "append inside a batch"
        for e in entries:
            assert e.offset == self.end_offset, (e.offset, self.end_offset)
            assert e.epoch >= self.last_epoch, (e.epoch, self.last_epoch)
            if e.epoch > self._epochs.latest_epoch:
                self._epochs.assign(e.epoch, e.offset)
            self._entries.append(e)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry from the batch holding ``offset`` on."""
        assert self._start <= offset, (offset, self._start)
        offset = self.batch_start(offset)
        if offset < self.end_offset:
            del self._entries[offset - self._start :]
            self._epochs.truncate_from_end(offset)
            self.truncations += 1
        self._flushed = min(self._flushed, self.end_offset)

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        self.truncations += 1
        self._entries.clear()
        self._epochs.clear()
        self._start = offset
        self._start_epoch = epoch
        self._flushed = offset

    def delete_before(self, offset: int, epoch: int) -> None:
        """Advance the LBO to ``offset`` (a snapshot covers everything below it)."""
        if offset <= self._start:
            return
        if offset >= self.end_offset:
            self.truncate_fully_and_start_at(offset, epoch)
            return
        del self._entries[: offset - self._start]
        self._epochs.truncate_from_start(offset)
        self._start = offset
        self._start_epoch = epoch
        self._flushed = max(self._flushed, offset)

    def flush(self, end_offset: int) -> None:
        # a crash keeps whole batches (storage recovery cuts a torn one)
        self._flushed = max(self._flushed, self.batch_start(min(end_offset, self.end_offset)))

    def durable_copy(self) -> MemoryLog:
        """The log as a crash leaves it: the flushed prefix only."""
        copy = MemoryLog(self._start, self._start_epoch)
        copy.append(self._entries[: self._flushed - self._start])
        copy._flushed = copy.end_offset
        return copy
