"""``<base offset>.remotetimeindex``: timestamp -> offset in the remote tier.

Like a segment's ``.timeindex`` (12-byte entries, big-endian)::

    timestamp       int64   the largest timestamp seen up to this entry
    relativeOffset  int32   firstOffset of the remote log index entry reaching it,
                            minus the file's base offset

An entry is appended only when the largest timestamp grows (so timestamps strictly
increase), one at most per remote log index entry: the first record with a timestamp >= T
is in the log index entry of the first time index entry >= T, found through the
``.remoteoffsetindex`` (same base offset). Derived data like the
offset index: rebuilt from the ``.remotelogindex`` when it disagrees.
"""

from __future__ import annotations

import bisect
import struct
from pathlib import Path
from typing import Final

from riverbed.tiered.remote_offset_index import FixedEntryIndex

__all__ = ["REMOTE_TIME_INDEX_SUFFIX", "RemoteTimeIndex"]

REMOTE_TIME_INDEX_SUFFIX: Final = ".remotetimeindex"
_ENTRY: Final = struct.Struct(">qi")
NO_TIMESTAMP: Final = -1


class RemoteTimeIndex(FixedEntryIndex):
    """(largest timestamp so far, relative offset) entries."""

    entry_struct = _ENTRY

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path)
        self.base_offset = base_offset

    @property
    def max_timestamp(self) -> int:
        return int(self.entries[-1][0]) if self.entries else NO_TIMESTAMP

    def entry_for(self, last_timestamp: int, first_offset: int) -> tuple[int, int] | None:
        """The entry to append for a log index entry, or None (timestamp did not grow)."""
        if last_timestamp <= self.max_timestamp:
            return None
        return (last_timestamp, first_offset - self.base_offset)

    def lookup(self, timestamp: int) -> int | None:
        """First offset of the log index entry where the largest timestamp first reaches
        ``timestamp`` (the first record at or after it is in that entry); None: none does."""
        i = bisect.bisect_left(self.entries, (timestamp, -(2**31)))
        return None if i >= len(self.entries) else self.base_offset + int(self.entries[i][1])
