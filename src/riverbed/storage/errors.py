"""Typed storage errors, each carrying the Kafka error code a broker returns for it.

The broker maps a :class:`StorageError` straight to a response error code
(``err.error_code``), so every way storage can refuse input names the Kafka code:

==========================  ====  ==========================================
exception                   code  when
==========================  ====  ==========================================
OffsetOutOfRangeError         1   read/DeleteRecords offset outside the log
CorruptRecordError            2   bad batch: CRC, length, magic, count
RecordTooLargeError          10   batch larger than ``max.message.bytes``
InvalidTimestampError        32   CreateTime outside the before/after bounds
InvalidConfigError           40   a LogConfig key or value is not acceptable
InvalidRecordError           87   batch is well-formed but not appendable here
LogDirError                  56   I/O failure in a log dir (KAFKA_STORAGE_ERROR)
LogDirNotFoundError          57   a path that is not one of ``log.dirs``
ReplicaNotAvailableError      9   no replica of the partition on this node
==========================  ====  ==========================================

The numbers are Kafka's (``org.apache.kafka.common.protocol.Errors``) and equal the
values of :class:`riverbed.protocol.errors.ErrorCode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "CorruptRecordError",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "LogDirError",
    "LogDirNotFoundError",
    "OffsetOutOfRangeError",
    "RecordError",
    "RecordTooLargeError",
    "ReplicaNotAvailableError",
    "StorageError",
]

OFFSET_OUT_OF_RANGE: Final = 1
CORRUPT_MESSAGE: Final = 2
MESSAGE_TOO_LARGE: Final = 10
INVALID_TIMESTAMP: Final = 32
INVALID_CONFIG: Final = 40
REPLICA_NOT_AVAILABLE: Final = 9
KAFKA_STORAGE_ERROR: Final = 56
LOG_DIR_NOT_FOUND: Final = 57
INVALID_RECORD: Final = 87
UNKNOWN_SERVER_ERROR: Final = -1


@dataclass(frozen=True)
class RecordError:
    """One record that made its batch fail (KIP-467): its index in the batch and why."""

    batch_index: int
    message: str

    def __str__(self) -> str:  # as Kafka's ProduceResponse.RecordError prints
        return f"RecordError(batchIndex={self.batch_index}, message='{self.message}')"


class StorageError(Exception):
    """Base of every storage error; ``error_code`` is the Kafka error code to return.

    ``record_errors`` names the records that failed a per-record check (Kafka's
    RecordValidationException); empty when the batch failed as a whole.
    """

    error_code: int = UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, record_errors: tuple[RecordError, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.record_errors = record_errors


class OffsetOutOfRangeError(StorageError):
    error_code = OFFSET_OUT_OF_RANGE


class CorruptRecordError(StorageError):
    error_code = CORRUPT_MESSAGE


class RecordTooLargeError(StorageError):
    error_code = MESSAGE_TOO_LARGE


class InvalidTimestampError(StorageError):
    error_code = INVALID_TIMESTAMP


class InvalidConfigError(StorageError):
    """A bad LogConfig entry; ``key`` and ``value`` name it."""

    error_code = INVALID_CONFIG

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for configuration {key}: {reason}")
        self.key = key
        self.value = value


class InvalidRecordError(StorageError):
    error_code = INVALID_RECORD


class LogDirError(StorageError):
    error_code = KAFKA_STORAGE_ERROR


class LogDirNotFoundError(StorageError):
    error_code = LOG_DIR_NOT_FOUND


class ReplicaNotAvailableError(StorageError):
    error_code = REPLICA_NOT_AVAILABLE
