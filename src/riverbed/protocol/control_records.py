"""Control records: transaction markers and KRaft control records.

A control batch has attributes bit 5 set; each of its records has a key that says what
it is (Kafka's ``ControlRecordType``), all integers big endian::

    key    version int16 (= 0)   type int16

    type 0 ABORT / 1 COMMIT (transaction markers, in transactional batches)
         value: EndTxnMarker  version int16 (= 0)  coordinatorEpoch int32
    type 2 LEADER_CHANGE     value: LeaderChangeMessage      (schema message)
    type 3 SNAPSHOT_HEADER   value: SnapshotHeaderRecord     (schema message)
    type 4 SNAPSHOT_FOOTER   value: SnapshotFooterRecord     (schema message)
    type 5 KRAFT_VERSION     value: KRaftVersionRecord       (schema message)
    type 6 KRAFT_VOTERS      value: VotersRecord             (schema message)

The schema-message values are encoded by the message engine
(:mod:`riverbed.protocol.messages`); :func:`build_control_batch` takes them as bytes.
Newer key or marker versions are read as version 0 with any extra bytes ignored, as Kafka
does, so that a newer writer's records stay readable.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Buffer,
    SimpleRecord,
    build_batch,
    iter_records,
    parse_header,
)

__all__ = [
    "CONTROL_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "ControlRecordKey",
    "ControlRecordType",
    "EndTxnMarker",
    "build_control_batch",
    "build_control_records_batch",
    "build_end_txn_marker_batch",
    "decode_control_key",
    "decode_end_txn_marker",
    "encode_control_key",
    "encode_end_txn_marker",
    "read_control_records",
]

CONTROL_KEY_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0

_KEY: Final = struct.Struct(">hh")
_MARKER: Final = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    """The ``type`` of a control record key (Kafka's ``ControlRecordType`` ids)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class ControlRecordKey:
    """A decoded control record key. ``type`` stays an int: unknown types are kept."""

    version: int
    type: int

    @property
    def known_type(self) -> ControlRecordType | None:
        try:
            return ControlRecordType(self.type)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """The value of an ABORT/COMMIT control record."""

    coordinator_epoch: int
    version: int = END_TXN_MARKER_VERSION


def encode_control_key(kind: ControlRecordType | int, version: int = CONTROL_KEY_VERSION) -> bytes:
    return _KEY.pack(version, int(kind))


def decode_control_key(key: Buffer | None) -> ControlRecordKey:
    """The key of a control record; ProtocolError if missing, short or of negative version."""
    if key is None:
        raise ProtocolError("control record without a key", field="key")
    if len(key) < _KEY.size:
        raise ProtocolError(
            f"control record key of {len(key)} bytes, needs {_KEY.size}", field="key"
        )
    version, kind = _KEY.unpack_from(key, 0)
    if version < 0:
        raise ProtocolError(f"invalid control record key version {version}", field="key")
    return ControlRecordKey(version, kind)


def encode_end_txn_marker(coordinator_epoch: int) -> bytes:
    return _MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker(value: Buffer | None) -> EndTxnMarker:
    """The value of a transaction marker; ProtocolError if missing or short."""
    if value is None:
        raise ProtocolError("transaction marker without a value", field="value")
    if len(value) < _MARKER.size:
        raise ProtocolError(
            f"transaction marker value of {len(value)} bytes, needs {_MARKER.size}",
            field="value",
        )
    version, epoch = _MARKER.unpack_from(value, 0)
    if version < 0:
        raise ProtocolError(f"invalid transaction marker version {version}", field="value")
    return EndTxnMarker(epoch, version)


def build_end_txn_marker_batch(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    now_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transactional control batch holding one COMMIT (or ABORT) marker.

    As Kafka writes them (``MemoryRecords.withEndTransactionMarker``): uncompressed, no
    base sequence, the marker's timestamp ``now_ms``.
    """
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = SimpleRecord(
        encode_end_txn_marker(coordinator_epoch), key=encode_control_key(kind), timestamp=now_ms
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
        now_ms=now_ms,
    )


def build_control_batch(
    kind: ControlRecordType | int,
    value: bytes,
    *,
    now_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: CompressionType | int = CompressionType.NONE,
) -> bytes:
    """A non-transactional control batch with one record of ``kind`` and encoded ``value``.

    For KRaft's LEADER_CHANGE, SNAPSHOT_HEADER/FOOTER, KRAFT_VERSION and KRAFT_VOTERS
    records; ``value`` is the schema message already encoded by the message engine.
    """
    return build_control_records_batch(
        [(kind, value)],
        now_ms=now_ms,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        compression=compression,
    )


def build_control_records_batch(
    entries: Sequence[tuple[ControlRecordType | int, bytes]],
    *,
    now_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: CompressionType | int = CompressionType.NONE,
) -> bytes:
    """A non-transactional control batch of several (kind, encoded value) records.

    KRaft writes e.g. KRAFT_VERSION and KRAFT_VOTERS together in one batch.
    """
    records = [SimpleRecord(v, key=encode_control_key(k), timestamp=now_ms) for k, v in entries]
    return build_batch(
        records,
        base_offset=base_offset,
        compression=compression,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        partition_leader_epoch=partition_leader_epoch,
        is_control=True,
        now_ms=now_ms,
    )


def read_control_records(batch: Buffer) -> list[tuple[int, ControlRecordKey, bytes | None]]:
    """(offset, key, value) of each record of the control batch ``batch``.

    ProtocolError when the batch is not a control batch or a key does not decode.
    """
    if not parse_header(batch).is_control:
        raise ProtocolError("not a control batch", field="attributes")
    return [(r.offset, decode_control_key(r.key), r.value) for r in iter_records(batch)]
