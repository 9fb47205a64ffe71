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
  lookups (:mod:`riverbed.server.remote_reads`, the manager's read half).

The active local remote index group is rotated at
``riverbed.remote.log.index.segment.bytes`` / ``riverbed.remote.log.index.roll.ms`` (the
read cache is ``riverbed.remote.log.reader.cache.size.bytes``; riverbed's keys: Kafka's ``remote.log.index.file.cache.total.size.bytes`` sizes a cache
of index files fetched from the remote tier, which riverbed does not have: its remote
indexes are local files).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from riverbed.metadata.image import MetadataImage, PartitionRegistration
from riverbed.metadata.storage_format import uuid_to_str
from riverbed.producer.snapshot import snapshot_name
from riverbed.server.backoff import ExponentialBackoff
from riverbed.server.broker.partitions import last_stable_offset, producer_state_of
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.metrics.remote import RemoteLogStats
from riverbed.server.remote_reads import (
    READ_CACHE_BYTES_MAX,
    REJECT_LOG_INTERVAL_S,
    ChunkCache,
    RemoteRead,
    RemoteReads,
    Tier,
)
from riverbed.server.supervise import guarded, supervise
from riverbed.storage.log import PartitionLog
from riverbed.tiered.remote_indexes import INDEX_FILE_BYTES_MAX, INDEX_FILE_ROLL_MS, RemoteIndexes
from riverbed.tiered.rlm import (
    LocalSegmentInfo,
    RlmScheduler,
    remote_segments_to_delete,
    segments_to_copy,
)
from riverbed.tiered.rsm import (
    FsspecRemoteStorageManager,
    RemoteListing,
    RemoteSegmentMetadata,
    RemoteStorageError,
    SegmentUpload,
    UploadAbandonedError,
    fence_segments,
    new_segment_id,
    segment_id_epoch,
)
from riverbed.tiered.segment_chunks import chunk_segment

if TYPE_CHECKING:
    from riverbed.server.config import ServerConfig

__all__ = ["READ_CACHE_BYTES_MAX", "RemoteLogManager", "RemoteLogSettings", "RemoteRead"]

log = logging.getLogger(__name__)

#: The scheduling loop wakes at least this often (partition set changes, shutdown).
LOOP_WAKE_MS_MAX: Final = 1000


class TieredPartition(Protocol):
    """What the manager reads of a hosted partition (`HostedPartition`)."""

    @property
    def log(self) -> PartitionLog: ...

    @property
    def registration(self) -> PartitionRegistration: ...


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
    def from_config(cls, cfg: ServerConfig) -> RemoteLogSettings:
        get = cfg.get_int

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


class RemoteLogManager(RemoteReads):
    """Schedules copy/sync/retention tasks and serves remote reads (see the docstring)."""

    def __init__(
        self,
        settings: RemoteLogSettings,
        rsm: FsspecRemoteStorageManager,
        node_id: int,
        *,
        now_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        fault_handler: FaultHandler | None = None,
    ) -> None:
        self.settings = settings
        #: the scheduling loop's unexpected errors halt the node (``supervise``)
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self._rng = rng or random.Random()
        # loop callbacks from pool threads: an error in one is a fault, not a log line
        fh = self.fault_handler
        self._guarded_on_roll = guarded("remote log roll notice", self._on_roll, fh)
        self._guarded_task_done = guarded("remote log task bookkeeping", self._task_done, fh)
        self._guarded_retry_deletion = guarded(
            "remote deletion retry", self._retry_remote_deletion, fh
        )
        self._guarded_read_finished = guarded("remote read bookkeeping", self._dec_pending, fh)
        #: remote deletion of a deleted partition: retried, bounded exponential with jitter
        self._deletion_backoff = ExponentialBackoff(
            settings.retry_backoff_ms, settings.retry_backoff_max_ms
        )
        self.rsm = rsm
        self.node_id = node_id
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.scheduler = RlmScheduler(
            task_interval_ms=settings.task_interval_ms,
            retry_backoff_ms=settings.retry_backoff_ms,
            retry_backoff_max_ms=settings.retry_backoff_max_ms,
            rng=self._rng,
        )
        self._copiers = ThreadPoolExecutor(settings.copier_threads, "riverbed-rlm-copier")
        self._readers = ThreadPoolExecutor(settings.reader_threads, "riverbed-rlm-reader")
        self._copying = 0  # tasks in the copier pool (at most copier_threads)
        self._reads_pending = 0  # reads queued or running (bounded by reader_max_pending)
        self._tiers: dict[tuple[str, int], Tier] = {}
        self._cache = ChunkCache(settings.read_cache_bytes)
        self._txn_cache = OrderedDict()
        self.reads_rejected = 0  # remote reads refused: reader_max_pending were waiting
        self.stats = RemoteLogStats()  # copies and reads, for the node's metrics
        self._reject_logged_s = -REJECT_LOG_INTERVAL_S
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._partitions: Callable[[], Mapping[tuple[str, int], TieredPartition]] = dict
        self._image: Callable[[], MetadataImage | None] = lambda: None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(
        self,
        partitions: Callable[[], Mapping[tuple[str, int], TieredPartition]],
        image: Callable[[], MetadataImage | None],
    ) -> None:
        """Follow ``partitions()`` (the hosted partitions) and ``image()`` (metadata)."""
        self._partitions = partitions
        self._image = image
        self._loop = asyncio.get_running_loop()
        self._task = supervise("remote log manager loop", self._run(), self.fault_handler)

    def wake(self) -> None:
        """Something changed (a new image): re-read the partitions now."""
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # its own fault went to the fault handler
        for tier in self._tiers.values():
            tier.plog.roll_listener = None
        # running copies finish their current object; queued ones see _closing and stop
        await asyncio.to_thread(self._copiers.shutdown, wait=True, cancel_futures=True)
        await asyncio.to_thread(self._readers.shutdown, wait=True, cancel_futures=True)
        self.rsm.close()

    # ---- the scheduling loop (event loop) -------------------------------------------------

    async def _run(self) -> None:
        while not self._closing:
            # in-memory bookkeeping only (remote work runs in the copier pool, whose
            # failures are retried per partition): an error here is a fault
            self._sync_partitions()
            self._submit_due()
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
            if not plog.tiered:
                if key in self._tiers:
                    self._drop(key, deleted=False)
                continue
            leader = hosted.registration.leader == self.node_id
            tier = self._tiers.get(key)
            topic_id = plog.topic_id
            if tier is not None and tier.topic_id != topic_id:
                # deleted and re-created under the same name before this loop saw it: the
                # old topic's remote data (its own prefix, by topic id) goes
                self._drop(key, deleted=True)
                tier = None
            if tier is None or tier.plog is not plog:
                tier = Tier(key, topic_id, plog, leader)
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
                loop.call_soon_threadsafe(self._guarded_on_roll, key)

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

    def _submit_remote_deletion(self, tier: Tier) -> None:
        log.info(
            "deleting the remote data of deleted partition %s-%d (topic id %s)",
            *tier.key,
            tier.topic_id,
        )
        self._copiers.submit(self._delete_remote_partition, tier)

    def _delete_remote_partition(self, tier: Tier) -> None:
        try:
            self.rsm.delete_partition(tier.key[0], tier.key[1], tier.topic_id)
        except RemoteStorageError as e:
            # the remote tier is down: try again later, deletion must complete
            log.warning("cannot delete the remote data of %s-%d (will retry): %s", *tier.key, e)
            loop = self._loop
            if loop is not None and not self._closing:
                tier.deletion_failures += 1
                delay_s = self._deletion_backoff.delay_ms(tier.deletion_failures, self._rng) / 1000
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(
                        loop.call_later, delay_s, self._guarded_retry_deletion, tier
                    )

    def _retry_remote_deletion(self, tier: Tier) -> None:
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

    def _task_done_callback(self, key: Hashable, tier: Tier) -> Callable[[Future[None]], None]:
        def done(fut: Future[None]) -> None:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._guarded_task_done, key, tier, fut)

        return done

    def _task_done(self, key: Hashable, tier: Tier, fut: Future[None]) -> None:
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

    def _process(self, tier: Tier, leader: bool) -> None:
        if self._closing:
            return
        topic, partition = tier.key
        plog = tier.plog
        listing = self.rsm.list_partition(topic, partition, tier.topic_id)
        remote, stale = fence_segments(listing.segments, listing.fenced)
        self._sync_indexes(tier, remote, leading=leader and tier.leader)
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

    def _install_remote_producers(self, tier: Tier, remote: list[RemoteSegmentMetadata]) -> None:
        """Producer state of the remote range for a log restarted at its leader's local
        start: the snapshot shipped with the remote segment ending just below it."""
        plog, at = tier.plog, tier.producers_pending_at
        state = producer_state_of(plog)
        if at is None or state is None or at != plog.local_log_start_offset:
            tier.producers_pending_at = None
            return
        below = [m for m in remote if m.end_offset == at - 1 and ".snapshot" in m.files]
        if below:
            topic, partition = tier.key
            data = self.rsm.producer_snapshot(topic, partition, tier.topic_id, below[-1].segment_id)
            added = state.install_remote_snapshot(data)
            log.info("%s-%d: %d producer(s) of the remote range installed", topic, partition, added)
        tier.producers_pending_at = None

    def _sweep(
        self, tier: Tier, listing: RemoteListing, stale: list[RemoteSegmentMetadata]
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

    def _sync_indexes(
        self, tier: Tier, remote: list[RemoteSegmentMetadata], *, leading: bool
    ) -> None:
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
        epoch = None if leading else tier.leader_epoch
        tier.plog.update_highest_offset_in_remote(_copied_up_to(remote, epoch))

    def _copy_rolled(self, tier: Tier) -> None:
        plog = tier.plog
        topic, partition = tier.key
        segments = plog.segments
        infos = [LocalSegmentInfo(s.base_offset, s.next_offset, s.size, s.active) for s in segments]
        by_base = {s.base_offset: s for s in segments}
        # Kafka copies only segments below the last stable offset: every transaction in
        # a copied segment has ended, its aborts are in the txn indexes copied with it
        upper = last_stable_offset(plog)
        for info in segments_to_copy(infos, plog.highest_offset_in_remote, upper):
            if self._closing or not tier.leader:
                return  # leadership moved: the new leader continues from the remote listing
            seg = by_base[info.base_offset]
            epoch = tier.leader_epoch
            segment_id = new_segment_id(info.base_offset, epoch)
            summary = chunk_segment(seg.log_path, segment_id, size_bytes=info.size_bytes)
            epochs = _epoch_slice(plog.epoch_entries(), info.base_offset, info.next_offset)
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
                txn_index_path=seg.txn_index.path,
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
                self.stats.copy_failed()
                # best effort now; the next task's orphan sweep catches what is left
                with contextlib.suppress(RemoteStorageError):
                    self.rsm.delete_segment(topic, partition, tier.topic_id, segment_id)
                raise
            with tier.lock:
                assert tier.indexes is not None
                tier.indexes.add_segment(summary.entries, self._now_ms())
                tier.remote.append(meta)
            plog.update_highest_offset_in_remote(meta.end_offset)
            self.stats.copied(meta.size_bytes)
            log.info(
                "%s-%d: copied segment %d..%d (%d bytes) to the remote tier as %s",
                topic,
                partition,
                meta.base_offset,
                meta.end_offset,
                meta.size_bytes,
                segment_id,
            )

    def _remote_retention(self, tier: Tier) -> None:
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


def _copied_up_to(remote: list[RemoteSegmentMetadata], leader_epoch: int | None) -> int:
    """The "copied up to" offset local retention may rely on (-1: nothing).

    The leader relies on every valid segment (it continues after what it listed, so they
    stay valid). A follower relies only on segments copied at the current leader epoch or
    followed by a later leader's copy above them: an older leader's late upload that the
    current leader has not seen yet can still turn stale (riverbed.tiered.rsm), and the
    follower must not have dropped its local copy of that range then."""
    if leader_epoch is None:
        return max((m.end_offset for m in remote), default=-1)
    out = -1
    later_epoch = -1  # highest copy epoch among segments with a larger base offset
    for meta in sorted(remote, key=lambda m: m.base_offset, reverse=True):
        if meta.copy_epoch >= leader_epoch or later_epoch > meta.copy_epoch:
            out = max(out, meta.end_offset)
        later_epoch = max(later_epoch, meta.copy_epoch)
    return out


def _complete_snapshot(plog: PartitionLog, offset: int) -> bytes | None:
    """Every live producer as of ``offset`` (None: the log keeps no producer state)."""
    state = producer_state_of(plog)
    return None if state is None else state.complete_snapshot_bytes(offset)


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
