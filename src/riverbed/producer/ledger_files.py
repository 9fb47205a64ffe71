"""The files of the producer-id ledger (:mod:`riverbed.producer.ledger` documents the
directory): the mapped active ``<generation>.ledger`` file and the sealed, sorted
``<offset>.snapshot`` files (Kafka's producer snapshot format,
:mod:`riverbed.producer.snapshot`: int16 version, uint32 CRC-32C, int32 count, 46-byte
entries), with the helpers that write them whole or not at all.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import mmap
import os
import struct
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from crc32c import crc32c

from riverbed.producer.bloom import BloomFilter, BloomFormatError
from riverbed.producer.complete import iter_fd_fields
from riverbed.producer.snapshot import (
    ENTRY,
    SNAPSHOT_VERSION,
    CorruptSnapshotError,
    check_snapshot,
    iter_snapshot_fields,
    snapshot_name,
)

__all__ = [
    "FENCE_STRIDE",
    "HEADER",
    "OPEN_FILES_MAX",
    "ActiveFile",
    "Fields",
    "LedgerStats",
    "PendingFlush",
    "SealedFile",
    "complete_marker",
    "delete_sealed",
    "encode_sorted",
    "fences_of",
    "fsync_dir",
    "install_sealed",
    "load_sealed",
    "write_file",
]

log = logging.getLogger(__name__)

Fields = tuple[int, int, int, int, int, int, int, int]
HEADER: Final = 10  # version int16, crc uint32, count int32
_PID: Final = struct.Struct(">q")
#: Entries per fence of a sealed file's in-memory index (one pread of <= 64 x 46 bytes).
FENCE_STRIDE: Final = 64
#: Sealed files whose descriptor stays open for lookups (least recently used close).
OPEN_FILES_MAX: Final = 64


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + dir fsync: the file appears whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class ActiveFile:
    """A mapped ``.ledger`` file: slots of 46-byte entries after a 10-byte header."""

    def __init__(self, path: Path, capacity: int, fpp: float, *, create: bool) -> None:
        self.path = path
        self.capacity = capacity
        size = HEADER + capacity * ENTRY.size
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                size = os.fstat(fd).st_size
                self.capacity = max(0, (size - HEADER) // ENTRY.size)
            self.mm = mmap.mmap(fd, size) if size else None
        finally:
            os.close(fd)
        self.filter = BloomFilter.for_items(max(capacity, 1), fpp)
        self.slots: dict[int, int] = {}
        self.count = 0
        if create and self.mm is not None:
            self.mm[0:HEADER] = SNAPSHOT_VERSION.to_bytes(2, "big") + bytes(8)

    def recovered_entries(self) -> list[Fields]:
        """Entries of a file left by a crash (count from its header, bounded by its size)."""
        if self.mm is None or len(self.mm) < HEADER:
            return []
        count = int.from_bytes(self.mm[6:10], "big", signed=True)
        count = max(0, min(count, self.capacity))
        return [ENTRY.unpack_from(self.mm, HEADER + i * ENTRY.size) for i in range(count)]

    def get(self, pid: int) -> Fields | None:
        slot = self.slots.get(pid)
        if slot is None or self.mm is None:
            return None
        fields: Fields = ENTRY.unpack_from(self.mm, HEADER + slot * ENTRY.size)
        return fields

    def put(self, fields: Fields) -> bool:
        """Write in place or append; False when the file is full (nothing written)."""
        pid = fields[0]
        assert self.mm is not None
        slot = self.slots.get(pid)
        if slot is None:
            if self.count >= self.capacity:
                return False
            slot = self.count
            ENTRY.pack_into(self.mm, HEADER + slot * ENTRY.size, *fields)
            self.count += 1
            # count after the entry: a crash never exposes a slot that was not written
            self.mm[6:10] = self.count.to_bytes(4, "big")
            self.slots[pid] = slot
            self.filter.add(pid)
        else:
            ENTRY.pack_into(self.mm, HEADER + slot * ENTRY.size, *fields)
        return True

    def entries(self) -> list[Fields]:
        assert self.mm is not None
        return [ENTRY.unpack_from(self.mm, HEADER + i * ENTRY.size) for i in range(self.count)]

    def raw_entries(self) -> bytes:
        """A copy of the written slots (``count`` x 46 bytes)."""
        assert self.mm is not None
        return self.mm[HEADER : HEADER + self.count * ENTRY.size]

    def full(self) -> bool:
        return self.count >= self.capacity or self.filter.is_full()

    def close(self, *, delete: bool) -> None:
        if self.mm is not None:
            with contextlib.suppress(BufferError, ValueError):
                self.mm.close()
            self.mm = None
        if delete:
            self.path.unlink(missing_ok=True)


def fences_of(data: bytes | bytearray, count: int) -> array[int]:
    """Every ``FENCE_STRIDE``-th producer id of a sorted sealed file's entries."""
    return array(
        "q",
        (_PID.unpack_from(data, HEADER + i * ENTRY.size)[0] for i in range(0, count, FENCE_STRIDE)),
    )


