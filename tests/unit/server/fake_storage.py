"""A small file-backed stand-in for riverbed.storage's LogManager/PartitionLog.

One file per partition, whole batches appended, offsets assigned by patching headers:
enough for the broker's handlers (produce/fetch/list offsets/delete records) to be tested
on their own, with real file ranges for the sendfile path.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riverbed.protocol.records import (
    iter_batches,
    iter_records,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
)
from riverbed.storage.errors import RecordTooLargeError


@dataclass(frozen=True)
class Range:
    path: str
    position: int
    size: int


@dataclass(frozen=True)
class Read:
    ranges: list[Range]


@dataclass(frozen=True)
class Info:
    first_offset: int
    last_offset: int
    log_append_time: int


@dataclass(frozen=True)
class Found:
    timestamp: int
    offset: int
    leader_epoch: int = 0


class FakeLog:
    def __init__(self, path: Path, config: Any) -> None:
        self.path = path
        self.config = config
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.batches: list[tuple[int, int, int, int]] = []  # base, last, position, size
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0

    def append_as_leader(self, buf: bytearray, leader_epoch: int) -> Info:
        now = int(time.time() * 1000)
        first = self.log_end_offset
        headers = list(iter_batches(buf))
        for _pos, h in headers:
            if h.size > self.config.max_message_bytes:
                raise RecordTooLargeError(f"batch of {h.size} bytes")
        offset = first
        for pos, h in headers:
            patch_base_offset(buf, pos, offset)
            patch_partition_leader_epoch(buf, pos, leader_epoch)
            if self.config.log_append_time:
                set_log_append_time(buf, pos, now)
            offset += h.last_offset_delta + 1
        position = self.path.stat().st_size
        with open(self.path, "ab") as f:
            f.write(buf)
        offset = first
        for pos, h in headers:
            self.batches.append((offset, offset + h.last_offset_delta, position + pos, h.size))
            offset += h.last_offset_delta + 1
        self.log_end_offset = offset
        return Info(first, offset - 1, now)

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset

    def read(self, offset: int, max_bytes: int, upper_bound: int) -> Read:
        ranges: list[Range] = []
        total = 0
        for base, last, pos, size in self.batches:
            if last < offset or base >= upper_bound:
                continue
            if ranges and total + size > max_bytes:
                break
            ranges.append(Range(str(self.path), pos, size))
            total += size
        return Read(ranges)

    def _records(self) -> list[tuple[int, int]]:
        out = []
        data = self.path.read_bytes()
        for base, _last, pos, size in self.batches:
            for rec in iter_records(data[pos : pos + size]):
                if rec.offset >= self.log_start_offset:
                    out.append((rec.offset, rec.timestamp))
            del base
        return out

    def offset_for_timestamp(self, ts: int) -> Found | None:
        for offset, t in self._records():
            if t >= ts:
                return Found(t, offset)
        return None

    def max_timestamp_offset(self) -> Found | None:
        recs = self._records()
        if not recs:
            return None
        offset, t = max(recs, key=lambda r: (r[1], -r[0]))
        return Found(t, offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return epoch, self.log_end_offset

    def delete_records_before(self, offset: int) -> None:
        self.log_start_offset = max(self.log_start_offset, offset)

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size


class FakeLogManager:
    def __init__(self, log_dirs: list[str], clock: Any = None) -> None:
        self.root = Path(log_dirs[0])
        self.logs: dict[tuple[str, int], FakeLog] = {}

    def get_or_create(
        self, topic: str, partition: int, config: Any, *, topic_id: str | None = None
    ) -> FakeLog:
        key = (topic, partition)
        if key not in self.logs:
            self.logs[key] = FakeLog(self.root / f"{topic}-{partition}" / "0.log", config)
        return self.logs[key]

    def get(self, topic: str, partition: int) -> FakeLog | None:
        return self.logs.get((topic, partition))

    def delete(self, topic: str, partition: int) -> None:
        log = self.logs.pop((topic, partition), None)
        if log is not None:
            os.unlink(log.path)

    def flush_due(self, now_ms: int) -> None:
        pass

    def run_retention(self, now_ms: int) -> None:
        pass

    def shutdown(self) -> None:
        pass
