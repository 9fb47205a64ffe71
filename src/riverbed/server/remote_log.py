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
  after each), and applies remote retention (moving the log start offset)
  (:mod:`riverbed.server.remote_copies`, the manager's copy half);
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
from riverbed.server.backoff import ExponentialBackoff
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.metrics.remote import RemoteLogStats
from riverbed.server.remote_copies import RemoteCopies
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
from riverbed.tiered.remote_indexes import INDEX_FILE_BYTES_MAX, INDEX_FILE_ROLL_MS
from riverbed.tiered.rlm import (
    RlmScheduler,
)
from riverbed.tiered.rsm import (
    FsspecRemoteStorageManager,
    RemoteStorageError,
)

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


class RemoteLogManager(RemoteCopies, RemoteReads):
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
