"""The files of the producer-id ledger (:mod:`riverbed.producer.ledger` documents the
directory): the mapped active ``<generation>.ledger`` file and the sealed, sorted
``<offset>.snapshot`` files (Kafka's producer snapshot format,
:mod:`riverbed.producer.snapshot`: int16 version, uint32 CRC-32C, int32 count, 46-byte
entries), with the helpers that write them whole or not at all.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import struct
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Final

from crc32c import crc32c

from riverbed.producer.bloom import BloomFilter
from riverbed.producer.snapshot import ENTRY, SNAPSHOT_VERSION, iter_snapshot_fields

__all__ = [
    "FENCE_STRIDE",
    "HEADER",
    "OPEN_FILES_MAX",
    "ActiveFile",
    "Fields",
    "SealedFile",
    "encode_sorted",
    "fences_of",
    "fsync_dir",
    "write_file",
]

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
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name.replace(".snapshot", ".bloom")).unlink(missing_ok=True)


def encode_sorted(entries: dict[int, Fields]) -> bytes:
    body = bytearray(len(entries).to_bytes(4, "big", signed=True))
    for pid in sorted(entries):
        body += ENTRY.pack(*entries[pid])
    return SNAPSHOT_VERSION.to_bytes(2, "big") + crc32c(body).to_bytes(4, "big") + bytes(body)
