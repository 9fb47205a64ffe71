"""Log compaction: the offset map and the rewrite of one segment's batches (Kafka's cleaner).

A compacted log (``cleanup.policy`` containing ``compact``) keeps, for every key, at least
its latest record. One cleaning of a partition:

1. the *dirty* part, from the cleaner checkpoint (``cleaner-offset-checkpoint``) to the
   end of the cleanable segments (closed, entirely below the high watermark, and older
   than ``min.compaction.lag.ms``), is scanned into an `OffsetMap`: key -> latest offset.
   The map lives in ``log.cleaner.dedupe.buffer.size`` bytes as Kafka's does (24 bytes a
   slot: a 16-byte MD5 of the key and an 8-byte offset, filled to 90%); when it is full
   the scan stops at that segment and the next cleaning goes on from there, so memory
   stays bounded whatever the number of keys;
2. every cleanable segment below the map's end is rewritten by `clean_segment`: a record
   is dropped when the map holds a later offset for its key; a tombstone (null value) is
   kept for ``delete.retention.ms`` after the first cleaning that saw it (that cleaning
   stamps the batch's *delete horizon*, KIP-534's attribute bit 6) and dropped by the
   first cleaning after the horizon. Kept records keep their offsets and timestamps; each
   batch keeps its base offset, last offset delta, producer id, epoch and base sequence,
   compression and timestamp type. A batch emptied entirely is dropped, except the last
   batch of each producer id, kept as an empty (header-only) batch so the producer state
   rebuilt from the log still knows that producer's last sequence. Control and
   transactional batches are kept as they are (transaction-aware cleaning is not done).
   Unchanged batches are copied byte for byte.
3. consecutive segments whose sizes add up to at most ``segment.bytes`` are cleaned into
   one (Kafka's grouping, so cleaned logs do not keep one shrinking file per roll); the
   new segment replaces the group crash-safely: written as ``<base>.log.cleaned``,
   fsynced, renamed ``<base>.log.swap`` (the commit point), then under the log's lock
   the old files become ``*.deleted`` and the swap file becomes ``<base>.log`` (indexes
   rebuilt). Recovery (`complete_swaps`) deletes ``.cleaned`` files (the clean is rolled
   back) and finishes every ``.swap`` (the clean is kept): it replaces ``<base>.log``
   and removes the group's other segments, those with a base offset below the swap's
   end (a group member past the end, emptied by the clean, only holds superseded
   records: left, it costs a later cleaning, never a record).

Records without a key cannot be compacted: a compacted topic refuses them at produce
(`require_keys`, INVALID_RECORD).
"""

from __future__ import annotations

import hashlib
import logging
import os
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.record_batch import BatchHeader, iter_batches
from riverbed.protocol.records import SimpleRecord, build_batch, iter_records
from riverbed.storage.errors import InvalidRecordError

log = logging.getLogger(__name__)

#: Kafka's SkimpyOffsetMap: MD5 of the key (16 bytes) + offset (8 bytes) per entry.
OFFSET_MAP_ENTRY_BYTES = 24
#: Fill factor of the map (Kafka's log.cleaner.io.buffer.load.factor default).
OFFSET_MAP_LOAD_FACTOR = 0.9
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


