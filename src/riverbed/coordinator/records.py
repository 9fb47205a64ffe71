"""``__consumer_offsets`` record formats and the group -> partition mapping (Kafka's).

Every record has a key and a value, each an int16 version followed by the struct of
that version (`riverbed.protocol` encodes the structs from Kafka's JSON specs in
``kafka-reference/group-coordinator``):

- key version 0 or 1: ``OffsetCommitKey`` (group, topic, partition) -> value
  ``OffsetCommitValue`` (offset, leaderEpoch v3+, metadata, commitTimestamp,
  expireTimestamp v1 only); riverbed writes key v1 and value v3 (v1 for a commit with
  its own retention time);
- key version 2: ``GroupMetadataKey`` (group) -> value ``GroupMetadataValue``
  (protocolType, generation, protocol, leader, currentStateTimestamp v2+, members with
  memberId, groupInstanceId v3+, clientId, clientHost, rebalanceTimeout v1+,
  sessionTimeout, subscription, assignment); riverbed writes v3;
- a null value (tombstone) deletes the key: an offset deleted or expired, a group gone;
- key versions 3 and above belong to the KIP-848 (consumer protocol) records and are
  skipped by the classic replay.

A group lives in partition ``abs(javaStringHashCode(group_id)) % num_partitions``
(Kafka's ``Utils.abs``: Integer.MIN_VALUE maps to 0).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    encode,
)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Key versions: offset commits (0 and 1) and classic group metadata (2).
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
#: Value versions riverbed writes (Kafka 2.3+ writes these as well).
OFFSET_COMMIT_VALUE_VERSION = 3
#: The only value version with an expireTimestamp (a commit with its own retention).
OFFSET_COMMIT_VALUE_V1 = 1
GROUP_METADATA_VALUE_VERSION = 3
_INT16 = struct.Struct(">h")
_INT32_MIN = -(2**31)
#: Keys whose partition `partition_for` remembers (least recently used dropped): every
#: transactional request maps its id a few times (coordinator check, routing, KIP-890
#: verification), every group request its group id, and the hash is a Python loop
#: (~12 us for a 33-character id, ~0.1 us from the cache).
PARTITION_FOR_CACHE_ENTRIES_MAX = 4096


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31-polynomial over UTF-16 code units, int32 wraparound."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=PARTITION_FOR_CACHE_ENTRIES_MAX)
def partition_for(key: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` (or ``__transaction_state``) partition of ``key``."""
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % num_partitions


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """One committed offset as stored (and served by OffsetFetch). ``record_offset`` is
    the log offset of the record that holds it (-1: not written yet): a transaction's
    offsets replace a committed offset only when their record is the later one."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1
    record_offset: int = -1


@dataclass(slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class StoredGroup:
    """A ``GroupMetadataValue``: what the classic group keeps across loads."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: list[StoredMember] = field(default_factory=list)


def _versioned(version: int, body: bytes) -> bytes:
    return _INT16.pack(version) + body


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    msg = OffsetCommitKey(group=group, topic=topic, partition=partition)
    return _versioned(OFFSET_COMMIT_KEY_VERSION, encode(msg, OFFSET_COMMIT_KEY_VERSION))


def offset_commit_value(value: OffsetAndMetadata) -> bytes:
    """Version 3, or version 1 when the commit asked for its own retention (OffsetCommit
    v2-4 ``retention_time_ms``: only v1 stores ``expireTimestamp``), as Kafka writes."""
    expiring = value.expire_timestamp_ms >= 0
    version = OFFSET_COMMIT_VALUE_V1 if expiring else OFFSET_COMMIT_VALUE_VERSION
    msg = OffsetCommitValue(
        offset=value.offset,
        leader_epoch=-1 if expiring else value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp_ms,
        expire_timestamp=value.expire_timestamp_ms,
    )
    return _versioned(version, encode(msg, version))


def group_metadata_key(group: str) -> bytes:
    msg = GroupMetadataKey(group=group)
    return _versioned(GROUP_METADATA_KEY_VERSION, encode(msg, GROUP_METADATA_KEY_VERSION))


def group_metadata_value(group: StoredGroup) -> bytes:
    msg = GroupMetadataValue(
        protocol_type=group.protocol_type,
        generation=group.generation,
        protocol=group.protocol,
        leader=group.leader,
        current_state_timestamp=group.current_state_timestamp_ms,
        members=[
            GroupMetadataValue.MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.subscription,
                assignment=m.assignment,
            )
            for m in group.members
        ],
    )
    return _versioned(GROUP_METADATA_VALUE_VERSION, encode(msg, GROUP_METADATA_VALUE_VERSION))


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """A replayed offset commit (``value`` None: a tombstone)."""

    group: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A replayed group metadata record (``value`` None: a tombstone)."""

    group: str
    value: StoredGroup | None


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise ProtocolError(f"{what} shorter than its version", field=what)
    return int(_INT16.unpack_from(data)[0])


def parse_record(key: bytes, value: bytes | None) -> OffsetRecord | GroupRecord | None:
    """The record at one offset of ``__consumer_offsets``; None for a key version the
    classic coordinator does not own (KIP-848 records). ProtocolError when malformed."""
    kv = _version(key, "key")
    if kv in (0, 1):
        k = decode(OffsetCommitKey, key[2:], kv)
        if value is None:
            return OffsetRecord(k.group, k.topic, k.partition, None)
        vv = _version(value, "value")
        if not 0 <= vv <= 4:
            raise ProtocolError(f"unknown OffsetCommitValue version {vv}", field="value")
        v = decode(OffsetCommitValue, value[2:], vv)
        stored = OffsetAndMetadata(
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata or "",
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=v.expire_timestamp,
        )
        return OffsetRecord(k.group, k.topic, k.partition, stored)
    if kv == GROUP_METADATA_KEY_VERSION:
        g = decode(GroupMetadataKey, key[2:], kv).group
        if value is None:
            return GroupRecord(g, None)
        vv = _version(value, "value")
        if not 0 <= vv <= 4:
            raise ProtocolError(f"unknown GroupMetadataValue version {vv}", field="value")
        gv = decode(GroupMetadataValue, value[2:], vv)
        members = [
            StoredMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                subscription=bytes(m.subscription),
                assignment=bytes(m.assignment),
            )
            for m in gv.members
        ]
        stored_group = StoredGroup(
            protocol_type=gv.protocol_type,
            generation=gv.generation,
            protocol=gv.protocol,
            leader=gv.leader,
            current_state_timestamp_ms=gv.current_state_timestamp,
            members=members,
        )
        return GroupRecord(g, stored_group)
    return None
