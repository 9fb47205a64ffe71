"""The file handler of ``state-change.log``: a size-rotated file, cheap per line.

A metadata change of 10,000 partitions writes 10,000 to 30,000 state-change lines on the
event loop (the controller's decisions, each broker's received / become-leader lines).
Python's ``RotatingFileHandler`` pays per line for two ``stat`` calls of its path (it never
rotates anything but a regular file, bpo-45401), a seek to the file's end and a second
formatting of the record to measure it. This handler counts the bytes it wrote instead
and formats each record once; it rotates as Kafka's log4j ``RollingFileAppender`` does:
at ``max_bytes``, keeping ``backups`` old files (``state-change.log.1`` the newest).
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path


class StateChangeFileHandler(logging.handlers.RotatingFileHandler):
    """``RotatingFileHandler`` with the size kept in memory (see the module docstring).
    Each line is flushed as it is written, as log4j's ``immediateFlush``."""

    def __init__(self, path: str | Path, max_bytes: int, backups: int) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._bytes = self._size_now()

    def _size_now(self) -> int:
        return 0 if self.stream is None else self.stream.seek(0, 2)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            size = len(line.encode("utf-8"))
            if self._bytes and self._bytes + size >= self.maxBytes:
                self.doRollover()
                self._bytes = self._size_now()
            if self.stream is None:
                self.stream = self._open()
            self.stream.write(line)
            self.stream.flush()
            self._bytes += size
        except Exception:
            self.handleError(record)
