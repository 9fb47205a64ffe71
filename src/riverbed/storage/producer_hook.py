"""The seam between a partition log and the producer state kept beside it.

Storage knows nothing of producer ids, epochs or sequences (that is ``riverbed.producer``,
a layer above). A :class:`PartitionLog` optionally carries a :class:`ProducerStateHook`
and calls it, under the log's lock, at the points where producer state must follow the
log (Kafka's ``UnifiedLog`` calls its ``ProducerStateManager`` at the same points):

- ``check_leader_append(headers, markers)`` before a leader assigns offsets (``markers``:
  the decoded transaction marker of each control batch, None for other batches): raises
  a typed ``StorageError`` (out of order sequence, fenced epoch, a non-transactional
  batch inside an open transaction, a marker of a fenced coordinator epoch) or returns the
  :class:`DuplicateBatch` an exact retry repeats (then nothing is appended and the append
  reports ``AppendInfo.duplicate``);
- ``on_batch(header, marker)`` for every batch written (leader and follower alike, offsets
  final; ``marker`` the decoded COMMIT/ABORT of a transactional control batch): returns
  the :class:`~riverbed.storage.txn_index.AbortedTxn` an ABORT ended, which the log
  writes to the ``.txnindex`` of the segment holding the marker;
- ``last_stable_offset(high_watermark)``: the first offset of the earliest open
  transaction, never above the high watermark (Kafka's ``lastStableOffset``);
- ``on_roll(base_offset)`` when a new segment starts there (a snapshot is due);
- ``on_truncate(log_start_offset, log_end_offset)`` after a truncation (snapshots past the
  end go, the state is rebuilt from the log); ``on_truncate_fully(offset)`` when the log
  restarts empty (every snapshot goes);
- ``on_segments_deleted(first_segment_base)`` after retention deleted the segments below
  it (their snapshots go with them);
- ``on_close(log_end_offset)`` at a clean close (a snapshot at the log end).

Every hook method takes only batch headers and offsets (DESIGN principle 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from riverbed.protocol.control_records import (
    ControlRecordType,
    decode_end_txn_marker,
    read_control_records,
)
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import BatchHeader
from riverbed.storage.errors import CorruptRecordError
from riverbed.storage.txn_index import AbortedTxn

__all__ = ["DuplicateBatch", "ProducerStateHook", "TxnMarker", "txn_marker_of"]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The COMMIT/ABORT record of a transactional control batch (its key's type and its
    value's coordinator epoch)."""

    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """An already appended batch that a produce repeats exactly (same producer, epoch and
    sequence range): acknowledged with its original offsets, never appended again."""

    first_offset: int
    last_offset: int
    timestamp: int


def txn_marker_of(batch: bytes | bytearray | memoryview, h: BatchHeader) -> TxnMarker | None:
    """The COMMIT/ABORT marker of a transactional control batch (its first record; Kafka
    writes exactly one); None for any other batch. CorruptRecordError when it does not
    decode. Only control batches are decoded: data batches cost nothing."""
    if not (h.is_control and h.is_transactional):
        return None
    try:
        for _offset, key, value in read_control_records(batch):
            kind = key.known_type
            if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                raise ProtocolError(f"control record of type {key.type} in a transaction")
            marker = decode_end_txn_marker(value)
            return TxnMarker(kind is ControlRecordType.COMMIT, marker.coordinator_epoch)
    except ProtocolError as e:
        raise CorruptRecordError(f"transaction marker at offset {h.base_offset}: {e}") from None
    raise CorruptRecordError(f"transaction marker batch at offset {h.base_offset} has no record")


class ProducerStateHook(Protocol):
    def check_leader_append(
        self,
        headers: Sequence[BatchHeader],
        markers: Sequence[TxnMarker | None] = (),
        sequences: bool = True,
    ) -> DuplicateBatch | None: ...

    def on_batch(
        self, header: BatchHeader, marker: TxnMarker | None = None
    ) -> AbortedTxn | None: ...

    def last_stable_offset(self, high_watermark: int) -> int: ...

    def on_roll(self, base_offset: int) -> None: ...

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None: ...

    def on_truncate_fully(self, offset: int) -> None: ...

    def on_segments_deleted(self, first_segment_base: int) -> None: ...

    def on_close(self, log_end_offset: int) -> None: ...
