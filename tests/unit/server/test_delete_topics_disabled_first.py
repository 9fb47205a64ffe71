"""``delete.topic.enable=false`` is answered before authorization, as Kafka's
ControllerApis.deleteTopics answers it (it throws before it resolves or authorizes a
topic): a principal without DELETE on a topic, or on anything, is told deletion is
disabled (TOPIC_DELETION_DISABLED from v3, INVALID_REQUEST below), every topic of the
request alike, and nothing reaches the controller. Driven in-process through
`ControllerApis.handle` (the controller listener, and a broker's Envelope) with a stand-in
quorum; the broker listener takes the same `BrokerAuthorizer.verdict`."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest

from riverbed.metadata.image import MetadataImage, acl_record, replay_all
from riverbed.metadata.records import METADATA_VERSION_FEATURE
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    EnvelopeResponse,
    FeatureLevelRecord,
    Message,
    TopicRecord,
)
from riverbed.security.acl import AclOperation, PatternType, PermissionType, ResourceType
from riverbed.security.acl import StandardAcl as Acl
from riverbed.security.authorizer import AuthorizerConfig
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.broker.authorization import BrokerAuthorizer
from riverbed.server.broker.error_response import item_errors
from riverbed.server.controller_apis import ControllerApis
from riverbed.server.forwarding import Origin, unwrap_response, wrap_request
from riverbed.server.network import RequestContext

ORDERS = uuid.UUID(int=1)
MALLORY = KafkaPrincipal("User", "mallory")
BROKER = KafkaPrincipal("User", "broker")
#: the broker may vouch for its clients; mallory may only DESCRIBE orders
ACLS = [
    Acl(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:broker", "*",
        AclOperation.CLUSTER_ACTION, PermissionType.ALLOW),
    Acl(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:mallory", "*",
        AclOperation.DESCRIBE, PermissionType.ALLOW),
]  # fmt: skip


@dataclass
class ServingQuorum:
    """What `ControllerApis` needs of the quorum: its image; records what it serves."""

    image: MetadataImage
    served: list[Message] = field(default_factory=list)

    async def handle_controller_request(
        self, api_key: int, body: Message, origin: Origin
    ) -> Message:
        self.served.append(body)
        return item_errors(api_key, body, origin.api_version, ErrorCode.NONE)


def _controller(delete_topic_enable: bool) -> tuple[ControllerApis, ServingQuorum]:
    records: list[Message] = [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=21)]
    records.append(TopicRecord(name="orders", topic_id=ORDERS))
    records += [acl_record(uuid.UUID(int=100 + i), a) for i, a in enumerate(ACLS)]
    quorum = ServingQuorum(replay_all(MetadataImage.EMPTY, records))
    apis = ControllerApis(lambda: quorum)  # type: ignore[arg-type, return-value]
    apis.authorizer = BrokerAuthorizer(AuthorizerConfig(), delete_topic_enable=delete_topic_enable)
    return apis, quorum


def _ctx(api_key: int, version: int, principal: KafkaPrincipal) -> RequestContext:
    return RequestContext(
        header=RequestHeader(api_key, version, 7, "client-1"),
        peer="10.0.0.1:40000",
        listener_name="CONTROLLER",
        connection_id=1,
        received_ms=0,
        principal=principal,
    )


def _request(version: int) -> DeleteTopicsRequest:
    """orders (mallory may DESCRIBE it, not DELETE it) and a topic that does not exist;
    by name, and from v6 orders by id too."""
    if version < 6:
        return DeleteTopicsRequest(topic_names=["orders", "gone"], timeout_ms=1000)
    state = DeleteTopicsRequest.DeleteTopicState
    return DeleteTopicsRequest(
        topics=[state(name="orders"), state(name="gone"), state(name=None, topic_id=ORDERS)],
        timeout_ms=1000,
    )


def _codes(answer: Message) -> list[int]:
    assert isinstance(answer, DeleteTopicsResponse)
    return [r.error_code for r in answer.responses]


@pytest.mark.parametrize("version", range(7))
def test_disabled_deletion_is_answered_before_authorization(version: int) -> None:
    code = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
    body = _request(version)
    apis, quorum = _controller(delete_topic_enable=False)
    direct = asyncio.run(apis.handle(_ctx(ApiKey.DELETE_TOPICS, version, MALLORY), body))
    assert _codes(direct) == [code] * (2 if version < 6 else 3)
    # the same client's request forwarded by a broker in an Envelope
    origin = Origin(MALLORY, "client-1", version, "10.0.0.1")
    envelope = wrap_request(ApiKey.DELETE_TOPICS, body, origin)
    answer = asyncio.run(apis.handle(_ctx(ApiKey.ENVELOPE, 0, BROKER), envelope))
    assert isinstance(answer, EnvelopeResponse) and answer.error_code == 0
    assert _codes(unwrap_response(ApiKey.DELETE_TOPICS, origin, answer)) == _codes(direct)
    assert quorum.served == []  # the controller never saw it


def test_with_deletion_enabled_the_same_principal_is_refused_by_its_acls() -> None:
    """The other side of the order: deletion on, mallory is refused
    TOPIC_AUTHORIZATION_FAILED for orders (DESCRIBE only) and for the absent topic (not
    even DESCRIBE: it learns nothing of it), and nothing is deleted."""
    apis, quorum = _controller(delete_topic_enable=True)
    answer = asyncio.run(apis.handle(_ctx(ApiKey.DELETE_TOPICS, 5, MALLORY), _request(5)))
    assert isinstance(answer, DeleteTopicsResponse)
    assert sorted((r.name, r.error_code) for r in answer.responses) == [
        ("gone", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("orders", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]
    assert quorum.served == []
