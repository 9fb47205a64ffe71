"""What `LogManager` keeps that its mixins (`riverbed.storage.log_moves.LogMoves`,
`riverbed.storage.log_housekeeping.LogHousekeeping`) read and change: declared once here,
set by ``LogManager.__init__``. Every field is guarded by ``_lock`` where the mixins touch it
from the pool's threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from riverbed.storage.file_io import FileIO
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_dir import LogDir

#: A partition: (topic, partition index).
Key = tuple[str, int]


class LogManagerState:
    """The shared fields of `LogManager` (annotations only: no behaviour)."""

    log_dirs: list[Path]
    _dirs: dict[Path, LogDir]
    _lock: threading.RLock
    _logs: dict[Key, PartitionLog]
    _dir_of: dict[Key, Path]
    #: the bounded pool of flushes, retention, deletes and checkpoint writes
    _pool: ThreadPoolExecutor
    _closed: bool
    _io: FileIO
    #: (due ms, path) of deleted partition dirs removed after file.delete.delay.ms
    _pending_dir_deletes: list[tuple[int, Path]]
