"""Complete producer snapshots: every live producer as of an offset, in one Kafka file.

The ledger's sealed ``<offset>.snapshot`` files are deltas (the entries updated since the
previous flush; :mod:`riverbed.producer.ledger`), but Kafka's own loader reads only the
newest snapshot, and the tiered-storage copier ships one segment's ``<offset>.snapshot``
as the producer state at that segment's end. Both need a *complete* file: this module
merges the ledger's sources into one, in Kafka's format (:mod:`riverbed.producer.snapshot`:
version, CRC-32C, count, 46-byte entries), sorted by producer id.

Merge: every source is a stream sorted by producer id, ranked; for each producer id the
best-ranked stream's entry wins (:func:`merge_newest`). The ranks, as of offset ``X``
(:meth:`riverbed.producer.manager.ProducerStateManager.write_complete_snapshot`):

1. the batches after the newest sealed file below ``X`` replayed from the log up to ``X``
   (only when ``X`` is neither a sealed file's offset nor the log end), or, at the log
   end, the mapped active files;
2. the sealed files at or below ``X``, newest first;
3. the entries of later sources whose last offset is below ``X``: carried forward there
   when the file they lived in was deleted with its segment.

Memory stays bounded by the number of sources, not of producers: files are read in
chunks of ``CHUNK_ENTRIES`` entries through descriptors opened under the ledger's lock
(a file retention deletes meanwhile stays readable), and the output is written as it is
merged, the CRC computed by reading it back (the count, which the CRC covers, is known
only at the end).
"""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

from crc32c import crc32c

from riverbed.producer.snapshot import ENTRY, SNAPSHOT_VERSION

__all__ = [
    "CHUNK_ENTRIES",
    "CompleteSources",
    "iter_fd_fields",
    "merge_newest",
    "write_snapshot",
]

Fields = tuple[int, int, int, int, int, int, int, int]
#: Entries read or written per chunk (46 bytes each: ~190 KiB).
CHUNK_ENTRIES: Final = 4096
_HEAD: Final = struct.Struct(">hIi")  # version, crc, count
_CRC_FROM: Final = 6  # the CRC covers the count and the entries


def iter_fd_fields(fd: int) -> Iterator[Fields]:
    """The entries of a sealed file (CRC checked when the ledger loaded it), read in
    chunks from ``fd`` (the caller closes it)."""
    head = os.pread(fd, _HEAD.size, 0)
    if len(head) < _HEAD.size:
        return
    pos = _HEAD.size
    left = max(0, _HEAD.unpack(head)[2])
    while left:
        data = os.pread(fd, min(left, CHUNK_ENTRIES) * ENTRY.size, pos)
        n = len(data) // ENTRY.size
        if n == 0:
            return
        yield from ENTRY.iter_unpack(memoryview(data)[: n * ENTRY.size])
        pos += n * ENTRY.size
        left -= n


@dataclass(frozen=True, slots=True)
class CompleteSources:
    base: int | None  # the newest sealed file's offset at or below the requested one
    mapped: list[Fields]  # the mapped files' newest entries, sorted by producer id
    upto: list[int]  # descriptors of the sealed files at or below it, newest first
    later: list[int]  # descriptors of the sealed files above it


def _ranked(rank: int, stream: Iterable[Fields]) -> Iterator[tuple[int, int, Fields]]:
    for fields in stream:
        yield fields[0], rank, fields


def _merged(streams: list[Iterable[Fields]]) -> Iterator[tuple[int, int, Fields]]:
    return heapq.merge(*(_ranked(r, s) for r, s in enumerate(streams)))


def merge_newest(streams: list[Iterable[Fields]]) -> Iterator[Fields]:
    """Merge streams sorted by producer id; per id, the entry of the first stream (the
    best rank) holding it."""
    last: int | None = None
    for pid, _rank, fields in _merged(streams):
        if pid != last:
            last = pid
            yield fields


def write_snapshot(out: BinaryIO, entries: Iterable[Fields]) -> int:
    """Write a Kafka producer snapshot of ``entries`` to ``out`` (seekable, readable,
    positioned at 0), chunk by chunk; returns the entry count."""
    out.write(_HEAD.pack(SNAPSHOT_VERSION, 0, 0))
    count = 0
    chunk = bytearray()
    for fields in entries:
        chunk += ENTRY.pack(*fields)
        count += 1
        if count % CHUNK_ENTRIES == 0:
            out.write(chunk)
            chunk.clear()
    out.write(chunk)
    out.seek(_CRC_FROM)
    out.write(count.to_bytes(4, "big", signed=True))
    out.seek(_CRC_FROM)
    crc = 0
    while block := out.read(CHUNK_ENTRIES * ENTRY.size):
        crc = crc32c(block, crc)
    out.seek(2)
    out.write(crc.to_bytes(4, "big"))
    out.seek(0, os.SEEK_END)
    return count
