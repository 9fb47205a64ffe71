"""Cut a rolled segment's ``.log`` into runs of whole batches: its remote index entries.

Each run is at least ``interval_bytes`` of whole batches (the last one may be shorter), so
a remote read fetches one run (or a few) with one ranged read and never splits a batch.
Reads only batch headers (61 bytes each) from the file through a descriptor of its own,
so it runs in a copier thread without the log's lock (a rolled segment never changes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from riverbed.protocol.records import BATCH_HEADER_SIZE, parse_header
from riverbed.tiered.remote_log_index import RemoteLogIndexEntry

__all__ = ["INDEX_INTERVAL_BYTES", "SegmentSummary", "chunk_segment"]

#: Bytes of batches per remote index entry (one ranged read serves about this much).
INDEX_INTERVAL_BYTES: Final = 1024 * 1024
_NO_TIMESTAMP: Final = -1


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What a segment's batch headers say: its runs and its extent."""

    entries: list[RemoteLogIndexEntry]
    base_offset: int
    last_offset: int
    max_timestamp: int
    size_bytes: int


def chunk_segment(
    log_path: Path,
    segment_id: str,
    *,
    size_bytes: int | None = None,
    interval_bytes: int = INDEX_INTERVAL_BYTES,
) -> SegmentSummary:
    """The remote index entries of a segment file (up to ``size_bytes``, default all)."""
    entries: list[RemoteLogIndexEntry] = []
    fd = os.open(log_path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size if size_bytes is None else size_bytes
        pos = 0
        run_start = 0
        run_first = run_last = -1
        run_first_ts = run_max_ts = _NO_TIMESTAMP
        base_offset, last_offset, max_ts = -1, -1, _NO_TIMESTAMP
        while pos < end:
            head = os.pread(fd, BATCH_HEADER_SIZE, pos)
            if len(head) < BATCH_HEADER_SIZE:
                raise ValueError(f"{log_path}: truncated batch header at {pos}")
            h = parse_header(head)
            if pos + h.size > end:
                raise ValueError(f"{log_path}: batch at {pos} runs past {end}")
            if run_first < 0:
                run_start, run_first, run_first_ts = pos, h.base_offset, h.first_timestamp
                run_max_ts = _NO_TIMESTAMP
            run_last = h.last_offset
            run_max_ts = max(run_max_ts, h.max_timestamp)
            if base_offset < 0:
                base_offset = h.base_offset
            last_offset = h.last_offset
            max_ts = max(max_ts, h.max_timestamp)
            pos += h.size
            if pos - run_start >= interval_bytes or pos >= end:
                entries.append(
                    RemoteLogIndexEntry(
                        run_first,
                        run_last,
                        run_first_ts,
                        run_max_ts,
                        pos - run_start,
                        run_start,
                        segment_id,
                    )
                )
                run_first = -1
    finally:
        os.close(fd)
    return SegmentSummary(entries, base_offset, last_offset, max_ts, end)
