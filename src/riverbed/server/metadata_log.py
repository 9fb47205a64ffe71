"""The metadata log seam: "append these records and tell me when they are committed".

`MetadataLog` is the interface the controller shell uses; the Raft layer implements it with
quorum replication later.  `LocalMetadataLog` is the one-voter quorum, in Kafka's layout:
the partition directory `__cluster_metadata-0/` under `metadata.log.dir` holds

    00000000000000000000.log                     segments of v2 record batches, named by
    00000000000000001234.log                     base offset; one batch per append, each
                                                 record value a framed metadata record
    00000000000000001234-0000000001.checkpoint   KIP-630 snapshot: every record below 1234
                                                 (format: riverbed.raft.snapshot_format)

An append is committed when its batch is written and fsync'd.  On open, a torn tail of the
last segment (a partial or corrupt batch from a crash mid-write) is cut off: it was never
acknowledged, so nothing committed is lost.  `write_snapshot` stores the image as of the
end offset, rolls to a new segment there and deletes segments and snapshots it makes
redundant, so the log stays bounded; startup replays the newest snapshot and then the
records after it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from riverbed.metadata.records import decode_record, encode_record
from riverbed.protocol.messages import Message
from riverbed.protocol.records import (
    Record,
    SimpleRecord,
    build_batch,
    iter_records,
    valid_prefix,
)
from riverbed.raft.messages import SnapshotId
from riverbed.raft.snapshot_files import FileSnapshotStore
from riverbed.raft.snapshot_format import SnapshotFormatError, encode_snapshot, read_snapshot
from riverbed.storage.checkpoints import fsync_dir
from riverbed.storage.layout import METADATA_PARTITION_DIR

log = logging.getLogger(__name__)

#: Records one append may carry (Kafka's MAX_RECORDS_PER_USER_OP); bounds a batch.
APPEND_RECORDS_MAX = 100_000
#: Largest segment or snapshot file read back at start.
LOG_READ_BYTES_MAX = 1 << 30
#: Kafka's metadata.log.max.record.bytes.between.snapshots default.
SNAPSHOT_BYTES_DEFAULT = 20 * 1024 * 1024
#: Snapshots kept on disk (the newest is the one used; the other is a fallback).
SNAPSHOTS_KEPT = 2
SEGMENT_SUFFIX = ".log"


class MetadataLogError(RuntimeError):
    """The metadata log cannot be opened, read or written."""


class MetadataLog(Protocol):
    def read_committed(self) -> Iterator[tuple[int, Message]]:
        """Every committed record with its offset, oldest first (startup replay).

        Records restored from a snapshot all carry the snapshot's last offset."""
        ...

    async def append(self, records: Sequence[Message]) -> int:
        """Append atomically; return the last record's offset once committed."""
        ...

    def snapshot_due(self) -> bool:
        """True when enough has been appended since the last snapshot to write one."""
        ...

    async def write_snapshot(self, records: Iterable[Message], end_offset: int) -> None:
        """Store `records` (the image of every record below `end_offset`) as a snapshot.

        `records` may be lazy; it is consumed off the event loop."""
        ...

    def close(self) -> None: ...


def read_metadata_log(
    metadata_log_dir: str | os.PathLike[str], *, use_snapshot: bool = True
) -> Iterator[tuple[int, Message]]:
    """Read-only walk of a metadata log directory (for tools): the newest snapshot's records
    (all at its last offset), then every record of the segments after it; a torn tail is
    skipped, never truncated.  `use_snapshot=False` reads only the segments."""
    directory = metadata_partition_dir(metadata_log_dir)
    if not directory.is_dir():
        raise MetadataLogError(f"no metadata log in {directory}")
    start = 0
    if use_snapshot:
        snapshots = FileSnapshotStore(directory).list()
        if snapshots:
            sid = snapshots[-1]
            try:
                contents = read_snapshot(FileSnapshotStore(directory).read_all(sid))
            except (OSError, SnapshotFormatError) as exc:
                raise MetadataLogError(f"metadata snapshot {sid.file_stem()}: {exc}") from exc
            for value in contents.records:
                yield sid.end_offset - 1, decode_record(value)
            start = sid.end_offset
    bases = sorted(
        int(p.name[: -len(SEGMENT_SUFFIX)])
        for p in directory.iterdir()
        if p.name.endswith(SEGMENT_SUFFIX) and p.name[: -len(SEGMENT_SUFFIX)].isdigit()
    )
    for base in bases:
        path = segment_path(directory, base)
        if path.stat().st_size > LOG_READ_BYTES_MAX:
            raise MetadataLogError(f"metadata log {path} is larger than {LOG_READ_BYTES_MAX}")
        for record in _data_records(path.read_bytes(), start):
            if record.value is not None:
                yield record.offset, decode_record(record.value)


