"""Remote reads of the remote log manager (KIP-405): the event loop asks, the bounded
reader pool reads.

A consumer fetch below the local log start, a ListOffsets by timestamp or MAX_TIMESTAMP
over the remote tier: the reader finds the remote index entries (runs of whole batches)
through the partition's local remote indexes, reads them with ranged reads plus the next
contiguous entry as read-ahead (at most ``READ_AHEAD_BYTES_MAX`` per read) into an LRU
cache of ``riverbed.remote.log.reader.cache.size.bytes``, and answers whole batches in
memory. At most ``remote.log.reader.max.pending.tasks`` reads wait: one beyond that is
rejected with KAFKA_STORAGE_ERROR (retriable; Kafka's RejectedExecutionException),
counted in ``reads_rejected`` and logged at most every ``REJECT_LOG_INTERVAL_S``. A read
waits up to ``remote.fetch.max.wait.ms``; transient remote errors are retried with
exponential back-off until then (then KAFKA_STORAGE_ERROR); a remote segment that is
gone gives OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeVar, TypeVarTuple

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import iter_batches, iter_records
from riverbed.server.backoff import ExponentialBackoff
from riverbed.server.metrics.remote import RemoteLogStats
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_files import TimestampOffset
from riverbed.storage.txn_index import AbortedTxn, collect_aborted
from riverbed.tiered.remote_indexes import RemoteIndexes
from riverbed.tiered.remote_log_index import RemoteLogIndexEntry
from riverbed.tiered.rsm import (
    FsspecRemoteStorageManager,
    RemoteResourceNotFoundError,
    RemoteSegmentMetadata,
    RemoteStorageError,
)

__all__ = ["READ_CACHE_BYTES_MAX", "ChunkCache", "RemoteRead", "RemoteReads", "Tier"]

if TYPE_CHECKING:
    from riverbed.server.remote_log import RemoteLogSettings

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

log = logging.getLogger(__name__)

#: Default bytes of remote chunks kept for sequential readers (read-ahead included).
READ_CACHE_BYTES_MAX: Final = 32 * 1024 * 1024
#: A rejected remote read (too many pending) is logged at most this often.
REJECT_LOG_INTERVAL_S: Final = 10.0
#: Largest single ranged read (an entry plus its read-ahead neighbour).
READ_AHEAD_BYTES_MAX: Final = 4 * 1024 * 1024
#: First back-off of a failed remote read; doubles up to READ_RETRY_BACKOFF_MAX_MS.
READ_RETRY_BACKOFF_MS: Final = 50
READ_RETRY_BACKOFF_MAX_MS: Final = 1000
READ_BACKOFF: Final = ExponentialBackoff(READ_RETRY_BACKOFF_MS, READ_RETRY_BACKOFF_MAX_MS)


@dataclass
class RemoteRead:
    """The outcome of a remote fetch: whole batches, or an error code (0: none); for a
    read_committed fetch, the aborted transactions overlapping the batches read."""

    data: bytes = b""
    error: int = 0
    aborted: list[AbortedTxn] | None = None


#: Remote segments whose aborted transactions (``.txnindex``) are kept in memory.
TXN_INDEX_CACHE_SEGMENTS_MAX: Final = 1024


@dataclass
class Tier:
    """A tiered partition this node hosts."""

    key: tuple[str, int]
    topic_id: str | None
    plog: PartitionLog
    leader: bool
    leader_epoch: int = -1  # the partition's leader epoch in the metadata image
    indexes: RemoteIndexes | None = None  # opened by the first task (file I/O)
    remote: list[RemoteSegmentMetadata] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: bool = False  # a copier task of this tier runs (event loop's view)
    # the log restarted at this local start below which the remote tier's producers are
    # still to be installed (buildRemoteLogAuxState); None: nothing pending
    producers_pending_at: int | None = None
    # the topic was deleted (or re-created under a new id) while a task ran: its remote
    # data goes once that task ends, so no upload lands after the deletion
    delete_when_idle: bool = False
    deletion_failures: int = 0  # consecutive failed remote deletions (their back-off)


class ChunkCache:
    """LRU of remote chunks by (segment id, position), bounded in bytes; thread-safe."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            data = self._chunks.get(key)
            if data is None:
                self.misses += 1
                return None
            self.hits += 1
            self._chunks.move_to_end(key)
            return data

    def put(self, key: tuple[str, int], data: bytes) -> None:
        with self._lock:
            old = self._chunks.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._chunks[key] = data
            self._bytes += len(data)
            while self._bytes > self.bytes_max and len(self._chunks) > 1:
                _, dropped = self._chunks.popitem(last=False)
                self._bytes -= len(dropped)


