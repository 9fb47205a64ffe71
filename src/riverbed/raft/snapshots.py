"""Snapshot storage as the raft node sees it (KIP-630), and an in-memory implementation.

A snapshot ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`` holds the state
machine's image of every record below ``end_offset``. While being written (by the local
state machine, or downloaded with FetchSnapshot) it is a ``.checkpoint.part`` that is
renamed when complete, so only complete snapshots are ever listed; a download is validated
(``read_partial`` + ``snapshot_format.read_snapshot``) before it is completed. The file contents (record
batches from SnapshotHeader to SnapshotFooter) are produced by the state machine with
``riverbed.raft.snapshot_format``; the node only moves bytes. ``FileSnapshotStore``
(``riverbed.raft.snapshot_files``) is the on-disk version.
"""

from __future__ import annotations

from typing import Protocol

from riverbed.raft.messages import SnapshotId

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return snapshot_id.file_stem() + SNAPSHOT_SUFFIX


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    """The id in ``00000000000000000042-0000000003.checkpoint``; None for other names."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    offset, dash, epoch = stem.partition("-")
    if not dash or len(offset) != 20 or len(epoch) != 10:
        return None
    if not (offset.isdigit() and epoch.isdigit()):
        return None
    return SnapshotId(int(offset), int(epoch))


class SnapshotStore(Protocol):
    def list(self) -> list[SnapshotId]: ...
    def size(self, snapshot_id: SnapshotId) -> int: ...
    def read(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes: ...
    def write(self, snapshot_id: SnapshotId, data: bytes) -> None: ...
    def begin_download(self, snapshot_id: SnapshotId) -> None: ...
    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None: ...
    def partial_size(self, snapshot_id: SnapshotId) -> int: ...
    def read_partial(self, snapshot_id: SnapshotId) -> bytes: ...
    def complete_download(self, snapshot_id: SnapshotId) -> None: ...
    def abort_download(self, snapshot_id: SnapshotId) -> None: ...
    def delete(self, snapshot_id: SnapshotId) -> None: ...


def finish_download(store: SnapshotStore, snapshot_id: SnapshotId) -> str | None:
    """Validate a fully downloaded ``.part`` (every batch's CRC, the SnapshotHeader first
    and the SnapshotFooter last, contiguous offsets, the snapshot's epoch) and, when it is
    sound, make it durable under its final name. Returns the problem, or None when done.
    Disk work (a whole read, fsyncs, a rename): the shells run it off their event loop."""
    from riverbed.raft.snapshot_format import SnapshotFormatError, read_snapshot

    try:
        read_snapshot(store.read_partial(snapshot_id), snapshot_id)
    except SnapshotFormatError as exc:
        return str(exc)
    store.complete_download(snapshot_id)
    return None


class SnapshotNotFoundError(KeyError):
    pass


class MemorySnapshotStore:
    """Complete snapshots survive a crash (``durable_copy``); partial downloads do not."""

    def __init__(self) -> None:
        self._complete: dict[SnapshotId, bytes] = {}
        self._partial: dict[SnapshotId, bytearray] = {}

    def list(self) -> list[SnapshotId]:
        return sorted(self._complete)

    def _get(self, snapshot_id: SnapshotId) -> bytes:
        try:
            return self._complete[snapshot_id]
        except KeyError:
            raise SnapshotNotFoundError(snapshot_id) from None

    def size(self, snapshot_id: SnapshotId) -> int:
        return len(self._get(snapshot_id))

    def read(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        return self._get(snapshot_id)[position : position + max_bytes]

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._complete[snapshot_id] = bytes(data)

    def begin_download(self, snapshot_id: SnapshotId) -> None:
        self._partial[snapshot_id] = bytearray()

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        buf = self._partial[snapshot_id]
        assert position == len(buf), (position, len(buf))
        buf += data

    def partial_size(self, snapshot_id: SnapshotId) -> int:
        return len(self._partial[snapshot_id])

    def read_partial(self, snapshot_id: SnapshotId) -> bytes:
        return bytes(self._partial[snapshot_id])

    def complete_download(self, snapshot_id: SnapshotId) -> None:
        self._complete[snapshot_id] = bytes(self._partial.pop(snapshot_id))

    def abort_download(self, snapshot_id: SnapshotId) -> None:
        self._partial.pop(snapshot_id, None)

    def delete(self, snapshot_id: SnapshotId) -> None:
        self._complete.pop(snapshot_id, None)

    def get(self, snapshot_id: SnapshotId) -> bytes:
        return self._get(snapshot_id)

    def durable_copy(self) -> MemorySnapshotStore:
        copy = MemorySnapshotStore()
        copy._complete = dict(self._complete)
        return copy
