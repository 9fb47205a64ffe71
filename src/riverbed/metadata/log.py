"""The metadata log seam: "append these records and tell me when they are committed".

`MetadataLog` is the interface the controller shell uses; the Raft layer implements it
with quorum replication later.  `LocalMetadataLog` is the one-voter quorum: the partition
`__cluster_metadata-0` under `metadata.log.dir`, Kafka's layout, one file
`00000000000000000000.log` of v2 record batches (one batch per append; each record value
is a framed metadata record, see `riverbed.metadata.records`).  An append is committed when
its batch is written and fsync'd.  On open, a torn tail (partial or corrupt last batch from
a crash mid-write) is cut off: it was never acknowledged, so nothing committed is lost.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from riverbed.metadata.records import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    decode_record,
    encode_record,
)
from riverbed.protocol.messages import Message
from riverbed.protocol.records import SimpleRecord, build_batch, iter_records, valid_prefix

#: Records one append may carry (Kafka's MAX_RECORDS_PER_USER_OP); bounds a batch.
APPEND_RECORDS_MAX = 100_000
#: Largest metadata log we read back at start; a bigger file means snapshots are missing.
LOG_READ_BYTES_MAX = 1 << 30
SEGMENT_NAME = f"{0:020d}.log"


class MetadataLogError(RuntimeError):
    """The metadata log cannot be opened or written."""


class MetadataLog(Protocol):
    def read_committed(self) -> Iterator[tuple[int, Message]]:
        """Every committed record with its offset, oldest first (startup replay)."""
        ...

    async def append(self, records: Sequence[Message]) -> int:
        """Append atomically; return the last record's offset once committed."""
        ...

    def close(self) -> None: ...


def metadata_partition_dir(metadata_log_dir: str | os.PathLike[str]) -> Path:
    return Path(metadata_log_dir) / f"{METADATA_TOPIC}-{METADATA_PARTITION}"


class LocalMetadataLog:
    """A single-voter metadata log in one local file (see module docstring)."""

    def __init__(self, metadata_log_dir: str | os.PathLike[str], *, leader_epoch: int = 1) -> None:
        self.dir = metadata_partition_dir(metadata_log_dir)
        self.path = self.dir / SEGMENT_NAME
        self.leader_epoch = leader_epoch
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a+b")  # noqa: SIM115 (kept open for appends)
        except OSError as exc:
            raise MetadataLogError(f"cannot open metadata log {self.path}: {exc}") from exc
        self._next_offset = 0
        self._recover()

    def _read_all(self) -> bytes:
        size = os.fstat(self._file.fileno()).st_size
        if size > LOG_READ_BYTES_MAX:
            raise MetadataLogError(
                f"metadata log {self.path} is {size} bytes, more than {LOG_READ_BYTES_MAX}"
            )
        self._file.seek(0)
        return self._file.read()

    def _recover(self) -> None:
        data = self._read_all()
        good, headers = valid_prefix(data)
        if good < len(data):
            # A torn or corrupt tail was never acknowledged: drop it.
            self._file.truncate(good)
            self._file.flush()
            os.fsync(self._file.fileno())
        self._next_offset = headers[-1].next_offset if headers else 0

    @property
    def end_offset(self) -> int:
        """The offset the next record will get."""
        return self._next_offset

    def read_committed(self) -> Iterator[tuple[int, Message]]:
        data = self._read_all()
        good, headers = valid_prefix(data)
        pos = 0
        for header in headers:
            batch = data[pos : pos + header.size]
            pos += header.size
            for record in iter_records(batch):
                if record.value is None:
                    raise MetadataLogError(f"null record value at offset {record.offset}")
                yield record.offset, decode_record(record.value)
        assert pos == good

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
        # Reserve the offsets before yielding to the loop so appends never interleave.
        self._next_offset += len(records)
        await asyncio.to_thread(self._write, batch)
        return self._next_offset - 1

    def close(self) -> None:
        self._file.close()
