"""LogDir: the health of one log directory (Kafka's ``LogDirFailureChannel``, per dir).

A failed write or fsync (EIO, ENOSPC, ...) in a log dir is never retried as if nothing
happened (fsyncgate: after a failed fsync the kernel may have dropped the dirty pages and
a second fsync reports success over lost data). The first ``OSError`` of any write path
of any partition log in the dir takes the whole dir offline, for good in this process:

- every log in it refuses appends, reads, flushes and truncations with
  :class:`~riverbed.storage.errors.LogDirError` (KAFKA_STORAGE_ERROR, code 56) naming
  the dir and the first failure;
- no recovery point advances any more (a flush whose fsyncs succeeded after the failure
  does not count), and no checkpoint is written to the dir;
- the owner is told once (``on_offline``): the LogManager halts the node when no log dir
  is left online or when the dir holds the metadata log, as Kafka does.

A restart with the disk healthy again recovers the dir's logs from their checkpointed
recovery points (the unclean-shutdown path).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from riverbed.storage.errors import LogDirError

__all__ = ["LogDir"]

log = logging.getLogger(__name__)


class LogDir:
    """Online until the first I/O failure of any log in it; offline from then on."""

    def __init__(self, path: Path, on_offline: Callable[[LogDir, OSError], None] | None = None):
        self.path = path
        self._on_offline = on_offline
        self._lock = threading.Lock()
        self.failure: str | None = None  # the first failure, once offline

    @property
    def offline(self) -> bool:
        return self.failure is not None

    def error(self, name: str) -> LogDirError:
        return LogDirError(f"{name}: log dir {self.path} is offline after {self.failure}")

    def check(self, name: str) -> None:
        """Raise :class:`LogDirError` for ``name`` (a log) when the dir is offline."""
        if self.failure is not None:
            raise self.error(name)

    def fail(self, what: str, cause: OSError) -> LogDirError:
        """Take the dir offline after ``cause`` (the first call wins); the error to raise.

        ``on_offline`` runs once, in the caller's thread (possibly holding a log's lock:
        it must not take another log's lock).
        """
        with self._lock:
            first = self.failure is None
            if first:
                self.failure = f"{what}: {type(cause).__name__}: {cause}"
        if first:
            log.error("log dir %s is offline: %s", self.path, self.failure)
            if self._on_offline is not None:
                self._on_offline(self, cause)
        return LogDirError(f"{what}: {cause} (log dir {self.path} is offline)")