def _data_records(data: bytes, start: int) -> Iterator[Record]:
    """The records at offsets >= ``start`` in the valid prefix of a segment's bytes."""
    good, headers = valid_prefix(data)
    pos = 0
    for header in headers:
        batch = data[pos : pos + header.size]
        pos += header.size
        # Control batches (Raft's LeaderChange, ...) carry no metadata records.
        if header.next_offset <= start or header.is_control:
            continue
        for record in iter_records(batch):
            if record.offset >= start:
                yield record
    assert pos == good


def metadata_partition_dir(metadata_log_dir: str | os.PathLike[str]) -> Path:
    return Path(metadata_log_dir) / METADATA_PARTITION_DIR


def segment_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{SEGMENT_SUFFIX}"


class LocalMetadataLog:
    """A single-voter metadata log in local files (see module docstring)."""

    def __init__(
        self,
        metadata_log_dir: str | os.PathLike[str],
        *,
        leader_epoch: int = 1,
        snapshot_bytes: int = SNAPSHOT_BYTES_DEFAULT,
    ) -> None:
        assert snapshot_bytes > 0
        self.dir = metadata_partition_dir(metadata_log_dir)
        self.leader_epoch = leader_epoch
        self.snapshot_bytes = snapshot_bytes
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.snapshots = FileSnapshotStore(self.dir)
            self.snapshots.remove_partial_files()
        except OSError as exc:
            raise MetadataLogError(f"cannot open metadata log in {self.dir}: {exc}") from exc
        self._bytes_since_snapshot = 0
        self._next_offset = 0
        self._failed: str | None = None
        self._segments = self._list_segments()
        if not self._segments:
            start = self.latest_snapshot.end_offset if self.latest_snapshot else 0
            self._segments = [start]
        self._file = self._open_active()
        self._recover()

    # ----- files
    def _list_segments(self) -> list[int]:
        bases = []
        for name in os.listdir(self.dir):
            stem = name[: -len(SEGMENT_SUFFIX)]
            if name.endswith(SEGMENT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                bases.append(int(stem))
        return sorted(bases)

    def _open_active(self) -> BinaryIO:
        path = segment_path(self.dir, self._segments[-1])
        try:
            return open(path, "a+b")
        except OSError as exc:
            raise MetadataLogError(f"cannot open metadata log {path}: {exc}") from exc

    def _read_segment(self, base: int) -> bytes:
        path = segment_path(self.dir, base)
        try:
            size = path.stat().st_size
            if size > LOG_READ_BYTES_MAX:
                raise MetadataLogError(
                    f"metadata log {path} is {size} bytes, more than {LOG_READ_BYTES_MAX}"
                )
            return path.read_bytes()
        except OSError as exc:
            raise MetadataLogError(f"cannot read metadata log {path}: {exc}") from exc

    def _recover(self) -> None:
        base = self._segments[-1]
        data = self._read_segment(base)
        good, headers = valid_prefix(data)
        if good < len(data):
            log.warning(
                "metadata log %s: dropping %d bytes of torn tail",
                segment_path(self.dir, base),
                len(data) - good,
            )
            self._file.truncate(good)
            self._file.flush()
            os.fsync(self._file.fileno())
        self._next_offset = headers[-1].next_offset if headers else base
        snap = self.latest_snapshot
        if snap is not None and snap.end_offset > self._next_offset:
            raise MetadataLogError(
                f"metadata snapshot ends at {snap.end_offset} but the log ends at "
                f"{self._next_offset}"
            )
        self._bytes_since_snapshot = sum(
            segment_path(self.dir, b).stat().st_size
            for b in self._segments
            if snap is None or b >= snap.end_offset
        )

    @property
    def latest_snapshot(self) -> SnapshotId | None:
        ids = self.snapshots.list()
        return ids[-1] if ids else None

    @property
    def end_offset(self) -> int:
        """The offset the next record will get."""
        return self._next_offset

    @property
    def start_offset(self) -> int:
        """The first offset still in a segment file."""
        return self._segments[0]

    # ----- reading
    def _snapshot_records(self, sid: SnapshotId) -> Iterator[Message]:
        try:
            contents = read_snapshot(self.snapshots.read_all(sid))
        except (OSError, SnapshotFormatError) as exc:
            raise MetadataLogError(f"metadata snapshot {sid.file_stem()}: {exc}") from exc
        # decoded as the caller replays them: a million decoded records never exist at once
        return (decode_record(value) for value in contents.records)

    def read_committed(self) -> Iterator[tuple[int, Message]]:
        snap = self.latest_snapshot
        start = 0
        if snap is not None:
            for restored in self._snapshot_records(snap):
                yield snap.end_offset - 1, restored
            start = snap.end_offset
        if self._segments[0] > start:
            raise MetadataLogError(
                f"metadata log starts at {self._segments[0]} but the newest snapshot "
                f"covers only offsets below {start}"
            )
        for base in self._segments:
            for record in _data_records(self._read_segment(base), start):
                if record.value is None:
                    raise MetadataLogError(f"null record value at offset {record.offset}")
                yield record.offset, decode_record(record.value)

    # ----- writing
    def _write(self, batch: bytes) -> None:
        self._file.seek(0, os.SEEK_END)
        self._file.write(batch)
        self._file.flush()
        os.fsync(self._file.fileno())

    async def append(self, records: Sequence[Message]) -> int:
        if not records:
            raise ValueError("append needs at least one record")
        if len(records) > APPEND_RECORDS_MAX:
            raise MetadataLogError(
                f"{len(records)} records in one metadata append, more than {APPEND_RECORDS_MAX}"
            )
        batch = build_batch(
            [SimpleRecord(value=encode_record(r)) for r in records],
            base_offset=self._next_offset,
            partition_leader_epoch=self.leader_epoch,
        )
        if self._failed is not None:
            raise MetadataLogError(self._failed)
        # Reserve the offsets before yielding to the loop so appends never interleave.
        self._next_offset += len(records)
        self._bytes_since_snapshot += len(batch)
        try:
            await asyncio.to_thread(self._write, batch)
        except OSError as exc:
            # The file may now end in a partial batch and the offsets are spent: refuse
            # further appends (Kafka's controller stops too); a restart recovers the log.
            self._failed = f"metadata log write failed, restart the node: {exc}"
            raise MetadataLogError(self._failed) from exc
        return self._next_offset - 1

    def snapshot_due(self) -> bool:
        return self._bytes_since_snapshot >= self.snapshot_bytes

    async def write_snapshot(self, records: Iterable[Message], end_offset: int) -> None:
        await asyncio.to_thread(self.write_snapshot_sync, records, end_offset)

    def write_snapshot_sync(self, records: Iterable[Message], end_offset: int) -> None:
        if end_offset != self._next_offset:
            raise MetadataLogError(
                f"snapshot must end at the log end {self._next_offset}, not {end_offset}"
            )
        sid = SnapshotId(end_offset, self.leader_epoch)
        values = [encode_record(r) for r in records]
        data = encode_snapshot(sid, values)
        self.snapshots.write(sid, data)
        # Roll so that every older segment holds only records the snapshot covers.
        if self._segments[-1] != end_offset:
            self._file.close()
            self._segments.append(end_offset)
            self._file = self._open_active()
        for base in self._segments[:-1]:
            segment_path(self.dir, base).unlink(missing_ok=True)
        self._segments = self._segments[-1:]
        for old in self.snapshots.list()[:-SNAPSHOTS_KEPT]:
            self.snapshots.delete(old)
        fsync_dir(self.dir)
        self._bytes_since_snapshot = 0
        log.info("metadata snapshot %s written (%d records)", sid.file_stem(), len(values))

    def close(self) -> None:
        self._file.close()
