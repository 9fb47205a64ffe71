"""Read results (file ranges for sendfile), the local log's result types and the file
housekeeping of a partition dir.

A partition dir ``<topic>-<partition>/`` holds, besides the live segments
(``{base:020d}.log|.index|.timeindex``), files left by interrupted or delayed operations:

- ``*.deleted``: a segment removed by retention or truncation, kept for
  ``file.delete.delay.ms`` so that in-flight reads of it can finish, then unlinked
  (left over at start-up: unlinked at once);
- ``*.tmp`` (an unfinished checkpoint): unlinked at start-up;
- ``*.cleaned`` (a cleaning that did not commit): unlinked; ``<base>.log.swap`` (a
  committed cleaning): replaces ``<base>.log`` (`riverbed.storage.cleaner.complete_swaps`);
- an ``.index`` / ``.timeindex`` / ``.txnindex`` without its ``.log``: unlinked at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Final

from riverbed.storage.file_io import OS_FILE_IO, FileIO

if TYPE_CHECKING:
    from riverbed.storage.segment import LogSegment

__all__ = [
    "LOADED_INDEXES_MAX",
    "Cleanable",
    "DirSync",
    "FileRange",
    "FlushPlan",
    "LoadedIndexes",
    "ReadResult",
    "Rolled",
    "SegmentFiles",
    "SegmentSpan",
    "StaleRangeError",
    "TimestampOffset",
]

log = logging.getLogger(__name__)

_SEGMENT_FILE: Final = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
# Inactive segments per log whose index mirrors stay in memory (an LRU).
LOADED_INDEXES_MAX: Final = 8
_GARBAGE_SUFFIXES: Final = (".deleted", ".tmp", ".cleaned", ".swap")
# one read of a FileRange is bounded by the range itself; ranges come from read(), which
# bounds them by max_bytes (or one batch, itself bounded by max.message.bytes)


class StaleRangeError(OSError):
    """A pinned range can no longer be read as it was: its segment was truncated (the same
    bytes may have been replaced), or the range was closed."""


class FileRange:
    """``size`` bytes of a segment's ``.log`` from ``position`` (whole batches), pinned.

    The read that produced the range took its own fd of the segment file, under the log's
    lock: retention renaming the file to ``*.deleted`` and unlinking it, or a new segment
    taking the same name, never changes what the range reads (the inode stays). A
    truncation cuts that same inode and may be followed by other batches at the same
    positions, so it bumps the segment's ``truncations``; from then on ``intact()`` is
    False and readers fail cleanly (``StaleRangeError``) instead of returning other bytes
    or a short read padded with zeros.

    The holder ``close()`` s the range when done (the network layer after sending it);
    ``__del__`` closes a range that was dropped without it.
    """

    __slots__ = ("_fd", "_generation", "_segment", "path", "position", "size")

    def __init__(
        self,
        path: Path,
        position: int,
        size: int,
        fd: int,
        segment: LogSegment | None = None,
    ) -> None:
        self.path = path
        self.position = position
        self.size = size
        self._fd = fd
        self._segment = segment
        self._generation = segment.truncations if segment is not None else 0

    @classmethod
    def pin(cls, segment: LogSegment, position: int, size: int) -> FileRange:
        """A range of ``segment``'s ``.log`` with its own fd (call under the log's lock)."""
        return cls(segment.log_path, position, size, segment.dup_log_fd(), segment)

    @classmethod
    def open(cls, path: Path | str, position: int, size: int) -> FileRange:
        """A range of the file at ``path`` (no segment: never truncated under it)."""
        return cls(Path(path), position, size, os.open(path, os.O_RDONLY))

    @property
    def fd(self) -> int:
        """The pinned fd (StaleRangeError once closed)."""
        if self._fd < 0:
            raise StaleRangeError(f"{self.path}: range {self.position}+{self.size} is closed")
        return self._fd

    def intact(self) -> bool:
        """True while the bytes of the range are the ones the read found."""
        seg = self._segment
        return self._fd >= 0 and (seg is None or seg.truncations == self._generation)

    def read(self) -> bytes:
        """The bytes of the range (for callers that cannot sendfile, and tests)."""
        data = os.pread(self.fd, self.size, self.position)
        # checked after the read: a truncation bumps the generation before it cuts
        if len(data) != self.size or not self.intact():
            raise StaleRangeError(
                f"{self.path}: range {self.position}+{self.size} was truncated after the read"
            )
        return data

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRange({self.path.name}, {self.position}+{self.size})"


@dataclass(frozen=True, slots=True)
class ReadResult:
    """File ranges of whole batches plus the log's offsets at the time of the read."""

    ranges: list[FileRange]
    first_offset: int  # base offset of the first batch, -1 when empty
    next_offset: int  # offset after the last batch returned (the request's when empty)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)

    def read_bytes(self) -> bytes:
        return b"".join(r.read() for r in self.ranges)

    def close(self) -> None:
        """Release the pinned fds of every range."""
        for r in self.ranges:
            r.close()

    def __enter__(self) -> ReadResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A ListOffsets answer: a record's timestamp, offset and its batch's leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int


