"""ProducerStateManager: one partition's producer state beside its log, and its snapshots.

The partition log calls it (``riverbed.storage.producer_hook``) under the log's lock; it
keeps a :class:`~riverbed.producer.state.ProducerStateTable` and the snapshot files
``<offset, 20 digits>.snapshot`` (:mod:`riverbed.producer.snapshot`) in the partition dir:

- written at every segment roll (named by the new segment's base offset) and at a clean
  close (named by the log end offset, fsynced with the dir); written to ``.tmp`` and
  renamed, so a crash never leaves a torn file under a snapshot name (``.tmp`` files are
  garbage the log removes at load);
- on attach (start-up) and after a truncation: snapshots past the log end are deleted,
  the newest readable one at or below it is loaded (a corrupt one is deleted and the next
  older tried, as Kafka does), and the batch headers after it are replayed from the log;
- deleted with their segments: when retention deletes segments, every snapshot below the
  first remaining segment goes;
- ``remove_expired(now_ms)``: producers idle for ``producer.id.expiration.ms`` are
  forgotten (the broker calls it every ``producer.id.expiration.check.interval.ms``).

Thread safety: changes come under the log's lock; ``describe`` and ``remove_expired`` may
run on another thread, so the table is guarded by this manager's own lock too (taken
after the log's, never before).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from riverbed.producer.snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    snapshot_name,
    snapshot_offset,
)
from riverbed.producer.state import ProducerEntry, ProducerStateTable
from riverbed.protocol.records import BatchHeader
from riverbed.storage.producer_hook import DuplicateBatch

__all__ = ["PRODUCER_ID_EXPIRATION_MS_DEFAULT", "ProducerStateConfig", "ProducerStateManager"]

log = logging.getLogger(__name__)

#: Kafka's producer.id.expiration.ms default (one day).
PRODUCER_ID_EXPIRATION_MS_DEFAULT: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT


class ProducerStateManager:
    """Implements :class:`riverbed.storage.producer_hook.ProducerStateHook`."""

    def __init__(
        self,
        directory: Path,
        now_ms: Callable[[], int],
        config: ProducerStateConfig = ProducerStateConfig(),
        name: str = "",
    ) -> None:
        self.directory = Path(directory)
        self.now_ms = now_ms
        self.config = config
        self.name = name or self.directory.name
        self.table = ProducerStateTable()
        self._lock = threading.Lock()
        self._log: Any = None
        self._last_snapshot_offset = -1

    # ---- attaching to a log (load + replay) ----------------------------------------------

    def attach(self, plog: Any) -> None:
        """Rebuild the state for ``plog`` and become its producer state hook."""
        with plog._lock:
            self._log = plog
            self._reload(plog.log_start_offset, plog.log_end_offset)
            plog.producer_state = self

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.directory):
                off = snapshot_offset(entry.name)
                if off is not None:
                    offsets.append(off)
        return sorted(offsets)

    def _path(self, offset: int) -> Path:
        return self.directory / snapshot_name(offset)

    def _delete_snapshot(self, offset: int) -> None:
        self._path(offset).unlink(missing_ok=True)

    def _reload(self, log_start: int, log_end: int) -> None:
        offsets = self.snapshot_offsets()
        for off in offsets:
            if off > log_end:
                self._delete_snapshot(off)
        candidates = [o for o in offsets if o <= log_end]
        now = self.now_ms()
        expiration = self.config.producer_id_expiration_ms
        start = log_start  # no snapshot: replay the whole log
        entries: list[ProducerEntry] = []
        self._last_snapshot_offset = -1
        while candidates:
            off = candidates.pop()
            try:
                loaded = decode_snapshot(self._path(off).read_bytes())
            except (CorruptSnapshotError, OSError) as e:
                log.warning("%s: deleting unreadable producer snapshot %s: %s", self.name, off, e)
                self._delete_snapshot(off)
                continue
            entries = [
                e
                for e in loaded
                if e.current_txn_first_offset >= 0 or now - e.last_timestamp < expiration
            ]
            start = off
            self._last_snapshot_offset = off
            break
        with self._lock:
            self.table.load(entries, start)
            replayed = 0
            for h in self._headers_from(start):
                self.table.apply(h)
                replayed += 1
            self.table.map_end_offset = log_end
        if replayed or entries:
            log.info(
                "%s: producer state of %d producers from snapshot %d + %d batches",
                self.name,
                len(self.table),
                self._last_snapshot_offset,
                replayed,
            )

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        if self._log is None:
            return iter(())
        it: Iterator[BatchHeader] = self._log.batch_headers_from(offset)
        return it

    # ---- the hook ----------------------------------------------------------------------------

    def check_leader_append(self, headers: Sequence[BatchHeader]) -> DuplicateBatch | None:
        return self.table.check(headers)

    def on_batch(self, header: BatchHeader) -> None:
        with self._lock:
            self.table.apply(header)

    def on_roll(self, base_offset: int) -> None:
        self.write_snapshot(base_offset, sync=False)

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None:
        self._reload(log_start_offset, log_end_offset)

    def on_truncate_fully(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            self._delete_snapshot(off)
        self._last_snapshot_offset = -1
        with self._lock:
            self.table.clear(offset)

    def on_segments_deleted(self, first_segment_base: int) -> None:
        for off in self.snapshot_offsets():
            if off < first_segment_base:
                self._delete_snapshot(off)

    def on_close(self, log_end_offset: int) -> None:
        self.write_snapshot(log_end_offset, sync=True)

    # ---- snapshots ------------------------------------------------------------------------

    def write_snapshot(self, offset: int, *, sync: bool) -> bool:
        """Write the state as of ``offset`` (nothing when a snapshot there exists)."""
        if offset <= self._last_snapshot_offset and self._path(offset).exists():
            return False
        with self._lock:
            data = encode_snapshot(self.table.producers.values())
        path = self._path(offset)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if sync:
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._last_snapshot_offset = max(self._last_snapshot_offset, offset)
        return True

    # ---- expiry and views -----------------------------------------------------------------

    def remove_expired(self, now_ms: int | None = None) -> int:
        now = self.now_ms() if now_ms is None else now_ms
        with self._lock:
            gone = self.table.expire(now, self.config.producer_id_expiration_ms)
        return len(gone)

    def describe(self) -> list[ProducerEntry]:
        """Copies of the active producers' entries (for DescribeProducers)."""
        with self._lock:
            return [replace(e, batches=list(e.batches)) for e in self.table.producers.values()]

    def __len__(self) -> int:
        return len(self.table)