class OffsetMap:
    """key -> latest offset in an open-addressing table of 24-byte slots (Kafka's
    SkimpyOffsetMap: the key's 16-byte MD5, an 8-byte offset; -1 marks a free slot).

    The table grows by doubling from ``INITIAL_SLOTS`` up to the slots the dedupe buffer
    holds, so its memory follows the keys seen and never exceeds the buffer; ``capacity`` keys (90% of those slots) fit, then the map is full.
    """

    INITIAL_SLOTS = 1024

    def __init__(self, dedupe_buffer_bytes: int) -> None:
        self._max_slots = max(dedupe_buffer_bytes // OFFSET_MAP_ENTRY_BYTES, 2)
        self.capacity = max(1, int(self._max_slots * OFFSET_MAP_LOAD_FACTOR))
        self._allocate(min(self.INITIAL_SLOTS, self._max_slots))

    def _allocate(self, slots: int) -> None:
        self._slots = slots
        self._digests = bytearray(16 * slots)
        self._offsets = array("q", [-1]) * slots
        self._count = 0

    @property
    def memory_bytes(self) -> int:
        return len(self._digests) + self._offsets.itemsize * len(self._offsets)

    def clear(self) -> None:
        self._allocate(min(self.INITIAL_SLOTS, self._max_slots))

    def __len__(self) -> int:
        return self._count

    @staticmethod
    def _digest(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def full(self) -> bool:
        return self._count >= self.capacity

    def _slot(self, digest: bytes) -> int:
        """The slot holding ``digest``, or the free slot where it would go."""
        slots = self._slots
        i = int.from_bytes(digest[:8], "little") % slots
        offsets, digests = self._offsets, self._digests
        while offsets[i] != -1 and digests[16 * i : 16 * i + 16] != digest:
            i = (i + 1) % slots
        return i

    def _grow(self) -> None:
        old_digests, old_offsets = self._digests, self._offsets
        self._allocate(min(self._slots * 2, self._max_slots))
        for j, offset in enumerate(old_offsets):
            if offset != -1:
                digest = bytes(old_digests[16 * j : 16 * j + 16])
                i = self._slot(digest)
                self._digests[16 * i : 16 * i + 16] = digest
                self._offsets[i] = offset
                self._count += 1

    def put(self, key: bytes, offset: int) -> None:
        digest = self._digest(key)
        i = self._slot(digest)
        if self._offsets[i] == -1:
            if self._count >= self.capacity:
                raise OverflowError("offset map full")  # callers check capacity first
            if self._count + 1 > self._slots * OFFSET_MAP_LOAD_FACTOR:
                self._grow()
                i = self._slot(digest)
            self._digests[16 * i : 16 * i + 16] = digest
            self._count += 1
        self._offsets[i] = offset

    def get(self, key: bytes) -> int | None:
        i = self._slot(self._digest(key))
        offset = self._offsets[i]
        return None if offset == -1 else offset


def require_keys(batch: bytes | bytearray | memoryview, h: BatchHeader) -> None:
    """INVALID_RECORD unless every record of the batch has a key (compacted topics)."""
    if h.is_control:
        return
    try:
        keyless = any(r.key is None for r in iter_records(batch, verify=False))
    except ProtocolError as e:
        raise InvalidRecordError(str(e)) from None
    if keyless:
        raise InvalidRecordError("Compacted topic cannot accept message without key")


def map_segment(data: bytes, start: int, offset_map: OffsetMap) -> tuple[int, bool]:
    """Add the records at offsets >= ``start`` of one segment's bytes to the map.

    Returns (next offset after the last batch mapped, whether the whole segment fit).
    Stops before a batch whose new keys would not fit (so the map's end is a batch end)."""
    next_offset = start
    for pos, h in iter_batches(data):
        if h.next_offset <= start:
            continue
        if h.is_control:
            next_offset = h.next_offset
            continue
        records = list(iter_records(memoryview(data)[pos : pos + h.size], verify=False))
        if len(offset_map) + len(records) > offset_map.capacity:
            return next_offset, False
        for r in records:
            if r.key is not None and r.offset >= start:
                offset_map.put(r.key, r.offset)
        next_offset = h.next_offset
    return next_offset, True


@dataclass
class CleanStats:
    batches_kept: int = 0
    batches_rewritten: int = 0
    batches_dropped: int = 0
    records_dropped: int = 0
    tombstones_dropped: int = 0
    #: The latest delete horizon of the tombstones kept (-1: none): when it passes, the
    #: log is worth cleaning again even without new dirty records (Kafka does the same).
    delete_horizon_ms: int = -1


def last_batches_by_producer(segments_data: Iterable[bytes]) -> dict[int, int]:
    """producer id -> base offset of its last batch in these bytes (header scan)."""
    out: dict[int, int] = {}
    for data in segments_data:
        for _pos, h in iter_batches(data):
            if h.producer_id >= 0:
                out[h.producer_id] = h.base_offset
    return out


def clean_segment(
    data: bytes,
    offset_map: OffsetMap,
    now_ms: int,
    delete_retention_ms: int,
    last_batch_of: dict[int, int],
    stats: CleanStats | None = None,
) -> bytes:
    """The segment's bytes with superseded records and expired tombstones removed."""
    stats = stats if stats is not None else CleanStats()
    out = bytearray()
    view = memoryview(data)
    for pos, h in iter_batches(data):
        raw = view[pos : pos + h.size]
        if h.is_control or h.is_transactional:
            out += raw
            stats.batches_kept += 1
            continue
        horizon = h.first_timestamp if h.has_delete_horizon else None
        records = list(iter_records(raw, verify=False))
        kept = []
        has_tombstone = False
        for r in records:
            latest = offset_map.get(r.key) if r.key is not None else None
            if r.key is None or (latest is not None and latest > r.offset):
                stats.records_dropped += 1
                continue
            if r.value is None:
                if horizon is not None and now_ms >= horizon:
                    stats.tombstones_dropped += 1
                    continue
                has_tombstone = True
            kept.append(r)
        if has_tombstone and horizon is None:
            horizon = now_ms + delete_retention_ms
        if has_tombstone and horizon is not None:
            stats.delete_horizon_ms = max(stats.delete_horizon_ms, horizon)
        if len(kept) == len(records) and (not has_tombstone or h.has_delete_horizon):
            out += raw
            stats.batches_kept += 1
            continue
        producer_last = h.producer_id >= 0 and last_batch_of.get(h.producer_id) == h.base_offset
        if not kept and not producer_last:
            stats.batches_dropped += 1
            continue
        out += build_batch(
            [
                SimpleRecord(value=r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
                for r in kept
            ],
            base_offset=h.base_offset,
            compression=h.compression,
            timestamp_type=h.timestamp_type,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            partition_leader_epoch=h.partition_leader_epoch,
            now_ms=h.max_timestamp,
            offset_deltas=[r.offset - h.base_offset for r in kept],
            last_offset_delta=h.last_offset_delta,
            delete_horizon_ms=horizon if has_tombstone else None,
        )
        stats.batches_rewritten += 1
    return bytes(out)


def complete_swaps(directory: Path) -> int:
    """Recovery of interrupted cleanings in a partition dir (before its segments load):
    ``*.cleaned`` files are removed (not committed), every ``<base>.log.swap`` replaces
    ``<base>.log`` (committed) together with the segments of its group (base offsets in
    (base, end of the swap)); indexes of replaced segments are removed (rebuilt on use)."""
    done = 0
    entries = list(os.scandir(directory))
    for entry in entries:
        if entry.name.endswith(CLEANED_SUFFIX):
            log.info("removing unfinished cleaned segment %s", entry.path)
            Path(entry.path).unlink(missing_ok=True)
    for entry in entries:
        name = entry.name
        if not name.endswith(".log" + SWAP_SUFFIX):
            continue
        stem = name[: -len(".log" + SWAP_SUFFIX)]
        base = int(stem)
        data = Path(entry.path).read_bytes()
        end = base
        for _pos, h in iter_batches(data):
            end = h.next_offset
        for other in entries:
            m = other.name.split(".", 1)
            segment_file = len(m) == 2 and m[0].isdigit() and m[1] in ("log", "index", "timeindex")
            if segment_file and base <= int(m[0]) < max(end, base + 1):
                Path(other.path).unlink(missing_ok=True)
        os.replace(entry.path, directory / f"{stem}.log")
        log.info("completed the swap of cleaned segment %s", directory / f"{stem}.log")
        done += 1
    if done:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return done