class Rolled(Enum):
    """What an append did to the segments before writing its batch."""

    NO = "no"
    ROLLED = "rolled"  # a new segment at the batch's base offset
    REPLACED = "replaced"  # an empty active segment replaced by one based at the batch


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """A segment and the offset bounding it from above (next segment base or log end)."""

    segment: LogSegment
    end_offset: int
    size: int
    last: bool


@dataclass(frozen=True, slots=True)
class Cleanable:
    """A closed segment the cleaner may rewrite: it and its end offset (next base)."""

    segment: LogSegment
    end_offset: int
    size: int


@dataclass(slots=True)
class FlushPlan:
    """The duplicated fds a flush fsyncs outside the lock, and what it covers."""

    target: int
    truncations: int
    all_indexes: bool
    fds: list[int] = field(default_factory=list)
    synced: list[LogSegment] = field(default_factory=list)

    def close_fds(self, io: FileIO) -> None:
        """Close the duplicated fds (after the fsyncs, or when collecting them failed)."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                io.close(fd)
        self.fds.clear()


class DirSync:
    """What of a partition dir needs an fsync: its entries, for files created in it since
    its last fsync, and its own entry in its parent when the dir is new. Created with the
    dir; its lock is a leaf (taken under the local log's or the unified log's)."""

    def __init__(self, directory: Path) -> None:
        self._lock = threading.Lock()
        self._entries = False
        try:
            directory.mkdir(parents=True)
            self._parent = True  # the new dir's entry is not durable yet
        except FileExistsError:
            self._parent = False

    def file_created(self) -> None:
        with self._lock:
            self._entries = True

    def take(self) -> tuple[bool, bool]:
        """(the dir, its parent) need an fsync; the caller runs them (:meth:`failed`
        when they fail, :meth:`parent_synced` when the parent's is done)."""
        with self._lock:
            pending = self._entries, self._parent
            self._entries = False
            return pending

    def failed(self, entries: bool) -> None:
        with self._lock:
            self._entries = self._entries or entries

    def parent_synced(self) -> None:
        with self._lock:
            self._parent = False


class LoadedIndexes:
    """The inactive segments whose index mirrors stay in memory: the
    ``LOADED_INDEXES_MAX`` used last (the local log calls it under its lock)."""

    def __init__(self) -> None:
        self._loaded: OrderedDict[int, LogSegment] = OrderedDict()

    def release(self, seg: LogSegment) -> None:
        """After using an inactive segment: close its files, bound the loaded indexes
        (least recently used go first; they are re-read on next use)."""
        if seg.active:
            return
        seg.close_files()
        self._loaded.pop(seg.base_offset, None)
        self._loaded[seg.base_offset] = seg
        while len(self._loaded) > LOADED_INDEXES_MAX:
            _, old = self._loaded.popitem(last=False)
            if not old.active:
                old.unload_indexes()

    def forget(self, seg: LogSegment) -> None:
        """The segment is deleted."""
        if self._loaded.get(seg.base_offset) is seg:
            del self._loaded[seg.base_offset]


class SegmentFiles:
    """Lists segments of a partition dir, removes garbage, runs delayed deletes."""

    def __init__(self, directory: Path, io: FileIO = OS_FILE_IO) -> None:
        self.directory = directory
        self._io = io
        self._pending: list[tuple[int, list[Path]]] = []  # (delete at ms, files)

    def clean_and_list(self) -> list[int]:
        """Base offsets of the segments with a ``.log``, after removing garbage files."""
        from riverbed.storage.cleaner import complete_swaps

        complete_swaps(self.directory)  # first: a committed cleaning's .swap is no garbage
        logs: set[int] = set()
        indexes: list[tuple[int, Path]] = []
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(_GARBAGE_SUFFIXES):
                log.info("removing leftover file %s", entry.path)
                Path(entry.path).unlink(missing_ok=True)
                continue
            m = _SEGMENT_FILE.match(name)
            if m is None:
                continue
            base = int(m.group(1))
            if m.group(2) == "log":
                logs.add(base)
            else:
                indexes.append((base, Path(entry.path)))
        for base, path in indexes:
            if base not in logs:
                log.info("removing index without a segment: %s", path)
                path.unlink(missing_ok=True)
        return sorted(logs)

    def schedule_delete(self, seg: LogSegment, delete_at_ms: int) -> None:
        self._pending.append((delete_at_ms, seg.rename_to_deleted()))

    def delete_expired(self, now_ms: int | None) -> int:
        """Unlink pending files due at ``now_ms`` (all of them when None)."""
        due = self.take_expired(now_ms)
        self.unlink(due)
        return len(due)

    def take_expired(self, now_ms: int | None) -> list[list[Path]]:
        """The files of the deletes due at ``now_ms`` (all when None), no longer pending:
        the caller unlinks them (``unlink``), outside the log's lock."""
        keep: list[tuple[int, list[Path]]] = []
        due: list[list[Path]] = []
        for at, paths in self._pending:
            if now_ms is None or at <= now_ms:
                due.append(paths)
            else:
                keep.append((at, paths))
        self._pending = keep
        return due

    def unlink(self, due: list[list[Path]]) -> None:
        for paths in due:
            for p in paths:
                self._io.unlink(p)

    @property
    def pending(self) -> int:
        return len(self._pending)
