"""riverbed.storage: the on-disk partition log and the manager of a node's logs.

See :mod:`riverbed.storage.log` (PartitionLog, the unified log over
:mod:`riverbed.storage.local_log`'s LocalLog of segments), :mod:`riverbed.storage.log_manager`
(LogManager), :mod:`riverbed.storage.segment` and the index and checkpoint modules for
the file formats (Kafka's, byte for byte).
"""

from riverbed.storage.clock import Clock, ManualClock
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    LogDirError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from riverbed.storage.log import AppendInfo, PartitionLog, RetentionHook
from riverbed.storage.log_files import FileRange, ReadResult, TimestampOffset
from riverbed.storage.log_manager import LogManager

__all__ = [
    "AppendInfo",
    "Clock",
    "CorruptRecordError",
    "FileRange",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "LogConfig",
    "LogDirError",
    "LogManager",
    "ManualClock",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ReadResult",
    "RecordTooLargeError",
    "RetentionHook",
    "StorageError",
    "TimestampOffset",
]
