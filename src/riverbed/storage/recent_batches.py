"""The last batches appended to a segment, kept in memory: where the log's readers are.

Followers and tailing consumers fetch from the end of the log, at a batch boundary they
got from their previous fetch. Found through the offset index, each such read looks up
the index twice and reads a few batch headers back from the file (the batch at the fetch
offset, the last whole batch within the byte budget, the header after it): a third of a
leader's CPU for one follower fetch (issue 23). The segment remembers the positions and
headers of the batches it appended last, contiguous up to its end, and answers those
reads from them; a read further back goes through the index as before.

Bounded: at most `RECENT_BATCHES_MAX` batches per segment (trimmed to half when over),
forgotten when the segment is truncated, recovered or rolled.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import attrgetter
from typing import Final

from riverbed.protocol.records import BatchHeader

#: Batches a segment remembers at most.
RECENT_BATCHES_MAX: Final = 32

_LAST_OFFSET = attrgetter("last_offset")


class RecentBatches:
    """Positions and headers of a segment's last appended batches, ending at its end."""

    __slots__ = ("headers", "positions")

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.headers: list[BatchHeader] = []

    def clear(self) -> None:
        self.positions.clear()
        self.headers.clear()

    def add(self, position: int, h: BatchHeader) -> None:
        """The batch ``h`` was just written at ``position`` (the segment's old end)."""
        positions = self.positions
        if positions and position != positions[-1] + self.headers[-1].size:
            self.clear()  # not contiguous: only what ends at the segment's end is kept
        positions.append(position)
        self.headers.append(h)
        if len(positions) > RECENT_BATCHES_MAX:
            half = RECENT_BATCHES_MAX // 2
            del positions[:half]
            del self.headers[:half]

    def header_at(self, position: int) -> BatchHeader | None:
        """The header of the batch starting at ``position`` (None: not remembered)."""
        positions = self.positions
        if not positions or position < positions[0]:
            return None
        i = bisect_left(positions, position)
        if i < len(positions) and positions[i] == position:
            return self.headers[i]
        return None

    def covers_offset(self, offset: int) -> bool:
        """Is the first batch with last offset >= ``offset`` known here (or known to be
        none)? Every earlier batch ends below the first remembered one's base offset."""
        return bool(self.headers) and offset >= self.headers[0].base_offset

    def first_ending_at_or_after(self, offset: int, start_position: int) -> int:
        """Index of the first batch at or after ``start_position`` whose last offset is
        >= ``offset`` (len: none); only when `covers_offset`."""
        i = bisect_left(self.headers, offset, key=_LAST_OFFSET)
        return max(i, bisect_left(self.positions, start_position))

    def covers_position(self, position: int) -> bool:
        return bool(self.positions) and position >= self.positions[0]

    def whole_batches_end(self, start: int, limit: int) -> int:
        """The segment's ``whole_batches_end`` from a batch start ``start`` that
        `covers_position`: the last batch boundary <= ``limit``, at least ``start``."""
        positions = self.positions
        last_end = positions[-1] + self.headers[-1].size
        if limit >= last_end:
            return max(start, last_end)
        b = bisect_right(positions, limit) - 1
        return max(start, positions[b]) if b >= 0 else start
