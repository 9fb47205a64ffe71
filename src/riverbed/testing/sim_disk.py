"""SimDisk: a storage file layer that remembers what an fsync made durable (tests only).

Injected where storage takes a :class:`~riverbed.storage.file_io.FileIO` (``io=`` of
:class:`~riverbed.storage.LogManager`), it passes every call to :mod:`os` and keeps, per
file, the content its last ``fsync`` covered. The files are real (reads stay on
:mod:`os`, as storage's do); what a crash leaves of them is the simulation's choice:

- ``process_crash()``: SIGKILL. The page cache survives: every written byte stays.
- ``power_loss(rng)``: every file written, truncated or renamed over since its last fsync
  goes back to the content that fsync covered, plus (sometimes) a random prefix of the
  bytes appended after it, cut anywhere (a torn write); a file never fsynced goes away.
  ``flush.messages`` is unlimited by default, so this is where an unflushed tail is lost.
- ``replace_disk()``: the directory is gone (a new, empty disk).

A rename of a file whose content was fsynced is durable at once (storage fsyncs the
directory after its renames); a rename of an unsynced file leaves the target's old
durable content (or nothing) for a power loss to find, as ext4 may.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from riverbed.storage.file_io import FileIO, StrPath

__all__ = ["SimDisk"]

#: A power loss keeps a random prefix of a file's unsynced appended bytes this often.
TORN_TAIL_P = 0.5


class SimDisk(FileIO):
    """:class:`FileIO` over the files below ``root`` that tracks their durable content."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: dict[int, str] = {}  # fd -> path
        # path -> content its last fsync covered (None: never durable, gone after a power
        # loss); a path is in it once written through this layer
        self._durable: dict[str, bytes | None] = {}
        self._dirty: set[str] = set()  # changed since that fsync
        self.fsyncs = 0
        root.mkdir(parents=True, exist_ok=True)

    # ---- FileIO --------------------------------------------------------------------------

    def open(self, path: StrPath, flags: int, mode: int = 0o644) -> int:
        p = os.fspath(path)
        existed = os.path.exists(p)
        fd = os.open(p, flags, mode)
        self._paths[fd] = p
        if not existed:
            self._durable[p] = None
            self._dirty.add(p)
        elif flags & os.O_TRUNC:
            self._touch(p)
        return fd

    def dup(self, fd: int) -> int:
        new = os.dup(fd)
        if fd in self._paths:
            self._paths[new] = self._paths[fd]
        return new

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._touch_fd(fd)
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._touch_fd(fd)
        return os.write(fd, data)

    def ftruncate(self, fd: int, size: int) -> None:
        self._touch_fd(fd)
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        p = self._paths.get(fd)
        if p is not None and p in self._dirty and os.path.isfile(p):
            with open(p, "rb") as f:
                self._durable[p] = f.read()
            self._dirty.discard(p)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        s, d = os.fspath(src), os.fspath(dst)
        os.replace(s, d)
        if os.path.isdir(d):
            self._move_tree(s, d)
            return
        if s not in self._dirty:
            self._durable[d] = self._durable.pop(s, None)
            self._dirty.discard(d)
        else:  # the new content was never synced: a power loss finds the old (or none)
            self._durable.pop(s, None)
            self._dirty.discard(s)
            self._durable.setdefault(d, None)
            self._dirty.add(d)

    def unlink(self, path: Path, *, missing_ok: bool = True) -> None:
        path.unlink(missing_ok=missing_ok)
        p = os.fspath(path)
        self._durable.pop(p, None)
        self._dirty.discard(p)

    def fsync_dir(self, path: StrPath) -> None:
        self.fsyncs += 1

    # ---- crashes -------------------------------------------------------------------------

    def process_crash(self) -> None:
        """SIGKILL: what was written stays (the page cache is the kernel's)."""
        self._paths.clear()

    def power_loss(self, rng: random.Random) -> int:
        """Every file back to its last fsync (see the module docstring); the bytes lost."""
        self._paths.clear()
        lost = 0
        for p in sorted(self._dirty):
            if not os.path.isfile(p):
                continue
            durable = self._durable.get(p)
            with open(p, "rb") as f:
                now = f.read()
            if durable is None:
                os.unlink(p)
                self._durable.pop(p, None)
                lost += len(now)
                continue
            kept = durable
            if now.startswith(durable) and len(now) > len(durable) and rng.random() < TORN_TAIL_P:
                kept = now[: rng.randint(len(durable), len(now))]
            with open(p, "wb") as f:
                f.write(kept)
            lost += abs(len(now) - len(kept))
        self._dirty.clear()
        return lost

    def replace_disk(self) -> None:
        """A new, empty disk in place of the old one."""
        self._paths.clear()
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self._durable.clear()
        self._dirty.clear()

    # ---- internals -----------------------------------------------------------------------

    def _touch_fd(self, fd: int) -> None:
        p = self._paths.get(fd)
        if p is not None:
            self._touch(p)

    def _touch(self, p: str) -> None:
        if p not in self._durable:
            # a file from before this layer saw it (none in the simulation): take what is
            # there as durable
            with open(p, "rb") as f:
                self._durable[p] = f.read()
        self._dirty.add(p)

    def _move_tree(self, src: str, dst: str) -> None:
        prefix = src.rstrip(os.sep) + os.sep
        for table in (self._durable,):
            for p in [q for q in table if q.startswith(prefix)]:
                table[dst + os.sep + p[len(prefix) :]] = table.pop(p)
        for p in [q for q in self._dirty if q.startswith(prefix)]:
            self._dirty.discard(p)
            self._dirty.add(dst + os.sep + p[len(prefix) :])
        for fd, p in list(self._paths.items()):
            if p.startswith(prefix):
                self._paths[fd] = dst + os.sep + p[len(prefix) :]
