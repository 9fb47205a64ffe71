"""Checkpoint and metadata files of a log dir, in Kafka's text formats.

Every file is written atomically: to ``<name>.tmp``, fsynced, renamed over the old file,
and the directory fsynced, so a crash leaves either the old or the new content.

Offset checkpoints (per log dir: ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``)::

    0                       version
    2                       number of entries
    my-topic 0 1234         topic, partition, offset (space separated)
    my-topic 1 99

``leader-epoch-checkpoint`` (per partition dir)::

    0                       version
    2                       number of entries
    0 0                     leader epoch, start offset
    3 1500

``partition.metadata`` (per partition dir)::

    version: 0
    topic_id: <22-char base64url topic UUID>

``meta.properties`` (per log dir, Java properties; KRaft version 1)::

    #
    #<comment>
    cluster.id=<id>
    directory.id=<id>
    node.id=1
    version=1

Readers raise :class:`CheckpointError` (a :class:`~riverbed.storage.errors.LogDirError`)
naming the file and line for anything malformed; callers decide whether to ignore the
file (Kafka ignores a corrupt recovery point and recovers everything).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from riverbed.storage.errors import LogDirError
from riverbed.storage.file_io import OS_FILE_IO, FileIO

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CheckpointError",
    "fsync_dir",
    "read_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "write_atomic",
    "write_epoch_checkpoint",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
PARTITION_METADATA: Final = "partition.metadata"
META_PROPERTIES: Final = "meta.properties"
CHECKPOINT_VERSION: Final = 0
# A checkpoint holds one line per partition of a dir; refuse absurd counts before allocating.
CHECKPOINT_ENTRIES_MAX: Final = 10_000_000
CHECKPOINT_FILE_BYTES_MAX: Final = 1 << 30


class CheckpointError(LogDirError):
    """A checkpoint or metadata file that does not parse."""


def fsync_dir(path: Path, io: FileIO = OS_FILE_IO) -> None:
    """fsync a directory so a rename or new file in it survives a crash."""
    io.fsync_dir(path)


def write_atomic(path: Path, text: str, *, sync: bool = True, io: FileIO = OS_FILE_IO) -> None:
    """Write ``text`` to ``path`` via ``path.tmp`` + fsync + rename (+ dir fsync)."""
    tmp = path.with_name(path.name + ".tmp")
    data = text.encode("utf-8")
    fd = io.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[io.write(fd, view) :]
        if sync:
            io.fsync(fd)
    finally:
        io.close(fd)
    io.replace(tmp, path)
    if sync:
        io.fsync_dir(path.parent)


def _read_text(path: Path) -> str | None:
    try:
        size = path.stat().st_size
        if size > CHECKPOINT_FILE_BYTES_MAX:
            raise CheckpointError(f"{path}: {size} bytes is too large for a checkpoint")
        return path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({e})") from None


def _read_versioned_lines(path: Path) -> list[list[str]] | None:
    text = _read_text(path)
    if text is None:
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"{path}: version/count lines are not integers") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: unsupported checkpoint version {version}")
    if not 0 <= count <= CHECKPOINT_ENTRIES_MAX:
        raise CheckpointError(f"{path}: entry count {count} out of range")
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}``; empty when the file does not exist."""
    entries = _read_versioned_lines(path)
    if entries is None:
        return {}
    out: dict[tuple[str, int], int] = {}
    for lineno, fields in enumerate(entries, start=3):
        if len(fields) != 3:
            raise CheckpointError(f"{path}:{lineno}: expected 'topic partition offset'")
        try:
            out[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError:
            raise CheckpointError(f"{path}:{lineno}: partition/offset not integers") from None
    return out


def write_offset_checkpoint(
    path: Path,
    offsets: Mapping[tuple[str, int], int],
    *,
    sync: bool = True,
    io: FileIO = OS_FILE_IO,
) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomic(path, "\n".join(lines) + "\n", sync=sync, io=io)


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """``[(epoch, start offset), ...]`` in file order; empty when missing."""
    entries = _read_versioned_lines(path)
    if entries is None:
        return []
    out: list[tuple[int, int]] = []
    for lineno, fields in enumerate(entries, start=3):
        if len(fields) != 2:
            raise CheckpointError(f"{path}:{lineno}: expected 'epoch start_offset'")
        try:
            out.append((int(fields[0]), int(fields[1])))
        except ValueError:
            raise CheckpointError(f"{path}:{lineno}: epoch/offset not integers") from None
    return out


def write_epoch_checkpoint(
    path: Path,
    entries: Iterable[tuple[int, int]],
    *,
    sync: bool = True,
    io: FileIO = OS_FILE_IO,
) -> None:
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))] + [f"{e} {o}" for e, o in items]
    write_atomic(path, "\n".join(lines) + "\n", sync=sync, io=io)


def read_partition_metadata(path: Path) -> str | None:
    """The topic id in ``partition.metadata``, or None when the file does not exist."""
    text = _read_text(path)
    if text is None:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise CheckpointError(f"{path}: malformed line {line!r}")
        fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CheckpointError(f"{path}: expected 'version: 0' and 'topic_id: ...'")
    return fields["topic_id"]


def write_partition_metadata(path: Path, topic_id: str, io: FileIO = OS_FILE_IO) -> None:
    write_atomic(path, f"version: 0\ntopic_id: {topic_id}\n", io=io)


def read_meta_properties(path: Path) -> dict[str, str] | None:
    """The key/value pairs of a ``meta.properties`` file (None when missing)."""
    text = _read_text(path)
    if text is None:
        return None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CheckpointError(f"{path}: malformed line {line!r}")
        props[key.strip()] = value.strip()
    return props


def write_meta_properties(path: Path, props: Mapping[str, str], comment: str = "") -> None:
    lines = ["#", f"#{comment}"] + [f"{k}={v}" for k, v in sorted(props.items())]
    write_atomic(path, "\n".join(lines) + "\n")
