"""KIP-848 group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

A heartbeat goes to its group's shard (`riverbed.coordinator.consumer_membership`) with
a view of the topics in this node's metadata image (ids and partition counts, names for
subscription regexes; internal topics are never matched). With an authorizer, a regex
matches only the topics the heartbeat's principal may DESCRIBE (Kafka 4's
``filterTopicDescribeAuthorizedTopics``: the group's regexes are resolved with the
context of the member whose heartbeat resolves them). With ``consumer`` missing from
``group.coordinator.rebalance.protocols`` the two APIs are not advertised and a heartbeat
answers UNSUPPORTED_VERSION, as Kafka does when the new protocol is disabled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    Message,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.acl import ResourceType
from riverbed.server.broker.authorization import authorized_operations
from riverbed.server.broker.error_response import error_response
from riverbed.server.broker.groups import _answer, _client_host
from riverbed.server.coordinator import CoordinatorError
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker
    from riverbed.server.config import ServerConfig

E = ErrorCode
CONSUMER_PROTOCOL = "consumer"


class ImageTopics:
    """The `TopicView` of a metadata image (looked up on demand, nothing copied)."""

    def __init__(
        self, image: MetadataImage, describable: Callable[[str], bool] | None = None
    ) -> None:
        self.image = image
        #: which topics a regex may match (None: all of them, no authorizer)
        self.describable = describable

    def get(self, name: str) -> tuple[uuid.UUID, int] | None:
        topic = self.image.topic(name)
        if topic is None:
            return None
        return topic.topic_id, len(topic.partitions)

    def names(self) -> Iterable[str]:
        names = [n for n in self.image.topics_by_name if not n.startswith("__")]
        if self.describable is None:
            return names
        return [n for n in names if self.describable(n)]


def consumer_protocol_enabled(config: ServerConfig) -> bool:
    """``consumer`` in ``group.coordinator.rebalance.protocols``."""
    protocols = config.get("group.coordinator.rebalance.protocols")
    names = protocols.split(",") if isinstance(protocols, str) else protocols
    if not isinstance(names, list | tuple):
        raise TypeError(f"group.coordinator.rebalance.protocols is {protocols!r}")
    return CONSUMER_PROTOCOL in [str(p).strip() for p in names]


#: The APIs that exist only for the consumer protocol (not advertised when it is off).
CONSUMER_PROTOCOL_APIS = (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE)


async def handle_consumer_group_heartbeat(
    broker: Broker, ctx: RequestContext, req: ConsumerGroupHeartbeatRequest
) -> Message:
    if not consumer_protocol_enabled(broker.config):
        return error_response(
            ctx.header.api_key, req, response_body_version(ctx.header), E.UNSUPPORTED_VERSION
        )
    client_id = ctx.header.client_id or ""
    host = _client_host(ctx)
    image = broker.metadata.image
    authz = broker.authz
    describable = None
    if authz is not None:

        def describable(name: str) -> bool:
            return authz.may(image, ctx, Op.DESCRIBE, ResourceType.TOPIC, name)

    topics = ImageTopics(image, describable)
    return await _answer(
        broker,
        ctx,
        req,
        req.group_id,
        lambda shard, reply, now: shard.consumer_group_heartbeat(
            reply, req, client_id, host, topics, now
        ),
    )


async def handle_consumer_group_describe(
    broker: Broker, ctx: RequestContext, req: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    out = []
    await broker.groups.wait_ready(req.group_ids)
    for group_id in req.group_ids:
        try:
            _partition, shard = broker.groups.shard_of(group_id)
        except CoordinatorError as exc:
            out.append(
                ConsumerGroupDescribeResponse.DescribedGroup(
                    error_code=exc.error_code,
                    error_message=None,
                    group_id=group_id,
                    group_state="",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=[],
                )
            )
            continue
        described = shard.describe_consumer_group(group_id)
        if broker.authz is not None and not described.error_code:
            described = _hide_undescribable(broker, ctx, described)
        if req.include_authorized_operations and not described.error_code:
            described.authorized_operations = authorized_operations(
                broker.authz, broker.metadata.image, ctx, ResourceType.GROUP, group_id
            )
        out.append(described)
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)


#: Kafka's message for a group refused for its topics.
_UNDESCRIBABLE_TOPICS = (
    "The group has described topic(s) that the client is not authorized to describe."
)


def _hide_undescribable(
    broker: Broker, ctx: RequestContext, described: ConsumerGroupDescribeResponse.DescribedGroup
) -> ConsumerGroupDescribeResponse.DescribedGroup:
    """Kafka 4.0 (KAFKA-18813): a group whose members are assigned (now or as a target) a
    topic the principal may not DESCRIBE is not described: TOPIC_AUTHORIZATION_FAILED
    instead. A subscribed name alone does not count (Kafka checks the assignments: a
    subscription may name a topic that does not exist)."""
    assert broker.authz is not None
    topics: set[str] = set()
    for m in described.members:
        for a in (m.assignment, m.target_assignment):
            topics.update(tp.topic_name for tp in (a.topic_partitions if a else ()))
    image, authz = broker.metadata.image, broker.authz
    if all(authz.may(image, ctx, Op.DESCRIBE, ResourceType.TOPIC, t) for t in topics):
        return described
    return ConsumerGroupDescribeResponse.DescribedGroup(
        error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        error_message=_UNDESCRIBABLE_TOPICS,
        group_id=described.group_id,
        group_state="",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=[],
    )
