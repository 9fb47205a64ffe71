"""Shared machinery of the two sparse index files (``.index`` and ``.timeindex``).

An index file is a flat array of fixed-size big-endian entries, sorted by key, with no
header. riverbed keeps index files **exact-size** (no preallocation): the file is always
``entries * entry_size`` bytes, which is exactly what Kafka leaves on disk after it trims
an index on roll or close, so Kafka tools read riverbed's indexes and vice versa.
``segment.index.bytes`` still bounds an index: ``max_entries = segment.index.bytes //
entry_size``, and a full index makes the segment roll (as in Kafka).

The entries are mirrored in a ``bytearray`` loaded on first use (a few MiB at most, the
equivalent of Kafka's mmap). Appends go to the mirror only and reach the file on
:meth:`IndexFile.write_pending` (called on flush, roll and close), like Kafka's mmap'd
pages reaching disk: after a crash an index may be missing its newest entries, which is
harmless (an index is sparse and lookups scan forward), and the segments after the
recovery point are re-indexed anyway.
An index whose file fails the sanity check raises :class:`CorruptIndexError`; the owning
segment then rebuilds it from its ``.log``.

Files are created lazily (Kafka's ``LazyIndex``): the index of a new segment
(:meth:`IndexFile.start_empty`) has no file until its first entry is written or the
segment is rolled (:meth:`IndexFile.materialize`), so creating an empty partition opens
only its ``.log``. The first open of such an index truncates whatever stale file may sit
under its name. A missing index of an empty segment is simply empty; of a non-empty one,
rebuilt.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Final

from riverbed.storage.file_io import OS_FILE_IO, FileIO

__all__ = ["CorruptIndexError", "IndexFile"]

INT32_MAX: Final = 2**31 - 1


class CorruptIndexError(Exception):
    """An index file that cannot be trusted (size, order or range wrong)."""


class _Keys:
    """A read-only sequence view of one field of every entry, for :mod:`bisect`."""

    __slots__ = ("_buf", "_fmt", "_n", "_size")

    def __init__(self, buf: bytearray, fmt: struct.Struct, size: int) -> None:
        self._buf = buf
        self._fmt = fmt
        self._size = size
        self._n = len(buf) // size

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        value: int = self._fmt.unpack_from(self._buf, i * self._size)[0]
        return value


class IndexFile:
    """A sorted array of fixed-size entries in a file; subclasses define the entry."""

    entry: ClassVar[struct.Struct]  # full entry format
    key_at: ClassVar[struct.Struct]  # format reading the search key (the first field)

    def __init__(
        self, path: Path, base_offset: int, max_index_bytes: int, io: FileIO = OS_FILE_IO
    ) -> None:
        self.path = path
        self._io = io
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry.size)
        self._buf: bytearray | None = None
        self._fd: int | None = None
        self._persisted = 0  # bytes of the mirror already written to the file
        self._fresh = False  # no file created yet for this (new, empty) index

    # ---- loading -------------------------------------------------------------------------

    def _entries(self) -> bytearray:
        if self._buf is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                raise CorruptIndexError(f"{self.path}: missing") from None
            if len(data) % self.entry.size:
                raise CorruptIndexError(
                    f"{self.path}: size {len(data)} is not a multiple of {self.entry.size}"
                )
            self._buf = bytearray(data)
            self._persisted = len(data)
        return self._buf

    def load(self) -> None:
        """Read the file now (raises :class:`CorruptIndexError` when missing or torn)."""
        self._entries()

    def reset(self) -> None:
        """Empty the index (file truncated to 0 bytes), e.g. before a rebuild."""
        self._buf = bytearray()
        self._persisted = 0
        fd = self.open_fd()
        self._io.ftruncate(fd, 0)

    def start_empty(self) -> None:
        """Empty the index without touching the disk: the file is created on first write.

        Any stale file under this name is truncated then (the first open truncates).
        """
        if self._fd is not None:
            self._io.close(self._fd)
            self._fd = None
        self._buf = bytearray()
        self._persisted = 0
        self._fresh = True

    @property
    def has_file(self) -> bool:
        """False while a lazily started index has not created its file yet."""
        return not self._fresh

    def materialize(self) -> None:
        """Create the file if it is still lazy and write pending entries (on roll)."""
        self.open_fd()
        self.write_pending()

    @property
    def loaded(self) -> bool:
        return self._buf is not None

    def unload(self) -> None:
        """Drop the in-memory mirror of an inactive index (re-read on next use)."""
        self.materialize()
        self.close()
        self._buf = None

    # ---- access --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries()) // self.entry.size

    @property
    def is_full(self) -> bool:
        return len(self._entries()) >= self.max_entries * self.entry.size

    @property
    def size_bytes(self) -> int:
        return len(self._entries())

    def entry_at(self, i: int) -> tuple[int, int]:
        a, b = self.entry.unpack_from(self._entries(), i * self.entry.size)
        return int(a), int(b)

    def iter_raw(self) -> Iterator[tuple[int, int]]:
        for a, b in self.entry.iter_unpack(self._entries()):
            yield int(a), int(b)

    def keys(self) -> _Keys:
        """The first field of every entry as a sequence (for :mod:`bisect`)."""
        return _Keys(self._entries(), self.key_at, self.entry.size)

    # ---- writing -------------------------------------------------------------------------

    def open_fd(self) -> int:
        if self._fd is None:
            flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if self._fresh else 0)
            self._fd = self._io.open(self.path, flags, 0o644)
            self._fresh = False
        return self._fd

    def write_pending(self) -> None:
        """Write entries appended since the last call to the file (no fsync)."""
        buf = self._buf
        if buf is None or self._persisted >= len(buf):
            return
        fd = self.open_fd()
        view = memoryview(buf)
        while self._persisted < len(buf):
            self._persisted += self._io.pwrite(fd, view[self._persisted :], self._persisted)

    def _truncate_entries(self, count: int) -> None:
        buf = self._entries()
        new_size = count * self.entry.size
        if new_size < len(buf):
            del buf[new_size:]
            if new_size < self._persisted:
                self._io.ftruncate(self.open_fd(), new_size)
                self._persisted = new_size

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"offset {offset} not representable relative to {self.base_offset}")
        return rel

    def flush(self) -> None:
        self.write_pending()
        if self._fd is not None:
            self._io.fsync(self._fd)

    def dup_fd(self) -> int | None:
        """Write pending entries, then a duplicate fd for an fsync outside the lock.

        None while the index is lazy and empty (no file to sync).
        """
        self.write_pending()
        if not self.has_file:
            return None
        return self._io.dup(self.open_fd())

    def close(self) -> None:
        """Write pending entries and close the file (the mirror stays)."""
        self.write_pending()
        if self._fd is not None:
            self._io.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        if self.has_file:
            self._io.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.discard()
        self._io.unlink(self.path)
        self._buf = bytearray()
        self._persisted = 0
        self._fresh = False

    def discard(self) -> None:
        """Close without writing pending entries (a simulated crash, or before delete)."""
        if self._fd is not None:
            self._io.close(self._fd)
            self._fd = None
        if self._buf is not None:
            del self._buf[self._persisted :]
