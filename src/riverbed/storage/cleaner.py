"""Log compaction: the offset map and the rewrite of one segment's batches (Kafka's cleaner).

A compacted log (``cleanup.policy`` containing ``compact``) keeps, for every key, at least
its latest record. One cleaning of a partition:

1. the *dirty* part, from the cleaner checkpoint (``cleaner-offset-checkpoint``) to the
   end of the cleanable segments (closed, entirely below the high watermark, and older
   than ``min.compaction.lag.ms``), is scanned into an `OffsetMap`: key -> latest offset.
   The map lives in ``log.cleaner.dedupe.buffer.size`` bytes as Kafka's does (24 bytes a
   key: a 16-byte MD5 of the key and an 8-byte offset, up to 90% of the buffer's 24-byte
   slots; numpy arrays filled a segment at a time, see `OffsetMap`); when it is full
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
   rebuilt from the log still knows that producer's last sequence. Transactions
   (`riverbed.storage.cleaner_txns`): cleaning stops at the last stable offset; aborted
   transactions' batches go whole, markers go in two passes (delete horizon first);
   committed transactional records compact as any others.
   Unchanged batches are copied byte for byte; a batch that lost records is framed
   anew around the bytes of the records it keeps (`cleaner_scan`: segments are read
   without building record objects).
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
(`riverbed.storage.record_checks`, INVALID_RECORD for each such record).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from riverbed.protocol.record_batch import BatchHeader, iter_batches
from riverbed.storage.cleaner_scan import (
    KEYLESS,
    TOMBSTONE,
    ScannedBatch,
    ScannedSegment,
    rewrite_batch,
    scan_segment,
)
from riverbed.storage.cleaner_txns import CleanerTxns
from riverbed.storage.errors import CorruptRecordError
from riverbed.storage.producer_hook import TxnMarker, txn_marker_of

log = logging.getLogger(__name__)

#: Kafka's SkimpyOffsetMap: MD5 of the key (16 bytes) + offset (8 bytes) per entry.
OFFSET_MAP_ENTRY_BYTES = 24
#: Fill factor of the map (Kafka's log.cleaner.io.buffer.load.factor default).
OFFSET_MAP_LOAD_FACTOR = 0.9
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


class OffsetMap:
    """key -> latest offset, holding what Kafka's SkimpyOffsetMap holds (24 bytes a key:
    its 16-byte MD5 and an 8-byte offset) in three numpy arrays (the digest's two
    halves as unsigned 64-bit ints, the offset) sorted by digest, so that a whole
    segment's keys are added (`put_many`) or looked up (`lookup`) at once.

    ``capacity`` keys fit (90% of the dedupe buffer's 24-byte slots, Kafka's load
    factor); the arrays grow with the keys and never exceed the buffer. Adding keys
    briefly needs a few times the map's size (the merge sort), as Kafka's map does not.
    """

    def __init__(self, dedupe_buffer_bytes: int) -> None:
        slots = max(dedupe_buffer_bytes // OFFSET_MAP_ENTRY_BYTES, 2)
        self.slots = slots
        self.capacity = max(1, int(slots * OFFSET_MAP_LOAD_FACTOR))
        self.clear()

    @property
    def utilization(self) -> float:
        """Keys held / slots (Kafka's ``SkimpyOffsetMap.utilization``)."""
        return len(self) / self.slots

    def clear(self) -> None:
        self._hi: np.ndarray = np.empty(0, dtype=np.uint64)
        self._lo: np.ndarray = np.empty(0, dtype=np.uint64)
        self._offsets: np.ndarray = np.empty(0, dtype=np.int64)

    @property
    def memory_bytes(self) -> int:
        return int(self._hi.nbytes + self._lo.nbytes + self._offsets.nbytes)

    def __len__(self) -> int:
        return len(self._hi)

    def full(self) -> bool:
        return len(self) >= self.capacity

    @staticmethod
    def digests(keys: Iterable[bytes]) -> np.ndarray:
        return as_digests(b"".join(hashlib.md5(k, usedforsecurity=False).digest() for k in keys))

    def _find(self, digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index of each digest in the map, or where it would go; whether it is held).
        The map is sorted by first half only: a run of equal first halves (two keys
        sharing 64 bits of MD5, ~n^2 / 2^65) is searched through."""
        hi, lo = self._hi, self._lo
        at = np.searchsorted(hi, digests[:, 0])
        if not len(hi):
            return at, np.zeros(len(digests), dtype=bool)
        at_c = np.minimum(at, len(hi) - 1)
        same_hi = hi[at_c] == digests[:, 0]
        found = same_hi & (lo[at_c] == digests[:, 1])
        for i in np.flatnonzero(same_hi & ~found).tolist():
            j = int(at[i])
            while j < len(hi) and hi[j] == digests[i, 0]:
                if lo[j] == digests[i, 1]:
                    at[i], found[i] = j, True
                    break
                j += 1
        return at, found

    def lookup(self, digests: np.ndarray) -> np.ndarray:
        """The latest offset of each digest (rows of `as_digests`), -1 where the map
        does not hold it."""
        at, found = self._find(digests)
        if not found.any():
            return np.full(len(digests), -1, dtype=np.int64)
        return np.where(found, self._offsets[np.minimum(at, len(self) - 1)], -1)

    def new_keys(self, digests: np.ndarray) -> np.ndarray:
        """Which of ``digests`` would add an entry: not held yet, first occurrence."""
        first = np.zeros(len(digests), dtype=bool)
        first[_runs(digests, np.arange(len(digests)), last=False)] = True
        new: np.ndarray = first & ~self._find(digests)[1]
        return new

    def put_many(self, digests: np.ndarray, offsets: np.ndarray) -> None:
        """Map each digest to its offset (the largest, for one given several times);
        OverflowError beyond ``capacity`` keys (callers check `new_keys` first)."""
        offsets = offsets.astype(np.int64, copy=False)
        keep = _runs(digests, offsets, last=True)  # one row per digest, by digest
        digests, offsets = digests[keep], offsets[keep]
        at, found = self._find(digests)
        if len(self) + int((~found).sum()) > self.capacity:
            raise OverflowError("offset map full")
        held = at[found]
        self._offsets[held] = np.maximum(self._offsets[held], offsets[found])
        new, where = digests[~found], at[~found]
        self._hi = np.insert(self._hi, where, new[:, 0])
        self._lo = np.insert(self._lo, where, new[:, 1])
        self._offsets = np.insert(self._offsets, where, offsets[~found])

    def put(self, key: bytes, offset: int) -> None:
        self.put_many(self.digests([key]), np.array([offset], dtype=np.int64))

    def get(self, key: bytes) -> int | None:
        offset = int(self.lookup(self.digests([key]))[0])
        return None if offset < 0 else offset


def _runs(digests: np.ndarray, order_by: np.ndarray, *, last: bool) -> np.ndarray:
    """Indexes of one row per distinct digest, sorted by digest: the row with the
    largest (``last``) or smallest ``order_by`` value among equal digests."""
    order = np.lexsort((order_by, digests[:, 1], digests[:, 0]))
    hi, lo = digests[order, 0], digests[order, 1]
    edge = np.ones(len(order), dtype=bool)
    differs = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    if last:
        edge[:-1] = differs
    else:
        edge[1:] = differs
    return order[edge]


def as_digests(raw: bytes | bytearray) -> np.ndarray:
    """Concatenated 16-byte digests as an (n, 2) array of uint64: each digest's halves,
    big-endian, so that rows sort as the digests' bytes do."""
    return np.frombuffer(bytes(raw), dtype=">u8").astype(np.uint64).reshape(-1, 2)


def _txn_excluded(data: bytes, seg: ScannedSegment, txns: CleanerTxns | None) -> np.ndarray:
    """Records never mapped: those of control batches and of aborted transactions."""
    excluded = np.zeros(len(seg.offsets), dtype=bool)
    if txns is None:
        return excluded
    view = memoryview(data)
    for b in seg.batches:
        h = b.header
        if h.is_control:
            txns.on_control(h, _marker(view[b.pos : b.pos + h.size], h))
            excluded[b.first : b.first + b.count] = True
        elif txns.on_batch(h):
            excluded[b.first : b.first + b.count] = True
    return excluded


def _marker(batch: memoryview, h: BatchHeader) -> TxnMarker | None:
    try:
        return txn_marker_of(batch, h)
    except CorruptRecordError:
        return None


def map_segment(
    data: bytes, start: int, offset_map: OffsetMap, txns: CleanerTxns | None = None
) -> tuple[int, bool]:
    """Add the records at offsets >= ``start`` of one segment's bytes to the map (with
    ``txns``: not those of aborted transactions and markers, `riverbed.storage.cleaner_txns`).

    Returns (next offset after the last batch mapped, whether the whole segment fit).
    Stops before a batch whose new keys would not fit (so the map's end is a batch end)."""
    seg = scan_segment(data, start)
    digests = as_digests(seg.digests)
    offsets = np.frombuffer(seg.offsets, dtype=np.int64)
    mappable = (offsets >= start) & ((np.frombuffer(seg.flags, dtype=np.uint8) & KEYLESS) == 0)
    mappable &= ~_txn_excluded(data, seg, txns)
    new = np.zeros(len(offsets), dtype=bool)
    new[mappable] = offset_map.new_keys(digests[mappable])
    new_before = np.concatenate(([0], np.cumsum(new))).tolist()
    size = len(offset_map)
    next_offset, end, whole = start, len(offsets), True
    for b in seg.batches:
        if size + new_before[b.first] + b.count > offset_map.capacity and b.count:
            end, whole = b.first, False
            break
        next_offset = b.header.next_offset
    mappable[end:] = False
    offset_map.put_many(digests[mappable], offsets[mappable])
    return next_offset, whole


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
    txns: CleanerTxns | None = None,
) -> bytes:
    """The segment's bytes with superseded records and expired tombstones removed (with
    ``txns``: aborted transactions and markers too, `riverbed.storage.cleaner_txns`)."""
    stats = stats if stats is not None else CleanStats()
    seg = scan_segment(data)
    offsets = np.frombuffer(seg.offsets, dtype=np.int64)
    flag_array = np.frombuffer(seg.flags, dtype=np.uint8)
    drop = (offset_map.lookup(as_digests(seg.digests)) > offsets) | ((flag_array & KEYLESS) != 0)
    dropped: list[bool] = drop.tolist()
    # batches with no record to drop and no tombstone are kept whole without a look at
    # their records (all of them, in a segment cleaned before)
    special = np.concatenate(([0], np.cumsum(drop | ((flag_array & TOMBSTONE) != 0)))).tolist()

    flags = seg.flags
    out = bytearray()
    view = memoryview(data)
    for b in seg.batches:
        h = b.header
        raw = view[b.pos : b.pos + h.size]
        untouched = special[b.first + b.count] == special[b.first]
        if txns is not None and (h.is_control or h.is_transactional):
            txn_out = _clean_txn_batch(seg, b, raw, txns, now_ms, delete_retention_ms, stats)
            if txn_out is not None:
                # a producer's last data batch is kept empty (its sequence); a marker
                # carries none (Kafka keeps one only while its epoch is the producer's)
                producer_last = last_batch_of.get(h.producer_id) == h.base_offset
                if not txn_out and producer_last and not h.is_control:
                    txn_out = rewrite_batch(seg, b, [], None)
                out += txn_out
                continue
            # a committed transaction's records: compacted as any others
        elif h.is_control or h.is_transactional or untouched:
            out += raw
            stats.batches_kept += 1
            continue
        horizon = h.first_timestamp if h.has_delete_horizon else None
        kept, has_tombstone = _kept_records(
            range(b.first, b.first + b.count), dropped, flags, horizon, now_ms, stats
        )
        if has_tombstone and horizon is None:
            horizon = now_ms + delete_retention_ms
        if has_tombstone and horizon is not None:
            stats.delete_horizon_ms = max(stats.delete_horizon_ms, horizon)
        if len(kept) == b.count and (not has_tombstone or h.has_delete_horizon):
            out += raw  # every record kept: the batch as it is
            stats.batches_kept += 1
            continue
        producer_last = h.producer_id >= 0 and last_batch_of.get(h.producer_id) == h.base_offset
        if not kept and not producer_last:
            stats.batches_dropped += 1
            continue
        out += rewrite_batch(seg, b, kept, horizon if has_tombstone else None)
        stats.batches_rewritten += 1
    return bytes(out)


