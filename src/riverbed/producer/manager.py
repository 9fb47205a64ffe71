"""ProducerStateManager: one partition's producer state beside its log, kept in the ledger.

The partition log calls it (``riverbed.storage.producer_hook``) under the log's lock. The
state (:class:`~riverbed.producer.state.ProducerStateTable`) keeps its entries in the
producer-id ledger (:mod:`riverbed.producer.ledger`: ``<offset>.snapshot`` files in Kafka's
format with ``.bloom`` filters beside them, and a mapped active ``.ledger`` file) behind a
bounded write-through cache (:mod:`riverbed.producer.cache`), so memory stays bounded
whatever the number of producer ids, and an id is on disk (in the mapped file) as soon
as its first batch is appended.

Snapshot files and the log:

- the ledger is flushed (a new ``<offset>.snapshot``, :meth:`PidLedger.flush`) at every
  segment roll (named by the new segment's base offset), at a clean close (the log end
  offset), every ``riverbed.producer.id.ledger.flush.interval.ms`` and when the active
  file's filter is full; a sealed file holds the entries updated since the previous
  flush, the newest file holding a producer id wins;
- at attach (start-up) and after a truncation: files past the log end are deleted, the
  ``.ledger`` files a crash left are recovered, and the batch headers after the newest
  sealed file are replayed from the log (after a truncation the active entries are
  dropped first, since they may reflect batches that are gone);
- deleted with their segments: sealed files below the first remaining segment go, after
  the newest entries of live (unexpired) producers they hold were carried into the file
  at that segment's base (:meth:`PidLedger.delete_before`);
- ``remove_expired(now_ms)``: producers idle for ``producer.id.expiration.ms`` read as
  absent (the broker calls it every ``producer.id.expiration.check.interval.ms``).

How long a producer lives (Kafka's ``ProducerStateManager``, checked against its code):
"We delete snapshot files prior to the logStartOffset but do not remove producer state
from the map" (``truncateAndReload``; ``onLogStartOffsetIncremented`` only drops
unreplicated transactions): since KIP-360 neither retention nor DeleteRecords removes a
producer, only expiry does (``producer.id.expiration.ms`` after its last batch's max
timestamp, no transaction open; the transactional id's ``transactional.id.expiration.ms``
ends it at the coordinator). Kafka's snapshots are complete, so a truncation to X brings
a producer back to its newest batch below X, deleted segments or not. riverbed follows
that rule, and keeps it where Kafka's in-memory state can be lost (its javadoc: an
unclean shutdown loses what no snapshot holds): the replay starts at the newest sealed
file even below the log start, and retention's carried entries are on disk. So after
any reopen or truncation each unexpired producer reads as its newest batch below the log
end, and an idempotent retry of that batch is a duplicate.

Complete snapshots: a clean close rewrites ``<log end>.snapshot`` as a complete file
(every live producer; the flush files are deltas), so Kafka's own loader, which reads
only the newest snapshot, sees every producer after a clean shutdown (after a crash the
newest is a delta: a producer missing there is "unknown" to Kafka, accepted since
KIP-360, so going back then costs duplicate detection of in-flight retries, never a
refused producer). ``write_complete_snapshot(out, up_to_offset)`` (and
``complete_snapshot_bytes`` / ``save_complete_snapshot``) produce a complete snapshot as
of any offset between the log start and the log end, e.g. for the tiered copier.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Final, Protocol, TypeVar

from riverbed.producer.cache import PRODUCER_ID_CACHE_MAX_ENTRIES_DEFAULT, LedgerStore
from riverbed.producer.complete import iter_fd_fields, merge_newest, write_snapshot
from riverbed.producer.ledger import (
    Fields,
    LedgerConfig,
    LedgerStats,
    PendingFlush,
    PidLedger,
    fsync_dir,
)
from riverbed.producer.snapshot import (
    entry_fields,
    iter_snapshot,
    snapshot_name,
    snapshot_offset,
)
from riverbed.producer.state import ProducerEntry, ProducerStateTable, is_expired
from riverbed.protocol.records import BatchHeader
from riverbed.storage.producer_hook import DuplicateBatch, ProducerStateHook, TxnMarker
from riverbed.storage.txn_index import AbortedTxn

__all__ = ["PRODUCER_ID_EXPIRATION_MS_DEFAULT", "ProducerStateConfig", "ProducerStateManager"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Kafka's producer.id.expiration.ms default (one day).
PRODUCER_ID_EXPIRATION_MS_DEFAULT: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT
    cache_max_entries: int = PRODUCER_ID_CACHE_MAX_ENTRIES_DEFAULT
    ledger: LedgerConfig = field(default_factory=LedgerConfig)


class _Based(Protocol):
    @property
    def base_offset(self) -> int: ...


class ProducerLog(Protocol):
    """What the producer state reads of its partition log (`PartitionLog`). It never takes
    the log's lock: changes that must be atomic with the log's appends, truncations and
    deletions go through ``attach_producer_state`` / ``update_producer_state``."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def segments(self) -> Sequence[_Based]: ...

    def batch_headers_from(self, offset: int) -> Iterator[BatchHeader]: ...

    def attach_producer_state(
        self, hook: ProducerStateHook, rebuild: Callable[[int, int], None]
    ) -> None: ...

    def update_producer_state(self, change: Callable[[], T]) -> T: ...

    def stale_txn_index_base(self) -> int | None: ...

    def txn_batches_from(self, offset: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]: ...

    def install_txn_index_entries(self, entries: Iterable[AbortedTxn]) -> int: ...


