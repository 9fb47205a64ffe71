"""The remote storage manager: remote segments in any fsspec file system (file://, s3://).

Configured under Kafka's ``rsm.config.`` prefix (``remote.log.storage.manager.impl.prefix``):

==================================  ===================================================
rsm.config.url                      ``file:///abs/dir`` or ``s3://bucket/prefix`` (any
                                    fsspec URL: gcs://, abfs:// with their packages)
rsm.config.s3.endpoint.url          S3 endpoint (SeaweedFS, MinIO, ...); default AWS
rsm.config.s3.access.key.id         S3 credentials (default: the usual AWS chain)
rsm.config.s3.secret.access.key
rsm.config.s3.region                default us-east-1
rsm.config.s3.timeout.ms            connect/read timeout of one S3 call (default 10000)
==================================  ===================================================

Object layout (one prefix per partition, one upload = one segment id)::

    <url>/<topic>-<topic id>/<partition>/
        <segment id>.log                       the segment's batches, as on disk
        <segment id>.index, .timeindex         its offset and time index (if present)
        <segment id>.txnindex                  its aborted transactions (if any, KIP-405)
        <segment id>.snapshot                  complete producer snapshot as of its end
                                               + 1 (Kafka's format; if the log has one)
        <segment id>.leader-epoch-checkpoint   the epochs covering it (Kafka's text format)
        <segment id>.remotelogindex            its remote log index entries (shipped so
                                               followers build the same local indexes)
        <segment id>.manifest.json             written LAST: the upload is complete
        <segment id>.fenced                    a newer leader fenced this upload (text:
                                               the fencing leader epoch)

``segment id`` = ``<20-digit base offset>-<copy leader epoch>-<32 hex uuid4>``: a new
uuid per upload attempt, so a retried or concurrent upload never overwrites another; the
epoch is the partition leader epoch the upload was made at (ids of the older
``<base>-<uuid>`` form have epoch -1). Objects whose segment id has no manifest are
leftovers of a failed attempt or uploads still running.
Deletion removes the manifest first (the segment is gone at once), then the rest.

Leader-epoch fencing (Kafka copies only as the leader at its epoch and deletes stale
copies), :func:`fence_segments`: a complete segment is stale, and invisible to readers,
when it is fenced, or when a segment copied at a higher leader epoch starts at or below
its base offset (a deposed leader's late upload after the new leader's). A leader at
epoch E fences an unfinished upload of an epoch below E by writing ``.fenced`` before
deleting its objects, so a deposed leader that is still alive and publishes its manifest
afterwards publishes a stale segment; the leader deletes stale segments (the marker
last, once the manifest it fences exists). A leader publishes a manifest only while it
still leads at the upload's epoch (``publish_if``), else it deletes its objects.

The manifest (JSON, UTF-8)::

    {"version": 0, "segment_id": ..., "base_offset": int, "end_offset": int (last offset),
     "max_timestamp": int, "size_bytes": int, "leader_epochs": [[epoch, start], ...],
     "created_ms": int, "files": [suffix, ...], "copy_leader_epoch": int}

Every call blocks (network I/O): only the server's bounded copier/reader pools call it.
Failures raise :class:`RemoteStorageError` (retriable) or
:class:`RemoteResourceNotFoundError` (the object is gone, e.g. deleted by retention).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

from riverbed.storage.txn_index import AbortedTxn, CorruptTxnIndexError
from riverbed.storage.txn_index import decode_entries as decode_txn_entries
from riverbed.tiered.remote_log_index import (
    RemoteLogIndexEntry,
    decode_entries,
    encode_entries,
)

__all__ = [
    "RSM_CONFIG_PREFIX",
    "FsspecRemoteStorageManager",
    "RemoteListing",
    "RemoteResourceNotFoundError",
    "RemoteSegmentMetadata",
    "RemoteStorageError",
    "SegmentUpload",
    "UploadAbandonedError",
    "fence_segments",
    "new_segment_id",
    "segment_id_epoch",
]

log = logging.getLogger(__name__)

RSM_CONFIG_PREFIX: Final = "rsm.config."
MANIFEST_SUFFIX: Final = ".manifest.json"
S3_TIMEOUT_MS_DEFAULT: Final = 10_000
#: Attempts of one S3 call inside botocore before our own retry/back-off takes over.
S3_ATTEMPTS_MAX: Final = 2
_DATA_SUFFIXES: Final = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
TXN_INDEX_SUFFIX: Final = ".txnindex"
_EPOCHS_SUFFIX: Final = ".leader-epoch-checkpoint"
_ENTRIES_SUFFIX: Final = ".remotelogindex"
FENCED_SUFFIX: Final = ".fenced"


class RemoteStorageError(Exception):
    """The remote tier failed (unreachable, timed out, refused): retriable."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The remote object does not exist (deleted)."""