def _kept_records(
    records: range,
    dropped: list[bool],
    flags: bytearray,
    horizon: int | None,
    now_ms: int,
    stats: CleanStats,
) -> tuple[list[int], bool]:
    """The indexes of a batch's records that survive (not superseded; a tombstone until
    its batch's delete horizon has passed), and whether a kept one is a tombstone."""
    kept = []
    has_tombstone = False
    for i in records:
        if dropped[i]:
            stats.records_dropped += 1
            continue
        if flags[i] & TOMBSTONE:
            if horizon is not None and now_ms >= horizon:
                stats.tombstones_dropped += 1
                continue
            has_tombstone = True
        kept.append(i)
    return kept, has_tombstone


def _clean_txn_batch(
    seg: ScannedSegment,
    b: ScannedBatch,
    raw: memoryview,
    txns: CleanerTxns,
    now_ms: int,
    delete_retention_ms: int,
    stats: CleanStats,
) -> bytes | None:
    """A control or transactional batch's cleaned bytes (b"": removed), None for a
    committed transaction's batch (compacted as usual)."""
    h = b.header
    if not h.is_control:
        if not txns.on_batch(h):
            return None
        stats.records_dropped += b.count
        stats.batches_dropped += 1
        return b""
    if not txns.on_control(h, _marker(raw, h)):
        stats.batches_kept += 1
        return bytes(raw)
    if not h.has_delete_horizon:  # the first pass that may discard it: the horizon
        horizon = now_ms + delete_retention_ms
        stats.delete_horizon_ms = max(stats.delete_horizon_ms, horizon)
        stats.batches_rewritten += 1
        return rewrite_batch(seg, b, list(range(b.first, b.first + b.count)), horizon)
    if now_ms >= h.first_timestamp:
        stats.batches_dropped += 1
        return b""
    stats.delete_horizon_ms = max(stats.delete_horizon_ms, h.first_timestamp)
    stats.batches_kept += 1
    return bytes(raw)


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
