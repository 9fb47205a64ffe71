"""Read results (file ranges for sendfile) and the file housekeeping of a partition dir.

A partition dir ``<topic>-<partition>/`` holds, besides the live segments
(``{base:020d}.log|.index|.timeindex``), files left by interrupted or delayed operations:

- ``*.deleted``: a segment removed by retention or truncation, kept for
  ``file.delete.delay.ms`` so that in-flight reads of it can finish, then unlinked
  (left over at start-up: unlinked at once);
- ``*.tmp`` (an unfinished checkpoint), ``*.cleaned`` / ``*.swap`` (reserved for the log
  cleaner): unlinked at start-up;
- an ``.index`` / ``.timeindex`` without its ``.log``: unlinked at start-up.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from riverbed.storage.file_io import OS_FILE_IO, FileIO

if TYPE_CHECKING:
    from riverbed.storage.segment import LogSegment

__all__ = ["FileRange", "ReadResult", "SegmentFiles", "TimestampOffset"]

log = logging.getLogger(__name__)

_SEGMENT_FILE: Final = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_GARBAGE_SUFFIXES: Final = (".deleted", ".tmp", ".cleaned", ".swap")
# one read of a FileRange is bounded by the range itself; ranges come from read(), which
# bounds them by max_bytes (or one batch, itself bounded by max.message.bytes)


@dataclass(frozen=True, slots=True)
class FileRange:
    """``size`` bytes of the segment file ``path`` from ``position`` (whole batches)."""

    path: Path
    position: int
    size: int

    def open_fd(self) -> int:
        """A read-only fd of the segment file, also while a retention delete is pending.

        Retention renames a deleted segment to ``*.deleted`` and unlinks it only after
        ``file.delete.delay.ms``, so a range handed out just before the rename is still
        readable under that name; FileNotFoundError once it is really gone.
        """
        try:
            return os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return os.open(
                Path(self.path).with_name(Path(self.path).name + ".deleted"), os.O_RDONLY
            )

    def read(self) -> bytes:
        """The bytes of the range (for callers that cannot sendfile, and tests)."""
        fd = self.open_fd()
        try:
            data = os.pread(fd, self.size, self.position)
        finally:
            os.close(fd)
        if len(data) != self.size:
            raise FileNotFoundError(f"{self.path}: range {self.position}+{self.size} is gone")
        return data


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


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A ListOffsets answer: a record's timestamp, offset and its batch's leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int


class SegmentFiles:
    """Lists segments of a partition dir, removes garbage, runs delayed deletes."""

    def __init__(self, directory: Path, io: FileIO = OS_FILE_IO) -> None:
        self.directory = directory
        self._io = io
        self._pending: list[tuple[int, list[Path]]] = []  # (delete at ms, files)

    def clean_and_list(self) -> list[int]:
        """Base offsets of the segments with a ``.log``, after removing garbage files."""
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
        keep: list[tuple[int, list[Path]]] = []
        done = 0
        for due, paths in self._pending:
            if now_ms is None or due <= now_ms:
                for p in paths:
                    self._io.unlink(p)
                done += 1
            else:
                keep.append((due, paths))
        self._pending = keep
        return done

    @property
    def pending(self) -> int:
        return len(self._pending)