class UploadAbandonedError(Exception):
    """The uploader stopped leading at the upload's epoch: nothing was published."""


@dataclass(frozen=True, slots=True)
class RemoteSegmentMetadata:
    """A complete remote segment (its manifest)."""

    segment_id: str
    base_offset: int
    end_offset: int  # last offset in the segment
    max_timestamp: int
    size_bytes: int
    leader_epochs: tuple[tuple[int, int], ...]
    created_ms: int
    files: tuple[str, ...]
    copy_epoch: int = -1  # the leader epoch the segment was copied at

    def to_json(self) -> bytes:
        doc = {
            "version": 0,
            "segment_id": self.segment_id,
            "base_offset": self.base_offset,
            "end_offset": self.end_offset,
            "max_timestamp": self.max_timestamp,
            "size_bytes": self.size_bytes,
            "leader_epochs": [list(e) for e in self.leader_epochs],
            "created_ms": self.created_ms,
            "files": list(self.files),
            "copy_leader_epoch": self.copy_epoch,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RemoteSegmentMetadata:
        doc = json.loads(data)
        if doc.get("version") != 0:
            raise ValueError(f"unknown manifest version {doc.get('version')!r}")
        return cls(
            segment_id=str(doc["segment_id"]),
            base_offset=int(doc["base_offset"]),
            end_offset=int(doc["end_offset"]),
            max_timestamp=int(doc["max_timestamp"]),
            size_bytes=int(doc["size_bytes"]),
            leader_epochs=tuple((int(e), int(s)) for e, s in doc["leader_epochs"]),
            created_ms=int(doc["created_ms"]),
            files=tuple(str(f) for f in doc["files"]),
            copy_epoch=int(doc.get("copy_leader_epoch", segment_id_epoch(doc["segment_id"]))),
        )


@dataclass(frozen=True, slots=True)
class SegmentUpload:
    """Everything one upload sends (local paths are read in the copier thread)."""

    segment_id: str
    log_path: Path
    entries: list[RemoteLogIndexEntry]
    base_offset: int
    end_offset: int
    max_timestamp: int
    size_bytes: int
    leader_epochs: tuple[tuple[int, int], ...]
    created_ms: int
    offset_index_path: Path | None = None
    time_index_path: Path | None = None
    txn_index_path: Path | None = None
    producer_snapshot_path: Path | None = None
    #: the complete producer snapshot as of end_offset + 1 (preferred to the path)
    producer_snapshot: bytes | None = None


def epochs_checkpoint_text(epochs: Sequence[tuple[int, int]]) -> str:
    """Kafka's leader-epoch-checkpoint text (version, count, ``epoch offset`` lines)."""
    lines = ["0", str(len(epochs)), *(f"{e} {s}" for e, s in epochs)]
    return "\n".join(lines) + "\n"


def segment_id_base(segment_id: str) -> int:
    return int(segment_id.split("-", 1)[0])


def new_segment_id(base_offset: int, leader_epoch: int) -> str:
    """A fresh id for one upload attempt of the segment at ``base_offset``."""
    return f"{base_offset:020d}-{leader_epoch}-{uuid.uuid4().hex}"


def segment_id_epoch(segment_id: str) -> int:
    """The leader epoch an upload was made at (-1: an id without one)."""
    parts = segment_id.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1


class RemoteListing(NamedTuple):
    """One listing of a partition's prefix."""

    segments: list[RemoteSegmentMetadata]  # complete (manifest read), by base offset
    incomplete: list[str]  # ids with objects but no manifest (failed or running uploads)
    fenced: set[str]  # ids a newer leader fenced (their ``.fenced`` marker exists)


def fence_segments(
    segments: Sequence[RemoteSegmentMetadata], fenced: Collection[str]
) -> tuple[list[RemoteSegmentMetadata], list[RemoteSegmentMetadata]]:
    """(valid, stale) in base offset order; see the module docstring."""
    valid: list[RemoteSegmentMetadata] = []
    stale: list[RemoteSegmentMetadata] = []
    live = sorted(
        (m for m in segments if m.segment_id not in fenced),
        key=lambda m: (m.base_offset, m.created_ms),
    )
    stale += [m for m in segments if m.segment_id in fenced]
    newest = -1  # highest copy epoch among segments starting at or below the current base
    i = 0
    while i < len(live):
        j = i
        while j < len(live) and live[j].base_offset == live[i].base_offset:
            j += 1
        newest = max(newest, *(m.copy_epoch for m in live[i:j]))
        for m in live[i:j]:
            (valid if m.copy_epoch >= newest else stale).append(m)
        i = j
    return valid, stale


def _storage_options(props: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    def get(key: str) -> str | None:
        value = props.get(RSM_CONFIG_PREFIX + key)
        return value if value not in (None, "") else None

    url = get("url")
    if url is None:
        raise ValueError(f"{RSM_CONFIG_PREFIX}url must name the remote tier (file:// or s3://)")
    options: dict[str, Any] = {}
    if url.startswith(("s3://", "s3a://")):
        timeout_s = int(get("s3.timeout.ms") or S3_TIMEOUT_MS_DEFAULT) / 1000
        options = {
            "client_kwargs": {"region_name": get("s3.region") or "us-east-1"},
            "config_kwargs": {
                "connect_timeout": timeout_s,
                "read_timeout": timeout_s,
                "retries": {"max_attempts": S3_ATTEMPTS_MAX},
            },
            "use_listings_cache": False,
            "skip_instance_cache": True,
        }
        if get("s3.endpoint.url"):
            options["client_kwargs"]["endpoint_url"] = get("s3.endpoint.url")
        if get("s3.access.key.id"):
            options["key"] = get("s3.access.key.id")
            options["secret"] = get("s3.secret.access.key")
    elif not url.startswith("file://") and "://" not in url:
        raise ValueError(f"{RSM_CONFIG_PREFIX}url={url!r} is not a URL (file:///dir, s3://b/p)")
    return url, options


class FsspecRemoteStorageManager:
    """Remote segments of every partition in one fsspec file system (see docstring)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec

        self.url = url
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        except ImportError as e:
            raise ValueError(f"{RSM_CONFIG_PREFIX}url={url!r} needs a package: {e}") from None
        self.root = root.rstrip("/")
        if hasattr(self.fs, "retries"):
            # s3fs retries a failed call 5 times with back-off by default: one outage then
            # costs seconds per call; the remote log manager does its own back-off
            self.fs.retries = S3_ATTEMPTS_MAX
        self._manifests: dict[str, RemoteSegmentMetadata] = {}  # immutable once written
        self._lock = threading.Lock()
        self._root_checked = False
        self._prefixes: set[str] = set()  # partition prefixes known to exist

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> FsspecRemoteStorageManager:
        url, options = _storage_options(props)
        return cls(url, options)

    # ---- paths ----------------------------------------------------------------------------

    def partition_path(self, topic: str, partition: int, topic_id: str | None) -> str:
        return f"{self.root}/{topic}-{topic_id or 'none'}/{partition}"

    def _ensure_root(self) -> None:
        if self._root_checked:
            return
        try:
            if not self.fs.exists(self.root):
                self.fs.makedirs(self.root, exist_ok=True)
        except FileExistsError:
            pass
        self._root_checked = True

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"{what}: not found: {e}") from e
        except RemoteStorageError:
            raise
        except Exception as e:  # fsspec backends raise anything (botocore, aiohttp, OSError)
            raise RemoteStorageError(f"{what}: {type(e).__name__}: {e}") from e

    # ---- upload ---------------------------------------------------------------------------

    def copy_segment(
        self,
        topic: str,
        partition: int,
        topic_id: str | None,
        upload: SegmentUpload,
        publish_if: Callable[[], bool] | None = None,
    ) -> RemoteSegmentMetadata:
        """Upload a segment with its indexes, snapshot and epochs; the manifest last,
        only if ``publish_if()`` still holds then (else the objects are deleted and
        :class:`UploadAbandonedError` raised)."""
        base = f"{self.partition_path(topic, partition, topic_id)}/{upload.segment_id}"
        self._call("create the remote root", self._ensure_root)
        prefix = base.rsplit("/", 1)[0]
        if prefix not in self._prefixes:
            self._call("create the partition prefix", self.fs.makedirs, prefix, exist_ok=True)
            self._prefixes.add(prefix)
        locals_ = (
            (".log", upload.log_path),
            (".index", upload.offset_index_path),
            (".timeindex", upload.time_index_path),
            (TXN_INDEX_SUFFIX, upload.txn_index_path),
            (".snapshot", None if upload.producer_snapshot else upload.producer_snapshot_path),
        )
        present = [(sfx, p) for sfx, p in locals_ if p is not None and p.exists()]
        files = [sfx for sfx, _ in present]
        # one call each: object stores (s3fs) run the PUTs of a list concurrently
        self._call(
            f"upload {upload.segment_id}",
            self.fs.put,
            [str(p) for _, p in present],
            [base + sfx for sfx, _ in present],
        )
        blobs = {
            base + _EPOCHS_SUFFIX: epochs_checkpoint_text(upload.leader_epochs).encode(),
            base + _ENTRIES_SUFFIX: encode_entries(upload.entries),
        }
        if upload.producer_snapshot:
            blobs[base + ".snapshot"] = upload.producer_snapshot
            files.append(".snapshot")
        self._call(f"upload {upload.segment_id} epochs and index entries", self.fs.pipe, blobs)
        files += [_EPOCHS_SUFFIX, _ENTRIES_SUFFIX]
        meta = RemoteSegmentMetadata(
            segment_id=upload.segment_id,
            base_offset=upload.base_offset,
            end_offset=upload.end_offset,
            max_timestamp=upload.max_timestamp,
            size_bytes=upload.size_bytes,
            leader_epochs=upload.leader_epochs,
            created_ms=upload.created_ms,
            files=tuple(files),
            copy_epoch=segment_id_epoch(upload.segment_id),
        )
        if publish_if is not None and not publish_if():
            self.delete_segment(topic, partition, topic_id, upload.segment_id, files)
            raise UploadAbandonedError(f"{upload.segment_id}: no longer the leader at its epoch")
        self._call("upload the manifest", self._put_atomic, base + MANIFEST_SUFFIX, meta.to_json())
        with self._lock:
            self._manifests[base + MANIFEST_SUFFIX] = meta
        return meta

    def _put_atomic(self, path: str, data: bytes) -> None:
        """An object store PUT is atomic; a local file is written aside and renamed, so
        a concurrent listing never reads half a manifest."""
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        if "file" not in protocols and "local" not in protocols:
            self.fs.pipe_file(path, data)
            return
        tmp = path + ".tmp"
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, path)

    # ---- listing --------------------------------------------------------------------------

    def _names(self, prefix: str) -> list[str]:
        try:
            paths = self.fs.ls(prefix, detail=False)
        except FileNotFoundError:
            return []
        return [str(p).rsplit("/", 1)[-1] for p in paths]

    def list_segments(
        self, topic: str, partition: int, topic_id: str | None
    ) -> list[RemoteSegmentMetadata]:
        """The valid (complete, not stale) remote segments of a partition, by base offset."""
        listing = self.list_partition(topic, partition, topic_id)
        return fence_segments(listing.segments, listing.fenced)[0]

    def list_partition(self, topic: str, partition: int, topic_id: str | None) -> RemoteListing:
        """One listing of the partition's prefix (see :class:`RemoteListing`)."""
        prefix = self.partition_path(topic, partition, topic_id)
        names = self._call(f"list {prefix}", self._names, prefix)
        out: list[RemoteSegmentMetadata] = []
        for name in names:
            if not name.endswith(MANIFEST_SUFFIX):
                continue
            path = f"{prefix}/{name}"
            with self._lock:
                meta = self._manifests.get(path)
            if meta is None:
                try:
                    data = self._call(f"read {name}", self.fs.cat_file, path)
                except RemoteResourceNotFoundError:
                    continue  # deleted since the listing
                try:
                    meta = RemoteSegmentMetadata.from_json(data)
                except (ValueError, KeyError, TypeError) as e:
                    log.warning("ignoring unreadable remote manifest %s: %s", path, e)
                    continue
                with self._lock:
                    self._manifests[path] = meta
            out.append(meta)
        complete = {n[: -len(MANIFEST_SUFFIX)] for n in names if n.endswith(MANIFEST_SUFFIX)}
        fenced = {n[: -len(FENCED_SUFFIX)] for n in names if n.endswith(FENCED_SUFFIX)}
        with_objects = {n.split(".", 1)[0] for n in names if not n.endswith(FENCED_SUFFIX)}
        return RemoteListing(
            sorted(out, key=lambda m: (m.base_offset, m.created_ms)),
            sorted(with_objects - complete),
            fenced,
        )

    def orphans(
        self, topic: str, partition: int, topic_id: str | None, in_progress: set[str]
    ) -> list[str]:
        """Segment ids with objects but no manifest (failed uploads), minus ``in_progress``."""
        listing = self.list_partition(topic, partition, topic_id)
        return [i for i in listing.incomplete if i not in in_progress]

    def fence_upload(
        self, topic: str, partition: int, topic_id: str | None, segment_id: str, epoch: int
    ) -> None:
        """Fence an unfinished upload of an older leader: the marker first (a manifest
        it publishes later is stale), then its objects (the marker stays)."""
        base = f"{self.partition_path(topic, partition, topic_id)}/{segment_id}"
        self._call(f"fence {segment_id}", self.fs.pipe_file, base + FENCED_SUFFIX, b"%d" % epoch)
        for suffix in (*_DATA_SUFFIXES, _EPOCHS_SUFFIX, _ENTRIES_SUFFIX):
            with contextlib.suppress(RemoteResourceNotFoundError):
                self._call(f"delete {segment_id}{suffix}", self.fs.rm_file, base + suffix)

    # ---- reads ----------------------------------------------------------------------------

    def read(
        self,
        topic: str,
        partition: int,
        topic_id: str | None,
        segment_id: str,
        position: int,
        length: int,
    ) -> bytes:
        """``length`` bytes of a remote segment's log from ``position`` (a ranged read)."""
        path = f"{self.partition_path(topic, partition, topic_id)}/{segment_id}.log"
        data: bytes = self._call(
            f"read {segment_id}", self.fs.cat_file, path, start=position, end=position + length
        )
        if len(data) != length:
            raise RemoteStorageError(
                f"read {segment_id}: got {len(data)} of {length} bytes at {position}"
            )
        return data

    def producer_snapshot(
        self, topic: str, partition: int, topic_id: str | None, segment_id: str
    ) -> bytes:
        """The producer snapshot shipped with a remote segment (state at its end + 1)."""
        path = f"{self.partition_path(topic, partition, topic_id)}/{segment_id}.snapshot"
        data: bytes = self._call(f"read {segment_id} producer snapshot", self.fs.cat_file, path)
        return data

    def aborted_transactions(
        self, topic: str, partition: int, topic_id: str | None, meta: RemoteSegmentMetadata
    ) -> list[AbortedTxn]:
        """The aborted transactions of a remote segment (its ``.txnindex``; none when the
        segment was uploaded without one)."""
        if TXN_INDEX_SUFFIX not in meta.files:
            return []
        path = (
            f"{self.partition_path(topic, partition, topic_id)}/{meta.segment_id}{TXN_INDEX_SUFFIX}"
        )
        data = self._call(f"read {meta.segment_id} txn index", self.fs.cat_file, path)
        try:
            return decode_txn_entries(data, path)
        except CorruptTxnIndexError as e:
            raise RemoteStorageError(f"corrupt remote txn index of {meta.segment_id}: {e}") from e

    def index_entries(
        self, topic: str, partition: int, topic_id: str | None, segment_id: str
    ) -> list[RemoteLogIndexEntry]:
        path = f"{self.partition_path(topic, partition, topic_id)}/{segment_id}{_ENTRIES_SUFFIX}"
        data = self._call(f"read {segment_id} index entries", self.fs.cat_file, path)
        try:
            return decode_entries(data)
        except ValueError as e:
            raise RemoteStorageError(f"corrupt remote index entries of {segment_id}: {e}") from e

    # ---- deletion -------------------------------------------------------------------------

    def delete_segment(
        self,
        topic: str,
        partition: int,
        topic_id: str | None,
        segment_id: str,
        files: Sequence[str] = (*_DATA_SUFFIXES, _EPOCHS_SUFFIX, _ENTRIES_SUFFIX),
        *,
        fence_marker: bool = False,
    ) -> None:
        """Delete one upload: the manifest first (invisible at once), then its objects
        (and its ``.fenced`` marker last when ``fence_marker``: the manifest it fenced
        is gone, and a manifest is written only once)."""
        base = f"{self.partition_path(topic, partition, topic_id)}/{segment_id}"
        suffixes = (MANIFEST_SUFFIX, *files, *((FENCED_SUFFIX,) if fence_marker else ()))
        for suffix in suffixes:
            with contextlib.suppress(RemoteResourceNotFoundError):
                self._call(f"delete {segment_id}{suffix}", self.fs.rm_file, base + suffix)
        with self._lock:
            self._manifests.pop(base + MANIFEST_SUFFIX, None)

    def delete_partition(self, topic: str, partition: int, topic_id: str | None) -> None:
        prefix = self.partition_path(topic, partition, topic_id)
        with contextlib.suppress(RemoteResourceNotFoundError):
            self._call(f"delete {prefix}", self.fs.rm, prefix, recursive=True)
        with self._lock:
            for key in [k for k in self._manifests if k.startswith(prefix + "/")]:
                del self._manifests[key]
        self._prefixes.discard(prefix)

    def close(self) -> None:
        with self._lock:
            self._manifests.clear()
