"""The producer-id ledger's files trimmed at either end (a mixin of
`riverbed.producer.ledger.PidLedger`): ``delete_before`` (the log start moved: retention,
DeleteRecords), ``truncate_after`` (the log end moved back: a follower's divergence) and
``clear``. The file layout is `riverbed.producer.ledger`'s.

Deletion (``delete_before(B)``, B the first remaining segment's base): the sealed files
below B go with their segments (shadowed ones too), but first ``<B>.snapshot`` is
written (fsynced; merged into the file already there, the roll's) with each live
producer's newest entry among the deleted files and the mapped entries below B. So the
order of the files stays the order of the batches (a carried entry is never newer than
a file that holds a newer one: the defect of issue 18 put it in the active file, above
the complete file, and rolled a producer back), it survives a power failure (the mapped
files may not), and every truncation keeps it (the log never truncates below B without
restarting empty). Every segment base has its file: a roll waits for a pending flush,
and the replay at open seals the bases a crash took (``ProducerStateManager._replay``).

Truncation (``truncate_after(X)``): the sealed files past X are deleted; when that takes
the complete file, the files it shadowed are indexed again (those past X deleted too). The
mapped entries the caller's log replay writes again are dropped, the ones below it kept
(but for ``forget``'s producers).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from riverbed.producer.complete import iter_fd_fields, merge_newest, write_snapshot
from riverbed.producer.ledger_files import (
    ActiveFile,
    Fields,
    SealedFile,
    delete_sealed,
    install_sealed,
)
from riverbed.producer.snapshot import snapshot_name

if TYPE_CHECKING:
    from riverbed.producer.filter_index import FilterIndex
    from riverbed.producer.ledger import LedgerConfig


class LedgerTruncation:
    if TYPE_CHECKING:  # provided by PidLedger
        directory: Path
        config: LedgerConfig
        _lock: threading.RLock
        _sealed: list[SealedFile]
        _filters: FilterIndex
        _shadowed: list[tuple[int, Path]]
        _complete: set[int]
        _fds: OrderedDict[int, SealedFile]
        active: ActiveFile | None
        retired: list[ActiveFile]
        _replay_from: int | None
        carried_files: int

        def wait_flush(self) -> None: ...
        def _put(self, fields: Fields) -> None: ...
        def _load_sealed(self, path: Path, off: int, bloom: Path | None) -> SealedFile | None: ...
        def _replay_start(self, first_offset: int) -> int: ...

    def delete_before(self, offset: int, keep: Callable[[Fields], bool]) -> int:
        """Delete sealed files below ``offset`` (the first remaining segment's base),
        shadowed ones included, after carrying what they hold into ``<offset>.snapshot``
        (:meth:`_carry_forward`). Returns the files gone."""
        self.wait_flush()
        with self._lock:
            doomed = sorted(
                [(s.offset, s.path) for s in self._sealed if s.offset < offset]
                + [(o, p) for o, p in self._shadowed if o < offset],
                reverse=True,
            )
            mapped = self._mapped_below(offset)
            if not doomed and not mapped:
                return 0
            self._carry_forward(offset, [p for _o, p in doomed], mapped, keep)
            for s in [s for s in self._sealed if s.offset < offset]:
                self._sealed.remove(s)
                self._filters.remove(s)
                self._fds.pop(id(s), None)
                s.delete()
            for o, p in [(o, p) for o, p in self._shadowed if o < offset]:
                delete_sealed(p)
                self._shadowed.remove((o, p))
            self._complete = {o for o in self._complete if o >= offset}
            return len(doomed)

    def _mapped_below(self, offset: int) -> list[Fields]:
        """The mapped files' newest entries whose batch is below ``offset``, sorted."""
        newest: dict[int, Fields] = {}
        for f in reversed([self.active, *self.retired]):  # oldest first: newest wins
            if f is not None:
                newest.update((e[0], e) for e in f.entries())
        return sorted(e for e in newest.values() if e[3] < offset)

    def _carry_forward(
        self, offset: int, doomed: list[Path], mapped: list[Fields], keep: Callable[[Fields], bool]
    ) -> None:
        """Write ``<offset>.snapshot`` (fsynced, before anything is deleted): what it held,
        plus each kept producer's newest entry among ``doomed`` (newest first) and
        ``mapped`` (entries below ``offset`` that only the unsynced mapped files hold).

        Why there: the file then holds every producer's newest entry below ``offset``
        that the deleted files held, at its place in the file order (older than every
        surviving file, so it never hides a newer entry, complete files included), on
        disk (a power failure loses mapped files), and at an offset no truncation goes
        below (the first segment's base; below it the log restarts empty). Entries that
        a newer file also holds are carried too: a truncation between the two needs the
        older one. The cost is bounded by the deleted files' entries."""
        existing = self._file_at(offset)
        tmp = self.directory / (snapshot_name(offset) + ".tmp")
        fds = [os.open(p, os.O_RDONLY) for p in ([existing] if existing else []) + doomed]
        try:
            with open(tmp, "w+b") as out:
                streams = [mapped, *(iter_fd_fields(fd) for fd in fds)]
                count = write_snapshot(out, (f for f in merge_newest(streams) if keep(f)))
                out.flush()
                os.fsync(out.fileno())
        finally:
            for fd in fds:
                os.close(fd)
        if count == 0 and existing is None:
            tmp.unlink()
            return
        install_sealed(
            self.directory, offset, tmp, self.config.capacity, self.config.fpp, complete=False
        )
        self.carried_files += 1
        self._index_rewritten(offset, existing)

    def _file_at(self, offset: int) -> Path | None:
        for s in self._sealed:
            if s.offset == offset:
                return s.path
        return next((p for o, p in self._shadowed if o == offset), None)

    def _index_rewritten(self, offset: int, existing: Path | None) -> None:
        """The in-memory index after ``<offset>.snapshot`` was written or replaced: below
        a complete file it is shadowed (as open() would find it), else loaded."""
        if existing is not None and any(o == offset for o, _p in self._shadowed):
            return
        for s in [s for s in self._sealed if s.offset == offset]:
            self._sealed.remove(s)
            self._filters.remove(s)
            self._fds.pop(id(s), None)
            s.close()
        path = self.directory / snapshot_name(offset)
        if any(o > offset for o in self._complete):
            self._shadowed.append((offset, path))
            self._shadowed.sort(reverse=True)
            return
        bloom = path.with_name(path.name.replace(".snapshot", ".bloom"))
        f = self._load_sealed(path, offset, bloom)
        if f is not None:
            bisect.insort(self._sealed, f, key=lambda s: -s.offset)
            self._filters.add(f, f.filter)

    def truncate_after(
        self, offset: int, first_offset: int = 0, forget: Collection[int] = ()
    ) -> None:
        """Drop sealed files past ``offset`` and the mapped entries the caller's log
        replay writes again (from :meth:`replay_start`); mapped entries below it are kept,
        except those of the producer ids in ``forget`` (a transaction marker past
        ``offset`` changed them without a batch of theirs: the sealed files' older entry
        and the replay hold their state)."""
        self.wait_flush()
        with self._lock:
            for s in [s for s in self._sealed if s.offset > offset]:
                self._sealed.remove(s)
                self._filters.remove(s)
                self._fds.pop(id(s), None)
                s.delete()
            self._complete = {o for o in self._complete if o <= offset}
            if self._shadowed and not self._complete:
                self._unshadow(offset)  # the complete file went: the older ones count again
            self._replay_from = self._sealed[0].offset if self._sealed else None
            start = self._replay_start(first_offset)
            kept: dict[int, Fields] = {}
            for f in reversed([self.active, *self.retired]):  # oldest first: newest wins
                if f is not None:
                    kept.update(
                        (e[0], e) for e in f.entries() if e[3] < start and e[0] not in forget
                    )
                    f.close(delete=True)
            self.retired = []
            self.active = None
            for fields in kept.values():
                self._put(fields)

    def _unshadow(self, offset: int) -> None:
        for off, p in self._shadowed:
            if off > offset:
                delete_sealed(p)
                continue
            bloom = p.with_name(p.name.replace(".snapshot", ".bloom"))
            f = self._load_sealed(p, off, bloom if bloom.exists() else None)
            if f is not None:
                bisect.insort(self._sealed, f, key=lambda s: -s.offset)
                self._filters.add(f, f.filter)
        self._shadowed = []

    def clear(self) -> None:
        self.wait_flush()
        with self._lock:
            for _off, p in self._shadowed:
                delete_sealed(p)
            self._shadowed = []
            self._complete.clear()
            for s in self._sealed:
                s.delete()
            self._sealed.clear()
            self._filters.clear()
            self._fds.clear()
            for f in (self.active, *self.retired):
                if f is not None:
                    f.close(delete=True)
            self.retired = []
            self.active = None
