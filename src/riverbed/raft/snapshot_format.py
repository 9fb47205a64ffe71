"""Contents of a KRaft snapshot file (``<end offset>-<epoch>.checkpoint``, KIP-630).

A sequence of record batches v2, offsets counting from 0, ``partitionLeaderEpoch`` = the
snapshot's epoch::

    control batch  SnapshotHeaderRecord   (control type 3: version, lastContainedLogTimestamp)
    data batches   the state machine's records (values; keys null), at most
                   ``snapshot_batch_bytes_max`` of values per batch
    control batch  SnapshotFooterRecord   (control type 4)

The header and footer values are the schema messages encoded by the message engine; the
batches are built by ``riverbed.protocol.records``/``control_records`` (CRC-32C included).
``read_snapshot`` validates every batch and the header/footer framing and raises
``SnapshotFormatError`` naming the problem (a truncated ``.part`` is never mistaken for a
complete snapshot).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.control_records import (
    ControlRecordType,
    build_control_batch,
    read_control_records,
)
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    decode,
    encode,
)
from riverbed.protocol.record_batch import LOG_OVERHEAD, BatchHeader, iter_batches
from riverbed.protocol.records import batch_values, build_values_batch, iter_records
from riverbed.raft.messages import SnapshotId

SNAPSHOT_BATCH_BYTES_MAX = 1024 * 1024  # values per data batch (Kafka writes ~8 KiB-1 MiB)
SNAPSHOT_RECORD_VERSION = 0


class SnapshotFormatError(ValueError):
    """A snapshot file's bytes are not header + batches + footer."""


@dataclass(frozen=True)
class SnapshotContents:
    last_contained_log_timestamp: int
    records: list[bytes]


def encode_snapshot(
    snapshot_id: SnapshotId,
    records: Iterable[bytes],
    *,
    last_contained_log_timestamp: int = -1,
    now_ms: int = -1,
    compression: CompressionType = CompressionType.NONE,
    snapshot_batch_bytes_max: int = SNAPSHOT_BATCH_BYTES_MAX,
) -> bytes:
    return b"".join(
        iter_snapshot_chunks(
            snapshot_id,
            records,
            last_contained_log_timestamp=last_contained_log_timestamp,
            now_ms=now_ms,
            compression=compression,
            snapshot_batch_bytes_max=snapshot_batch_bytes_max,
        )
    )


def iter_snapshot_chunks(
    snapshot_id: SnapshotId,
    records: Iterable[bytes],
    *,
    last_contained_log_timestamp: int = -1,
    now_ms: int = -1,
    compression: CompressionType = CompressionType.NONE,
    snapshot_batch_bytes_max: int = SNAPSHOT_BATCH_BYTES_MAX,
) -> Iterator[bytes]:
    """The snapshot as a stream of batches (write them to the ``.part`` file in order)."""
    epoch = snapshot_id.epoch
    header = SnapshotHeaderRecord(
        version=SNAPSHOT_RECORD_VERSION,
        last_contained_log_timestamp=last_contained_log_timestamp,
    )
    yield build_control_batch(
        ControlRecordType.SNAPSHOT_HEADER,
        encode(header, 0),
        now_ms=now_ms,
        base_offset=0,
        partition_leader_epoch=epoch,
    )
    offset = 1
    pending: list[bytes] = []
    size = 0
    for value in records:
        pending.append(value)
        size += len(value)
        if size >= snapshot_batch_bytes_max:
            yield build_values_batch(
                pending,
                base_offset=offset,
                compression=compression,
                partition_leader_epoch=epoch,
                now_ms=now_ms,
            )
            offset += len(pending)
            pending, size = [], 0
    if pending:
        yield build_values_batch(
            pending,
            base_offset=offset,
            compression=compression,
            partition_leader_epoch=epoch,
            now_ms=now_ms,
        )
        offset += len(pending)
    footer = SnapshotFooterRecord(version=SNAPSHOT_RECORD_VERSION)
    yield build_control_batch(
        ControlRecordType.SNAPSHOT_FOOTER,
        encode(footer, 0),
        now_ms=now_ms,
        base_offset=offset,
        partition_leader_epoch=epoch,
    )


