"""On-disk snapshot store for the metadata partition directory (the I/O shell of
``riverbed.raft.snapshots``).

Files in ``<metadata.log.dir>/__cluster_metadata-0/``::

    00000000000000005120-0000000002.checkpoint        complete snapshot (end offset, epoch)
    00000000000000005120-0000000002.checkpoint.part   being written or downloaded

A snapshot is written to its ``.part`` file, fsynced, renamed to ``.checkpoint`` and the
directory fsynced, so a crash leaves either the whole snapshot or a ``.part`` that
``remove_partial_files`` deletes at start-up (KIP-630). Reads serve FetchSnapshot
(``position``/``max_bytes``); a single read is bounded by ``max_bytes``.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from riverbed.raft.messages import SnapshotId
from riverbed.raft.snapshots import (
    PARTIAL_SUFFIX,
    SNAPSHOT_SUFFIX,
    SnapshotNotFoundError,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from riverbed.storage.checkpoints import fsync_dir


class SnapshotFileError(OSError):
    """A snapshot file operation was inconsistent (e.g. a chunk at the wrong position)."""


class FileSnapshotStore:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def _part(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / (snapshot_id.file_stem() + PARTIAL_SUFFIX)

    def list(self) -> list[SnapshotId]:
        ids = []
        for name in os.listdir(self.directory):
            sid = parse_snapshot_file_name(name)
            if sid is not None:
                ids.append(sid)
        return sorted(ids)

    def remove_partial_files(self) -> builtins.list[str]:
        """Start-up: delete ``.checkpoint.part`` files left by a crash; returns their names."""
        removed = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(PARTIAL_SUFFIX):
                os.unlink(self.directory / name)
                removed.append(name)
        if removed:
            fsync_dir(self.directory)
        return removed

    def size(self, snapshot_id: SnapshotId) -> int:
        try:
            return self._path(snapshot_id).stat().st_size
        except FileNotFoundError:
            raise SnapshotNotFoundError(snapshot_id) from None

    def read(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        if position < 0 or max_bytes < 0:
            raise ValueError(f"bad snapshot read position {position} / max_bytes {max_bytes}")
        try:
            with open(self._path(snapshot_id), "rb") as f:
                f.seek(position)
                return f.read(max_bytes)
        except FileNotFoundError:
            raise SnapshotNotFoundError(snapshot_id) from None

    def read_all(self, snapshot_id: SnapshotId) -> bytes:
        return self.read(snapshot_id, 0, self.size(snapshot_id))

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.write_chunks(snapshot_id, [data])

    def write_chunks(self, snapshot_id: SnapshotId, chunks: Iterable[bytes]) -> int:
        """Stream a snapshot to its ``.part`` file, fsync, rename; returns its size."""
        part = self._part(snapshot_id)
        size = 0
        try:
            with open(part, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    size += len(chunk)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
        self._commit(snapshot_id)
        return size

    def _commit(self, snapshot_id: SnapshotId) -> None:
        os.replace(self._part(snapshot_id), self._path(snapshot_id))
        fsync_dir(self.directory)

    def begin_download(self, snapshot_id: SnapshotId) -> None:
        with open(self._part(snapshot_id), "wb"):
            pass

    def partial_size(self, snapshot_id: SnapshotId) -> int:
        return self._part(snapshot_id).stat().st_size

    def read_partial(self, snapshot_id: SnapshotId) -> bytes:
        """A finished download's bytes, for validation before ``complete_download``."""
        return self._part(snapshot_id).read_bytes()

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        part = self._part(snapshot_id)
        with open(part, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size != position:
                raise SnapshotFileError(
                    f"{part.name}: chunk at position {position} but the file has {size} bytes"
                )
            f.write(data)

    def complete_download(self, snapshot_id: SnapshotId) -> None:
        with open(self._part(snapshot_id), "rb+") as f:
            os.fsync(f.fileno())
        self._commit(snapshot_id)

    def abort_download(self, snapshot_id: SnapshotId) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._part(snapshot_id))

    def delete(self, snapshot_id: SnapshotId) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(snapshot_id))


__all__ = ["SNAPSHOT_SUFFIX", "FileSnapshotStore", "SnapshotFileError"]
