"""The consumer embedded protocol (protocol type ``consumer``): subscription and assignment.

Clients put these in JoinGroup protocol metadata and SyncGroup assignments, each as an
int16 version followed by ``ConsumerProtocolSubscription`` (topics, user data, owned
partitions v1+, generation v2+, rack v3+) or ``ConsumerProtocolAssignment`` (topic ->
partitions, user data). The broker reads them only to describe groups and to refuse
OffsetDelete of a subscribed topic; malformed bytes read as "unknown".
"""

from __future__ import annotations

import struct

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    decode,
    encode,
)

_INT16 = struct.Struct(">h")
#: Highest version riverbed decodes; newer bytes are read with it (fields are appended).
_VERSION_MAX = 3


def _version(data: bytes) -> int | None:
    if len(data) < 2:
        return None
    return min(int(_INT16.unpack_from(data)[0]), _VERSION_MAX)


def subscription_topics(data: bytes) -> set[str] | None:
    version = _version(data)
    if version is None or version < 0:
        return None
    try:
        return set(decode(ConsumerProtocolSubscription, data[2:], version).topics)
    except (ProtocolError, ValueError):
        return None


def assignment_partitions(data: bytes) -> dict[str, list[int]] | None:
    """topic -> partitions of one member's assignment; None when unreadable."""
    if not data:
        return {}
    version = _version(data)
    if version is None or version < 0:
        return None
    try:
        msg = decode(ConsumerProtocolAssignment, data[2:], version)
    except (ProtocolError, ValueError):
        return None
    return {tp.topic: list(tp.partitions) for tp in msg.assigned_partitions}


def encode_subscription(topics: list[str], version: int = 0) -> bytes:
    msg = ConsumerProtocolSubscription(topics=topics, user_data=None)
    return _INT16.pack(version) + encode(msg, version)


def encode_assignment(parts: dict[str, list[int]], version: int = 0) -> bytes:
    msg = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=p)
            for t, p in sorted(parts.items())
        ],
        user_data=None,
    )
    return _INT16.pack(version) + encode(msg, version)
