"""DescribeTopicPartitions (api key 75, KIP-966): topic descriptions paginated by partition,
as Kafka 4.x's admin client (``describeTopics``) and tools ask for them.

Kafka's rules (``DescribeTopicPartitionsRequestHandler``, ``KRaftMetadataCache
.describeTopicResponse``):

- no topics named: every topic, else the named ones; in either case only the topics whose
  name sorts at or after the cursor's topic, in name order. A named list must contain the
  cursor's topic, and a cursor's partition must not be negative (else INVALID_REQUEST);
- a topic the principal may not DESCRIBE is left out of an all-topics answer, and answered
  TOPIC_AUTHORIZATION_FAILED (with no id) when named: its existence is not disclosed;
- the answer holds at most ``min(max.request.partition.size.limit,
  ResponsePartitionLimit)`` partitions (at least 1), the cursor's topic from the cursor's
  partition on; when a topic does not fit, its first partition left out is the
  ``NextCursor``, and when the limit is reached exactly at the end of a topic the next
  topic (partition 0) is. A named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION
  (INVALID_TOPIC_EXCEPTION for an invalid name); an all-topics answer only lists topics;
- a partition without a leader is LEADER_NOT_AVAILABLE; riverbed has no eligible leader
  replicas (KIP-966's ELR), so both ELR lists are null.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from riverbed.metadata.image import MetadataImage
from riverbed.metadata.records import ZERO_UUID
from riverbed.metadata.topic_names import is_internal_topic
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    Message,
)
from riverbed.security.acl import ResourceType
from riverbed.server.broker.authorization import authorized_operations
from riverbed.server.broker.cluster_info import partition_entry, valid_topic_name
from riverbed.server.broker.error_response import error_response
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

R = DescribeTopicPartitionsResponse


def _partitions(
    image: MetadataImage, name: str, start: int, room: int
) -> tuple[list[R.DescribeTopicPartitionsResponsePartition], int]:
    """Up to ``room`` partitions of ``name`` from index ``start``; and the index of the
    first one left out (-1: none)."""
    topic = image.topic(name)
    assert topic is not None
    indexes = [i for i in sorted(topic.partitions) if i >= start]
    P = R.DescribeTopicPartitionsResponsePartition
    out = [partition_entry(P, i, topic.partitions[i]) for i in indexes[:room]]
    return out, indexes[room] if len(indexes) > room else -1


def describe(
    image: MetadataImage,
    names: Iterable[str],
    start_of: Callable[[str], int],
    limit: int,
    listed_only: bool,
) -> R:
    """``describeTopicResponse``: ``names`` in order, at most ``limit`` partitions;
    ``listed_only`` (an all-topics request) leaves missing topics out."""
    response = R(throttle_time_ms=0, topics=[])
    remaining = limit
    for name in names:
        if remaining == 0:  # the previous topic filled the answer: the next one is next
            response.next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        topic = image.topic(name)
        if topic is None:
            if not listed_only:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if not valid_topic_name(name):
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                response.topics.append(R.DescribeTopicPartitionsResponseTopic(
                    error_code=int(code), name=name, is_internal=is_internal_topic(name),
                ))  # fmt: skip
            continue
        parts, next_index = _partitions(image, name, start_of(name), remaining)
        response.topics.append(
            R.DescribeTopicPartitionsResponseTopic(
                error_code=0,
                name=name,
                topic_id=topic.topic_id,
                is_internal=is_internal_topic(name),
                partitions=parts,
            )
        )
        if next_index >= 0:
            response.next_cursor = R.Cursor(topic_name=name, partition_index=next_index)
            break
        remaining -= len(parts)
    return response


async def handle_describe_topic_partitions(
    broker: Broker, ctx: RequestContext, req: DescribeTopicPartitionsRequest
) -> Message:
    image = broker.metadata.image
    fetch_all = not req.topics
    cursor = req.cursor
    after = cursor.topic_name if cursor is not None else ""
    if fetch_all:
        names = {n for n in image.topics_by_name if n >= after}
    else:
        names = {t.name for t in req.topics if t.name >= after}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid(ctx, req)  # "should contain the cursor topic"
    if cursor is not None and cursor.partition_index < 0:
        return _invalid(ctx, req)  # "cursor partition must be valid"
    shown: list[str] = sorted(names)
    refused: list[str] = []
    if broker.authz is not None:
        shown, refused = broker.authz.visible_topics(
            image, ctx, shown, explicit=not fetch_all, auto_create=False
        )
    limit = broker.config.get_int("max.request.partition.size.limit")
    limit = max(min(limit, req.response_partition_limit), 1)

    def start_of(name: str) -> int:
        return cursor.partition_index if cursor is not None and name == after else 0

    response = describe(image, shown, start_of, limit, fetch_all)
    for t in response.topics:
        t.topic_authorized_operations = authorized_operations(
            broker.authz, image, ctx, ResourceType.TOPIC, t.name or ""
        )
    response.topics += [
        R.DescribeTopicPartitionsResponseTopic(
            error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), name=n, topic_id=ZERO_UUID
        )
        for n in refused
    ]
    return response


def _invalid(ctx: RequestContext, req: DescribeTopicPartitionsRequest) -> Message:
    return error_response(
        ctx.header.api_key, req, ctx.header.api_version, ErrorCode.INVALID_REQUEST
    )