class SealedFile:
    """A sealed ``<offset>.snapshot`` (sorted by producer id), its filter, and fence ids
    (every 64th producer id: 8 bytes per 64 entries in memory) so a lookup is one bisect
    in memory and one ``pread`` of at most 64 entries."""

    def __init__(
        self, path: Path, offset: int, filter_: BloomFilter, count: int, fences: array[int]
    ) -> None:
        self.path = path
        self.offset = offset
        self.filter = filter_
        self.count = count
        self.fences = fences
        self.fd: int | None = None

    def lookup(self, pid: int, fds: OrderedDict[int, SealedFile]) -> Fields | None:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
            fds[id(self)] = self
            while len(fds) > OPEN_FILES_MAX:
                _, old = fds.popitem(last=False)
                old.close()
        else:
            fds.move_to_end(id(self))
        block = bisect.bisect_right(self.fences, pid) - 1
        if block < 0:
            return None
        first = block * FENCE_STRIDE
        n = min(FENCE_STRIDE, self.count - first)
        data = os.pread(self.fd, n * ENTRY.size, HEADER + first * ENTRY.size)
        lo, hi = 0, len(data) // ENTRY.size
        while lo < hi:
            mid = (lo + hi) // 2
            (found,) = _PID.unpack_from(data, mid * ENTRY.size)
            if found == pid:
                fields: Fields = ENTRY.unpack_from(data, mid * ENTRY.size)
                return fields
            if found < pid:
                lo = mid + 1
            else:
                hi = mid
        return None

    def entries(self) -> list[Fields]:
        return list(iter_snapshot_fields(self.path.read_bytes()))

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def delete(self) -> None:
        self.close()
        delete_sealed(self.path)


def complete_marker(path: Path) -> Path:
    """``<offset>.complete`` beside ``<offset>.snapshot``: that file is complete."""
    return path.with_name(path.name.replace(".snapshot", ".complete"))


def delete_sealed(path: Path) -> None:
    """A sealed file with its marker (first: a marker never outlives its file) and filter."""
    complete_marker(path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    path.with_name(path.name.replace(".snapshot", ".bloom")).unlink(missing_ok=True)


def encode_sorted(entries: dict[int, Fields]) -> bytes:
    body = bytearray(len(entries).to_bytes(4, "big", signed=True))
    for pid in sorted(entries):
        body += ENTRY.pack(*entries[pid])
    return SNAPSHOT_VERSION.to_bytes(2, "big") + crc32c(body).to_bytes(4, "big") + bytes(body)


def load_sealed(
    path: Path, off: int, bloom: Path | None, fpp: float, name: str
) -> SealedFile | None:
    """The sealed file with its filter (rebuilt when its .bloom is missing or bad);
    None (and the file deleted) when its CRC or length is wrong, as Kafka's loader
    deletes a corrupt snapshot."""
    data = path.read_bytes()
    try:
        check_snapshot(data)
    except CorruptSnapshotError as e:
        log.warning("%s: deleting corrupt %s: %s", name, path.name, e)
        path.unlink(missing_ok=True)
        if bloom is not None:
            bloom.unlink(missing_ok=True)
        return None
    size = len(data)
    count = (size - HEADER) // ENTRY.size
    f: BloomFilter | None = None
    if bloom is not None:
        try:
            f = BloomFilter.from_bytes(bloom.read_bytes(), fpp)
        except (BloomFormatError, OSError) as e:
            log.warning("%s: rebuilding filter %s: %s", name, bloom.name, e)
    if f is None or size < HEADER or (size - HEADER) % ENTRY.size:
        entries = list(iter_snapshot_fields(data))
        f = BloomFilter.for_items(max(len(entries), 1), fpp)
        for fields in entries:
            f.add(fields[0])
        write_file(path.with_name(path.name.replace(".snapshot", ".bloom")), f.to_bytes())
        count = len(entries)
    return SealedFile(path, off, f, count, fences_of(data, count))


def install_sealed(
    directory: Path, offset: int, tmp: Path, capacity: int, fpp: float, *, complete: bool
) -> None:
    """Make ``tmp`` (a snapshot as of ``offset``, fsynced) the sealed file
    ``<offset>.snapshot``, replacing any there: its filter first, then the rename (a
    crash between leaves a filter that covers more than the file there: only false
    positives, since a replacement holds every id of the file it replaces). ``complete``:
    then its ``.complete`` marker. The caller updates the in-memory index."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        count = max(0, int.from_bytes(os.pread(fd, 4, 6), "big", signed=True))
        filt = BloomFilter.for_items(max(count, capacity), fpp)
        for fields in iter_fd_fields(fd):
            filt.add(fields[0])
    finally:
        os.close(fd)
    path = directory / snapshot_name(offset)
    write_file(path.with_name(path.name.replace(".snapshot", ".bloom")), filt.to_bytes())
    os.replace(tmp, path)
    fsync_dir(directory)
    if complete:
        # the marker last: a crash before it only costs the older files' filters in memory
        complete_marker(path).touch()
        fsync_dir(directory)


@dataclass(frozen=True, slots=True)
class LedgerStats:
    active_entries: int
    sealed_files: int
    sealed_entries: int
    filter_fill: float  # of the active filter
    filter_bytes: int  # every filter in memory
    reads: int
    false_positive_checks: int  # sealed files read because a filter said maybe, in vain
    filter_checks: int  # sealed-file filter checks made by reads


@dataclass(slots=True)
class PendingFlush:
    """A flush past step 3: ``olds`` (newest first) are sealed as ``<offset>.snapshot``,
    merged into ``same`` (the newest sealed file) when nothing was appended since it."""

    offset: int
    olds: list[ActiveFile]
    same: SealedFile | None
    done: threading.Event = field(default_factory=threading.Event)
