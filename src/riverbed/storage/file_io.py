"""FileIO: the system calls through which storage writes, syncs and renames its files.

Every write path of :mod:`riverbed.storage` (segment ``.log`` files, both indexes, the
checkpoint files, directory fsyncs, renames and unlinks) calls these methods on a
``FileIO`` handed down from the :class:`~riverbed.storage.log_manager.LogManager` or the
:class:`~riverbed.storage.log.PartitionLog` constructor. Production uses
:data:`OS_FILE_IO`, which is :mod:`os` itself; tests inject
:class:`riverbed.testing.faulty_files.FaultyFileIO` to fail the Nth write or fsync with
EIO or ENOSPC, or to tear a write, without touching :mod:`os`.

Reads (``pread``, the sendfile ranges of fetch) stay on :mod:`os`: a failing disk is
detected by its writes and fsyncs, as Kafka's log dir failure handling does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["OS_FILE_IO", "FileIO"]

StrPath = str | os.PathLike[str]


class FileIO:
    """The write-side system calls of storage (each one is :mod:`os`'s by default)."""

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def dup(self, fd: int) -> int:
        return os.dup(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        os.replace(src, dst)

    def unlink(self, path: Path, *, missing_ok: bool = True) -> None:
        path.unlink(missing_ok=missing_ok)

    def fsync_dir(self, path: StrPath) -> None:
        """fsync a directory so a rename or a new file in it survives a crash."""
        fd = self.open(path, os.O_RDONLY)
        try:
            self.fsync(fd)
        finally:
            self.close(fd)


#: The production instance: plain :mod:`os` calls.
OS_FILE_IO: Final = FileIO()
