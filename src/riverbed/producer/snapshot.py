"""Producer snapshot files: Kafka's ``<offset, 20 digits>.snapshot`` format, byte for byte.

A snapshot holds the producer state of a partition as of ``offset`` (every batch below
it applied). Layout (big-endian; Kafka's ``ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA``,
version 1):

=========  ======  ============================================================
field      type    meaning
=========  ======  ============================================================
version    int16   1
crc        uint32  CRC-32C of every byte after this field
count      int32   number of entries
entries            ``count`` times the 46-byte entry below
=========  ======  ============================================================

Entry: producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta
int32 (last minus first offset of the last batch), timestamp int64 (max timestamp of the
last batch), coordinatorEpoch int32, currentTxnFirstOffset int64 (-1: none). A producer
without a retained batch has lastSequence -1, lastOffset -1, offsetDelta 0.

Only the producer's last batch survives a snapshot (as in Kafka): a retry of an older one
of its last five after a restart is answered OUT_OF_ORDER_SEQUENCE_NUMBER, not as a
duplicate.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from typing import Final

from crc32c import crc32c

from riverbed.producer.state import INT32_MAX, BatchMetadata, ProducerEntry

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "decode_snapshot",
    "encode_snapshot",
    "snapshot_name",
    "snapshot_offset",
]

SNAPSHOT_VERSION: Final = 1
SNAPSHOT_SUFFIX: Final = ".snapshot"
_HEAD: Final = struct.Struct(">hI")
_COUNT: Final = struct.Struct(">i")
ENTRY: Final = struct.Struct(">qhiqiqiq")
ENTRIES_OFFSET: Final = _HEAD.size  # the CRC covers everything from here on
_NAME: Final = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshotError(Exception):
    """A snapshot file that does not parse or whose CRC does not match (Kafka deletes it
    and falls back to an older one)."""


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset a snapshot file name encodes; None for other files."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def first_sequence(last_seq: int, offset_delta: int) -> int:
    """Kafka's ``decrementSequence``: sequences wrap at INT32_MAX."""
    first = last_seq - offset_delta
    return first + INT32_MAX + 1 if first < 0 else first


def entry_fields(e: ProducerEntry) -> tuple[int, int, int, int, int, int, int, int]:
    return (
        e.producer_id,
        e.epoch,
        e.last_seq,
        e.last_offset,
        e.last_offset_delta,
        e.last_timestamp,
        e.coordinator_epoch,
        e.current_txn_first_offset,
    )


def entry_from_fields(
    pid: int, epoch: int, seq: int, offset: int, delta: int, ts: int, coord: int, txn: int
) -> ProducerEntry:
    entry = ProducerEntry(
        pid, epoch, coordinator_epoch=coord, current_txn_first_offset=txn, last_timestamp=ts
    )
    if offset >= 0:
        entry.batches.append(
            BatchMetadata(
                first_sequence(seq, delta) if seq >= 0 else seq, seq, offset - delta, offset, ts
            )
        )
    return entry


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    body = bytearray(_COUNT.size)
    count = 0
    for e in entries:
        body += ENTRY.pack(*entry_fields(e))
        count += 1
    _COUNT.pack_into(body, 0, count)
    return _HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    return list(iter_snapshot(data))


def iter_snapshot(data: bytes) -> Iterator[ProducerEntry]:
    for fields in iter_snapshot_fields(data):
        yield entry_from_fields(*fields)


def iter_snapshot_fields(
    data: bytes,
) -> Iterator[tuple[int, int, int, int, int, int, int, int]]:
    """The raw 8 fields of every entry (CRC and length checked first)."""
    start = check_snapshot(data)
    yield from ENTRY.iter_unpack(memoryview(data)[start:])


def check_snapshot(data: bytes) -> int:
    """Check version, CRC-32C and length; the position of the first entry."""
    if len(data) < ENTRIES_OFFSET + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    version, crc = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    computed = crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
            f"Computed crc: {computed}"
        )
    (count,) = _COUNT.unpack_from(data, ENTRIES_OFFSET)
    start = ENTRIES_OFFSET + _COUNT.size
    if count < 0 or start + count * ENTRY.size != len(data):
        raise CorruptSnapshotError(f"snapshot claims {count} entries in {len(data)} bytes")
    return start
