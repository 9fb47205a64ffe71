"""The remote log manager's shell: bounded pools around the tiered core (KIP-405).

Runs only with ``remote.log.storage.system.enable=true``, for partitions whose log is
tiered (topic ``remote.storage.enable=true``, not compacted). Leadership is read from
the metadata image (the partition registration's leader), so the same code runs with
one node and with replication.

Threads, all bounded (object-store slowness or outage never blocks produce, local
fetch, admin or the event loop; nothing remote runs under a log's lock):

- the copier pool (``remote.log.manager.copier.thread.pool.size``, -1 = the
  ``remote.log.manager.thread.pool.size``) runs one task per due partition (never two
  for one partition): list the remote segments and bring the local remote indexes in
  step (leader and followers alike; only segments valid under leader-epoch fencing,
  see riverbed.tiered.rsm); the leader at epoch E then deletes its own failed uploads,
  fences older leaders' unfinished ones, deletes stale segments, copies rolled segments
  earliest first at epoch E (a manifest is published only while it still leads at E,
  else the copy is abandoned and deleted; publishing "copied up to" to the log
  after each), and applies remote retention (moving the log start offset);
- the reader pool (``remote.log.reader.threads``) serves remote fetches and ListOffsets
  lookups; at most ``remote.log.reader.max.pending.tasks`` wait: a read beyond that
  is rejected (Kafka's RejectedExecutionException) with KAFKA_STORAGE_ERROR, which
  clients retry, and counted in ``reads_rejected`` (logged at most every
  ``REJECT_LOG_INTERVAL_S``). A read waits up to ``remote.fetch.max.wait.ms``
  (the delayed remote fetch); transient remote errors are retried with exponential
  back-off until then, after which the client gets KAFKA_STORAGE_ERROR (retriable); a
  remote segment that is gone gives OFFSET_OUT_OF_RANGE.

Reads fetch whole remote index entries (runs of whole batches) with ranged reads, plus
the next contiguous entry as read-ahead, into an LRU cache of
``riverbed.remote.log.reader.cache.size.bytes``. The active local remote index group is
rotated at ``riverbed.remote.log.index.segment.bytes`` / ``riverbed.remote.log.index.roll.ms``
(riverbed's keys: Kafka's ``remote.log.index.file.cache.total.size.bytes`` sizes a cache
of index files fetched from the remote tier, which riverbed does not have: its remote
indexes are local files).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from riverbed.metadata.storage_format import uuid_to_str
from riverbed.producer.snapshot import snapshot_name
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import iter_batches, iter_records
from riverbed.storage.log_files import TimestampOffset
from riverbed.tiered.remote_indexes import INDEX_FILE_BYTES_MAX, INDEX_FILE_ROLL_MS, RemoteIndexes
from riverbed.tiered.remote_log_index import RemoteLogIndexEntry
from riverbed.tiered.rlm import (
    LocalSegmentInfo,
    RlmScheduler,
    remote_segments_to_delete,
    segments_to_copy,
)
from riverbed.tiered.rsm import (
    FsspecRemoteStorageManager,
    RemoteListing,
    RemoteResourceNotFoundError,
    RemoteSegmentMetadata,
    RemoteStorageError,
    SegmentUpload,
    UploadAbandonedError,
    fence_segments,
    new_segment_id,
    segment_id_epoch,
)
from riverbed.tiered.segment_chunks import chunk_segment

__all__ = ["READ_CACHE_BYTES_MAX", "RemoteLogManager", "RemoteLogSettings", "RemoteRead"]

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
#: The scheduling loop wakes at least this often (partition set changes, shutdown).
LOOP_WAKE_MS_MAX: Final = 1000


@dataclass(frozen=True, slots=True)
class RemoteLogSettings:
    """The broker's tiered-storage keys (Kafka's names), validated at start."""

    enabled: bool
    task_interval_ms: int
    copier_threads: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    reader_threads: int
    reader_max_pending: int
    fetch_max_wait_ms: int
    read_cache_bytes: int = READ_CACHE_BYTES_MAX
    index_file_bytes_max: int = INDEX_FILE_BYTES_MAX
    index_roll_ms: int = INDEX_FILE_ROLL_MS

    @classmethod
    def from_config(cls, cfg: Any) -> RemoteLogSettings:
        def get(key: str) -> int:
            return int(cfg.get(key))

        copier = get("remote.log.manager.copier.thread.pool.size")
        if copier == -1:
            copier = get("remote.log.manager.thread.pool.size")
        if copier < 1:
            raise ValueError(
                "remote.log.manager.copier.thread.pool.size must be -1 (use "
                "remote.log.manager.thread.pool.size) or at least 1"
            )
        settings = cls(
            enabled=bool(cfg.get("remote.log.storage.system.enable")),
            task_interval_ms=get("remote.log.manager.task.interval.ms"),
            copier_threads=copier,
            retry_backoff_ms=get("remote.log.manager.task.retry.backoff.ms"),
            retry_backoff_max_ms=get("remote.log.manager.task.retry.backoff.max.ms"),
            reader_threads=get("remote.log.reader.threads"),
            reader_max_pending=get("remote.log.reader.max.pending.tasks"),
            fetch_max_wait_ms=get("remote.fetch.max.wait.ms"),
            read_cache_bytes=get("riverbed.remote.log.reader.cache.size.bytes"),
            index_file_bytes_max=get("riverbed.remote.log.index.segment.bytes"),
            index_roll_ms=get("riverbed.remote.log.index.roll.ms"),
        )
        if settings.retry_backoff_max_ms < settings.retry_backoff_ms:
            raise ValueError(
                "remote.log.manager.task.retry.backoff.max.ms must be >= "
                "remote.log.manager.task.retry.backoff.ms"
            )
        return settings


@dataclass
class RemoteRead:
    """The outcome of a remote fetch: whole batches, or an error code (0: none)."""

    data: bytes = b""
    error: int = 0


@dataclass
class _Tier:
    """A tiered partition this node hosts."""

    key: tuple[str, int]
    topic_id: str | None
    plog: Any  # riverbed.storage.PartitionLog
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


class _ChunkCache:
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


class RemoteLogManager:
    """Schedules copy/sync/retention tasks and serves remote reads (see the docstring)."""

    def __init__(
        self,
        settings: RemoteLogSettings,
        rsm: FsspecRemoteStorageManager,
        node_id: int,
        *,
        now_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.rsm = rsm
        self.node_id = node_id
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.scheduler = RlmScheduler(
            task_interval_ms=settings.task_interval_ms,
            retry_backoff_ms=settings.retry_backoff_ms,
            retry_backoff_max_ms=settings.retry_backoff_max_ms,
            rng=rng or random.Random(),
        )
        self._copiers = ThreadPoolExecutor(settings.copier_threads, "riverbed-rlm-copier")
        self._readers = ThreadPoolExecutor(settings.reader_threads, "riverbed-rlm-reader")
        self._copying = 0  # tasks in the copier pool (at most copier_threads)
        self._reads_pending = 0  # reads queued or running (bounded by reader_max_pending)
        self._tiers: dict[tuple[str, int], _Tier] = {}
        self._cache = _ChunkCache(settings.read_cache_bytes)
        self.reads_rejected = 0  # remote reads refused: reader_max_pending were waiting
        self._reject_logged_s = -REJECT_LOG_INTERVAL_S
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._partitions: Callable[[], dict[tuple[str, int], Any]] = dict
        self._image: Callable[[], Any] = lambda: None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(
        self,
        partitions: Callable[[], dict[tuple[str, int], Any]],
        image: Callable[[], Any],
    ) -> None:
        """Follow ``partitions()`` (the hosted partitions) and ``image()`` (metadata)."""
        self._partitions = partitions
        self._image = image
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run())

    def wake(self) -> None:
        """Something changed (a new image): re-read the partitions now."""
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for tier in self._tiers.values():
            tier.plog.roll_listener = None
        # running copies finish their current object; queued ones see _closing and stop
        await asyncio.to_thread(self._copiers.shutdown, wait=True, cancel_futures=True)
        await asyncio.to_thread(self._readers.shutdown, wait=True, cancel_futures=True)
        self.rsm.close()

    # ---- the scheduling loop (event loop) -------------------------------------------------

    async def _run(self) -> None:
        while not self._closing:
            try:
                self._sync_partitions()
                self._submit_due()
            except Exception:
                log.exception("remote log manager scheduling failed")
            due = self.scheduler.next_due_ms()
            wait_ms = LOOP_WAKE_MS_MAX if due is None else due - self._now_ms()
            wait_ms = max(1, min(wait_ms, LOOP_WAKE_MS_MAX))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_ms / 1000)
            self._wake.clear()

    def _sync_partitions(self) -> None:
        now = self._now_ms()
        hosted_all = self._partitions()
        for key, hosted in hosted_all.items():
            plog = hosted.log
            if not getattr(plog, "tiered", False):
                if key in self._tiers:
                    self._drop(key, deleted=False)
                continue
            leader = hosted.registration.leader == self.node_id
            tier = self._tiers.get(key)
            topic_id = getattr(plog, "topic_id", None)
            if tier is not None and tier.topic_id != topic_id:
                # deleted and re-created under the same name before this loop saw it: the
                # old topic's remote data (its own prefix, by topic id) goes
                self._drop(key, deleted=True)
                tier = None
            if tier is None or tier.plog is not plog:
                tier = _Tier(key, topic_id, plog, leader)
                self._tiers[key] = tier
                plog.roll_listener = self._roll_listener(key)
            tier.leader = leader
            tier.leader_epoch = hosted.registration.leader_epoch
            self.scheduler.assign(key, leader, now)
        image = self._image()
        for key in [k for k in self._tiers if k not in hosted_all]:
            topic = image.topics_by_name.get(key[0]) if image is not None else None
            deleted = (
                topic is None
                or key[1] not in topic.partitions
                or uuid_to_str(topic.topic_id) != self._tiers[key].topic_id
            )
            self._drop(key, deleted=deleted)

    def _roll_listener(self, key: tuple[str, int]) -> Callable[[int], None]:
        def rolled(_base_offset: int) -> None:
            # called under the log's lock, maybe from a pool thread: hand over and return
            loop = self._loop
            if loop is not None and not self._closing:
                loop.call_soon_threadsafe(self._on_roll, key)

        return rolled

    def _on_roll(self, key: tuple[str, int]) -> None:
        self.scheduler.notify_roll(key, self._now_ms())
        self._wake.set()

    def _drop(self, key: tuple[str, int], *, deleted: bool) -> None:
        tier = self._tiers.pop(key)
        tier.plog.roll_listener = None
        tier.leader = False
        self.scheduler.unassign(key)
        if deleted and not self._closing:
            # topic deletion deletes its remote data too (one leader's worth of work)
            if tier.running:
                tier.delete_when_idle = True
            else:
                self._submit_remote_deletion(tier)

    def _submit_remote_deletion(self, tier: _Tier) -> None:
        log.info(
            "deleting the remote data of deleted partition %s-%d (topic id %s)",
            *tier.key,
            tier.topic_id,
        )
        self._copiers.submit(self._delete_remote_partition, tier)

    def _delete_remote_partition(self, tier: _Tier) -> None:
        try:
            self.rsm.delete_partition(tier.key[0], tier.key[1], tier.topic_id)
        except RemoteStorageError as e:
            # the remote tier is down: try again later, deletion must complete
            log.warning("cannot delete the remote data of %s-%d (will retry): %s", *tier.key, e)
            loop = self._loop
            if loop is not None and not self._closing:
                delay_s = self.settings.retry_backoff_max_ms / 1000
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(
                        loop.call_later, delay_s, self._retry_remote_deletion, tier
                    )

    def _retry_remote_deletion(self, tier: _Tier) -> None:
        if not self._closing:
            self._submit_remote_deletion(tier)

    def _submit_due(self) -> None:
        free = self.settings.copier_threads - self._copying
        for task in self.scheduler.due(self._now_ms(), free):
            tier = self._tiers[task.key]  # type: ignore[index]
            self._copying += 1
            tier.running = True
            fut = self._copiers.submit(self._process, tier, task.leader)
            fut.add_done_callback(self._task_done_callback(task.key, tier))

    def _task_done_callback(self, key: Hashable, tier: _Tier) -> Callable[[Future[None]], None]:
        def done(fut: Future[None]) -> None:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._task_done, key, tier, fut)

        return done

    def _task_done(self, key: Hashable, tier: _Tier, fut: Future[None]) -> None:
        self._copying -= 1
        tier.running = False
        if tier.delete_when_idle and not self._closing:
            tier.delete_when_idle = False
            self._submit_remote_deletion(tier)
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:
            failures = self.scheduler.failures(key)
            level = logging.WARNING if failures < 3 else logging.DEBUG
            log.log(level, "remote log task of %s failed (will retry): %s", key, exc)
        self.scheduler.finished(key, exc is None and not fut.cancelled(), self._now_ms())
        self._wake.set()

    # ---- one partition's task (copier thread) ---------------------------------------------

    def _process(self, tier: _Tier, leader: bool) -> None:
        if self._closing:
            return
        topic, partition = tier.key
        plog = tier.plog
        listing = self.rsm.list_partition(topic, partition, tier.topic_id)
        remote, stale = fence_segments(listing.segments, listing.fenced)
        self._sync_indexes(tier, remote)
        if leader and tier.leader:
            self._sweep(tier, listing, stale)
            self._copy_rolled(tier)
            self._remote_retention(tier)
        with tier.lock:
            remote = list(tier.remote)
        if remote:
            # followers too: the leader's remote retention moved the start of the log,
            # or the log restarted at the leader's local start above the remote data
            plog.adopt_remote_log_start(remote[0].base_offset)
            plog.advance_log_start_offset(remote[0].base_offset)
            # a log restarted at the leader's local start lacks the epochs of the remote
            # range: take them from the remote segments (their leader-epoch slices)
            if plog.install_remote_epochs(_remote_epochs(remote)):
                tier.producers_pending_at = plog.local_log_start_offset
            self._install_remote_producers(tier, remote)
        elif plog.log_start_offset < plog.local_log_start_offset:
            plog.advance_log_start_offset(plog.local_log_start_offset)

    def _install_remote_producers(self, tier: _Tier, remote: list[RemoteSegmentMetadata]) -> None:
        """Producer state of the remote range for a log restarted at its leader's local
        start: the snapshot shipped with the remote segment ending just below it."""
        plog, at = tier.plog, tier.producers_pending_at
        install = getattr(plog.producer_state, "install_remote_snapshot", None)
        if at is None or install is None or at != plog.local_log_start_offset:
            tier.producers_pending_at = None
            return
        below = [m for m in remote if m.end_offset == at - 1 and ".snapshot" in m.files]
        if below:
            topic, partition = tier.key
            data = self.rsm.producer_snapshot(topic, partition, tier.topic_id, below[-1].segment_id)
            added = install(data)
            log.info("%s-%d: %d producer(s) of the remote range installed", topic, partition, added)
        tier.producers_pending_at = None

    def _sweep(
        self, tier: _Tier, listing: RemoteListing, stale: list[RemoteSegmentMetadata]
    ) -> None:
        """The leader deletes unfinished uploads and stale segments (see the rsm docstring)."""
        topic, partition = tier.key
        epoch = tier.leader_epoch
        for orphan in listing.incomplete:
            upload_epoch = segment_id_epoch(orphan)
            if upload_epoch > epoch:
                continue  # a newer leader's running upload: this node is deposed
            if upload_epoch < epoch and orphan not in listing.fenced and upload_epoch >= 0:
                # an older leader's upload may still run: fence it, then delete it
                log.info(
                    "%s-%d: fencing remote upload %s of an older leader", topic, partition, orphan
                )
                self.rsm.fence_upload(topic, partition, tier.topic_id, orphan, epoch)
            else:
                # no upload of this leader runs now (one task at a time): a leftover
                log.info("%s-%d: deleting orphan remote upload %s", topic, partition, orphan)
                self.rsm.delete_segment(topic, partition, tier.topic_id, orphan)
        for meta in stale:
            if meta.copy_epoch > epoch:
                continue
            log.info("%s-%d: deleting stale remote segment %s", topic, partition, meta.segment_id)
            self.rsm.delete_segment(
                topic,
                partition,
                tier.topic_id,
                meta.segment_id,
                meta.files,
                fence_marker=meta.segment_id in listing.fenced,
            )

    def _sync_indexes(self, tier: _Tier, remote: list[RemoteSegmentMetadata]) -> None:
        """Make the local remote indexes describe exactly the listed remote segments."""
        topic, partition = tier.key
        now = self._now_ms()
        with tier.lock:
            if tier.indexes is None:
                tier.indexes = RemoteIndexes(
                    tier.plog.directory,
                    now,
                    file_bytes_max=self.settings.index_file_bytes_max,
                    roll_ms=self.settings.index_roll_ms,
                )
            indexes = tier.indexes
            known = indexes.segment_ids
        listed = {m.segment_id for m in remote}
        missing = [m for m in remote if m.segment_id not in known]
        fetched = [
            (m, self.rsm.index_entries(topic, partition, tier.topic_id, m.segment_id))
            for m in missing
        ]
        with tier.lock:
            highest = indexes.highest_offset
            if any(m.end_offset <= highest for m, _ in fetched):
                # a segment below what is indexed (a new leader's overlap): rebuild in order
                indexes.delete_all()
                fetched = [
                    (m, self.rsm.index_entries(topic, partition, tier.topic_id, m.segment_id))
                    for m in remote
                ]
            for _, entries in fetched:
                indexes.add_segment(entries, now)
            indexes.retain_segments(listed)
            tier.remote = list(remote)
        tier.plog.update_highest_offset_in_remote(max((m.end_offset for m in remote), default=-1))

    def _copy_rolled(self, tier: _Tier) -> None:
        plog = tier.plog
        topic, partition = tier.key
        segments = plog.segments
        infos = [LocalSegmentInfo(s.base_offset, s.next_offset, s.size, s.active) for s in segments]
        by_base = {s.base_offset: s for s in segments}
        for info in segments_to_copy(infos, plog.highest_offset_in_remote, plog.high_watermark):
            if self._closing or not tier.leader:
                return  # leadership moved: the new leader continues from the remote listing
            seg = by_base[info.base_offset]
            epoch = tier.leader_epoch
            segment_id = new_segment_id(info.base_offset, epoch)
            summary = chunk_segment(seg.log_path, segment_id, size_bytes=info.size_bytes)
            epochs = _epoch_slice(plog.epoch_cache.entries(), info.base_offset, info.next_offset)
            upload = SegmentUpload(
                segment_id=segment_id,
                log_path=seg.log_path,
                entries=summary.entries,
                base_offset=summary.base_offset,
                end_offset=summary.last_offset,
                max_timestamp=summary.max_timestamp,
                size_bytes=summary.size_bytes,
                leader_epochs=epochs,
                created_ms=self._now_ms(),
                offset_index_path=seg.offset_index.path,
                time_index_path=seg.time_index.path,
                producer_snapshot_path=plog.directory / snapshot_name(info.next_offset),
                producer_snapshot=_complete_snapshot(plog, info.next_offset),
            )

            def still_leading(epoch: int = epoch) -> bool:
                return tier.leader and tier.leader_epoch == epoch and not self._closing

            try:
                meta = self.rsm.copy_segment(
                    topic, partition, tier.topic_id, upload, publish_if=still_leading
                )
            except UploadAbandonedError as e:
                log.info("%s-%d: copy abandoned: %s", topic, partition, e)
                return  # the new leader continues from the remote listing
            except RemoteStorageError:
                # best effort now; the next task's orphan sweep catches what is left
                with contextlib.suppress(RemoteStorageError):
                    self.rsm.delete_segment(topic, partition, tier.topic_id, segment_id)
                raise
            with tier.lock:
                assert tier.indexes is not None
                tier.indexes.add_segment(summary.entries, self._now_ms())
                tier.remote.append(meta)
            plog.update_highest_offset_in_remote(meta.end_offset)
            log.info(
                "%s-%d: copied segment %d..%d (%d bytes) to the remote tier as %s",
                topic,
                partition,
                meta.base_offset,
                meta.end_offset,
                meta.size_bytes,
                segment_id,
            )

    def _remote_retention(self, tier: _Tier) -> None:
        plog = tier.plog
        topic, partition = tier.key
        cfg = plog.config
        with tier.lock:
            remote = list(tier.remote)
        if not remote:
            return
        highest = remote[-1].end_offset
        local_only = sum(s.size for s in plog.segments if s.base_offset > highest)
        doomed = remote_segments_to_delete(
            remote,
            log_start_offset=plog.log_start_offset,
            retention_ms=cfg.retention_ms,
            retention_bytes=cfg.retention_bytes,
            local_only_bytes=local_only,
            now_ms=self._now_ms(),
        )
        for meta in doomed:
            if self._closing or not tier.leader:
                return
            # the log start moves first: no reader is sent to a segment being deleted
            plog.advance_log_start_offset(meta.end_offset + 1)
            self.rsm.delete_segment(topic, partition, tier.topic_id, meta.segment_id, meta.files)
            with tier.lock:
                tier.remote = [m for m in tier.remote if m.segment_id != meta.segment_id]
                assert tier.indexes is not None
                tier.indexes.retain_segments(m.segment_id for m in tier.remote)
            log.info(
                "%s-%d: remote retention deleted segment %d..%d",
                topic,
                partition,
                meta.base_offset,
                meta.end_offset,
            )

    # ---- reads (event loop -> reader pool) ------------------------------------------------

    def serves(self, key: tuple[str, int]) -> bool:
        return key in self._tiers

    async def read(self, key: tuple[str, int], offset: int, max_bytes: int) -> RemoteRead:
        """Whole batches from ``offset`` (below the local log start) out of the remote tier.

        Waits up to remote.fetch.max.wait.ms; see the module docstring for the errors.
        """
        tier = self._tiers.get(key)
        if tier is None:
            return RemoteRead(error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        result = await self._in_reader(self._read_sync, tier, offset, max_bytes)
        return result if result is not None else RemoteRead()

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
        self, tier: _Tier, meta: RemoteSegmentMetadata
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

    async def _in_reader(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._closing:
            return None
        if self._reads_pending >= self.settings.reader_max_pending:
            return self._reject_read()
        deadline = time.monotonic() + self.settings.fetch_max_wait_ms / 1000
        self._reads_pending += 1
        failures: list[str] = []  # appended to by the reader thread
        fut = self._readers.submit(self._with_retries, fn, deadline, failures, *args)
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
                loop.call_soon_threadsafe(self._dec_pending)

    def _dec_pending(self) -> None:
        self._reads_pending -= 1

    def _with_retries(
        self, fn: Callable[..., Any], deadline: float, failures: list[str], *args: Any
    ) -> Any:
        backoff_ms = READ_RETRY_BACKOFF_MS
        while True:
            try:
                return fn(*args)
            except RemoteResourceNotFoundError as e:
                log.info("remote read: %s", e)
                return RemoteRead(error=int(ErrorCode.OFFSET_OUT_OF_RANGE))
            except (RemoteStorageError, ProtocolError, ValueError) as e:
                failures.append(str(e))
                if time.monotonic() + backoff_ms / 1000 >= deadline or self._closing:
                    log.warning("remote read failed: %s", e)
                    return RemoteRead(error=int(ErrorCode.KAFKA_STORAGE_ERROR))
                time.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, READ_RETRY_BACKOFF_MAX_MS)

    def _entries_for(self, tier: _Tier, offset: int, max_bytes: int) -> list[RemoteLogIndexEntry]:
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

    def _read_sync(self, tier: _Tier, offset: int, max_bytes: int) -> RemoteRead:
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

    def _chunk(self, tier: _Tier, e: RemoteLogIndexEntry, nxt: RemoteLogIndexEntry | None) -> bytes:
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

    def _timestamp_sync(self, tier: _Tier, timestamp: int) -> TimestampOffset | RemoteRead:
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


def _complete_snapshot(plog: Any, offset: int) -> bytes | None:
    """Every live producer as of ``offset`` (None: the log keeps no producer state)."""
    complete = getattr(plog.producer_state, "complete_snapshot_bytes", None)
    return None if complete is None else bytes(complete(offset))


def _remote_epochs(remote: list[RemoteSegmentMetadata]) -> list[tuple[int, int]]:
    """The leader epochs of the remote range (each segment's slice, in order)."""
    out: list[tuple[int, int]] = []
    for meta in remote:
        for epoch, start in meta.leader_epochs:
            if not out or (epoch > out[-1][0] and start > out[-1][1]):
                out.append((epoch, start))
    return out


def _epoch_slice(
    entries: list[tuple[int, int]], base_offset: int, next_offset: int
) -> tuple[tuple[int, int], ...]:
    """The leader epochs covering [base_offset, next_offset), the first clamped to base."""
    out: list[tuple[int, int]] = []
    for i, (epoch, start) in enumerate(entries):
        following = entries[i + 1][1] if i + 1 < len(entries) else None
        if start >= next_offset or (following is not None and following <= base_offset):
            continue
        out.append((epoch, max(start, base_offset)))
    return tuple(out)
