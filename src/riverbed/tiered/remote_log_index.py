"""``<base offset>.remotelogindex``: where remote record data lives (KIP-405's format).

A file is a sequence of entries, each describing a run of whole record batches stored in
the remote tier (all integers big-endian)::

    magic           int16   0 (the only version)
    length          int16   bytes of the whole entry, magic to the end of rdi
    crc             int32   CRC-32C of every byte after this field (firstOffset..rdi)
    firstOffset     int64   offset of the first record of the run
    lastOffset      int64   offset of the last record of the run
    firstTimestamp  int64   base timestamp of the first batch of the run
    lastTimestamp   int64   the largest timestamp in the run (max over its batches)
    dataLength      int32   bytes of the run in the remote object
    rdiLength       int16   bytes of rdi
    rdi             bytes   remote data identifier (below)

riverbed's rdi: ``position int64`` (byte position of the run in the remote segment's log
object) followed by the UTF-8 remote segment id (``<20-digit base offset>-<32 hex
uuid>``, which names the objects of one upload, see :mod:`riverbed.tiered.rsm`).

CRC: CRC-32C (the ``crc32c`` library), the checksum Kafka's v2 record batches use; the
seed only says "crc", and CRC-32C is hardware-accelerated and already a dependency.

The file name's base offset is the firstOffset of its first entry (20 digits, as segment
files). Entries are appended in offset order and never rewritten; a crash may leave a
torn last entry, which loading drops (and truncates away): the remote tier still holds
the entries (they are shipped with every segment as ``<segment id>.remotelogindex``)
and the next sync appends them again.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c

__all__ = [
    "ENTRY_BYTES_MAX",
    "MAGIC",
    "REMOTE_LOG_INDEX_SUFFIX",
    "CorruptRemoteIndexError",
    "RemoteLogIndexEntry",
    "RemoteLogIndexFile",
    "decode_entries",
    "encode_entries",
]

log = logging.getLogger(__name__)

MAGIC: Final = 0
REMOTE_LOG_INDEX_SUFFIX: Final = ".remotelogindex"
_PREFIX: Final = struct.Struct(">hhI")  # magic, length, crc
_BODY: Final = struct.Struct(">qqqqih")  # first/last offset, first/last timestamp, len, rdi len
_POSITION: Final = struct.Struct(">q")
#: The length field is an int16: an entry (and so its segment id) stays below this.
ENTRY_BYTES_MAX: Final = 0x7FFF


class CorruptRemoteIndexError(ValueError):
    """An entry that does not parse or whose CRC does not match."""


@dataclass(frozen=True, slots=True)
class RemoteLogIndexEntry:
    """One run of whole batches in a remote segment."""

    first_offset: int
    last_offset: int
    first_timestamp: int
    last_timestamp: int
    data_length: int
    position: int  # in the remote segment's log object (rdi)
    segment_id: str  # the remote segment (rdi)

    @property
    def rdi(self) -> bytes:
        return _POSITION.pack(self.position) + self.segment_id.encode()

    def encode(self) -> bytes:
        rdi = self.rdi
        body = (
            _BODY.pack(
                self.first_offset,
                self.last_offset,
                self.first_timestamp,
                self.last_timestamp,
                self.data_length,
                len(rdi),
            )
            + rdi
        )
        length = _PREFIX.size + len(body)
        if length > ENTRY_BYTES_MAX:
            raise ValueError(f"remote log index entry of {length} bytes (segment id too long)")
        return _PREFIX.pack(MAGIC, length, crc32c.crc32c(body)) + body


def decode_entry(buf: bytes | memoryview, pos: int = 0) -> tuple[RemoteLogIndexEntry, int]:
    """The entry at ``pos`` and its size; CorruptRemoteIndexError when it is not one."""
    if len(buf) - pos < _PREFIX.size + _BODY.size:
        raise CorruptRemoteIndexError(f"truncated entry at {pos}")
    magic, length, crc = _PREFIX.unpack_from(buf, pos)
    if magic != MAGIC:
        raise CorruptRemoteIndexError(f"unknown magic {magic} at {pos}")
    if length < _PREFIX.size + _BODY.size + _POSITION.size or pos + length > len(buf):
        raise CorruptRemoteIndexError(f"bad entry length {length} at {pos}")
    body = bytes(buf[pos + _PREFIX.size : pos + length])
    if crc32c.crc32c(body) != crc:
        raise CorruptRemoteIndexError(f"CRC mismatch in the entry at {pos}")
    first, last, first_ts, last_ts, data_length, rdi_length = _BODY.unpack_from(body)
    rdi = body[_BODY.size :]
    if rdi_length != len(rdi) or rdi_length < _POSITION.size:
        raise CorruptRemoteIndexError(f"rdi length {rdi_length} disagrees with the entry")
    if last < first or data_length <= 0:
        raise CorruptRemoteIndexError(f"inconsistent entry at {pos}: {first}..{last}")
    (position,) = _POSITION.unpack_from(rdi)
    try:
        segment_id = rdi[_POSITION.size :].decode()
    except UnicodeDecodeError:
        raise CorruptRemoteIndexError(f"rdi at {pos} is not a segment id") from None
    entry = RemoteLogIndexEntry(first, last, first_ts, last_ts, data_length, position, segment_id)
    return entry, length


def append_to_file(path: Path, blob: bytes, *, sync: bool) -> None:
    """Append ``blob`` to an index file (fsynced unless told not to)."""
    with open(path, "ab") as f:
        f.write(blob)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def encode_entries(entries: Iterable[RemoteLogIndexEntry]) -> bytes:
    return b"".join(e.encode() for e in entries)


def decode_entries(buf: bytes) -> list[RemoteLogIndexEntry]:
    """Every entry of ``buf`` (strict: any bad entry raises CorruptRemoteIndexError)."""
    return [entry for _, entry in _iter_entries(buf, strict=True)]


def _iter_entries(buf: bytes, *, strict: bool) -> Iterator[tuple[int, RemoteLogIndexEntry]]:
    pos = 0
    while pos < len(buf):
        try:
            entry, size = decode_entry(buf, pos)
        except CorruptRemoteIndexError:
            if strict:
                raise
            return
        yield pos, entry
        pos += size


class RemoteLogIndexFile:
    """One ``.remotelogindex`` file with an in-memory mirror of its entries."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base_offset = int(path.name.split(".")[0])
        self.entries: list[RemoteLogIndexEntry] = []
        self.positions: list[int] = []  # byte position of each entry in the file
        self.size = 0

    @classmethod
    def create(cls, directory: Path, base_offset: int) -> RemoteLogIndexFile:
        f = cls(directory / f"{base_offset:020d}{REMOTE_LOG_INDEX_SUFFIX}")
        f.path.touch()
        return f

    def load(self) -> int:
        """Read the entries; a torn or corrupt tail is truncated away. Returns bytes cut."""
        data = self.path.read_bytes()
        for pos, entry in _iter_entries(data, strict=False):
            self.entries.append(entry)
            self.positions.append(pos)
            self.size = pos + len(entry.encode())
        cut = len(data) - self.size
        if cut:
            log.warning("%s: dropping %d bytes of corrupt entries", self.path, cut)
            os.truncate(self.path, self.size)
        return cut

    def append(self, entries: Iterable[RemoteLogIndexEntry], *, sync: bool = True) -> list[int]:
        """Append entries; returns their positions in the file."""
        new = list(entries)
        blob = bytearray()
        positions = []
        for e in new:
            positions.append(self.size + len(blob))
            blob += e.encode()
        append_to_file(self.path, bytes(blob), sync=sync)
        self.entries.extend(new)
        self.positions.extend(positions)
        self.size += len(blob)
        return positions

    @property
    def last_offset(self) -> int:
        return self.entries[-1].last_offset if self.entries else self.base_offset - 1

    def entry_at(self, position: int) -> RemoteLogIndexEntry:
        """The entry at a byte position (what the offset and time indexes point to)."""
        i = bisect.bisect_left(self.positions, position)
        if i >= len(self.positions) or self.positions[i] != position:
            raise CorruptRemoteIndexError(f"{self.path}: no entry at position {position}")
        return self.entries[i]
