"""The remote indexes of one partition: groups of three local files, rotated.

A partition dir holds, next to its segments, groups of::

    <base offset>.remotelogindex     entries (riverbed.tiered.remote_log_index)
    <base offset>.remoteoffsetindex  offset -> entry (riverbed.tiered.remote_offset_index)
    <base offset>.remotetimeindex    timestamp -> offset (riverbed.tiered.remote_time_index)

The newest group is the active one: a remote segment's entries are appended to it (all
of one segment go to one group), and it is rotated (a new group starts) once its
``.remotelogindex`` holds ``file_bytes_max`` bytes or is ``roll_ms`` old. A group is
deleted once every remote segment it describes is gone from the remote tier. Leader and
followers build the same files from the entries shipped with each remote segment.

Not thread-safe: its owner (the remote log manager) serializes access with a lock.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from riverbed.tiered.remote_log_index import (
    REMOTE_LOG_INDEX_SUFFIX,
    RemoteLogIndexEntry,
    RemoteLogIndexFile,
)
from riverbed.tiered.remote_offset_index import REMOTE_OFFSET_INDEX_SUFFIX, RemoteOffsetIndex
from riverbed.tiered.remote_time_index import REMOTE_TIME_INDEX_SUFFIX, RemoteTimeIndex

__all__ = ["INDEX_FILE_BYTES_MAX", "INDEX_FILE_ROLL_MS", "RemoteIndexGroup", "RemoteIndexes"]

log = logging.getLogger(__name__)

#: Rotate the active .remotelogindex at this size (about 10k entries).
INDEX_FILE_BYTES_MAX: Final = 1024 * 1024
#: ... or at this age.
INDEX_FILE_ROLL_MS: Final = 24 * 3600 * 1000


@dataclass
class RemoteIndexGroup:
    """One .remotelogindex with its offset and time index."""

    log_index: RemoteLogIndexFile
    offset_index: RemoteOffsetIndex
    time_index: RemoteTimeIndex
    created_ms: int
    segment_ids: set[str] = field(default_factory=set)

    @property
    def base_offset(self) -> int:
        return self.log_index.base_offset

    @classmethod
    def open(cls, path: Path, created_ms: int) -> RemoteIndexGroup:
        log_index = RemoteLogIndexFile(path)
        base = log_index.base_offset
        stem = path.with_suffix("")
        group = cls(
            log_index,
            RemoteOffsetIndex(stem.with_suffix(REMOTE_OFFSET_INDEX_SUFFIX), base),
            RemoteTimeIndex(stem.with_suffix(REMOTE_TIME_INDEX_SUFFIX), base),
            created_ms,
        )
        return group

    def load(self) -> None:
        self.log_index.load()
        self.offset_index.load()
        self.time_index.load()
        self.segment_ids = {e.segment_id for e in self.log_index.entries}
        offsets, times = self._derived(self.log_index.entries, self.log_index.positions, -1)
        if self.offset_index.entries != offsets:
            log.warning("%s: rebuilding from its .remotelogindex", self.offset_index.path)
            self.offset_index.rewrite(offsets)
        if self.time_index.entries != times:
            log.warning("%s: rebuilding from its .remotelogindex", self.time_index.path)
            self.time_index.rewrite(times)

    def _derived(
        self, entries: list[RemoteLogIndexEntry], positions: list[int], max_ts: int
    ) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        """The offset and time index entries for log index entries (appended after a
        largest timestamp of ``max_ts``)."""
        offsets: list[tuple[int, ...]] = []
        times: list[tuple[int, ...]] = []
        for e, pos in zip(entries, positions, strict=True):
            offsets.append(self.offset_index.entry_for(e.first_offset, pos))
            if e.last_timestamp > max_ts:
                max_ts = e.last_timestamp
                times.append((e.last_timestamp, e.first_offset - self.base_offset))
        return offsets, times

    def append(self, entries: list[RemoteLogIndexEntry]) -> None:
        max_ts = self.time_index.max_timestamp
        positions = self.log_index.append(entries)
        offsets, times = self._derived(entries, positions, max_ts)
        self.offset_index.append(offsets)
        if times:
            self.time_index.append(times)
        self.segment_ids.update(e.segment_id for e in entries)

    def delete(self) -> None:
        for path in (self.log_index.path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)

    def entries_from(self, offset: int) -> Iterator[RemoteLogIndexEntry]:
        """Entries whose last offset is >= ``offset``, in order."""
        pos = self.offset_index.lookup(offset)
        i = 0 if pos is None else bisect.bisect_left(self.log_index.positions, pos)
        for e in self.log_index.entries[i:]:
            if e.last_offset >= offset:
                yield e


class RemoteIndexes:
    """Every remote index group of one partition dir."""

    def __init__(
        self,
        directory: Path,
        now_ms: int,
        *,
        file_bytes_max: int = INDEX_FILE_BYTES_MAX,
        roll_ms: int = INDEX_FILE_ROLL_MS,
    ) -> None:
        self.directory = directory
        self.file_bytes_max = file_bytes_max
        self.roll_ms = roll_ms
        self.groups: list[RemoteIndexGroup] = []
        for name in sorted(os.listdir(directory)):
            if name.endswith(REMOTE_LOG_INDEX_SUFFIX) and name[:20].isdigit():
                group = RemoteIndexGroup.open(directory / name, now_ms)
                group.load()
                self.groups.append(group)
        self._drop_empty_tail()

    def _drop_empty_tail(self) -> None:
        while self.groups and not self.groups[-1].log_index.entries:
            self.groups.pop().delete()

    # ---- contents -------------------------------------------------------------------------

    @property
    def segment_ids(self) -> set[str]:
        out: set[str] = set()
        for g in self.groups:
            out |= g.segment_ids
        return out

    @property
    def highest_offset(self) -> int:
        """Last offset described (-1 when empty)."""
        return self.groups[-1].log_index.last_offset if self.groups else -1

    def entries_from(self, offset: int) -> Iterator[RemoteLogIndexEntry]:
        """Entries whose last offset is >= ``offset``, in offset order, over all groups."""
        i = max(bisect.bisect_right([g.base_offset for g in self.groups], offset) - 1, 0)
        for g in self.groups[i:]:
            yield from g.entries_from(offset)

    def entry_for_timestamp(self, timestamp: int) -> RemoteLogIndexEntry | None:
        """The first entry holding a record with a timestamp >= ``timestamp`` (None: none)."""
        for g in self.groups:
            offset = g.time_index.lookup(timestamp)
            if offset is None:
                continue
            pos = g.offset_index.lookup(offset)
            if pos is not None:
                return g.log_index.entry_at(pos)
        return None

    # ---- changes --------------------------------------------------------------------------

    def add_segment(self, entries: list[RemoteLogIndexEntry], now_ms: int) -> None:
        """Append the entries of one remote segment (in order, after what is indexed)."""
        if not entries:
            return
        active = self.groups[-1] if self.groups else None
        if (
            active is None
            or active.log_index.size >= self.file_bytes_max
            or now_ms - active.created_ms >= self.roll_ms
        ):
            path = self.directory / f"{entries[0].first_offset:020d}{REMOTE_LOG_INDEX_SUFFIX}"
            if path.exists():  # a leftover group at that base: start it again
                RemoteIndexGroup.open(path, now_ms).delete()
            RemoteLogIndexFile.create(self.directory, entries[0].first_offset)
            active = RemoteIndexGroup.open(path, now_ms)
            self.groups.append(active)
        active.append(entries)

    def retain_segments(self, live: Iterable[str]) -> int:
        """Forget remote segments not in ``live``: delete groups describing none of them.
        Returns groups deleted."""
        keep = set(live)
        deleted = 0
        for g in list(self.groups):
            if g.segment_ids and not (g.segment_ids & keep):
                g.delete()
                self.groups.remove(g)
                deleted += 1
        return deleted

    def delete_all(self) -> None:
        for g in self.groups:
            g.delete()
        self.groups.clear()
