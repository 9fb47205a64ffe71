"""Moving a partition's replica between log dirs (Kafka's JBOD AlterReplicaLogDirs).

A move of ``<topic>-<p>`` from log dir S to log dir D (mixed into the LogManager):

1. the *future log* ``D/<topic>-<p>.<uuid hex>-future/`` is created (an ordinary partition
   log dir under another name) starting at the current log's local log start offset;
2. it catches up by copying the current log's batches unchanged (read as file ranges,
   appended as a follower appends: offsets, epochs and timestamps kept), at most
   ``MOVE_STEP_BYTES_MAX`` per step, each step a job in the manager's bounded pool, so
   flushes and retention interleave and nothing runs on the caller's event loop; a
   truncation of the current log (or retention past the copy) restarts the copy. With
   Kafka's ``replica.alter.log.dirs.io.max.bytes.per.second`` the steps are paced by the
   caller's timer (``flush_due``): each copies what the rate allows since the last one;
3. once a step finds it caught up, the swap runs under the current log's lock (appends
   wait): the last batches are copied, the future log is closed (fsynced), the current
   one is closed, ``S/<topic>-<p>`` is renamed to ``S/<topic>-<p>.<uuid>-delete`` (dir
   fsynced), then the future dir to ``D/<topic>-<p>`` (dir fsynced), and the log reopens
   there; the old files are removed after ``file.delete.delay.ms``.

Crash safety: the current dir is renamed away only after the future log is complete and
durable, and a deletion removes the future dir before the current one. So at start-up a
``-future`` dir whose partition has a current log anywhere is an unfinished copy (removed:
the old log stands), and one without a current log is a completed move interrupted between
the two renames (renamed into place and recovered: the new log stands).

Errors (Kafka's ``ReplicaManager.alterReplicaLogDirs``): a path that is not one of
``log.dirs`` is LOG_DIR_NOT_FOUND; an offline target (or any offline dir: no future log is
created then) KAFKA_STORAGE_ERROR; a partition without a local replica
REPLICA_NOT_AVAILABLE, and the dir is remembered as where its log is created later.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from riverbed.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
)
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import (
    InvalidRecordError,
    LogDirError,
    LogDirNotFoundError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
    StorageError,
)
from riverbed.storage.layout import partition_dir_name
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_manager_state import Key, LogManagerState

__all__ = ["FUTURE_DIR_SUFFIX", "MOVE_STEP_BYTES_MAX", "LogMoves", "ReplicaMove"]

log = logging.getLogger("riverbed.storage.log_manager")

FUTURE_DIR_SUFFIX: Final = "-future"
#: Bytes one copy step reads from the current log before yielding the pool thread.
MOVE_STEP_BYTES_MAX: Final = 8 * 1024 * 1024


def future_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<p>.<uuid hex>-future`` (Kafka's ``logFutureDirName``)."""
    return f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_dir(name: str) -> Key | None:
    """``("t", 3)`` for ``t-3.<hex>-future``; None for anything else."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    base, dot, unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    topic, dash, part = base.rpartition("-")
    if not dot or not unique or not dash or not topic or not part.isdigit():
        return None
    return topic, int(part)


@dataclass(eq=False)
class ReplicaMove:
    """One partition on its way to ``dest``; ``lock`` is held by the step running."""

    key: Key
    dest: Path
    future_dir: Path
    lock: threading.Lock = field(default_factory=threading.Lock)
    future: PartitionLog | None = None
    cancelled: bool = False
    truncations: int = -1  # the current log's count when the copy (re)started
    in_flight: bool = False  # a step is queued or running
    last_step_ms: int = -1  # when the last throttled step was scheduled


class LogMoves(LogManagerState):
    """Replica moves between log dirs (mixed into LogManager; see the module docstring)."""

    clock: Any
    _moves: dict[Key, ReplicaMove]
    _preferred_dirs: dict[Key, Path]
    #: Attaches what the layers above keep beside a log (producer state) to a log this
    #: manager opens by itself: a future log, or the moved log after the swap.
    log_attach: Callable[[PartitionLog], None] | None
    #: Told (key, new log) after a swap, under the old log's lock (its appends wait).
    on_log_replaced: Callable[[Key, PartitionLog], None] | None
    #: Kafka's replica.alter.log.dirs.io.max.bytes.per.second (None: unlimited).
    move_bytes_per_s: int | None

    _open_log: Callable[..., PartitionLog]
    _assign_dir: Callable[[Key, Path], None]
    _unassign_dir: Callable[[Key], Path | None]
    _write_checkpoint: Callable[[str], None]
    _config: Callable[[str], LogConfig]

    # ---- the request -----------------------------------------------------------------------

    def alter_log_dir(self, topic: str, partition: int, path: str) -> None:
        """Move ``topic-partition`` to the log dir ``path`` (returns once the move is
        scheduled; a no-op when it is there or already going there). Raises
        LogDirNotFoundError, LogDirError (KAFKA_STORAGE_ERROR), ReplicaNotAvailableError."""
        key = (topic, partition)
        dest = Path(path).resolve() if path else None
        if dest is None or dest not in self._dirs:
            raise LogDirNotFoundError(f"{path!r} is not one of log.dirs")
        if self._dirs[dest].offline:
            raise LogDirError(f"log dir {dest} is offline")
        with self._lock:
            current = self._dir_of.get(key)
            if key not in self._logs or current is None:
                self._preferred_dirs[key] = dest  # its log is created there later
                raise ReplicaNotAvailableError(f"no replica of {topic}-{partition} here")
            if self._dirs[current].offline:
                raise LogDirError(f"log dir {current} of {topic}-{partition} is offline")
            offline = [str(d) for d, ld in self._dirs.items() if ld.offline]
            if offline:
                raise LogDirError(f"no replica moves while log dirs are offline: {offline}")
            ongoing = self._moves.get(key)
            if ongoing is not None and ongoing.dest == dest:
                return
        if ongoing is not None:
            self._cancel_move(ongoing)
        if current == dest:
            return
        move = ReplicaMove(key, dest, dest / future_dir_name(topic, partition))
        with self._lock:
            self._check_open()
            if key in self._moves or key not in self._logs:
                return  # a concurrent request won, or the partition went away
            self._moves[key] = move
        log.info("moving %s-%d from %s to %s", topic, partition, current, dest)
        if self.move_bytes_per_s is None:
            self._schedule_step(move)
        else:
            move.last_step_ms = self.clock.now_ms()
            self._schedule_step(move, min(MOVE_STEP_BYTES_MAX, self.move_bytes_per_s))

    def future_logs(self) -> dict[Key, tuple[Path, int, int]]:
        """Moving partitions -> (target dir, future log bytes, offsets behind the current)."""
        with self._lock:
            moves = list(self._moves.values())
        out = {}
        for move in moves:
            future, current = move.future, self._logs.get(move.key)
            if future is None or current is None or future.closed:
                size, lag = 0, current.log_end_offset if current is not None else 0
            else:
                size = future.size_bytes
                lag = max(0, current.log_end_offset - future.log_end_offset)
            out[move.key] = (move.dest, size, lag)
        return out

    def preferred_dir(self, key: Key) -> Path | None:
        """Where AlterReplicaLogDirs asked a not-yet-hosted partition to be created."""
        d = self._preferred_dirs.pop(key, None)
        return d if d is not None and not self._dirs[d].offline else None

    # ---- the copy ----------------------------------------------------------------------------

    def _schedule_step(self, move: ReplicaMove, budget: int | None = None) -> None:
        """Queue ``move``'s next step, copying at most ``budget`` bytes (None: a full step)."""
        with self._lock:
            if self._closed or move.cancelled or move.in_flight:
                return
            move.in_flight = True
            self._pool.submit(self._move_step, move, budget)

    def _schedule_throttled_moves(self, now_ms: int) -> None:
        """With ``replica.alter.log.dirs.io.max.bytes.per.second``: each waiting move copies
        what the rate allows since its last step (the caller's timer drives this)."""
        rate = self.move_bytes_per_s
        if rate is None:
            return
        with self._lock:
            moves = [m for m in self._moves.values() if not m.in_flight]
        for move in moves:
            elapsed = now_ms - move.last_step_ms if move.last_step_ms >= 0 else 1000
            budget = min(MOVE_STEP_BYTES_MAX, rate * max(0, elapsed) // 1000)
            if budget > 0:
                move.last_step_ms = now_ms
                self._schedule_step(move, budget)

    def _move_step(self, move: ReplicaMove, budget: int | None = None) -> None:
        """One pool job: copy up to ``budget`` bytes, or swap when caught up."""
        if budget is None:
            budget = MOVE_STEP_BYTES_MAX
        again = False
        with move.lock:
            try:
                current = self._logs.get(move.key)
                if move.cancelled or self._closed or current is None:
                    return
                if move.future is None:
                    move.future = self._open_future(move, current)
                copied = self._copy(move, current, budget)
                if copied < budget:
                    # caught up: fsync what was copied now, so the swap (which holds the
                    # partition's lock) syncs only the last batches
                    move.future.flush()
                again = copied >= budget or not self._swap(move, current)
            except (OSError, StorageError) as e:
                log.error("moving %s-%d to %s failed: %s", *move.key, move.dest, e)
                self._drop_future(move)
                with self._lock:
                    if self._moves.get(move.key) is move:
                        del self._moves[move.key]
                return
            finally:
                move.in_flight = False
        if again and self.move_bytes_per_s is None:
            self._schedule_step(move)  # unthrottled: the next step at once

    def _open_future(self, move: ReplicaMove, current: PartitionLog) -> PartitionLog:
        topic, partition = move.key
        future = PartitionLog(
            move.future_dir,
            topic,
            partition,
            current.config,
            current.clock,
            log_start_offset=current.local_log_start_offset,
            clean_shutdown=True,
            topic_id=current.topic_id,
            io=self._io,
            log_dir=self._dirs[move.dest],
            remote_log_enabled=current.remote_log_enabled,
        )
        move.truncations = current.truncations
        if self.log_attach is not None:
            self.log_attach(future)  # producer state builds up as batches are copied
        return future

    def _copy(self, move: ReplicaMove, current: PartitionLog, max_bytes: int) -> int:
        """Append the current log's next batches to the future log; the bytes copied."""
        future = move.future
        assert future is not None
        start = current.local_log_start_offset
        if (
            current.truncations != move.truncations
            or future.log_end_offset > current.log_end_offset
            or future.log_end_offset < start
        ):
            # a truncation (or retention past the copy): the copy starts over
            move.truncations = current.truncations
            future.truncate_fully_and_start_at(start)
        copied = 0
        while copied < max_bytes and future.log_end_offset < current.log_end_offset:
            try:
                with current.read(future.log_end_offset, max_bytes - copied) as result:
                    data = result.read_bytes()
                if not data:
                    break
                future.append_as_follower(data)
            except (OffsetOutOfRangeError, InvalidRecordError):
                move.truncations = -1  # moved under the copy: start over next step
                return max_bytes
            copied += len(data)
        return copied

    def _swap(self, move: ReplicaMove, current: PartitionLog) -> bool:
        """Replace the current log with the caught-up future one (False: not yet)."""
        # appends to the partition wait for the swap
        swapped = current.replace_with(lambda: self._swap_locked(move, current))
        if not isinstance(swapped, tuple):
            return swapped
        src, leo = swapped
        key = move.key
        log.info("moved %s-%d from %s to %s (log end offset %d)", *key, src, move.dest, leo)
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
            self._write_checkpoint(name)
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT)
        return True

    def _swap_locked(self, move: ReplicaMove, current: PartitionLog) -> bool | tuple[Path, int]:
        """The swap with every change to ``current`` waiting: True when the move was
        cancelled, False when a truncation moved the log under the copy, else (source dir,
        log end offset) once the future log replaced it."""
        future = move.future
        assert future is not None
        key = move.key
        if move.cancelled:
            return True
        if current.closed:
            raise LogDirError(f"{current.name}: closed during the move")
        while future.log_end_offset < current.log_end_offset:
            self._copy(move, current, MOVE_STEP_BYTES_MAX)
            if current.truncations != move.truncations:
                return False
        leo, hw = current.log_end_offset, current.high_watermark
        start = current.log_start_offset
        future.close(flush=True)  # complete and durable before the current goes
        current.close(flush=False)  # its files are deleted
        with self._lock:
            src = self._dir_of[key]
        doomed = src / f"{partition_dir_name(*key)}.{uuid.uuid4().hex}-delete"
        final = move.dest / partition_dir_name(*key)
        try:
            self._io.replace(current.directory, doomed)
            fsync_dir(src, self._io)
        except OSError as e:
            raise self._dirs[src].fail(f"move {current.directory}", e) from e
        try:
            self._io.replace(move.future_dir, final)
            fsync_dir(move.dest, self._io)
        except OSError as e:
            raise self._dirs[move.dest].fail(f"move {move.future_dir}", e) from e
        moved = self._open_log(
            move.dest,
            key,
            current.config,
            recovery_point=leo,
            log_start_offset=start,
            high_watermark=hw,
            clean_shutdown=True,
            topic_id=current.topic_id,
        )
        if self.log_attach is not None:
            self.log_attach(moved)
        with self._lock:
            self._logs[key] = moved
            self._unassign_dir(key)
            self._assign_dir(key, move.dest)
            del self._moves[key]
            due = self.clock.now_ms() + current.config.file_delete_delay_ms
            self._pending_dir_deletes.append((due, doomed))
        if self.on_log_replaced is not None:
            self.on_log_replaced(key, moved)
        return src, leo

    # ---- cancelling and start-up -------------------------------------------------------------

    def _cancel_move(self, move: ReplicaMove) -> None:
        """Stop ``move`` and remove its future log (waits for a running step)."""
        move.cancelled = True
        with move.lock:
            self._drop_future(move)
            with self._lock:
                if self._moves.get(move.key) is move:
                    del self._moves[move.key]

    def _cancel_move_of(self, key: Key) -> None:
        with self._lock:
            move = self._moves.get(key)
        if move is not None:
            self._cancel_move(move)

    def _drop_future(self, move: ReplicaMove) -> None:
        future, move.future = move.future, None
        if future is not None:
            future.close(flush=False)
        if not move.future_dir.exists() or self._dirs[move.dest].offline:
            return  # an offline dir is left alone: start-up removes the copy
        doomed = move.future_dir.with_name(
            move.future_dir.name[: -len(FUTURE_DIR_SUFFIX)] + "-delete"
        )
        try:
            self._io.replace(move.future_dir, doomed)
        except OSError as e:
            self._dirs[move.dest].fail(f"remove {move.future_dir}", e)
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def _close_moves(self) -> None:
        """At shutdown (the pool has stopped): close future logs; start-up removes them."""
        with self._lock:
            moves = list(self._moves.values())
            self._moves.clear()
        for move in moves:
            move.cancelled = True
            if move.future is not None:
                move.future.close(flush=False)

    def _resolve_future_dirs(self, found: list[tuple[Path, Key, Path]]) -> None:
        """At start-up, after the current logs loaded (see the module docstring)."""
        for d, key, path in found:
            if key in self._logs:
                log.info("removing %s: an unfinished replica move (the old log stands)", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            final = d / partition_dir_name(*key)
            try:
                self._io.replace(path, final)
                fsync_dir(d, self._io)
            except OSError as e:
                raise LogDirError(f"cannot complete the move of {path}: {e}") from e
            self._logs[key] = self._open_log(d, key, self._config(key[0]), clean_shutdown=False)
            self._assign_dir(key, d)
            log.info("completed the move of %s-%d to %s (interrupted by a crash)", *key, d)

    def _check_open(self) -> None:
        raise NotImplementedError
