"""Rules over segments that the local log applies under its lock: when a segment rolls,
how a run of segments is recovered after an unclean shutdown, which may be compacted, and
what a flush fsyncs (``add_fsyncs``).

Roll (Kafka's ``LogSegment.shouldRoll``): the next batch would pass ``segment.bytes``,
the indexes are full, the segment's int32 relative offsets cannot reach the batch, or
``segment.ms`` minus the segment's jitter has passed, measured by record time from the
first batch's timestamp (KIP-32), by the creation time for segments without timestamps.

Recovery: every segment from the one holding the recovery point on is validated batch by
batch (:meth:`LogSegment.recover`: length, CRC, offsets), its indexes rebuilt and the
segment fsynced; the first invalid batch and everything after it are cut (later segments
deleted), as is a segment overlapping the one before it; an empty last segment left by a
torn tail goes too, so the log end is where the data ends.

Creation: each segment draws its own ``segment.jitter.ms`` in
``[0, min(segment.jitter.ms, segment.ms))`` from the log's ``random.Random`` (Kafka's
``LogConfig.randomSegmentJitter``), injected so tests are deterministic.

Compaction (Kafka's ``LogCleanerManager``): only closed segments entirely below the high
watermark whose records are all older than ``min.compaction.lag.ms``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

from riverbed.protocol.records import BatchHeader
from riverbed.storage.config import LogConfig
from riverbed.storage.file_io import FileIO
from riverbed.storage.log_files import Cleanable, DirSync, FlushPlan
from riverbed.storage.segment import LogSegment
from riverbed.storage.time_index import NO_TIMESTAMP

__all__ = [
    "SegmentMaker",
    "add_fsyncs",
    "cleanable_segments",
    "recover_segments",
    "should_roll",
]

log = logging.getLogger("riverbed.storage.log")


class _SegmentArgs(TypedDict):
    index_interval_bytes: int
    max_index_bytes: int
    created_ms: int
    io: FileIO


class SegmentMaker:
    """Opens and creates the segments of one log (the local log calls it under its lock)."""

    def __init__(
        self, directory: Path, config: LogConfig, io: FileIO, rng: random.Random, dirs: DirSync
    ) -> None:
        self.directory = directory
        self.config = config  # the local log's, kept current by it
        self._io = io
        self._rng = rng
        self._dirs = dirs

    def open(self, base_offset: int, now_ms: int, *, jitter: bool = True) -> LogSegment:
        """An existing segment (at load, or one the cleaner rewrote: no new jitter)."""
        return self._made(
            LogSegment.open_existing(self.directory, base_offset, **self._args(now_ms)), jitter
        )

    def create(self, base_offset: int, now_ms: int) -> LogSegment:
        """A new segment; its files make the partition dir need an fsync."""
        self._dirs.file_created()
        return self._made(
            LogSegment.create(self.directory, base_offset, **self._args(now_ms)), True
        )

    def _args(self, now_ms: int) -> _SegmentArgs:
        return {
            "index_interval_bytes": self.config.index_interval_bytes,
            "max_index_bytes": self.config.segment_index_bytes,
            "created_ms": now_ms,
            "io": self._io,
        }

    def _made(self, seg: LogSegment, jitter: bool) -> LogSegment:
        if jitter:
            bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
            seg.roll_jitter_ms = self._rng.randrange(bound) if bound > 0 else 0
        return seg


def should_roll(seg: LogSegment, h: BatchHeader, now: int, cfg: LogConfig) -> bool:
    """Must batch ``h`` go to a new segment rather than the active ``seg``?"""
    if seg.size == 0:
        return False
    if seg.size + h.size > cfg.segment_bytes:
        return True
    if seg.indexes_full() or not seg.can_hold_offset(h.last_offset):
        return True
    # segment.ms per KIP-32: measured by record time from the first batch's timestamp
    # (Kafka's rule); segments without timestamps fall back to their creation time
    if seg.rolling_based_timestamp >= 0 and h.max_timestamp >= 0:
        waited = h.max_timestamp - seg.rolling_based_timestamp
    else:
        waited = now - seg.created_ms
    return waited > cfg.segment_ms - seg.roll_jitter_ms


def recover_segments(
    name: str,
    segs: Sequence[LogSegment],
    start: int,
    on_batch: Callable[[BatchHeader], None],
) -> list[LogSegment]:
    """Recover ``segs[start:]`` (``on_batch`` sees every valid batch); returns the
    segments that remain, the last one active."""
    kept = list(segs[:start])
    rest = list(segs[start:])
    rest[-1].active = True
    for k, seg in enumerate(rest):
        if kept and seg.base_offset < kept[-1].next_offset:
            # would overlap the previous segment: everything from here on is garbage
            _drop(name, rest[k:])
            break
        truncated = seg.recover(on_batch)
        if truncated:
            log.warning(
                "%s: recovery truncated %d invalid bytes of %s",
                name,
                truncated,
                seg.log_path.name,
            )
        last = k == len(rest) - 1
        if truncated and not last:
            _drop(name, rest[k + 1 :])
            last = True
        if not last:
            seg.on_become_inactive()
        seg.flush()
        kept.append(seg)
        if last:
            break
    while len(kept) > 1 and kept[-1].size == 0:
        # an empty last segment (its data torn away) would put the log end at its
        # base offset, past the data when offsets have a gap: drop it
        kept.pop().delete_files()
    active = kept[-1]
    active.active = True
    active.load_tail_state()
    return kept


def _drop(name: str, doomed: list[LogSegment]) -> None:
    for seg in doomed:
        log.warning("%s: deleting segment %s after invalid data", name, seg.log_path.name)
        seg.delete_files()


def cleanable_segments(
    segs: Sequence[LogSegment],
    high_watermark: int,
    lag_ms: int,
    now_ms: int,
    release: Callable[[LogSegment], None],
) -> list[Cleanable]:
    """The leading closed segments of ``segs`` the cleaner may rewrite (oldest first)."""
    out: list[Cleanable] = []
    for i, seg in enumerate(segs[:-1]):
        end = segs[i + 1].base_offset
        if end > high_watermark:
            break
        if lag_ms > 0:
            newest = seg.largest_timestamp()
            if newest != NO_TIMESTAMP and newest > now_ms - lag_ms:
                break
        out.append(Cleanable(seg, end, seg.size))
        release(seg)
    return out


def add_fsyncs(
    plan: FlushPlan, segs: Sequence[LogSegment], recovery_point: int, io: FileIO
) -> None:
    """Add to ``plan`` what a flush to its target fsyncs: the ``.log`` of every segment
    holding data between the recovery point and the target, and the indexes of segments
    rolled since their last sync (every segment's with ``all_indexes``: close). The active
    segment's indexes need no fsync otherwise: after a crash the segment holding the
    recovery point is re-indexed from its ``.log``."""
    target = plan.target
    for seg in segs:
        has_data = target > recovery_point and seg.next_offset > recovery_point
        has_data = has_data and seg.base_offset < target
        indexes = plan.all_indexes or (not seg.active and seg.index_sync_pending)
        if has_data or (indexes and seg.size):  # an empty segment has nothing
            try:  # (writes pending index entries first)
                plan.fds += seg.dup_fds(with_indexes=indexes)
            except OSError:
                plan.close_fds(io)
                raise
            plan.synced.append(seg)