class ProducerStateManager:
    """Implements :class:`riverbed.storage.producer_hook.ProducerStateHook`."""

    def __init__(
        self,
        directory: Path,
        now_ms: Callable[[], int],
        config: ProducerStateConfig = ProducerStateConfig(),
        name: str = "",
        flush_executor: Executor | None = None,
    ) -> None:
        self.directory = Path(directory)
        #: runs flush steps 4-8 (two fsyncs) off the caller's thread and the log's lock
        #: (None: in the caller's thread, as tools and tests do)
        self.flush_executor = flush_executor
        self.now_ms = now_ms
        self.config = config
        self.name = name or self.directory.name
        self.ledger = PidLedger(self.directory, config.ledger)
        self.store = LedgerStore(
            self.ledger, config.cache_max_entries, now_ms, config.producer_id_expiration_ms
        )
        self.table = ProducerStateTable(store=self.store)
        self._log: ProducerLog | None = None
        self._last_flush_ms = now_ms()
        #: producer id -> offset of its newest transaction marker not yet in a sealed
        #: file: a marker changes an entry without a batch of its own, so a truncation
        #: below it must not keep the mapped entry (see PidLedger.truncate_after)
        self._markers: dict[int, int] = {}

    # ---- attaching to a log (load + replay) ----------------------------------------------

    def attach(self, plog: ProducerLog) -> None:
        """Rebuild the state for ``plog`` and become its producer state hook (no batch is
        appended meanwhile)."""

        def rebuild(_log_start_offset: int, log_end_offset: int) -> None:
            self._log = plog
            self.ledger.open(log_end_offset, self._first_offset())
            self._replay(log_end_offset)
            self._rebuild_txn_indexes(plog)

        plog.attach_producer_state(self, rebuild)

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.directory):
                off = snapshot_offset(entry.name)
                if off is not None:
                    offsets.append(off)
        return sorted(offsets)

    def _replay(self, log_end: int) -> None:
        """Apply the batches after the newest sealed file (all of them without one), and
        seal the file of each segment base on the way that has none (a crash took the
        roll's flush): retention deleting the segments below a base relies on it."""
        newest = self.ledger.replay_offset()
        start = self.ledger.replay_start(self._first_offset())
        bases = [b for b in self._segment_bases() if b > start]
        self.store.clear()
        # the open transactions the replay starts from: every producer's newest entry
        # (Kafka's loadFromSnapshot fills ongoingTxns from currentTxnFirstOffset)
        self.table.seed_ongoing(
            {f[0]: f[7] for f in self.ledger.iter_newest() if 0 <= f[7] < log_end}
        )
        replayed = 0
        # markers decoded: the replay restores their coordinator epochs (a marker of an
        # older coordinator epoch stays fenced after a restart)
        batches = self._log.txn_batches_from(start) if self._log is not None else iter(())
        for h, marker in batches:
            while bases and h.base_offset >= bases[0]:
                self.ledger.flush(bases.pop(0))
            self.table.apply(h, marker)
            replayed += 1
        for base in bases:
            self.ledger.flush(base)
        self.table.map_end_offset = log_end
        if replayed or newest is not None:
            log.info(
                "%s: producer state from ledger files up to %s + %d replayed batches",
                self.name,
                newest,
                replayed,
            )

    def _rebuild_txn_indexes(self, plog: ProducerLog) -> None:
        """Recovery emptied the txn indexes of the segments from the recovery point on:
        replay the batches from the first of them with the transactions open at its base
        (the complete producer state there), and install every ABORT's entry again."""
        base = plog.stale_txn_index_base()
        if base is None:
            return
        start = max(base, self._log_start())
        table = ProducerStateTable(start)
        open_txns = {
            e.producer_id: e.current_txn_first_offset
            for e in iter_snapshot(self.complete_snapshot_bytes(start))
            if e.current_txn_first_offset >= 0
        }
        for pid, first in open_txns.items():
            table.producers.put(ProducerEntry(pid, current_txn_first_offset=first))
        table.seed_ongoing(open_txns)
        aborted = (table.apply(h, marker) for h, marker in plog.txn_batches_from(start))
        written = plog.install_txn_index_entries(a for a in aborted if a is not None)
        log.info("%s: txn indexes rebuilt from offset %d (%d aborted)", self.name, start, written)

    def _segment_bases(self) -> list[int]:
        if self._log is None:
            return []
        return [int(seg.base_offset) for seg in self._log.segments]

    def _first_offset(self) -> int:
        """The log's first local batch (its first segment's base)."""
        bases = self._segment_bases()
        return bases[0] if bases else 0

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        if self._log is None:
            return iter(())
        return self._log.batch_headers_from(offset)

    # ---- the hook ----------------------------------------------------------------------------

    def check_leader_append(
        self,
        headers: Sequence[BatchHeader],
        markers: Sequence[TxnMarker | None] = (),
        sequences: bool = True,
    ) -> DuplicateBatch | None:
        return self.table.check(headers, markers, sequences)

    def on_batch(self, header: BatchHeader, marker: TxnMarker | None = None) -> AbortedTxn | None:
        if header.is_control and header.producer_id >= 0:
            self._markers[header.producer_id] = header.base_offset
        return self.table.apply(header, marker)

    def last_stable_offset(self, high_watermark: int) -> int:
        return self.table.last_stable_offset(high_watermark)

    def begin_verification(self, producer_id: int, epoch: int | None = None) -> int | None:
        """A KIP-890 verification guard, or None when the producer's transaction (of
        ``epoch`` when given) is open here already (nothing to verify)."""

        def begin() -> int | None:
            if self.table.has_open_transaction(producer_id, epoch):
                return None
            return self.table.begin_verification(producer_id)

        return begin() if self._log is None else self._log.update_producer_state(begin)

    def end_verification(self, producer_id: int, guard: int, verified: bool = True) -> bool:
        """True when the append may go ahead (``ProducerStateTable.end_verification``)."""
        if self._log is None:
            return self.table.end_verification(producer_id, guard, verified)
        return self._log.update_producer_state(
            lambda: self.table.end_verification(producer_id, guard, verified)
        )

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of every open transaction (a copy)."""
        return dict(self.table.ongoing)

    def oldest_open_txn_last_timestamp(self) -> int:
        """The last timestamp written by the producer of the earliest open transaction
        (Kafka's ``oldestTxnLastTimestamp``); -1 without one."""
        ongoing = self.table.ongoing
        if not ongoing:
            return -1
        producer_id = min(ongoing, key=lambda pid: ongoing[pid])
        entry = self.table.get(producer_id)
        return entry.last_timestamp if entry is not None else -1

    def on_roll(self, base_offset: int) -> None:
        # a pending flush first: every segment base then has its sealed file (when
        # anything changed), which retention deleting the segments below relies on
        self.ledger.wait_flush()
        self._flush_in_background(base_offset)

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None:
        forget = {pid for pid, off in self._markers.items() if off >= log_end_offset}
        self.ledger.truncate_after(log_end_offset, self._first_offset(), forget)
        self._markers = {p: o for p, o in self._markers.items() if o < log_end_offset}
        self._replay(log_end_offset)

    def on_truncate_fully(self, offset: int) -> None:
        self._markers.clear()
        self.ledger.clear()
        self.table.clear(offset)

    def on_segments_deleted(self, first_segment_base: int) -> None:
        now = self.now_ms()
        expiration = self.config.producer_id_expiration_ms
        self.ledger.delete_before(
            first_segment_base, lambda f: not (f[7] < 0 and now - f[5] >= expiration)
        )

    def on_close(self, log_end_offset: int) -> None:
        self.flush(log_end_offset)
        if self.ledger.newest_offset() is not None:
            # the newest file complete: Kafka's loader reads only the newest snapshot
            tmp = self.directory / (snapshot_name(log_end_offset) + ".complete.tmp")
            self.save_complete_snapshot(tmp, log_end_offset, rename=False)
            self.ledger.install_complete(log_end_offset, tmp)
        self.ledger.close()

    # ---- flushing ---------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> bool:
        """Seal the ledger's active file at ``offset`` (default: the state's end offset)."""
        self._last_flush_ms = self.now_ms()
        at = self.table.map_end_offset if offset is None else offset
        self._forget_markers_below(at)
        return self.ledger.flush(at)

    def _forget_markers_below(self, offset: int) -> None:
        """The sealed file at ``offset`` holds the entries the markers below it changed."""
        self._markers = {p: o for p, o in self._markers.items() if o >= offset}

    def flush_if_due(self) -> bool:
        """The timer / full-filter flush (the broker calls it on its housekeeping tick).

        Steps 1-3 (switching to a new active file, no fsync) under the log's lock, like
        every other change: no batch is appended between reading the end offset that
        names the sealed file and switching the active file, so the file reflects exactly
        the batches below its name. Steps 4-8 (the fsyncs) run in ``flush_executor``,
        outside the lock; reads meanwhile find the old file on the read path."""
        if not self.ledger.flush_due(self.now_ms(), self._last_flush_ms):
            return False
        if self._log is None:
            return self._flush_in_background(self.table.map_end_offset)
        return self._log.update_producer_state(
            lambda: self._flush_in_background(self.table.map_end_offset)
        )

    def _flush_in_background(self, offset: int) -> bool:
        """Steps 1-3 now, 4-8 in the executor. False when nothing was due or a flush is
        still pending (the next tick seals what is left, under a later offset)."""
        if self.flush_executor is None:
            return self.flush(offset)
        pending = self.ledger.begin_flush(offset)
        if pending is None:
            return False
        self._forget_markers_below(offset)
        self._last_flush_ms = self.now_ms()
        self.flush_executor.submit(self._finish_flush, pending)
        return True

    def _finish_flush(self, pending: PendingFlush) -> None:
        try:
            self.ledger.finish_flush(pending)
        except Exception:
            # the old files stay on the read path and on disk: the next flush seals them
            log.exception("%s: producer ledger flush at %d failed", self.name, pending.offset)

    # ---- complete snapshots (for Kafka's loader and the tiered copier) -------------------

    def write_complete_snapshot(self, out: BinaryIO, up_to_offset: int | None = None) -> int:
        """Write to ``out`` (seekable, readable, at 0) a Kafka producer snapshot of every
        live producer as of ``up_to_offset`` (every batch below it applied; from the log
        start offset up to the log end, the default), as :mod:`riverbed.producer.complete` merges it; returns
        the number of entries. Memory bounded by the number of ledger files, plus the
        replayed batches' producers when ``up_to_offset`` is neither a sealed file's
        offset nor the log end. Thread-safe (the tiered copier calls it from its pool)."""
        end = self.table.map_end_offset
        x = end if up_to_offset is None else up_to_offset
        if not self._log_start() <= x <= end:
            raise ValueError(f"{self.name}: no producer state as of {x} (log end {end})")
        src = self.ledger.complete_sources(x)
        now = self.now_ms()
        expiration = self.config.producer_id_expiration_ms
        try:
            if x >= end:
                first = src.mapped
            elif src.base == x:
                first = []
            else:
                start = src.base if src.base is not None else self._first_offset()
                first = self._replayed(start, x)

            def below_x(fields_: Iterable[Fields]) -> Iterator[Fields]:
                return (f for f in fields_ if f[3] < x)

            carried = [below_x(iter_fd_fields(fd)) for fd in src.later]
            if x < end:
                carried.insert(0, below_x(src.mapped))
            streams = [first, *(iter_fd_fields(fd) for fd in src.upto), *carried]
            return write_snapshot(
                out,
                (
                    f
                    for f in merge_newest(streams)
                    if not (f[7] < 0 and now - f[5] >= expiration)  # expired: Kafka drops it
                ),
            )
        finally:
            for fd in (*src.upto, *src.later):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def complete_snapshot_bytes(self, up_to_offset: int | None = None) -> bytes:
        """:meth:`write_complete_snapshot` in memory (46 bytes per live producer)."""
        out = io.BytesIO()
        self.write_complete_snapshot(out, up_to_offset)
        return out.getvalue()

    def save_complete_snapshot(
        self, path: Path, up_to_offset: int | None = None, *, rename: bool = True
    ) -> int:
        """:meth:`write_complete_snapshot` into ``path`` (via ``<path>.tmp``, fsync and
        rename: whole or absent; ``rename=False``: written and fsynced in place);
        returns the number of entries."""
        tmp = path.with_name(path.name + ".tmp") if rename else path
        with open(tmp, "w+b") as out:
            count = self.write_complete_snapshot(out, up_to_offset)
            out.flush()
            os.fsync(out.fileno())
        if rename:
            os.replace(tmp, path)
            fsync_dir(path.parent)
        return count

    def _log_start(self) -> int:
        return int(self._log.log_start_offset) if self._log is not None else 0

    def _replayed(self, start: int, end: int) -> list[Fields]:
        """Producers' entries from the batches in [start, end) of the log, sorted."""
        table = ProducerStateTable(start)
        headers = self._headers_from(start)
        try:
            for h in headers:
                if h.base_offset >= end:
                    break
                table.apply(h)
        finally:
            close = getattr(headers, "close", None)
            if close is not None:
                close()  # the log's lock, held while iterating
        return sorted(entry_fields(e) for e in table.producers.entries())

    # ---- expiry and views -----------------------------------------------------------------

    def remove_expired(self, now_ms: int | None = None) -> int:
        now = self.now_ms() if now_ms is None else now_ms
        return len(self.table.expire(now, self.config.producer_id_expiration_ms))

    def describe(self) -> list[ProducerEntry]:
        """Copies of the active (unexpired) producers' entries (for DescribeProducers)."""
        now = self.now_ms()
        expiration = self.config.producer_id_expiration_ms
        return [
            replace(e, batches=list(e.batches))
            for e in self.store.entries()
            if not is_expired(e, now, expiration)
        ]

    def install_remote_snapshot(self, data: bytes) -> int:
        """Kafka's buildRemoteLogAuxState: a log restarted at its leader's local start
        takes the producers of the remote range from the complete snapshot shipped with
        the remote segment ending there; producers seen since the restart keep their
        newer state. Returns the producers added. Raises CorruptSnapshotError."""
        entries = iter_snapshot(data)  # CRC checked first; one entry object at a time

        def install() -> int:
            added = 0
            for entry in entries:
                if self.store.get(entry.producer_id) is None:
                    self.store.put(entry)
                    first = entry.current_txn_first_offset
                    if first >= 0:  # its marker comes later
                        self.table.add_open_transaction(entry.producer_id, first)
                    added += 1
            return added

        return install() if self._log is None else self._log.update_producer_state(install)

    def ledger_totals(self) -> tuple[tuple[int, int, int, int, int, int], int]:
        """(`PidLedger.totals`, cached entries): the metrics' per-partition sums."""
        return self.ledger.totals(), len(self.store)

    def open_transaction_count(self) -> int:
        return len(self.table.ongoing)

    def stats(self) -> tuple[LedgerStats, float, int]:
        """(ledger counts, cache hit rate, cached entries)."""
        return self.ledger.stats(), self.store.hit_rate, len(self.store)
