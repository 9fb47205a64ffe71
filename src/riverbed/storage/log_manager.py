"""LogManager: every partition log of a node, across its ``log.dirs``.

Layout of each log dir (Kafka's)::

    <log dir>/
      meta.properties                     written by `riverbed storage format`
      .kafka_cleanshutdown                present only between a clean shutdown and the
                                          next start: {"version":0,"brokerEpoch":N}, the
                                          broker epoch the node had then (KIP-966)
      recovery-point-offset-checkpoint    offset checkpoints (riverbed.storage.checkpoints)
      log-start-offset-checkpoint
      replication-offset-checkpoint       high watermarks
      <topic>-<partition>/                a partition log (riverbed.storage.log)
      <topic>-<partition>.<id>-delete/    a deleted partition, removed after
                                          file.delete.delay.ms (at once on start-up)
      <topic>-<partition>.<id>-future/    a replica moving here from another log dir
                                          (riverbed.storage.log_moves)
      __cluster_metadata-0/               the metadata log: not managed here

Start-up loads every partition dir of every log dir in parallel (a thread pool of
``recovery_threads_per_dir`` per dir, progress logged); a dir without the clean-shutdown
marker is recovered from each log's recovery point (and says so only when it holds
partition logs: a brand-new dir has nothing to recover). Scheduled work is driven by the
caller's timers through methods taking ``now_ms``: :meth:`LogManager.flush_due` (fsyncs
in a bounded pool of ``flush_threads_max`` threads, plus delayed file deletes and periodic
checkpoints) and :meth:`LogManager.schedule_retention` (retention in the same pool: its
index loads and deletes never run on the caller's event loop).

Disk failures: each log dir has a :class:`~riverbed.storage.log_dir.LogDir`. The first
failed write or fsync in a dir takes it offline (its logs answer KAFKA_STORAGE_ERROR, no
recovery point or checkpoint moves, nothing is retried); new partitions go to the other
dirs; the node halts (``halt``, Kafka's fault handler) when no dir is left online or the
failed dir holds the metadata log. A restart recovers the dir's logs.

:meth:`LogManager.get_or_create` picks the dir and reserves the partition under the
manager's lock but builds the log (file work) outside it, so creations overlap each other
and never block flushes, retention or lookups of other partitions; a second caller for
the same partition waits for the first. A creation that fails on the disk takes its dir
offline (Kafka's ``getOrCreateLog``). ``delete`` and ``shutdown`` wait for creations in
progress.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Final

from riverbed.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    fsync_dir,
    read_offset_checkpoint,
    write_atomic,
)
from riverbed.storage.clock import Clock
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import LogDirError, StorageError
from riverbed.storage.file_io import OS_FILE_IO, FileIO
from riverbed.storage.layout import METADATA_PARTITION_DIR, partition_dir_name
from riverbed.storage.log import PartitionLog, RetentionHook
from riverbed.storage.log_cleaner import CleanerConfig, LogCleaner
from riverbed.storage.log_dir import LogDir
from riverbed.storage.log_housekeeping import LogHousekeeping
from riverbed.storage.log_moves import LogMoves, ReplicaMove, parse_future_dir

__all__ = ["CLEAN_SHUTDOWN_FILE", "LogManager", "parse_partition_dir"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX: Final = "-delete"
# Directories in a log dir that are not partition logs managed here: METADATA_PARTITION_DIR
_IGNORED_DIR_SUFFIXES: Final = ("-stray",)
# Kafka's defaults (log.flush.offset.checkpoint.interval.ms,
# log.flush.start.offset.checkpoint.interval.ms, replica.high.watermark.checkpoint...).
RECOVERY_POINT_CHECKPOINT_INTERVAL_MS: Final = 60_000
LOG_START_CHECKPOINT_INTERVAL_MS: Final = 60_000
HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS: Final = 5_000
FLUSH_THREADS_MAX: Final = 2
# Threads closing logs at shutdown (each mostly waits in fsync; see shutdown()).
SHUTDOWN_THREADS_MAX: Final = 8
RECOVERY_THREADS_PER_DIR: Final = 1


def _clean_shutdown_epoch(log_dirs: Sequence[Path]) -> int:
    """The broker epoch of the last clean shutdown (Kafka's
    ``readBrokerEpochFromCleanShutdownFiles``): -1 unless every log dir has a readable
    marker, all with the same epoch."""
    epochs = set()
    for d in log_dirs:
        try:
            epochs.add(int(json.loads((d / CLEAN_SHUTDOWN_FILE).read_text())["brokerEpoch"]))
        except (OSError, ValueError, KeyError, TypeError):
            return -1
    return epochs.pop() if len(epochs) == 1 else -1


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``("my-topic", 3)`` for ``my-topic-3``; None for anything else."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def _checked_log_dirs(log_dirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """``log.dirs`` resolved: at least one, none twice."""
    if not log_dirs:
        raise LogDirError("log.dirs is empty")
    resolved = [Path(d).resolve() for d in log_dirs]
    if len(set(resolved)) != len(resolved):
        raise LogDirError(f"duplicate entries in log.dirs: {log_dirs}")
    return resolved


class LogManager(LogMoves, LogHousekeeping):
    """Creates, loads, deletes, flushes, retains and moves the partition logs of a node."""

    def __init__(
        self,
        log_dirs: Sequence[str | os.PathLike[str]],
        clock: Clock,
        *,
        default_config: LogConfig | None = None,
        config_for: Callable[[str], LogConfig] | None = None,
        retention_hook: RetentionHook | None = None,
        flush_threads_max: int = FLUSH_THREADS_MAX,
        recovery_threads_per_dir: int = RECOVERY_THREADS_PER_DIR,
        recovery_point_checkpoint_interval_ms: int = RECOVERY_POINT_CHECKPOINT_INTERVAL_MS,
        log_start_checkpoint_interval_ms: int = LOG_START_CHECKPOINT_INTERVAL_MS,
        high_watermark_checkpoint_interval_ms: int = HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS,
        rng: random.Random | None = None,
        io: FileIO = OS_FILE_IO,
        halt: Callable[[str, BaseException | None], object] | None = None,
        metadata_log_dir: str | os.PathLike[str] | None = None,
        remote_log_enabled: bool = False,
        move_bytes_per_s: int | None = None,
        cleaner_config: CleanerConfig | None = None,
    ) -> None:
        """``move_bytes_per_s``: ``replica.alter.log.dirs.io.max.bytes.per.second`` (None:
        unlimited), the pace of replica moves between log dirs (``alter_log_dir``);
        ``remote_log_enabled``: the broker's ``remote.log.storage.system.enable`` (logs
        of topics with ``remote.storage.enable`` are then tiered); ``halt``: Kafka's fault handler (never returns), called when the last online
        log dir or the one holding the metadata log (``metadata_log_dir``) fails; ``io``:
        the file layer (a fault-injecting one in tests)."""
        assert flush_threads_max >= 1 and recovery_threads_per_dir >= 1
        self.log_dirs = _checked_log_dirs(log_dirs)
        self.clock = clock
        self._io = io
        self._halt = halt
        self._metadata_log_dir = (
            Path(metadata_log_dir).resolve() if metadata_log_dir is not None else None
        )
        self._dirs = {d: LogDir(d, self._dir_went_offline) for d in self.log_dirs}
        self.default_config = default_config or LogConfig()
        self._config_for = config_for
        self.retention_hook = retention_hook
        self.remote_log_enabled = remote_log_enabled
        # segment.jitter.ms draws of every log (random.Random is safe to share: each
        # draw is one call under the GIL); injected for deterministic tests
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.RLock()
        # partitions whose log is being built outside the lock (set when done)
        self._creating: dict[tuple[str, int], threading.Event] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}
        self._dir_counts: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)  # of _dir_of
        self._pool = ThreadPoolExecutor(flush_threads_max, thread_name_prefix="riverbed-flush")
        self._inflight: dict[tuple[str, int], Future[int]] = {}
        self._pending_dir_deletes: list[tuple[int, Path]] = []
        self._init_checkpoints(
            recovery_point_checkpoint_interval_ms,
            log_start_checkpoint_interval_ms,
            high_watermark_checkpoint_interval_ms,
        )
        self._retention_inflight: Future[int] | None = None
        self._expiry_inflight: Future[None] | None = None
        self._closed = False
        self._init_moves(move_bytes_per_s)
        #: PreviousBrokerEpoch of the next registration (-1: not shut down cleanly)
        self.previous_broker_epoch = -1
        self._load_all(recovery_threads_per_dir)
        #: Compaction of the logs whose cleanup.policy contains compact (log.cleaner.*).
        self.cleaner = self._new_cleaner(cleaner_config or CleanerConfig())

    def _new_cleaner(self, config: CleanerConfig) -> LogCleaner:
        return LogCleaner(
            config, self.all_logs, lambda key: self.log_dir_of(*key), self.log_dirs, self.clock
        )

    def _init_checkpoints(
        self, recovery_ms: int, log_start_ms: int, high_watermark_ms: int
    ) -> None:
        """The per-dir checkpoint files and how often each is written."""
        self._intervals = {
            RECOVERY_POINT_CHECKPOINT: recovery_ms,
            LOG_START_OFFSET_CHECKPOINT: log_start_ms,
            REPLICATION_OFFSET_CHECKPOINT: high_watermark_ms,
        }
        now = self.clock.now_ms()
        self._next_checkpoint = {name: now + ms for name, ms in self._intervals.items()}
        self._checkpoint_inflight: dict[str, Future[None]] = {}

    def _init_moves(self, move_bytes_per_s: int | None) -> None:
        """Replica moves between log dirs (AlterReplicaLogDirs; ``log_moves``)."""
        self._moves: dict[tuple[str, int], ReplicaMove] = {}
        self._preferred_dirs: dict[tuple[str, int], Path] = {}
        self.log_attach = None
        self.on_log_replaced = None
        self.move_bytes_per_s = move_bytes_per_s
        self._found_futures: list[tuple[Path, tuple[str, int], Path]] = []

    # ---- start-up ------------------------------------------------------------------------

    def _read_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(path)
        except CheckpointError as e:
            log.warning("ignoring unreadable checkpoint (logs are recovered instead): %s", e)
            return {}

    def _load_all(self, threads_per_dir: int) -> None:
        started = self.clock.now_ms()
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise LogDirError(f"cannot create log dir {d}: {e}") from e
        pools = [
            ThreadPoolExecutor(threads_per_dir, thread_name_prefix=f"riverbed-load-{i}")
            for i in range(len(self.log_dirs))
        ]
        try:
            jobs: list[tuple[Path, tuple[str, int], Future[PartitionLog]]] = []
            for d, pool in zip(self.log_dirs, pools, strict=True):
                jobs += self._submit_dir_loads(d, pool)
            total = len(jobs)
            for n, (d, key, fut) in enumerate(jobs, start=1):
                try:
                    plog = fut.result()
                except (OSError, StorageError) as e:
                    raise LogDirError(
                        f"cannot load partition log {d / f'{key[0]}-{key[1]}'}: {e}"
                    ) from e
                if key in self._logs:
                    raise LogDirError(
                        f"partition {key[0]}-{key[1]} is in both {self._dir_of[key]} and {d}"
                    )
                self._logs[key] = plog
                self._assign_dir(key, d)
                if n == total or n % 100 == 0:
                    log.info("loaded %d/%d partition logs", n, total)
        finally:
            for pool in pools:
                pool.shutdown(wait=True)
        self._resolve_future_dirs(self._found_futures)
        self._found_futures = []
        self.previous_broker_epoch = _clean_shutdown_epoch(self.log_dirs)
        for d in self.log_dirs:
            (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        log.info(
            "loaded %d partition logs from %d log dirs in %.0f ms",
            len(self._logs),
            len(self.log_dirs),
            self.clock.now_ms() - started,
        )

    def _submit_dir_loads(
        self, d: Path, pool: ThreadPoolExecutor
    ) -> list[tuple[Path, tuple[str, int], Future[PartitionLog]]]:
        clean = (d / CLEAN_SHUTDOWN_FILE).exists()
        recovery = self._read_checkpoint(d / RECOVERY_POINT_CHECKPOINT)
        starts = self._read_checkpoint(d / LOG_START_OFFSET_CHECKPOINT)
        hws = self._read_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT)
        jobs = []
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if not entry.is_dir() or entry.name == METADATA_PARTITION_DIR:
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing deleted partition dir %s", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            future = parse_future_dir(entry.name)
            if future is not None:
                self._found_futures.append((d, future, Path(entry.path)))
                continue
            if entry.name.endswith(_IGNORED_DIR_SUFFIXES):
                continue
            key = parse_partition_dir(entry.name)
            if key is None:
                log.warning("ignoring unexpected directory %s in log dir", entry.path)
                continue
            # without a recovery point checkpoint, recover each log from its start
            fut = pool.submit(
                self._open_log,
                d,
                key,
                self._config(key[0]),
                recovery_point=recovery.get(key, 0),
                log_start_offset=starts.get(key, 0),
                high_watermark=hws.get(key, 0),
                clean_shutdown=clean and key in recovery,
            )
            jobs.append((d, key, fut))
        if jobs and not clean:
            log.info("log dir %s was not shut down cleanly: recovering its %d logs", d, len(jobs))
        return jobs

    def _config(self, topic: str) -> LogConfig:
        return self._config_for(topic) if self._config_for is not None else self.default_config

    def _open_log(
        self,
        d: Path,
        key: tuple[str, int],
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean_shutdown: bool = True,
        topic_id: str | None = None,
    ) -> PartitionLog:
        topic, partition = key
        return PartitionLog(
            d / partition_dir_name(topic, partition),
            topic,
            partition,
            config,
            self.clock,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            high_watermark=high_watermark,
            clean_shutdown=clean_shutdown,
            topic_id=topic_id,
            retention_hook=self.retention_hook,
            rng=self._rng,
            io=self._io,
            log_dir=self._dirs[d],
            remote_log_enabled=self.remote_log_enabled,
        )

    # ---- partitions ----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[tuple[str, int], PartitionLog]:
        with self._lock:
            return dict(self._logs)

    def get_or_create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        *,
        topic_id: str | None = None,
    ) -> PartitionLog:
        """The log of ``topic-partition``, created in the least loaded log dir if new.

        An existing log takes ``config`` and ``topic_id`` (when given) as its new config
        and topic id (written with the next flush). The new log is
        built outside the manager's lock (see the module docstring).
        """
        if not topic or "/" in topic or topic in (".", "..") or partition < 0:
            raise LogDirError(f"invalid partition {topic!r}-{partition}")
        key = (topic, partition)
        while True:
            with self._lock:
                self._check_open()
                existing = self._logs.get(key)
                if existing is not None:
                    if config is not None and config != existing.config:
                        existing.update_config(config)
                    if topic_id is not None and topic_id != existing.topic_id:
                        # e.g. lost with partition.metadata in a crash before the first flush
                        existing.assign_topic_id(topic_id)
                    return existing
                pending = self._creating.get(key)
                if pending is None:
                    d = self.preferred_dir(key) or self._least_loaded_dir()
                    self._assign_dir(key, d)  # reserves the dir for the balance of others
                    done = self._creating[key] = threading.Event()
                    break
            pending.wait()  # another caller is creating it: then take (or retry) theirs
        try:
            plog = self._open_log(
                d, key, config or self._config(topic), clean_shutdown=True, topic_id=topic_id
            )
        except BaseException as e:
            with self._lock:
                self._unassign_dir(key)
                del self._creating[key]
            done.set()
            if isinstance(e, OSError):
                # a disk that cannot take a new log (ENOSPC, EIO) fails its dir, as any
                # write does (Kafka's getOrCreateLog: maybeAddOfflineLogDir)
                raise self._dirs[d].fail(f"create log {topic}-{partition}", e) from e
            raise
        with self._lock:
            self._logs[key] = plog
            del self._creating[key]
        done.set()
        log.info("created log for partition %s-%d in %s", topic, partition, d)
        return plog

    def _least_loaded_dir(self) -> Path:
        online = [d for d in self.log_dirs if not self._dirs[d].offline]
        if not online:
            raise LogDirError(f"every log dir is offline: {self.offline_dirs()}")
        return min(online, key=lambda p: self._dir_counts[p])

    # ---- disk failures -------------------------------------------------------------------

    def _dir_went_offline(self, log_dir: LogDir, cause: OSError) -> None:
        # Called in the failing thread, maybe holding a log's lock: reads LogDir states
        # only (no manager or log lock). The logs' fds are closed by the next flush_due.
        online = [d for d in self.log_dirs if not self._dirs[d].offline]
        if log_dir.path == self._metadata_log_dir:
            why = f"the metadata log dir {log_dir.path} failed ({log_dir.failure})"
        elif not online:
            why = f"the last online log dir {log_dir.path} failed ({log_dir.failure})"
        else:
            log.error(
                "log dir %s is offline: its partitions answer KAFKA_STORAGE_ERROR until "
                "a restart with the disk healthy again; still online: %s",
                log_dir.path,
                ", ".join(map(str, online)),
            )
            return
        if self._halt is not None:
            self._halt(why, cause)
        log.error("%s (no fault handler: every log of the dir refuses requests)", why)

    def offline_dirs(self) -> dict[Path, str]:
        """The offline log dirs and the failure that took each one offline."""
        return {d: ld.failure for d, ld in self._dirs.items() if ld.failure is not None}

    def _close_offline_logs(self) -> None:
        """Close the fds of logs in offline dirs (nothing is written to a failed disk)."""
        with self._lock:
            doomed = [
                plog
                for key, plog in self._logs.items()
                if self._dirs[self._dir_of[key]].offline and not plog.closed
            ]
        for plog in doomed:
            plog.abandon()

    def _assign_dir(self, key: tuple[str, int], d: Path) -> None:
        assert key not in self._dir_of, key
        self._dir_of[key] = d
        self._dir_counts[d] += 1

    def _unassign_dir(self, key: tuple[str, int]) -> Path | None:
        d = self._dir_of.pop(key, None)
        if d is not None:
            self._dir_counts[d] -= 1
        return d

    def _wait_for_creation(self, key: tuple[str, int] | None = None) -> None:
        """Wait until the creation of ``key`` (None: of every partition) has finished."""
        with self._lock:
            events = list(self._creating.values()) if key is None else [self._creating.get(key)]
        for event in events:
            if event is not None:
                event.wait()

    def delete(self, topic: str, partition: int) -> bool:
        """Close the log, rename its dir to ``...-delete``, remove it after the delay."""
        key = (topic, partition)
        self.cleaner.forget(key)
        self._wait_for_creation(key)
        self._cancel_move_of(key)  # its future dir goes before the current one
        with self._lock:
            plog = self._logs.pop(key, None)
            d = self._unassign_dir(key)
            if plog is None or d is None:
                return False
            fut = self._inflight.pop(key, None)
        if fut is not None:
            fut.exception()  # wait (a failure was logged)
        plog.close(flush=False)
        if self._dirs[d].offline:
            # nothing is renamed on a failed disk: the next start deletes the orphan
            log.info("deleted log %s-%d from offline log dir %s", topic, partition, d)
            return True
        target = d / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            self._io.replace(plog.directory, target)
        except OSError as e:
            raise self._dirs[d].fail(f"delete {plog.directory}", e) from e
        due = self.clock.now_ms() + plog.config.file_delete_delay_ms
        with self._lock:
            self._pending_dir_deletes.append((due, target))
        log.info(
            "deleted log %s-%d (files removed after %d ms)",
            topic,
            partition,
            plog.config.file_delete_delay_ms,
        )
        return True

    # ---- scheduled work ------------------------------------------------------------------

    # ---- reporting -----------------------------------------------------------------------

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def partition_sizes(self) -> dict[Path, dict[tuple[str, int], int]]:
        """Bytes per partition per log dir (DescribeLogDirs)."""
        out: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
        with self._lock:
            items = list(self._logs.items())
        for key, plog in items:
            out[self._dir_of[key]][key] = plog.size_bytes
        return out

    def dir_sizes(self) -> dict[Path, int]:
        return {d: sum(sizes.values()) for d, sizes in self.partition_sizes().items()}

    # ---- shutdown ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogDirError("log manager is shut down")

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker (with
        ``broker_epoch``, the node's registration: its next registration sends it as
        PreviousBrokerEpoch, telling the controller nothing unflushed was lost)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            inflight = list(self._inflight.values())
        self.cleaner.shutdown()  # a cleaning in progress stops before its next read/write
        self._wait_for_creation()  # no creation starts once closed; finish the running ones
        for fut in inflight:
            fut.exception()  # wait; failures were logged by the callback
        self._pool.shutdown(wait=True)
        self._close_moves()
        # closes are mostly fsyncs (and first partition.metadata writes): they overlap in
        # a pool of their own so the file system can commit many in one journal flush
        close_pool = ThreadPoolExecutor(SHUTDOWN_THREADS_MAX, thread_name_prefix="riverbed-close")
        with self._lock:
            dir_of = dict(self._dir_of)
        closes = [
            (dir_of[key], plog, close_pool.submit(plog.close, flush=True, sync_parent_dir=False))
            for key, plog in self.all_logs().items()
        ]
        close_pool.shutdown(wait=True)
        failed: set[Path] = set()
        for d, plog, closed in closes:
            exc = closed.exception()
            if exc is None:
                continue
            if not isinstance(exc, (OSError, LogDirError)):
                raise exc
            failed.add(d)
            log.error("closing %s failed: %s", plog.name, exc)
        for d in self.log_dirs:
            if self._dirs[d].offline:
                continue
            try:
                fsync_dir(d, self._io)  # once per log dir instead of once per new partition dir
            except OSError as e:
                failed.add(d)
                self._dirs[d].fail(f"fsync {d}", e)
        self.write_checkpoints()
        # a dir that failed is recovered from its recovery points at the next start
        for d in self.log_dirs:
            if d in failed or self._dirs[d].offline:
                continue
            try:
                marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch})
                write_atomic(d / CLEAN_SHUTDOWN_FILE, marker, io=self._io)
            except OSError as e:
                log.error("cannot write the clean-shutdown marker in %s: %s", d, e)
        log.info("log manager shut down (%d logs)", len(self._logs))
