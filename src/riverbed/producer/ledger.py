"""The producer-id ledger of one partition (the seed pid-ledger-bloom-filters.txt).

Files in the partition dir:

- ``<offset, 20 digits>.snapshot``: sealed ledger files in Kafka's producer snapshot format
  (:mod:`riverbed.producer.snapshot`; Kafka's own code reads them), written sorted by
  producer id so a lookup is a bisect of in-memory fences and one ``pread``; ``offset`` =
  every batch below it is reflected in this file or an older one. Which are complete:

  * a flush's file (segment roll, timer, full filter) is a DELTA: the entries updated
    since the previous flush (newest file wins), not every producer;
  * the file a clean close writes at the log end is COMPLETE (every live producer,
    :meth:`install_complete`), so Kafka's loader, which reads only the newest snapshot,
    sees every producer after a clean shutdown; after a crash the newest is a delta;
  * a complete snapshot as of any offset from the log start to the log end, on demand
    (for the tiered copier, which ships a segment's snapshot):
    ``ProducerStateManager.write_complete_snapshot`` / ``complete_snapshot_bytes`` /
    ``save_complete_snapshot`` (:mod:`riverbed.producer.complete` merges the files);
- ``<offset>.bloom`` beside each: its Bloom filter (:mod:`riverbed.producer.bloom`);
- ``<offset>.complete`` (empty) beside a complete file: at open, the sealed files below
  it are *shadowed*: kept on disk (Kafka, complete snapshots as of older offsets) but
  neither read nor in memory, since the complete file holds their newest entries; a
  truncation below the complete file deletes it and indexes the shadowed files again.
  The complete file is a *home* like any other: the delta it replaced at the same
  offset lives only there, so nothing is ever carried to a place newer than it (below);
- ``<generation, 20 digits>.ledger``: the active file, memory-mapped, same layout as a
  snapshot (version, CRC 0 while active, count, 46-byte entries), fixed size
  (``riverbed.producer.id.ledger.file.bytes``), with its own Bloom filter in memory and a
  producer id -> slot dict bounded by the file's capacity (a scan of the mapping per
  update would cost O(entries) of Python per produce).

In memory: the list of (Bloom filter, sealed file) pairs, newest first, plus the active
file's filter and slot dict. That is ``~1.2 bytes`` per id at 1 % false positives plus a
bounded active part, instead of a Python object per producer.

API (thread-safe, one lock; the flush's file work runs outside it):

- ``update(fields)``: known to the active file -> overwrite the slot in place; otherwise
  append and add to the active filter. ``fields`` are a snapshot entry's 8 fields. (The
  seed asks the active filter first; with the exact slot dict that would only add a hash
  before the same lookup, so the active file's filter serves its sealed file.)
- ``read(pid)``: active file, then the file being flushed, then each sealed file whose
  filter matches, newest first, continuing past false positives; None when absent.
- ``flush(offset)``: the seed's eight steps (numbered in :meth:`PidLedger.flush`), so a
  known producer id is reachable at every moment. Due on the timer
  (``riverbed.producer.id.ledger.flush.interval.ms``), when the active filter is full
  (estimate_n >= estimate_max_n for ``riverbed.producer.id.ledger.fpp``) or the active
  file is, and at segment roll and clean close.

The seed's open question (``.snapshot`` name for the active file, or another extension and
a rename at flush): riverbed gives the active file its own extension and, at flush,
writes its entries sorted into ``<offset>.snapshot.tmp``, fsyncs and renames it. So no
``.snapshot`` without a valid CRC ever exists (Kafka's loader and riverbed's never meet a
half-written one), the sealed file is sorted for binary search (an append-ordered file
would need a scan per lookup), and the rename is the atomic commit point.

Crash safety (each step, ``crash_at`` in tests): before step 5's rename the old
``.ledger`` is still on disk and is recovered at open (both ``.ledger`` files when the
crash came between steps 1 and 8, oldest first); a ``.bloom`` without its ``.snapshot``
(crash after step 4) is deleted; a ``.snapshot`` without ``.bloom`` gets its filter rebuilt
from the file; after the rename a leftover ``.ledger`` only repeats what the sealed file
holds. Nothing an update wrote to the mapping is lost by a process crash (the pages are
the page cache's); a machine crash may lose the active file's unsynced tail, which the
partition log's replay after the newest sealed file restores.

Deletion (``delete_before``: each live producer's newest entry in the deleted files is
first carried into the first remaining segment's file) and truncation (``truncate_after``)
are :mod:`riverbed.producer.ledger_truncation`'s.

Invariant (the model check :mod:`riverbed.testing.ledger_model` tests it over appends,
rolls, flushes, truncations, DeleteRecords, retention and clean, crash and power failure
reopens): for every producer, the newest entry of the newest source holding it (mapped
files, then sealed files newest first) is its newest batch below the log end, and the
sealed files at or below any offset X hold, with the log's batches from the newest of
them to X, every producer's newest batch below X.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from riverbed.producer.bloom import BloomFilter
from riverbed.producer.complete import CompleteSources
from riverbed.producer.filter_index import FilterIndex
from riverbed.producer.ledger_files import (
    HEADER,
    ActiveFile,
    Fields,
    LedgerStats,
    PendingFlush,
    SealedFile,
    delete_sealed,
    encode_sorted,
    fences_of,
    fsync_dir,
    install_sealed,
    load_sealed,
    write_file,
)
from riverbed.producer.ledger_truncation import LedgerTruncation
from riverbed.producer.snapshot import (
    ENTRY,
    CorruptSnapshotError,
    snapshot_name,
    snapshot_offset,
)

__all__ = [
    "FLUSH_STEPS",
    "CompleteSources",
    "Fields",
    "LedgerConfig",
    "LedgerStats",
    "PendingFlush",
    "PidLedger",
    "fsync_dir",
]

log = logging.getLogger(__name__)

FLUSH_STEPS: Final = 8
_LEDGER: Final = re.compile(r"^(\d{20})\.ledger$")
_BLOOM: Final = re.compile(r"^(\d{20})\.bloom$")
_COMPLETE: Final = re.compile(r"^(\d{20})\.complete$")
#: What a crash may leave of a file being written (tmp + rename): deleted at open.
_TMP: Final = re.compile(r"^\d{20}\.(snapshot|bloom)(\.complete)?\.tmp$")


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    #: riverbed.producer.id.ledger.fpp: false-positive probability of every filter.
    fpp: float = 0.01
    #: riverbed.producer.id.ledger.file.bytes: size of the active mapped file.
    file_bytes: int = 4 << 20
    #: riverbed.producer.id.ledger.flush.interval.ms
    flush_interval_ms: int = 60_000

    @property
    def capacity(self) -> int:
        return max(1, (self.file_bytes - HEADER) // ENTRY.size)


class PidLedger(LedgerTruncation):
    def __init__(
        self,
        directory: Path,
        config: LedgerConfig = LedgerConfig(),
        crash_at: Callable[[int], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.config = config
        self._lock = threading.RLock()
        #: the flush between steps 3 and 8 (one at a time); truncation, deletion, clear
        #: and close wait for it, so they never meet a half-sealed file
        self._pending: PendingFlush | None = None
        self._crash_at = crash_at or (lambda step: None)
        self._sealed: list[SealedFile] = []  # newest (highest offset) first
        self._filters = FilterIndex()  # their filters, bit-sliced
        #: sealed files older than a complete one (on disk for Kafka and the complete
        #: snapshots as of older offsets; never read by lookups, so never in memory),
        #: newest first
        self._shadowed: list[tuple[int, Path]] = []
        self._complete: set[int] = set()  # offsets of the complete sealed files (.complete)
        self._fds: OrderedDict[int, SealedFile] = OrderedDict()
        self._generation = 0
        self.active: ActiveFile | None = None
        #: files no longer written (full, or being flushed) and not sealed yet, newest
        #: first: still on the read path, after the active file
        self.retired: list[ActiveFile] = []
        #: where the log replay after open() / truncate_after() starts (None: the log
        #: start): the newest sealed file, or below a corrupt one that was deleted
        self._replay_from: int | None = None
        self.reads = 0
        #: files written by delete_before (:meth:`_carry_forward`)
        self.carried_files = 0
        self.filter_checks = 0
        self.false_positive_checks = 0

    # ---- opening and recovery ------------------------------------------------------------

    def open(self, log_end_offset: int | None = None, first_offset: int = 0) -> None:
        """Load the sealed files (those past ``log_end_offset`` are deleted), recover any
        ``.ledger`` a crash left into a new active file: with a log (``log_end_offset``
        given), only the entries below where its replay starts (:meth:`replay_start`;
        ``first_offset``: the log's first local batch), since the replay writes the others
        again, in order (it seals the files of segment bases a crash took)."""
        self.wait_flush()
        with self._lock:
            self._close_all()
            sealed: dict[int, Path] = {}
            blooms: dict[int, Path] = {}
            markers: dict[int, Path] = {}
            ledgers: list[tuple[int, Path]] = []
            for entry in os.scandir(self.directory):
                p = Path(entry.path)
                if (off := snapshot_offset(entry.name)) is not None:
                    sealed[off] = p
                elif m := _BLOOM.match(entry.name):
                    blooms[int(m.group(1))] = p
                elif m := _LEDGER.match(entry.name):
                    ledgers.append((int(m.group(1)), p))
                elif m := _COMPLETE.match(entry.name):
                    markers[int(m.group(1))] = p
                elif _TMP.match(entry.name):
                    p.unlink(missing_ok=True)
            for off, p in (*blooms.items(), *markers.items()):
                if off not in sealed:
                    p.unlink(missing_ok=True)  # a crash between flush steps 4 and 5
            corrupt: list[int] = []
            complete = False
            for off in sorted(sealed, reverse=True):
                p = sealed[off]
                if log_end_offset is not None and off > log_end_offset:
                    delete_sealed(p)
                    continue
                if complete:  # below a complete file: nothing to look up there
                    self._shadowed.append((off, p))
                    continue
                f = self._load_sealed(p, off, blooms.get(off))
                if f is not None:
                    self._sealed.append(f)
                    self._filters.add(f, f.filter)
                    complete = off in markers
                    if complete:
                        self._complete.add(off)
                else:
                    corrupt.append(off)
            self._replay_from = self._sealed[0].offset if self._sealed else None
            if corrupt:
                # the deleted file's entries are gone: replay the log from the newest
                # file below it (or from the log start) to write them again
                below = [s.offset for s in self._sealed if s.offset < min(corrupt)]
                self._replay_from = max(below) if below else None
            ledgers.sort()
            self._generation = ledgers[-1][0] + 1 if ledgers else 0
            self.active = None  # created by the first update (idle partitions cost nothing)
            keep_below = (
                None
                if log_end_offset is None
                else min(log_end_offset, self._replay_start(first_offset))
            )
            for _gen, p in ledgers:
                old = ActiveFile(p, 0, self.config.fpp, create=False)
                for fields in old.recovered_entries():
                    if keep_below is None or fields[3] < keep_below:
                        self._put(fields)
                old.close(delete=True)

    def _load_sealed(self, path: Path, off: int, bloom: Path | None) -> SealedFile | None:
        return load_sealed(path, off, bloom, self.config.fpp, self.directory.name)

    def _new_active(self) -> ActiveFile:
        path = self.directory / f"{self._generation:020d}.ledger"
        self._generation += 1
        return ActiveFile(path, self.config.capacity, self.config.fpp, create=True)

    # ---- the API -------------------------------------------------------------------------

    def update(self, fields: Fields) -> None:
        with self._lock:
            self._put(fields)

    def _put(self, fields: Fields) -> None:
        if self.active is None:
            self.active = self._new_active()
        if not self.active.put(fields):
            # full before its owner flushed it (a flush in progress, recovery, carrying
            # entries forward): retire it to the read path; the next flush seals it too
            self.retired.insert(0, self.active)
            self.active = self._new_active()
            self.active.put(fields)

    def read(self, pid: int) -> Fields | None:
        with self._lock:
            self.reads += 1
            for f in (self.active, *self.retired):
                if f is not None and (found := f.get(pid)) is not None:
                    return found
            if not self._sealed:
                return None
            # a cache miss: one hash, the filters of all sealed files tested at once
            # (bit-sliced), then the candidate files newest first
            for s in self._filters.candidates(pid):
                assert isinstance(s, SealedFile)
                found = s.lookup(pid, self._fds)
                if found is not None:
                    # the filters a newest-first scan would have tested
                    self.filter_checks += self._sealed.index(s) + 1
                    return found
                self.false_positive_checks += 1
            self.filter_checks += len(self._sealed)
            return None

    def flush_due(self, now_ms: int, last_flush_ms: int) -> bool:
        with self._lock:
            a = self.active
            if a is None or (a.count == 0 and not self.retired):
                return False
            return (
                a.full()
                or bool(self.retired)
                or now_ms - last_flush_ms >= self.config.flush_interval_ms
            )

    def flush(self, offset: int) -> bool:
        """Seal the active file as ``<offset>.snapshot`` (every batch below ``offset`` is
        reflected in the ledger), all eight steps in the caller's thread. False when
        there was nothing to flush."""
        while True:
            self.wait_flush()
            with self._lock:
                if self._pending is None:
                    pending = self._begin(offset)
                    break
        if pending is None:
            return False
        self.finish_flush(pending)
        return True

    def begin_flush(self, offset: int) -> PendingFlush | None:
        """Steps 1-3 (no fsync: cheap enough for the log's lock and the event loop).
        None when there is nothing to flush or a flush is still pending (one at a time:
        sealed files must enter the index in offset order). The caller runs
        :meth:`finish_flush` (the fsyncs) later, in any thread."""
        with self._lock:
            if self._pending is not None:
                return None
            return self._begin(offset)

    def _begin(self, offset: int) -> PendingFlush | None:
        step = self._crash_at
        if self.active is None or (self.active.count == 0 and not self.retired):
            return None
        olds = [self.active, *self.retired]  # newest first
        new = self._new_active()  # 1. new mapped file and filter
        step(1)
        self.active = new  # 2. writes go to the new file
        step(2)
        self.retired = list(olds)  # 3. reads: new, then the old ones, then sealed files
        step(3)
        same = self._sealed[0] if self._sealed and self._sealed[0].offset >= offset else None
        self._pending = PendingFlush(same.offset if same else offset, olds, same)
        return self._pending

    def wait_flush(self) -> None:
        """Until the pending flush (if any) is finished (call without the ledger lock)."""
        with self._lock:
            pending = self._pending
        if pending is not None:
            pending.done.wait()

    def finish_flush(self, pending: PendingFlush) -> None:
        """Steps 4-8: the old files are no longer written (step 2) nor closed (truncation,
        clear and close wait for this), so they are read without the ledger lock."""
        try:
            self._finish(pending)
        finally:
            with self._lock:
                if self._pending is pending:
                    self._pending = None
            pending.done.set()

    def _finish(self, pending: PendingFlush) -> None:
        step = self._crash_at
        offset, olds, same = pending.offset, pending.olds, pending.same
        entries: dict[int, Fields] = {}
        if same is not None:  # nothing was appended to the log since it: merge into it
            entries.update((e[0], e) for e in same.entries())
        for old in reversed(olds):  # newest wins
            entries.update((e[0], e) for e in old.entries())
        # sealed filters share the active file's shape when they fit: a read hashes once
        filt = BloomFilter.for_items(max(len(entries), self.config.capacity), self.config.fpp)
        if same is None and all(o.filter.shape == filt.shape for o in olds):
            # the mapped files' filters hold exactly their ids: their union is the sealed
            # file's filter (no second hash per id)
            filt.union_all([o.filter for o in olds])
        else:
            for pid in entries:
                filt.add(pid)
        path = self.directory / snapshot_name(offset)
        write_file(path.with_name(path.name.replace(".snapshot", ".bloom")), filt.to_bytes())
        step(4)  # 4. the old file's filter is on disk
        data = encode_sorted(entries)
        write_file(path, data)
        step(5)  # 5. CRC computed, sorted copy fsynced and renamed into place
        fences = fences_of(data, len(entries))
        with self._lock:
            sealed = SealedFile(path, offset, filt, len(entries), fences)
            if same is not None:
                self._sealed.remove(same)
                self._filters.remove(same)
                same.close()
            bisect.insort(self._sealed, sealed, key=lambda s: -s.offset)
            self._filters.add(sealed, filt)
            step(6)  # 6. the (filter, file) pair is in the index
            self.retired = [f for f in self.retired if f not in olds]
            step(7)  # 7. the old mappings leave the read path
        for old in olds:
            old.close(delete=True)
        step(8)  # 8. unmapped (and the files removed)

    # ---- lifetime of files ------------------------------------------------------------------

    def newest_offset(self) -> int | None:
        with self._lock:
            return self._sealed[0].offset if self._sealed else None

    def replay_offset(self) -> int | None:
        """Where the log replay after open() or truncate_after() starts: the newest sealed
        file's offset, or below a corrupt file that open() deleted (None: the log start)."""
        with self._lock:
            return self._replay_from

    def replay_start(self, first_offset: int) -> int:
        """Where the caller's log replay starts after open() or truncate_after(): the
        newest sealed file (even below the log start: DeleteRecords keeps the producers
        of the batches it deletes), without one ``first_offset`` (the log's first local
        batch)."""
        with self._lock:
            return self._replay_start(first_offset)

    def _replay_start(self, first_offset: int) -> int:
        return first_offset if self._replay_from is None else self._replay_from

    def _close_all(self) -> None:
        for s in self._sealed:
            s.close()
        self._sealed.clear()
        self._filters.clear()
        self._shadowed = []
        self._complete.clear()
        self._fds.clear()
        for f in (self.active, *self.retired):
            if f is not None:
                f.close(delete=False)
        self.active = None
        self.retired = []

    def close(self) -> None:
        self.wait_flush()
        with self._lock:
            self._close_all()

    def abandon(self) -> None:
        """A crash (tests and the model check): unmap everything, write nothing; a
        pending flush stays as a crash leaves it (its mapped files recovered at open)."""
        with self._lock:
            self._close_all()
            self._pending = None

    def install_complete(self, offset: int, tmp: Path) -> None:
        """At a clean close (the index is not updated: the next open loads the file)."""
        install_sealed(
            self.directory, offset, tmp, self.config.capacity, self.config.fpp, complete=True
        )

    # ---- views ------------------------------------------------------------------------------

    def complete_sources(self, up_to_offset: int) -> CompleteSources:
        """What a complete snapshot as of ``up_to_offset`` merges
        (:mod:`riverbed.producer.complete`): the mapped entries (newest version, sorted),
        and descriptors of the sealed files at or below it and above it, newest first,
        opened under the lock so retention cannot take them away meanwhile. The caller
        closes the descriptors."""
        with self._lock:
            # copies of the mapped entries (a memcpy each): parsed after the lock, so
            # updates wait for no Python loop over up to a file's capacity
            raw = [f.raw_entries() for f in reversed([self.active, *self.retired]) if f]
            files = sorted(
                [(s.offset, s.path) for s in self._sealed] + self._shadowed, reverse=True
            )
            upto = [(o, p) for o, p in files if o <= up_to_offset]
            later = [(o, p) for o, p in files if o > up_to_offset]
            fds: list[int] = []
            try:
                for _o, p in (*upto, *later):
                    fds.append(os.open(p, os.O_RDONLY))
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
        mapped: dict[int, Fields] = {}
        for data in raw:  # oldest first: newest wins
            mapped.update((e[0], e) for e in ENTRY.iter_unpack(data))
        return CompleteSources(
            base=upto[0][0] if upto else None,
            mapped=sorted(mapped.values()),
            upto=fds[: len(upto)],
            later=fds[len(upto) :],
        )

    def iter_newest(self) -> Iterator[Fields]:
        """Every producer's newest entry (active first, then sealed files newest first;
        files are read one at a time, as the caller consumes)."""
        with self._lock:
            mapped = [f.entries() for f in (self.active, *self.retired) if f is not None]
            sealed = list(self._sealed)
        seen: set[int] = set()
        for entries in mapped:
            for fields in entries:
                if fields[0] not in seen:
                    seen.add(fields[0])
                    yield fields
        for s in sealed:
            try:
                entries = s.entries()
            except (OSError, CorruptSnapshotError):
                continue  # deleted meanwhile (retention) or unreadable: skip it
            for fields in entries:
                if fields[0] not in seen:
                    seen.add(fields[0])
                    yield fields

    def totals(self) -> tuple[int, int, int, int, int, int]:
        """(ids, sealed files, filter bytes, reads, false-positive checks, filter checks):
        the metrics' sums, without `stats`' filter fill and record (scrape time, once per
        hosted partition)."""
        with self._lock:
            a = self.active
            filter_bytes = self._filters.memory_bytes()
            if a is not None:
                filter_bytes += a.filter.memory_bytes()
            for f in self.retired:
                filter_bytes += f.filter.memory_bytes()
            ids = a.count if a is not None else 0
            for s in self._sealed:
                ids += s.count
            return (
                ids,
                len(self._sealed),
                filter_bytes,
                self.reads,
                self.false_positive_checks,
                self.filter_checks,
            )

    def stats(self) -> LedgerStats:
        with self._lock:
            a = self.active
            filters = [f.filter for f in (self.active, *self.retired) if f is not None]
            return LedgerStats(
                active_entries=a.count if a else 0,
                sealed_files=len(self._sealed),
                sealed_entries=sum(s.count for s in self._sealed),
                filter_fill=a.filter.fill_ratio if a else 0.0,
                filter_bytes=self._filters.memory_bytes() + sum(f.memory_bytes() for f in filters),
                reads=self.reads,
                false_positive_checks=self.false_positive_checks,
                filter_checks=self.filter_checks,
            )
