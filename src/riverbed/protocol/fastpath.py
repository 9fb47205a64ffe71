"""Specialised codecs for the records a metadata snapshot is made of (C, optional).

A snapshot of a cluster with a million partitions holds a million PartitionRecords, each
the value of one record of a v2 batch; the generic message engine (``codec.py``) and the
record iterator (``records.py``) spend microseconds of Python on each. The C module
``_fastpath`` (``_fastpath.c``, built by ``hatch_build.py``) does the common shapes only:

- ``decode_record(value)``: PartitionRecord, TopicRecord and PartitionChangeRecord at
  version 0 (what riverbed writes) -> ``(message, 0)``;
- ``encode_record(msg)``: the same three at version 0 -> framed bytes;
- ``encode_partition(partition_id, topic_id, replicas, isr, removing, adding, leader,
  leader_recovery_state, leader_epoch, partition_epoch)``: a PartitionRecord v0 from plain
  values, for snapshot writing (no message object);
- ``record_values(section, count, last_offset_delta)``: the values of an uncompressed
  records section; ``value_records(values)``: the section of a snapshot batch.

Each returns None for anything else, malformed input included, and the caller then runs
the generic code: it stays the reference (tests/unit/protocol/test_fastpath.py checks that
both give the same bytes, messages and error classes) and the one source of error
messages. Without a C compiler at install the module is absent and everything runs the
generic code (slower, same results).
"""

from __future__ import annotations

import uuid
from typing import Any

from riverbed.protocol.messages import PartitionChangeRecord, PartitionRecord, TopicRecord

#: The slots the C decoder fills, in its order (an enum in _fastpath.c).
PARTITION_SLOTS = (
    "partition_id",
    "topic_id",
    "replicas",
    "isr",
    "removing_replicas",
    "adding_replicas",
    "leader",
    "leader_recovery_state",
    "leader_epoch",
    "partition_epoch",
    "directories",
    "eligible_leader_replicas",
    "last_known_elr",
    "_unknown_tagged_fields",
)
TOPIC_SLOTS = ("name", "topic_id", "_unknown_tagged_fields")
PARTITION_CHANGE_SLOTS = (
    "partition_id",
    "topic_id",
    "isr",
    "leader",
    "replicas",
    "removing_replicas",
    "adding_replicas",
    "leader_recovery_state",
    "directories",
    "eligible_leader_replicas",
    "last_known_elr",
    "_unknown_tagged_fields",
)
#: The one version of each record the fast path reads and writes.
FAST_VERSION = 0


def _schema_matches() -> bool:
    """The C decoder fills every slot: a field added to a schema must be added there too."""
    return all(
        set(slots) == {*cls._FIELD_NAMES, "_unknown_tagged_fields"}
        for cls, slots in (
            (PartitionRecord, PARTITION_SLOTS),
            (TopicRecord, TOPIC_SLOTS),
            (PartitionChangeRecord, PARTITION_CHANGE_SLOTS),
        )
    )


def _load() -> Any:
    try:
        from riverbed.protocol import _fastpath  # type: ignore[attr-defined]
    except ImportError:
        return None
    if not _schema_matches():
        return None
    _fastpath.setup(
        uuid.UUID,
        PartitionRecord,
        PARTITION_SLOTS,
        TopicRecord,
        TOPIC_SLOTS,
        PartitionChangeRecord,
        PARTITION_CHANGE_SLOTS,
    )
    return _fastpath


#: The C module, or None when it is not built (then callers run the generic code).
fast: Any = _load()


def available() -> bool:
    return fast is not None