def _control_value(batch: bytes, expected: ControlRecordType, where: str) -> bytes:
    try:
        recs = read_control_records(batch)
    except ProtocolError as exc:
        raise SnapshotFormatError(f"snapshot {where}: {exc}") from None
    if len(recs) != 1 or recs[0][1].type != expected:
        raise SnapshotFormatError(f"snapshot {where}: expected one {expected.name} record")
    value = recs[0][2]
    if value is None:
        raise SnapshotFormatError(f"snapshot {where}: {expected.name} has a null value")
    return value


def read_snapshot(
    data: bytes | bytearray | memoryview, snapshot_id: SnapshotId | None = None
) -> SnapshotContents:
    """Validate and decode a whole snapshot file: the one validator for snapshots loaded at
    start-up and for downloaded ones before they replace the log.

    Checks: every batch whole with its CRC-32C, nothing after the last batch, the
    SnapshotHeader first and the SnapshotFooter last (and no other control batch),
    offsets contiguous from 0, and with ``snapshot_id`` every batch stamped with its epoch.
    """
    buf = memoryview(data)
    if len(buf) == 0:
        raise SnapshotFormatError("snapshot is empty (no SnapshotHeader)")
    spans: list[tuple[int, int, bool]] = []
    headers: list[BatchHeader] = []
    try:
        for pos, h in iter_batches(buf):
            spans.append((pos, pos + LOG_OVERHEAD + h.batch_length, h.is_control))
            headers.append(h)
    except ProtocolError as exc:
        raise SnapshotFormatError(f"snapshot batch {len(spans)}: {exc}") from None
    if len(spans) < 2 or not spans[0][2] or not spans[-1][2]:
        raise SnapshotFormatError(
            "snapshot must start with SnapshotHeader and end with SnapshotFooter"
        )
    next_offset = 0
    for (pos, _, _), h in zip(spans, headers, strict=True):
        if h.base_offset != next_offset:
            raise SnapshotFormatError(
                f"snapshot batch at byte {pos}: base offset {h.base_offset}, expected {next_offset}"
            )
        if snapshot_id is not None and h.partition_leader_epoch != snapshot_id.epoch:
            raise SnapshotFormatError(
                f"snapshot batch at byte {pos}: epoch {h.partition_leader_epoch}, "
                f"expected the snapshot's {snapshot_id.epoch}"
            )
        next_offset = h.base_offset + h.last_offset_delta + 1
    first, last = spans[0], spans[-1]
    header_value = _control_value(
        bytes(buf[first[0] : first[1]]), ControlRecordType.SNAPSHOT_HEADER, "header"
    )
    _control_value(bytes(buf[last[0] : last[1]]), ControlRecordType.SNAPSHOT_FOOTER, "footer")
    try:
        header = decode(SnapshotHeaderRecord, header_value, 0)
    except ProtocolError as exc:
        raise SnapshotFormatError(f"snapshot header: {exc}") from None
    out: list[bytes] = []
    for start, end, is_control in spans[1:-1]:
        if is_control:
            raise SnapshotFormatError(f"snapshot: unexpected control batch at byte {start}")
        try:
            values = batch_values(bytes(buf[start:end]), verify=False)  # CRC checked above
            if None in values:
                for rec in iter_records(bytes(buf[start:end]), verify=False):
                    if rec.value is None:
                        raise SnapshotFormatError(
                            f"snapshot: null record value at offset {rec.offset}"
                        )
        except ProtocolError as exc:
            raise SnapshotFormatError(f"snapshot batch at byte {start}: {exc}") from None
        out.extend(values)  # type: ignore[arg-type]  # no None in values: checked above
    return SnapshotContents(header.last_contained_log_timestamp, out)