class RemoteReads:
    """The read half of :class:`riverbed.server.remote_log.RemoteLogManager` (a mixin:
    the manager owns the attributes declared here)."""

    settings: RemoteLogSettings
    rsm: FsspecRemoteStorageManager
    reads_rejected: int
    _tiers: dict[tuple[str, int], Tier]
    _readers: ThreadPoolExecutor
    _reads_pending: int
    _reject_logged_s: float
    _closing: bool
    _loop: asyncio.AbstractEventLoop | None
    _cache: ChunkCache
    _rng: random.Random  # jitter of the read retries' back-off
    _guarded_read_finished: Callable[[], None]  # _dec_pending for call_soon_threadsafe
    _txn_cache: OrderedDict[str, list[AbortedTxn]]  # segment id -> its aborted transactions
    stats: RemoteLogStats  # remote reads counted for the node's metrics

    def serves(self, key: tuple[str, int]) -> bool:
        return key in self._tiers

    async def read(
        self, key: tuple[str, int], offset: int, max_bytes: int, read_committed: bool = False
    ) -> RemoteRead:
        """Whole batches from ``offset`` (below the local log start) out of the remote tier,
        with the aborted transactions of their range for ``read_committed`` (the remote
        segments' ``.txnindex`` first, then the local log's, as Kafka's
        ``RemoteLogManager.collectAbortedTransactions``).

        Waits up to remote.fetch.max.wait.ms; see the module docstring for the errors.
        """
        tier = self._tiers.get(key)
        if tier is None:
            return RemoteRead(error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        result = await self._in_reader(self._read_sync, tier, offset, max_bytes, read_committed)
        result = result if result is not None else RemoteRead()
        self.stats.fetched(len(result.data), result.error)
        return result

    def _aborted_sync(self, tier: Tier, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """Kafka's search over the remote segments from the one holding ``fetch_offset``,
        then the local segments after the remote ones, until complete."""
        with tier.lock:
            remote = sorted(tier.remote, key=lambda m: m.base_offset)
        found: list[AbortedTxn] = []
        remote_end = -1
        for meta in remote:
            remote_end = max(remote_end, meta.end_offset)
            if meta.end_offset < fetch_offset:
                continue  # its aborts all end before the fetch
            search = collect_aborted(self._txn_entries(tier, meta), fetch_offset, upper)
            found += search.aborted
            if search.complete:
                return found
        return found + tier.plog.aborted_transactions(max(fetch_offset, remote_end + 1), upper)

    def _txn_entries(self, tier: Tier, meta: RemoteSegmentMetadata) -> list[AbortedTxn]:
        cached = self._txn_cache.get(meta.segment_id)
        if cached is not None:
            return cached
        topic, partition = tier.key
        entries = self.rsm.aborted_transactions(topic, partition, tier.topic_id, meta)
        self._txn_cache[meta.segment_id] = entries
        while len(self._txn_cache) > TXN_INDEX_CACHE_SEGMENTS_MAX:
            self._txn_cache.popitem(last=False)
        return entries

    async def offset_for_timestamp(
        self, key: tuple[str, int], timestamp: int
    ) -> TimestampOffset | None:
        """The first remote record with a timestamp >= ``timestamp`` at or after the log
        start (None: the remote tier has none). Raises RemoteStorageError."""
        tier = self._tiers.get(key)
        if tier is None:
            return None
        with tier.lock:
            indexes = tier.indexes
            if indexes is None or indexes.entry_for_timestamp(timestamp) is None:
                return None  # no remote I/O when the index says there is nothing
        found = await self._in_reader(self._timestamp_sync, tier, timestamp)
        if found is None:
            raise RemoteStorageError("remote timestamp lookup timed out (remote.fetch.max.wait.ms)")
        if isinstance(found, RemoteRead):
            if found.error:
                raise RemoteStorageError(f"remote timestamp lookup failed (error {found.error})")
            return None
        assert isinstance(found, TimestampOffset)
        return found

    async def max_timestamp_offset(
        self, key: tuple[str, int], above: int
    ) -> TimestampOffset | None:
        """The remote record with the largest timestamp if that timestamp is >= ``above``
        (None: the remote tier has none as late). Raises RemoteStorageError."""
        tier = self._tiers.get(key)
        if tier is None:
            return None
        start = tier.plog.log_start_offset
        with tier.lock:
            live = [m for m in tier.remote if m.end_offset >= start]
        best = max(live, key=lambda m: m.max_timestamp, default=None)
        if best is None or best.max_timestamp < above or best.max_timestamp < 0:
            return None  # from the manifests alone: no remote I/O
        found = await self._in_reader(self._max_timestamp_sync, tier, best)
        if found is None or (isinstance(found, RemoteRead) and found.error):
            raise RemoteStorageError("remote max timestamp lookup failed or timed out")
        return found if isinstance(found, TimestampOffset) else None

    def _max_timestamp_sync(
        self, tier: Tier, meta: RemoteSegmentMetadata
    ) -> TimestampOffset | RemoteRead:
        with tier.lock:
            assert tier.indexes is not None
            entries = [
                e
                for e in tier.indexes.entries_from(meta.base_offset)
                if e.segment_id == meta.segment_id and e.last_timestamp == meta.max_timestamp
            ]
        for e in entries:
            chunk = self._chunk(tier, e, None)
            for pos, h in iter_batches(chunk):
                if h.max_timestamp != meta.max_timestamp:
                    continue
                for rec in iter_records(chunk[pos : pos + h.size]):
                    if rec.timestamp == meta.max_timestamp:
                        return TimestampOffset(rec.timestamp, rec.offset, h.partition_leader_epoch)
        return RemoteRead()

    async def _in_reader(self, fn: Callable[[*Ts], T], *args: *Ts) -> T | RemoteRead | None:
        """``fn(*args)`` in the reader pool (with retries), waiting up to
        remote.fetch.max.wait.ms; None when it takes longer (or the manager closes)."""
        if self._closing:
            return None
        if self._reads_pending >= self.settings.reader_max_pending:
            return self._reject_read()
        deadline = time.monotonic() + self.settings.fetch_max_wait_ms / 1000
        self._reads_pending += 1
        failures: list[str] = []  # appended to by the reader thread

        def attempt() -> T | RemoteRead:
            return self._with_retries(fn, deadline, failures, *args)

        fut = self._readers.submit(attempt)
        fut.add_done_callback(lambda _f: self._read_finished())
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(fut)), self.settings.fetch_max_wait_ms / 1000
            )
        except TimeoutError:
            if failures:  # an attempt is still running, but the remote tier keeps failing
                return RemoteRead(error=int(ErrorCode.KAFKA_STORAGE_ERROR))
            return None  # just slow (it fills the cache): the client polls again

    def _reject_read(self) -> RemoteRead:
        """remote.log.reader.max.pending.tasks reads wait already: refuse this one with a
        retriable error (never empty data that looks like success)."""
        self.reads_rejected += 1
        now_s = time.monotonic()
        if now_s - self._reject_logged_s >= REJECT_LOG_INTERVAL_S:
            self._reject_logged_s = now_s
            log.warning(
                "remote read rejected: %d reads pending (remote.log.reader.max.pending.tasks);"
                " %d rejected so far",
                self._reads_pending,
                self.reads_rejected,
            )
        return RemoteRead(error=int(ErrorCode.KAFKA_STORAGE_ERROR))

    def _read_finished(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._guarded_read_finished)

    def _dec_pending(self) -> None:
        self._reads_pending -= 1

    def _with_retries(
        self, fn: Callable[[*Ts], T], deadline: float, failures: list[str], *args: *Ts
    ) -> T | RemoteRead:
        attempts = 0
        while True:
            try:
                return fn(*args)
            except RemoteResourceNotFoundError as e:
                log.info("remote read: %s", e)
                return RemoteRead(error=int(ErrorCode.OFFSET_OUT_OF_RANGE))
            except (RemoteStorageError, ProtocolError, ValueError) as e:
                failures.append(str(e))
                attempts += 1
                backoff_ms = READ_BACKOFF.delay_ms(attempts, self._rng)
                if time.monotonic() + backoff_ms / 1000 >= deadline or self._closing:
                    log.warning("remote read failed: %s", e)
                    return RemoteRead(error=int(ErrorCode.KAFKA_STORAGE_ERROR))
                time.sleep(backoff_ms / 1000)

    def _entries_for(self, tier: Tier, offset: int, max_bytes: int) -> list[RemoteLogIndexEntry]:
        with tier.lock:
            if tier.indexes is None:
                return []
            out: list[RemoteLogIndexEntry] = []
            total = 0
            for e in tier.indexes.entries_from(offset):
                out.append(e)
                total += e.data_length
                if total >= max_bytes:
                    break
            return out

    def _read_sync(
        self, tier: Tier, offset: int, max_bytes: int, read_committed: bool = False
    ) -> RemoteRead:
        read = self._read_batches(tier, offset, max_bytes)
        if read_committed and read.data and not read.error:
            end = -1
            for _pos, h in iter_batches(read.data):
                end = h.next_offset
            read.aborted = self._aborted_sync(tier, offset, end)
        return read

    def _read_batches(self, tier: Tier, offset: int, max_bytes: int) -> RemoteRead:
        entries = self._entries_for(tier, offset, max_bytes)
        if not entries:
            if tier.indexes is None:
                return RemoteRead()  # not synced yet after start: the client polls again
            raise RemoteResourceNotFoundError(f"no remote data at offset {offset}")
        out = bytearray()
        for i, e in enumerate(entries):
            nxt = entries[i + 1] if i + 1 < len(entries) else None
            chunk = self._chunk(tier, e, nxt)
            for pos, h in iter_batches(chunk):
                if h.next_offset <= offset:
                    continue
                if out and len(out) + h.size > max_bytes:
                    return RemoteRead(bytes(out))
                out += chunk[pos : pos + h.size]
        return RemoteRead(bytes(out))

    def _chunk(self, tier: Tier, e: RemoteLogIndexEntry, nxt: RemoteLogIndexEntry | None) -> bytes:
        key = (e.segment_id, e.position)
        data = self._cache.get(key)
        if data is not None:
            return data
        topic, partition = tier.key
        ahead = (
            nxt is not None
            and nxt.segment_id == e.segment_id
            and nxt.position == e.position + e.data_length
            and e.data_length + nxt.data_length <= READ_AHEAD_BYTES_MAX
        )
        length = e.data_length + (nxt.data_length if ahead and nxt is not None else 0)
        blob = self.rsm.read(topic, partition, tier.topic_id, e.segment_id, e.position, length)
        data = blob[: e.data_length]
        self._cache.put(key, data)
        if ahead and nxt is not None:
            self._cache.put((nxt.segment_id, nxt.position), blob[e.data_length :])
        return data

    def _timestamp_sync(self, tier: Tier, timestamp: int) -> TimestampOffset | RemoteRead:
        """The record found, or an empty RemoteRead when the remote tier has none."""
        start = tier.plog.log_start_offset
        with tier.lock:
            assert tier.indexes is not None
            first = tier.indexes.entry_for_timestamp(timestamp)
            if first is None:
                return RemoteRead()
            entries = list(tier.indexes.entries_from(max(first.first_offset, start)))
        for i, e in enumerate(entries):
            if e.last_timestamp < timestamp:
                continue
            chunk = self._chunk(tier, e, entries[i + 1] if i + 1 < len(entries) else None)
            for pos, h in iter_batches(chunk):
                if h.max_timestamp < timestamp or h.next_offset <= start:
                    continue
                for rec in iter_records(chunk[pos : pos + h.size]):
                    if rec.timestamp >= timestamp and rec.offset >= start:
                        return TimestampOffset(rec.timestamp, rec.offset, h.partition_leader_epoch)
        return RemoteRead()

    @property
    def cache_stats(self) -> tuple[int, int]:
        """(hits, misses) of the read-ahead cache."""
        return self._cache.hits, self._cache.misses
