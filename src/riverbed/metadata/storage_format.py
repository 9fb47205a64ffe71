"""Storage formatting: Kafka's `meta.properties` in every log directory.

File format (Java properties, as `kafka-storage format` writes for KRaft)::

    #
    #<date>
    node.id=1
    directory.id=<base64url uuid>
    version=1
    cluster.id=<base64url uuid>

A node refuses to start on directories from another cluster or node; an unformatted
directory is formatted on start only when auto-format is on (the embedded default).
Ids are Kafka's `Uuid.toString()`: 16 random bytes in URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from riverbed.storage.checkpoints import write_atomic

META_PROPERTIES = "meta.properties"
META_PROPERTIES_BYTES_MAX = 65_536


class StorageFormatError(RuntimeError):
    """Log directories that are missing, unformatted or belong to another cluster/node."""


def uuid_to_str(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> uuid.UUID:
    """Parse Kafka's base64url uuid form; ValueError when it is not one."""
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{text!r} is not a base64 UUID: {exc}") from None
    if len(raw) != 16:
        raise ValueError(f"{text!r} does not decode to 16 bytes")
    return uuid.UUID(bytes=raw)


def random_uuid() -> str:
    """A random id in Kafka's form, never starting with '-' (it would look like a flag)."""
    while True:
        value = uuid.uuid4()
        text = uuid_to_str(value)
        if not text.startswith("-") and value.int > 100:
            return text


@dataclass(frozen=True, slots=True)
class MetaProperties:
    version: int
    cluster_id: str
    node_id: int
    directory_id: str | None = None

    def render(self) -> str:
        # Kafka's file starts with a dated comment; metadata/ reads no clock, so ours is
        # undated (readers skip comments)
        lines = ["#", "#written by riverbed storage format"]
        lines.append(f"node.id={self.node_id}")
        if self.directory_id:
            lines.append(f"directory.id={self.directory_id}")
        lines.append(f"version={self.version}")
        lines.append(f"cluster.id={self.cluster_id}")
        return "\n".join(lines) + "\n"


def read_meta_properties(directory: str | os.PathLike[str]) -> MetaProperties | None:
    path = Path(directory) / META_PROPERTIES
    try:
        if path.stat().st_size > META_PROPERTIES_BYTES_MAX:
            raise StorageFormatError(f"{path} is larger than {META_PROPERTIES_BYTES_MAX} bytes")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageFormatError(f"cannot read {path}: {exc}") from exc
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    try:
        return MetaProperties(
            version=int(props.get("version", "0")),
            cluster_id=props["cluster.id"],
            node_id=int(props.get("node.id", props.get("broker.id", "-1"))),
            directory_id=props.get("directory.id"),
        )
    except (KeyError, ValueError) as exc:
        raise StorageFormatError(f"{path} is malformed ({exc!r})") from None


def _all_dirs(log_dirs: Sequence[str], metadata_log_dir: str) -> list[Path]:
    out: list[Path] = []
    for d in [metadata_log_dir, *log_dirs]:
        p = Path(d)
        if p not in out:
            out.append(p)
    return out


def format_storage(
    log_dirs: Sequence[str],
    metadata_log_dir: str,
    node_id: int,
    cluster_id: str,
    *,
    ignore_formatted: bool = False,
) -> list[Path]:
    """Write meta.properties in every directory; returns the directories formatted."""
    try:
        uuid_from_str(cluster_id)
    except ValueError as exc:
        raise StorageFormatError(
            f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {exc}"
        ) from None
    if node_id < 0:
        raise StorageFormatError(f"node.id must be set to a non-negative integer, not {node_id}")
    formatted: list[Path] = []
    for d in _all_dirs(log_dirs, metadata_log_dir):
        existing = read_meta_properties(d)
        if existing is not None:
            if ignore_formatted:
                continue
            raise StorageFormatError(
                f"Log directory {d} is already formatted. Use --ignore-formatted to ignore this "
                "directory and format the others."
            )
        try:
            d.mkdir(parents=True, exist_ok=True)
            meta = MetaProperties(1, cluster_id, node_id, random_uuid())
            write_atomic(d / META_PROPERTIES, meta.render())
        except OSError as exc:
            raise StorageFormatError(f"cannot format {d}: {exc}") from exc
        formatted.append(d)
    return formatted


def ensure_formatted(
    log_dirs: Sequence[str], metadata_log_dir: str, node_id: int, *, auto_format: bool
) -> str:
    """Check (or, with auto_format, create) the format of every dir; returns the cluster id."""
    dirs = _all_dirs(log_dirs, metadata_log_dir)
    found = {d: read_meta_properties(d) for d in dirs}
    cluster_ids = {m.cluster_id for m in found.values() if m is not None}
    if len(cluster_ids) > 1:
        raise StorageFormatError(
            f"log directories belong to different clusters: {sorted(cluster_ids)}"
        )
    for d, meta in found.items():
        if meta is not None and meta.node_id != node_id:
            raise StorageFormatError(
                f"{d / META_PROPERTIES} has node.id={meta.node_id}, but the configured "
                f"node.id is {node_id}"
            )
    missing = [d for d, meta in found.items() if meta is None]
    if not missing:
        return cluster_ids.pop()
    if not auto_format:
        raise StorageFormatError(
            f"No meta.properties found in {', '.join(str(d) for d in missing)}; format the "
            "storage first: riverbed storage format --config server.properties "
            "--cluster-id $(riverbed storage random-uuid)"
        )
    cluster_id = cluster_ids.pop() if cluster_ids else random_uuid()
    format_storage(
        [str(d) for d in missing], str(missing[0]), node_id, cluster_id, ignore_formatted=True
    )
    return cluster_id
