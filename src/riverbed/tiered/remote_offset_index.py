"""``<base offset>.remoteoffsetindex``: offset -> entry of the ``.remotelogindex``.

Like a segment's ``.index`` (8-byte entries, big-endian) but pointing into the
``.remotelogindex`` file of the same base offset instead of a ``.log``::

    relativeOffset  int32   an entry's firstOffset - the file's base offset
    position        int32   byte position of that entry in the .remotelogindex

One entry per remote log index entry, in offset order. The file is derived data: a file
that disagrees with its ``.remotelogindex`` (torn by a crash) is rebuilt from it.

:class:`FixedEntryIndex` is the shared machinery of this file and the
``.remotetimeindex`` (:mod:`riverbed.tiered.remote_time_index`): an append-only file of
fixed-size entries mirrored in memory.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from riverbed.tiered.remote_log_index import append_to_file

__all__ = ["REMOTE_OFFSET_INDEX_SUFFIX", "FixedEntryIndex", "RemoteOffsetIndex"]

REMOTE_OFFSET_INDEX_SUFFIX: Final = ".remoteoffsetindex"
_ENTRY: Final = struct.Struct(">ii")
_INT32_MAX: Final = 2**31 - 1


class FixedEntryIndex:
    """Append-only file of ``entry_struct`` entries, all kept in memory."""

    entry_struct: struct.Struct = _ENTRY

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, ...]] = []

    def load(self) -> None:
        """Read the file (a partial last entry is ignored; ``rewrite`` fixes the file)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        size = self.entry_struct.size
        whole = len(data) - len(data) % size
        self.entries = [tuple(t) for t in self.entry_struct.iter_unpack(data[:whole])]

    def append(self, entries: Iterable[tuple[int, ...]], *, sync: bool = True) -> None:
        new = list(entries)
        blob = b"".join(self.entry_struct.pack(*e) for e in new)
        append_to_file(self.path, blob, sync=sync)
        self.entries.extend(new)

    def rewrite(self, entries: list[tuple[int, ...]]) -> None:
        """Replace the whole file atomically (rebuild after a crash)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(self.entry_struct.pack(*e) for e in entries))
        os.replace(tmp, self.path)
        self.entries = list(entries)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class RemoteOffsetIndex(FixedEntryIndex):
    """(relative offset, position in the .remotelogindex) entries."""

    entry_struct = _ENTRY

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path)
        self.base_offset = base_offset

    def entry_for(self, first_offset: int, position: int) -> tuple[int, int]:
        relative = first_offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {first_offset} out of this index's range")
        return (relative, position)

    def lookup(self, offset: int) -> int | None:
        """Position of the last entry whose first offset is <= ``offset`` (None: none)."""
        relative = offset - self.base_offset
        i = bisect.bisect_right(self.entries, (relative, _INT32_MAX)) - 1
        return None if i < 0 else self.entries[i][1]
