"""KIP-848 consumer group records of ``__consumer_offsets`` (Kafka's formats).

Key = int16 record type (Kafka's key "version") + key struct; value = int16 version 0 +
flexible value struct (specs in scripts/kafka-specs/group-coordinator):

===  ===========================================  =========================================
 3   ConsumerGroupMetadataKey (group)             ConsumerGroupMetadataValue: group epoch
 4   ConsumerGroupPartitionMetadataKey (group)    ...PartitionMetadataValue: subscribed
                                                  topics (id, name, partition count)
 5   ConsumerGroupMemberMetadataKey (group,       ...MemberMetadataValue: instance, rack,
     member)                                      client, host, subscription, assignor,
                                                  rebalance timeout
 6   ConsumerGroupTargetAssignmentMetadataKey     ...TargetAssignmentMetadataValue:
     (group)                                      assignment epoch
 7   ConsumerGroupTargetAssignmentMemberKey       ...TargetAssignmentMemberValue: the
     (group, member)                              member's target partitions
 8   ConsumerGroupCurrentMemberAssignmentKey      ...CurrentMemberAssignmentValue: epoch,
     (group, member)                              previous epoch, state, assigned and
                                                  pending-revocation partitions
===  ===========================================  =========================================

A null value deletes the key. A member leaves with tombstones 8, 7, 5 (in that order); a
deleted group with 6, 4, 3 after its members' (Kafka's order, so a replay of any prefix is
a consistent group).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.coordinator.assignors import Assignment
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    decode,
    encode,
)

_INT16 = struct.Struct(">h")
VALUE_VERSION = 0
GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
_KEYS: dict[int, Any] = {
    GROUP_METADATA: ConsumerGroupMetadataKey,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
    MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
}
_VALUES: dict[int, Any] = {
    GROUP_METADATA: ConsumerGroupMetadataValue,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
    MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
    TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
    CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentValue,
}
Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A replayed consumer group record: its type, group, member (or "") and value
    message (None: a tombstone)."""

    kind: int
    group: str
    member: str
    value: Any


def _key(kind: int, group: str, member: str | None = None) -> bytes:
    cls = _KEYS[kind]
    msg = cls(group_id=group) if member is None else cls(group_id=group, member_id=member)
    return _INT16.pack(kind) + encode(msg, kind)


def _value(msg: Any) -> bytes:
    return _INT16.pack(VALUE_VERSION) + encode(msg, VALUE_VERSION)


def _topic_partitions(cls: Any, assignment: Mapping[uuid.UUID, frozenset[int]]) -> list[Any]:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items()) if ps]


def read_assignment(rows: list[Any]) -> Assignment:
    return {r.topic_id: frozenset(r.partitions) for r in rows if r.partitions}


def group_epoch_record(group: str, epoch: int) -> Record:
    return _key(GROUP_METADATA, group), _value(ConsumerGroupMetadataValue(epoch=epoch))


def partition_metadata_record(group: str, topics: Mapping[str, tuple[uuid.UUID, int]]) -> Record:
    rows = [
        ConsumerGroupPartitionMetadataValue.TopicMetadata(
            topic_id=tid, topic_name=name, num_partitions=n, partition_metadata=[]
        )
        for name, (tid, n) in sorted(topics.items())
    ]
    return _key(PARTITION_METADATA, group), _value(ConsumerGroupPartitionMetadataValue(topics=rows))


def member_metadata_record(group: str, m: Any) -> Record:
    value = ConsumerGroupMemberMetadataValue(
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        server_assignor=m.server_assignor,
    )
    return _key(MEMBER_METADATA, group, m.member_id), _value(value)


def target_metadata_record(group: str, epoch: int) -> Record:
    value = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch)
    return _key(TARGET_METADATA, group), _value(value)


def target_member_record(group: str, member: str, target: Assignment) -> Record:
    rows = _topic_partitions(ConsumerGroupTargetAssignmentMemberValue.TopicPartition, target)
    value = ConsumerGroupTargetAssignmentMemberValue(topic_partitions=rows)
    return _key(TARGET_MEMBER, group, member), _value(value)


def current_assignment_record(group: str, m: Any) -> Record:
    cls = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=m.member_epoch,
        previous_member_epoch=m.previous_member_epoch,
        state=int(m.state),
        assigned_partitions=_topic_partitions(cls, m.assigned),
        partitions_pending_revocation=_topic_partitions(cls, m.pending_revocation),
    )
    return _key(CURRENT_ASSIGNMENT, group, m.member_id), _value(value)


def member_tombstones(group: str, member: str) -> list[Record]:
    return [
        (_key(CURRENT_ASSIGNMENT, group, member), None),
        (_key(TARGET_MEMBER, group, member), None),
        (_key(MEMBER_METADATA, group, member), None),
    ]


def group_tombstones(group: str) -> list[Record]:
    return [
        (_key(TARGET_METADATA, group), None),
        (_key(PARTITION_METADATA, group), None),
        (_key(GROUP_METADATA, group), None),
    ]


def parse_consumer_record(key: bytes, value: bytes | None) -> ConsumerRecord | None:
    """A KIP-848 record (key types 3-8); None for any other key type. ProtocolError
    when malformed or of a value version riverbed does not read."""
    if len(key) < 2:
        raise ProtocolError("key shorter than its type", field="key")
    kind = int(_INT16.unpack_from(key)[0])
    cls = _KEYS.get(kind)
    if cls is None:
        return None
    k = decode(cls, key[2:], kind)
    member = getattr(k, "member_id", "")
    if value is None:
        return ConsumerRecord(kind, k.group_id, member, None)
    if len(value) < 2 or int(_INT16.unpack_from(value)[0]) != VALUE_VERSION:
        raise ProtocolError(f"unknown value version of record type {kind}", field="value")
    return ConsumerRecord(kind, k.group_id, member, decode(_VALUES[kind], value[2:], 0))
