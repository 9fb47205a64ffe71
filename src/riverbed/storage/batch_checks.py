"""The checks of appended batches: whole-batch structure for every append, and a leader's
rules for a client's produce (the per-record ones are in :mod:`riverbed.storage.record_checks`).

Every append: each batch parses and its CRC holds (CORRUPT_MESSAGE), and it is at most
``max.message.bytes`` (MESSAGE_TOO_LARGE). A follower's fetched data may end with a partial
batch: it is left for the next fetch. A leader also refuses a request without batches,
offsets that are not dense, a batch without records, a client's control batch, a client's
LogAppendTime batch on a CreateTime topic, and records that fail the per-record checks.
"""

from __future__ import annotations

import struct
from typing import Final

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import LOG_OVERHEAD, BatchHeader, check_dense_offsets, validate_batch
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    RecordTooLargeError,
)
from riverbed.storage.record_checks import (
    TimestampBounds,
    batch_record_errors,
    record_validation_error,
)

__all__ = ["ORIGIN_CLIENT", "ORIGIN_COORDINATOR", "validate_batches", "validate_leader_batches"]

_INT32: Final = struct.Struct(">i")
ORIGIN_CLIENT: Final = "client"
ORIGIN_COORDINATOR: Final = "coordinator"


def validate_batches(
    buf: bytearray, name: str, max_message_bytes: int, *, allow_partial_tail: bool
) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every whole batch in ``buf``, each parsed and CRC-checked."""
    found: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        if allow_partial_tail:
            # a fetch response may end with a partial batch: leave it for next time
            if end - pos < LOG_OVERHEAD:
                break
            (length,) = _INT32.unpack_from(buf, pos + 8)
            if pos + LOG_OVERHEAD + length > end:
                break
        try:
            h = validate_batch(buf, pos)
        except ProtocolError as e:
            raise CorruptRecordError(f"{name}: {e}") from None
        if h.size > max_message_bytes:
            raise RecordTooLargeError(
                f"{name}: record batch of {h.size} bytes exceeds "
                f"max.message.bytes ({max_message_bytes})"
            )
        found.append((pos, h))
        pos += h.size
    return found


def validate_leader_batches(
    buf: bytearray, name: str, cfg: LogConfig, now: int, origin: str
) -> list[tuple[int, BatchHeader]]:
    """The batches of a produce to a leader, after every check a leader makes."""
    found = validate_batches(buf, name, cfg.max_message_bytes, allow_partial_tail=False)
    if not found:
        raise InvalidRecordError(f"{name}: produce request holds no record batches")
    bounds = None
    if not cfg.log_append_time:
        before, after = cfg.message_timestamp_before_max_ms, cfg.message_timestamp_after_max_ms
        bounds = TimestampBounds(now, before, after)
    # A compacted topic refuses a record without a key; a coordinator's records (its
    # KeyValue's key is bytes, never None) and markers always have one, so only what a
    # client wrote is decoded for it (a coordinator's state write is not walked twice).
    keyed = cfg.compact_enabled and origin == ORIGIN_CLIENT
    record_errors: list[RecordError] = []
    any_timestamp, index = False, 0
    for pos, h in found:
        try:
            check_dense_offsets(h)
        except ProtocolError as e:
            raise InvalidRecordError(f"{name}: {e}") from None
        if h.records_count == 0:
            raise InvalidRecordError(f"{name}: record batch with no records")
        if h.is_control and origin == ORIGIN_CLIENT:
            raise InvalidRecordError(f"{name}: clients may not write control batches")
        if bounds is not None and h.timestamp_type != 0 and origin == ORIGIN_CLIENT:
            raise InvalidTimestampError(
                f"{name}: batch claims LogAppendTime but the topic uses CreateTime"
            )
        errors, timestamp = batch_record_errors(buf, pos, h, name, compacted=keyed, bounds=bounds)
        # indices count the records of every batch of the request (one batch: KIP-467's)
        record_errors += [RecordError(index + e.batch_index, e.message) for e in errors]
        any_timestamp |= timestamp
        index += h.records_count
    if record_errors:
        raise record_validation_error(record_errors, bounds, any_timestamp)
    return found
