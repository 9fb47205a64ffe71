"""The offset index (``<base offset>.index``): offset -> byte position in the ``.log``.

File format (Kafka's, byte for byte): a flat array of 8-byte entries, no header::

    relativeOffset  int32 BE   offset - segment base offset
    position        int32 BE   byte position of a batch in the segment's .log

Entries are sparse: one per ``index.interval.bytes`` of appended data. As in Kafka the
entry names the *last* offset of the batch that starts at ``position`` (so every offset
``>= entry offset`` lives at or after ``position``). Offsets and positions strictly
increase. The file is kept exact-size (see :mod:`riverbed.storage.index_file`).
"""

from __future__ import annotations

import bisect
import struct
from typing import ClassVar

from riverbed.storage.index_file import INT32_MAX, CorruptIndexError, IndexFile

__all__ = ["OffsetIndex"]


class OffsetIndex(IndexFile):
    entry: ClassVar[struct.Struct] = struct.Struct(">iI")
    key_at: ClassVar[struct.Struct] = struct.Struct(">i")

    def append(self, offset: int, position: int) -> None:
        """Add ``offset`` at ``position``; both must exceed the last entry's."""
        buf = self._entries()
        size = len(buf)
        if size >= self.max_entries * 8:
            raise CorruptIndexError(f"{self.path}: append to a full index ({size // 8} entries)")
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"offset {offset} not representable relative to {self.base_offset}")
        if size:
            last_rel, last_pos = self.entry.unpack_from(buf, size - 8)
            if rel <= last_rel or position <= last_pos:
                raise ValueError(
                    f"offset index entry ({offset}, {position}) does not follow "
                    f"({self.base_offset + last_rel}, {last_pos})"
                )
        buf += self.entry.pack(rel, position)

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base offset, 0) when empty."""
        n = len(self)
        if not n:
            return self.base_offset, 0
        rel, pos = self.entry_at(n - 1)
        return self.base_offset + rel, pos

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= ``offset``.

        (base offset, 0) when no entry qualifies: scan from the segment start.
        """
        rel = offset - self.base_offset
        i = bisect.bisect_right(self.keys(), rel) - 1
        if i < 0:
            return self.base_offset, 0
        erel, pos = self.entry_at(i)
        return self.base_offset + erel, pos

    def floor_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before byte ``position``."""
        buf = self._entries()
        keys = _PositionKeys(buf, self.entry.size)
        i = bisect.bisect_right(keys, position) - 1
        if i < 0:
            return self.base_offset, 0
        rel, pos = self.entry_at(i)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        i = bisect.bisect_left(self.keys(), offset - self.base_offset)
        self._truncate_entries(max(i, 0))

    def truncate_to_position(self, position: int) -> None:
        """Remove every entry pointing at or past ``position`` (a .log truncation)."""
        keep = 0
        for i, (_, pos) in enumerate(self.iter_raw()):
            if pos >= position:
                break
            keep = i + 1
        self._truncate_entries(keep)

    def sanity_check(self, log_size: int) -> None:
        """Raise :class:`CorruptIndexError` unless entries increase and fit the log."""
        entries = self._entries()
        if len(entries) // self.entry.size > self.max_entries:
            raise CorruptIndexError(f"{self.path}: more entries than segment.index.bytes allows")
        prev_rel, prev_pos = -1, -1
        for rel, pos in self.entry.iter_unpack(entries):
            if rel <= prev_rel or pos <= prev_pos or rel < 0 or pos >= log_size:
                raise CorruptIndexError(
                    f"{self.path}: entry ({rel}, {pos}) out of order or beyond the log "
                    f"(previous ({prev_rel}, {prev_pos}), log size {log_size})"
                )
            prev_rel, prev_pos = rel, pos


class _PositionKeys:
    """The position field of every entry as a sequence (positions increase too)."""

    __slots__ = ("_buf", "_n", "_size")
    _fmt = struct.Struct(">I")

    def __init__(self, buf: bytearray, size: int) -> None:
        self._buf = buf
        self._size = size
        self._n = len(buf) // size

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        value: int = self._fmt.unpack_from(self._buf, i * self._size + 4)[0]
        return value
