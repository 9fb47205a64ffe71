"""The time index (``<base offset>.timeindex``): timestamp -> offset.

File format (Kafka's, byte for byte): a flat array of 12-byte entries, no header::

    timestamp       int64 BE   max timestamp of the segment so far
    relativeOffset  int32 BE   offset (minus segment base) of the batch that reached it

An entry is added only when the segment's max timestamp grows past the last entry, at
most one per ``index.interval.bytes`` of data; riverbed also indexes the first batch of
every segment and, on roll or close, the segment's final max timestamp (so the last
entry is the segment's largest timestamp, which time-based retention reads). Timestamps
strictly increase and offsets never decrease. As in Kafka's v2 format the offset is the
batch's last offset ("shallow" offset of the max timestamp). Exact-size file.
"""

from __future__ import annotations

import bisect
import struct
from typing import ClassVar

from riverbed.storage.index_file import CorruptIndexError, IndexFile

__all__ = ["NO_TIMESTAMP", "TimeIndex"]

NO_TIMESTAMP = -1


class TimeIndex(IndexFile):
    entry: ClassVar[struct.Struct] = struct.Struct(">qi")
    key_at: ClassVar[struct.Struct] = struct.Struct(">q")

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        n = len(self)
        if not n:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = self.entry_at(n - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if ``timestamp`` exceeds the last entry's.

        ``skip_full_check`` lets the final entry of a segment being rolled go in even when
        the index is full (Kafka does the same; the file is then one entry over).
        """
        buf = self._entries()
        size = len(buf)
        if not skip_full_check and size >= self.max_entries * 12:
            raise CorruptIndexError(
                f"{self.path}: append to a full time index ({size // 12} entries)"
            )
        if size:
            last_ts, last_rel = self.entry.unpack_from(buf, size - 12)
            if offset < self.base_offset + last_rel:
                raise ValueError(
                    f"time index entry ({timestamp}, {offset}) goes back from "
                    f"({last_ts}, {self.base_offset + last_rel})"
                )
            if timestamp <= last_ts:
                return False
        elif timestamp <= NO_TIMESTAMP:
            return False
        buf += self.entry.pack(timestamp, self.relative(offset))
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= ``timestamp``.

        (-1, base offset) when none qualifies: scan from the segment start.
        """
        i = bisect.bisect_right(self.keys(), timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = self.entry_at(i)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        keep = 0
        for i, (_, rel) in enumerate(self.iter_raw()):
            if self.base_offset + rel >= offset:
                break
            keep = i + 1
        self._truncate_entries(keep)

    def sanity_check(self, next_offset: int) -> None:
        """Raise :class:`CorruptIndexError` unless entries increase and fit the segment."""
        entries = self._entries()
        # one entry over the limit is legal: the final entry added on roll
        if len(entries) // self.entry.size > self.max_entries + 1:
            raise CorruptIndexError(f"{self.path}: more entries than segment.index.bytes allows")
        prev_ts, prev_rel = NO_TIMESTAMP, -1
        for ts, rel in self.entry.iter_unpack(entries):
            if ts <= prev_ts or rel < prev_rel or rel < 0 or self.base_offset + rel >= next_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry ({ts}, {rel}) out of order or beyond the segment "
                    f"(previous ({prev_ts}, {prev_rel}), next offset {next_offset})"
                )
            prev_ts, prev_rel = ts, rel
