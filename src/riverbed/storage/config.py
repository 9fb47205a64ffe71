"""LogConfig: the per-topic settings a partition log obeys, by Kafka's names and defaults.

Built from the topic's effective config (a mapping of Kafka topic config keys to string
values, e.g. ``riverbed.metadata.topic_configs.effective_topic_config``) with
:meth:`LogConfig.from_props`; keys storage does not use (``compression.type``,
``unclean.leader.election.enable``, ...) are ignored unless ``strict=True``. Every value is
validated and a bad one raises :class:`InvalidConfigError` naming the key and value.

==================================  ======================  ===============================
key                                 default                 meaning
==================================  ======================  ===============================
segment.bytes                       1073741824 (1 GiB)      roll when a segment would exceed
segment.ms                          604800000 (7 days)      roll by record time in segment
segment.jitter.ms                   0                       subtracted from segment.ms
segment.index.bytes                 10485760 (10 MiB)       max size of .index/.timeindex
index.interval.bytes                4096                    bytes between index entries
retention.ms                        604800000 (-1 = none)   delete by largest timestamp
retention.bytes                     -1 (none)               delete oldest beyond this size
message.timestamp.type              CreateTime              or LogAppendTime
message.timestamp.before.max.ms     Long.MAX_VALUE          CreateTime may be this far back
message.timestamp.after.max.ms      3600000 (1 hour)        CreateTime may be this far ahead
max.message.bytes                   1048588                 largest batch accepted
flush.messages                      Long.MAX_VALUE (OS)     fsync after this many records
flush.ms                            Long.MAX_VALUE (OS)     fsync after this much time
file.delete.delay.ms                60000                   keep deleted files this long
cleanup.policy                      delete                  "delete" and/or "compact"
delete.retention.ms                 86400000 (1 day)        tombstones kept after cleaning
min.compaction.lag.ms               0                       records younger are not cleaned
max.compaction.lag.ms               Long.MAX_VALUE          dirty records older force a clean
min.cleanable.dirty.ratio           0.5                     dirty share that triggers a clean
min.insync.replicas                 1                       for acks=all (replication)
preallocate                         false                   accepted, not used
compression.type                    producer                or a codec batches are stored in
compression.gzip.level              -1 (= 6)                when recompressing to gzip
compression.lz4.level               9                       when recompressing to lz4
compression.zstd.level              3                       when recompressing to zstd
remote.storage.enable               false                   tier rolled segments (KIP-405)
local.retention.ms                  -2 (= retention.ms)     local part of a tiered log
local.retention.bytes               -2 (= retention.bytes)  local part of a tiered log
==================================  ======================  ===============================

With ``remote.storage.enable`` (and the broker's ``remote.log.storage.system.enable``),
``retention.*`` bound the whole log (remote + local) and ``local.retention.*`` the local
segments. A compacted topic is never tiered: the controller refuses the combination
(INVALID_CONFIG) and :attr:`LogConfig.tiered` stays False should one slip through (e.g. a
broker default ``log.cleanup.policy=compact``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from riverbed.storage.errors import InvalidConfigError

__all__ = ["LONG_MAX", "TIMESTAMP_TYPES", "LogConfig"]

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES: Final = ("delete", "compact")
#: ``compression.type``: the codec a leader stores client batches in, or the producer's.
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
# Kafka's lower bounds (TopicConfig / LogConfig validators).
SEGMENT_BYTES_MIN: Final = 14  # LegacyRecord.RECORD_OVERHEAD_V0; tests use tiny segments
SEGMENT_INDEX_BYTES_MIN: Final = 4
_BOOLEAN_ATTRS: Final = ("preallocate", "remote_storage_enable")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed, validated topic config for one partition log (attribute = key with ``_``)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3

    def __post_init__(self) -> None:
        self._check_range("segment.bytes", self.segment_bytes, SEGMENT_BYTES_MIN, INT_MAX)
        self._check_range("segment.ms", self.segment_ms, 1, LONG_MAX)
        self._check_range("segment.jitter.ms", self.segment_jitter_ms, 0, LONG_MAX)
        self._check_range(
            "segment.index.bytes", self.segment_index_bytes, SEGMENT_INDEX_BYTES_MIN, INT_MAX
        )
        self._check_range("index.interval.bytes", self.index_interval_bytes, 0, INT_MAX)
        self._check_range("retention.ms", self.retention_ms, -1, LONG_MAX)
        self._check_range("retention.bytes", self.retention_bytes, -1, LONG_MAX)
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidConfigError(
                "message.timestamp.type",
                self.message_timestamp_type,
                f"must be one of {', '.join(TIMESTAMP_TYPES)}",
            )
        self._check_range(
            "message.timestamp.before.max.ms", self.message_timestamp_before_max_ms, 0, LONG_MAX
        )
        self._check_range(
            "message.timestamp.after.max.ms", self.message_timestamp_after_max_ms, 0, LONG_MAX
        )
        self._check_range("max.message.bytes", self.max_message_bytes, 0, INT_MAX)
        self._check_range("flush.messages", self.flush_messages, 1, LONG_MAX)
        self._check_range("flush.ms", self.flush_ms, 0, LONG_MAX)
        self._check_range("file.delete.delay.ms", self.file_delete_delay_ms, 0, LONG_MAX)
        self._check_range("min.insync.replicas", self.min_insync_replicas, 1, INT_MAX)
        self._check_range("delete.retention.ms", self.delete_retention_ms, 0, LONG_MAX)
        self._check_range("min.compaction.lag.ms", self.min_compaction_lag_ms, 0, LONG_MAX)
        self._check_range("max.compaction.lag.ms", self.max_compaction_lag_ms, 1, LONG_MAX)
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise InvalidConfigError("min.cleanable.dirty.ratio", ratio, "must be between 0 and 1")
        self._check_range("local.retention.ms", self.local_retention_ms, -2, LONG_MAX)
        self._check_range("local.retention.bytes", self.local_retention_bytes, -2, LONG_MAX)
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigError(
                "compression.type",
                self.compression_type,
                f"must be one of {', '.join(COMPRESSION_TYPES)}",
            )
        self._check_range("compression.gzip.level", self.compression_gzip_level, -1, 9)
        self._check_range("compression.lz4.level", self.compression_lz4_level, 1, 17)
        self._check_range("compression.zstd.level", self.compression_zstd_level, -131072, 22)
        if not self.cleanup_policy or any(p not in CLEANUP_POLICIES for p in self.cleanup_policy):
            raise InvalidConfigError(
                "cleanup.policy",
                ",".join(self.cleanup_policy),
                f"must be a non-empty list of {', '.join(CLEANUP_POLICIES)}",
            )

    @staticmethod
    def _check_range(key: str, value: Any, low: int, high: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(key, value, "must be an integer")
        if not low <= value <= high:
            raise InvalidConfigError(key, value, f"must be between {low} and {high}")

    # ---- derived -------------------------------------------------------------------------

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches (``message.timestamp.type=LogAppendTime``)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def tiered(self) -> bool:
        """The topic asks for tiering and can have it (never for compacted topics)."""
        return self.remote_storage_enable and not self.compact_enabled

    @property
    def local_retention_ms_effective(self) -> int:
        """``local.retention.ms``, where -2 means ``retention.ms`` (Kafka's rule)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        return (
            self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes
        )

    # ---- parsing -------------------------------------------------------------------------

    @classmethod
    def from_props(cls, props: Mapping[str, object], *, strict: bool = False) -> LogConfig:
        """Build from Kafka topic config keys (values as strings or already typed).

        Unknown keys are ignored (they belong to other layers) unless ``strict``.
        """
        kwargs: dict[str, Any] = {}
        known = {f.name: f for f in fields(cls)}
        for key, raw in props.items():
            attr = key.replace(".", "_")
            if attr not in known:
                if strict:
                    raise InvalidConfigError(key, raw, "unknown topic configuration")
                continue
            kwargs[attr] = _parse_value(key, attr, raw)
        return cls(**kwargs)

    def with_overrides(self, props: Mapping[str, object]) -> LogConfig:
        """A copy with the given Kafka keys replaced (validated like :meth:`from_props`)."""
        changes: dict[str, Any] = {
            k.replace(".", "_"): _parse_value(k, k.replace(".", "_"), v)
            for k, v in props.items()
            if k.replace(".", "_") in {f.name for f in fields(self)}
        }
        return replace(self, **changes)

    def to_props(self) -> dict[str, str]:
        """The Kafka keys and string values (round-trips through :meth:`from_props`)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            key = f.name.replace("_", ".")
            if isinstance(value, tuple):
                out[key] = ",".join(value)
            elif isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        return out


def _parse_value(key: str, attr: str, raw: object) -> object:
    if attr in ("message_timestamp_type", "compression_type"):
        return str(raw).strip()
    if attr == "cleanup_policy":
        if isinstance(raw, (tuple, list)):
            return tuple(str(p).strip() for p in raw)
        return tuple(p.strip() for p in str(raw).split(",") if p.strip())
    if attr == "min_cleanable_dirty_ratio":
        try:
            return float(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(key, raw, "must be a number") from None
    if attr in _BOOLEAN_ATTRS:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise InvalidConfigError(key, raw, "must be true or false")
        return text == "true"
    if isinstance(raw, bool):
        raise InvalidConfigError(key, raw, "must be an integer")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(key, raw, "must be an integer") from None
