"""Per-record checks of a client's batch, with an error for each record (KIP-467).

Kafka's ``LogValidator.validateRecord`` checks every record of a produced batch and
collects those that fail; the batch is then refused as a whole, but the error names each
bad record (``RecordValidationException``: the records' ``batch_index`` and message), so
that a client fails only those records and may send the others again. Per record, Kafka
checks the key first and the timestamp only when the key passed:

- a compacted topic refuses a record without a key: INVALID_RECORD, "Compacted topic
  cannot accept message without key in topic partition <tp>";
- a CreateTime topic refuses a timestamp out of ``message.timestamp.before.max.ms`` /
  ``after.max.ms``: INVALID_TIMESTAMP, "Timestamp <ts> of message with offset <offset> is
  out of range. The timestamp should be within [<now - before>, <now + after>]".

``processRecordErrors``: the batch's error is INVALID_TIMESTAMP if any record has a bad
timestamp, else INVALID_RECORD, with the summary messages below. Everything else Kafka
refuses a batch for (CRC, lengths, offsets, counts, control batches, a malformed record)
fails the batch as a whole, without record errors.

The checks cost nothing on the hot path beyond what they did before: the timestamps are
judged from the batch header when it can decide (`create_time_violation`) and decoded
per record only when a violation is possible; keys are decoded only on compacted topics.
"""

from __future__ import annotations

from dataclasses import dataclass

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.record_batch import BatchHeader
from riverbed.protocol.records import iter_records, record_timestamps
from riverbed.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    StorageError,
)
from riverbed.storage.timestamp_bounds import create_time_violation, out_of_bounds

__all__ = ["TimestampBounds", "batch_record_errors", "record_validation_error"]

#: Record errors quoted in an INVALID_RECORD summary (Kafka: "the first three at most").
SUMMARY_RECORD_ERRORS_MAX = 3


@dataclass(frozen=True)
class TimestampBounds:
    """The CreateTime bounds at ``now_ms`` (a topic's before/after.max.ms)."""

    now_ms: int
    before_max_ms: int
    after_max_ms: int

    def message(self, ts: int, offset: int) -> str:
        return (
            f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp "
            f"should be within [{self.now_ms - self.before_max_ms}, "
            f"{self.now_ms + self.after_max_ms}]"
        )


def _keyless(batch: memoryview, h: BatchHeader, name: str) -> dict[int, RecordError]:
    if h.is_control:
        return {}
    try:
        keys = [r.key for r in iter_records(batch, verify=False)]
    except ProtocolError as e:
        raise InvalidRecordError(f"{name}: {e}") from None
    message = f"Compacted topic cannot accept message without key in topic partition {name}"
    return {i: RecordError(i, message) for i, key in enumerate(keys) if key is None}


def _bad_timestamps(
    buf: bytearray, pos: int, h: BatchHeader, bounds: TimestampBounds, name: str
) -> dict[int, RecordError]:
    """The records whose CreateTime is out of bounds (header first, as before)."""
    b = bounds
    try:
        first_bad = create_time_violation(buf, pos, h, b.now_ms, b.before_max_ms, b.after_max_ms)
        if first_bad is None:
            return {}
        stamps = record_timestamps(buf, pos, h)
    except ProtocolError as e:
        raise CorruptRecordError(f"{name}: {e}") from None
    bad = {
        i: RecordError(i, b.message(ts, h.base_offset + i))
        for i, ts in enumerate(stamps)
        if out_of_bounds(ts, b.now_ms, b.before_max_ms, b.after_max_ms)
    }
    if not bad:
        # the header's first/max timestamp is out of bounds but no record is: the batch
        # lies about its records (the log trusts its max timestamp), refused as a whole
        raise InvalidTimestampError(f"{name}: {b.message(first_bad, h.base_offset)}")
    return bad


def batch_record_errors(
    buf: bytearray,
    pos: int,
    h: BatchHeader,
    name: str,
    *,
    compacted: bool,
    bounds: TimestampBounds | None,
) -> tuple[list[RecordError], bool]:
    """(the batch's record errors by index, whether one is a timestamp error).

    ``bounds`` is None when the topic does not check CreateTime (LogAppendTime).
    """
    keyless = _keyless(memoryview(buf)[pos : pos + h.size], h, name) if compacted else {}
    timestamps = _bad_timestamps(buf, pos, h, bounds, name) if bounds is not None else {}
    if not keyless and not timestamps:
        return [], False  # the usual case
    # one error per record, the key's first (Kafka's validateRecord)
    timestamps = {i: e for i, e in timestamps.items() if i not in keyless}
    merged = sorted({**keyless, **timestamps}.values(), key=lambda e: e.batch_index)
    return merged, bool(timestamps)


def record_validation_error(
    errors: list[RecordError], bounds: TimestampBounds | None, any_timestamp: bool
) -> StorageError:
    """The batch's error for its record errors (Kafka's ``processRecordErrors``: its
    summary, and for timestamps the bounds' configuration keys and the first errors)."""
    record_errors = tuple(errors)
    shown = ", ".join(str(e) for e in errors[:SUMMARY_RECORD_ERRORS_MAX])
    if any_timestamp and bounds is not None:
        message = (
            "One or more records have been rejected due to invalid timestamp "
            f"(message.timestamp.before.max.ms {bounds.before_max_ms}, "
            f"message.timestamp.after.max.ms {bounds.after_max_ms}): {len(errors)} record "
            f"errors in total, the first three at most: [{shown}]"
        )
        return InvalidTimestampError(message, record_errors)
    message = (
        f"One or more records have been rejected due to {len(errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]"
    )
    return InvalidRecordError(message, record_errors)
