"""FaultyFileIO: a storage file layer that fails chosen writes and fsyncs (tests only).

Injected where storage takes a :class:`~riverbed.storage.file_io.FileIO` (``io=`` of
:class:`~riverbed.storage.PartitionLog` and :class:`~riverbed.storage.LogManager`), it
passes every call to :mod:`os` until a planned fault is due:

- ``fail_write(nth, errno)``: the ``nth`` write (``pwrite``/``write``) from now raises
  ``OSError(errno)``: EIO for a failing disk, ENOSPC for a full one;
- ``fail_write(nth, torn_bytes=k)``: the write stores only its first ``k`` bytes, then
  raises (a torn write: what a crash or a failing disk leaves half-written);
- ``fail_fsync(nth, errno)``: the ``nth`` fsync (files and directories) raises;
- ``sticky=True``: after the fault every later write, fsync, truncate and rename fails
  too (a dead disk: nothing can clean up after the fault, so a torn write stays torn);
- ``heal()``: drop every plan (the disk works again, as after a restart on a new disk).

``under`` limits the faults to files below one directory (one log dir of several); other
files pass through. Every call is recorded in ``calls`` as (operation, path, thread name),
so a test can also check *where* disk work ran (e.g. not on the event loop's thread).
"""

from __future__ import annotations

import errno as errno_codes
import os
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from riverbed.storage.file_io import FileIO, StrPath

__all__ = ["FaultyFileIO"]

# Calls remembered in FaultyFileIO.calls (the oldest are dropped).
CALLS_KEPT_MAX: Final = 100_000
_WRITE = "write"
_FSYNC = "fsync"


@dataclass
class _Plan:
    kind: str  # _WRITE or _FSYNC
    remaining: int  # matching calls to let through before the fault
    errno: int
    torn_bytes: int | None
    sticky: bool


class FaultyFileIO(FileIO):
    """:class:`FileIO` with planned faults (see the module docstring)."""

    def __init__(self, under: StrPath | None = None) -> None:
        self.under = Path(under).resolve() if under is not None else None
        self._lock = threading.Lock()
        self._paths: dict[int, Path] = {}  # fd -> path, for the `under` filter
        self._plans: list[_Plan] = []
        self._dead_errno: int | None = None  # set by a sticky fault
        self.calls: deque[tuple[str, str, str]] = deque(maxlen=CALLS_KEPT_MAX)
        self.faults = 0  # faults raised so far

    # ---- planning ------------------------------------------------------------------------

    def fail_write(
        self,
        nth: int = 1,
        errno: int = errno_codes.EIO,
        *,
        torn_bytes: int | None = None,
        sticky: bool = False,
    ) -> None:
        assert nth >= 1
        with self._lock:
            self._plans.append(_Plan(_WRITE, nth - 1, errno, torn_bytes, sticky))

    def fail_fsync(
        self, nth: int = 1, errno: int = errno_codes.EIO, *, sticky: bool = False
    ) -> None:
        assert nth >= 1
        with self._lock:
            self._plans.append(_Plan(_FSYNC, nth - 1, errno, None, sticky))

    def heal(self) -> None:
        with self._lock:
            self._plans.clear()
            self._dead_errno = None

    # ---- the fault decision --------------------------------------------------------------

    def _path_of(self, target: int | StrPath) -> Path | None:
        if isinstance(target, int):
            return self._paths.get(target)
        return Path(target).resolve()

    def _matches(self, path: Path | None) -> bool:
        if self.under is None:
            return True
        return path is not None and path.is_relative_to(self.under)

    def _due(self, kind: str, op: str, target: int | StrPath) -> _Plan | None:
        """Record the call; the plan that fails it (or raise for a dead disk)."""
        path = self._path_of(target)
        self.calls.append((op, str(path), threading.current_thread().name))
        if not self._matches(path):
            return None
        with self._lock:
            if self._dead_errno is not None:
                self.faults += 1
                raise OSError(self._dead_errno, os.strerror(self._dead_errno), str(path))
            for plan in self._plans:
                if plan.kind != kind:
                    continue
                if plan.remaining:
                    plan.remaining -= 1
                    continue
                self._plans.remove(plan)
                if plan.sticky:
                    self._dead_errno = plan.errno
                self.faults += 1
                return plan
        return None

    @staticmethod
    def _error(plan: _Plan, path: object) -> OSError:
        return OSError(plan.errno, os.strerror(plan.errno), str(path))

    # ---- FileIO --------------------------------------------------------------------------

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        fd = os.open(path, flags, mode)
        self._paths[fd] = Path(path).resolve()
        return fd

    def dup(self, fd: int) -> int:
        new = os.dup(fd)
        path = self._paths.get(fd)
        if path is not None:
            self._paths[new] = path
        return new

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        plan = self._due(_WRITE, "pwrite", fd)
        if plan is not None:
            if plan.torn_bytes:
                os.pwrite(fd, memoryview(data)[: plan.torn_bytes], offset)
            raise self._error(plan, self._paths.get(fd))
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        plan = self._due(_WRITE, "write", fd)
        if plan is not None:
            if plan.torn_bytes:
                os.write(fd, memoryview(data)[: plan.torn_bytes])
            raise self._error(plan, self._paths.get(fd))
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        plan = self._due(_FSYNC, "fsync", fd)
        if plan is not None:
            raise self._error(plan, self._paths.get(fd))
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        self._check_alive("ftruncate", fd)
        os.ftruncate(fd, size)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        self._check_alive("replace", src)
        os.replace(src, dst)

    def unlink(self, path: Path, *, missing_ok: bool = True) -> None:
        self._check_alive("unlink", path)
        path.unlink(missing_ok=missing_ok)

    def _check_alive(self, op: str, target: int | StrPath) -> None:
        path = self._path_of(target)
        self.calls.append((op, str(path), threading.current_thread().name))
        dead = self._dead_errno
        if dead is not None and self._matches(path):
            self.faults += 1
            raise OSError(dead, os.strerror(dead), str(path))
