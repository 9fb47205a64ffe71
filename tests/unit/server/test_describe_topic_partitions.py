"""DescribeTopicPartitions (KIP-966): pagination by partition with a cursor, as Kafka's
``describeTopicResponse`` pages, and the request rules of its handler."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tests.unit.server.test_produce_record_errors import registered_image

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import MetadataImage, replay_all
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_response
from riverbed.protocol.messages import (
    CreateAclsRequest,
    CreateTopicsRequest,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from riverbed.security.acl import (
    SUPPORTED_OPERATIONS,
    PatternType,
    PermissionType,
    ResourceType,
    operations_bitfield,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.authorizer import AuthorizerConfig
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.broker import describe_topics
from riverbed.server.broker.authorization import BrokerAuthorizer
from riverbed.server.network import RequestContext

#: topic -> partitions
TOPICS = {"a": 5, "b": 2, "c": 1}


def _image() -> MetadataImage:
    c = Controller(ControllerConfig(node_id=1))
    image = registered_image(c)
    CT = CreateTopicsRequest
    req = CT(
        topics=[
            CT.CreatableTopic(name=n, num_partitions=p, replication_factor=1)
            for n, p in TOPICS.items()
        ],
        timeout_ms=0,
        validate_only=False,
    )
    return replay_all(image, c.create_topics(image, req, 0).records)


IMAGE = _image()


def _ask(
    names: list[str],
    limit: int = 2000,
    cursor: tuple[str, int] | None = None,
    max_limit: int = 2000,
    image: MetadataImage = IMAGE,
    authz: BrokerAuthorizer | None = None,
) -> Any:
    D = DescribeTopicPartitionsRequest
    req = D(
        topics=[D.TopicRequest(name=n) for n in names],
        response_partition_limit=limit,
        cursor=None
        if cursor is None
        else D.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    broker = SimpleNamespace(
        metadata=SimpleNamespace(image=image),
        authz=authz,
        config=SimpleNamespace(
            get_int=lambda key: {"max.request.partition.size.limit": max_limit}[key]
        ),
    )
    header = RequestHeader(int(ApiKey.DESCRIBE_TOPIC_PARTITIONS), 0, 5, "test")
    ctx = RequestContext(
        header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, KafkaPrincipal("User", "alice")
    )
    response = asyncio.run(describe_topics.handle_describe_topic_partitions(broker, ctx, req))  # type: ignore[arg-type]
    decoded = decode_response(header, encode_response(header, response)[4:])
    assert isinstance(decoded, DescribeTopicPartitionsResponse)
    return decoded


def _pages(names: list[str], limit: int) -> list[list[tuple[str, int]]]:
    """Every page of a paginated description, followed through its cursors."""
    pages, cursor = [], None
    while True:
        r = _ask(names, limit, cursor)
        pages.append([(t.name, p.partition_index) for t in r.topics for p in t.partitions])
        if r.next_cursor is None:
            return pages
        cursor = (r.next_cursor.topic_name, r.next_cursor.partition_index)


def test_pages_cover_every_partition_once_in_order() -> None:
    every = [(t, p) for t, n in sorted(TOPICS.items()) for p in range(n)]
    for names in ([], ["c", "a", "b"]):
        for limit in (1, 2, 3, 7, 8, 100):
            pages = _pages(names, limit)
            assert [tp for page in pages for tp in page] == every, (names, limit)
            assert all(1 <= len(page) <= limit for page in pages)


def test_cursor_positions() -> None:
    r = _ask([], 3)
    assert [(t.name, len(t.partitions)) for t in r.topics] == [("a", 3)]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("a", 3)
    # the limit reached exactly at a topic's end: the next topic, from partition 0
    r = _ask([], 2, ("a", 3))
    assert [(t.name, len(t.partitions)) for t in r.topics] == [("a", 2)]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("b", 0)
    # the broker's max.request.partition.size.limit caps the client's limit; at least 1
    assert len(_ask(["a"], 2000, max_limit=2).topics[0].partitions) == 2
    assert len(_ask(["a"], 0).topics[0].partitions) == 1


def test_partition_fields_and_topic_fields() -> None:
    r = _ask(["b"])
    (t,) = r.topics
    assert t.error_code == 0 and t.topic_id == IMAGE.topic("b").topic_id and not t.is_internal
    every = operations_bitfield(SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    assert t.topic_authorized_operations == every  # no authorizer: every operation
    for p in t.partitions:
        reg = IMAGE.partition("b", p.partition_index)
        assert (p.leader_id, p.leader_epoch) == (reg.leader, reg.leader_epoch) == (1, 0)
        assert p.replica_nodes == [1] and p.isr_nodes == [1] and p.offline_replicas == []
        assert p.eligible_leader_replicas is None and p.last_known_elr is None


def test_unknown_and_invalid_names_are_answered_only_when_named() -> None:
    r = _ask(["nope", "a", "bad/name"])
    codes = {t.name: t.error_code for t in r.topics}
    assert codes == {
        "a": 0,
        "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert [t.name for t in _ask([]).topics] == ["a", "b", "c"]


def test_bad_cursors_are_invalid_requests() -> None:
    # "the topic in cursor must be included in the topic list if provided"
    r = _ask(["a"], cursor=("b", 0))
    assert [t.error_code for t in r.topics] == [ErrorCode.INVALID_REQUEST]
    r = _ask(["a"], cursor=("a", -1))  # "cursor partition must be valid"
    assert [t.error_code for t in r.topics] == [ErrorCode.INVALID_REQUEST]
    # topics sorting before the cursor's are not described
    assert [t.name for t in _ask(["a", "b", "c"], cursor=("b", 1)).topics] == ["b", "c"]


def test_the_authorizer_hides_and_refuses_what_may_not_be_described() -> None:
    """As Metadata: a topic alice may not DESCRIBE is left out of an all-topics answer and
    TOPIC_AUTHORIZATION_FAILED (no id, existence not disclosed) when named; the
    authorized operations are hers (READ implies DESCRIBE)."""
    C = CreateAclsRequest.AclCreation
    acl = C(
        resource_type=ResourceType.TOPIC,
        resource_name="a",
        resource_pattern_type=PatternType.LITERAL,
        principal="User:alice",
        host="*",
        operation=Op.READ,
        permission_type=PermissionType.ALLOW,
    )
    c = Controller(ControllerConfig(node_id=1))
    image = replay_all(IMAGE, c.create_acls(IMAGE, CreateAclsRequest(creations=[acl]), 0).records)
    authz = BrokerAuthorizer(AuthorizerConfig())
    r = _ask([], image=image, authz=authz)
    assert [t.name for t in r.topics] == ["a"]
    assert r.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    r = _ask(["a", "b", "nope"], image=image, authz=authz)
    codes = {t.name: (t.error_code, t.topic_id.int) for t in r.topics}
    assert codes["a"][0] == 0
    assert codes["b"] == codes["nope"] == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)


def test_only_kafkas_internal_topics_are_marked_internal() -> None:
    """Kafka's Topic.isInternal is a fixed set: a user topic whose name starts with "__"
    is not internal (clients' exclude.internal.topics would hide it from a pattern
    subscription), in DescribeTopicPartitions and in Metadata alike."""
    from riverbed.metadata.topic_names import INTERNAL_TOPICS, is_internal_topic
    from riverbed.server.broker.cluster_info import _topic_metadata

    c = Controller(ControllerConfig(node_id=1))
    image = registered_image(c)
    CT = CreateTopicsRequest
    names = ["__events", "__consumer_offsets", "plain"]
    req = CT(
        topics=[CT.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in names],
        timeout_ms=0,
        validate_only=False,
    )
    image = replay_all(image, c.create_topics(image, req, 0).records)
    described = {t.name: t.is_internal for t in _ask(names, image=image).topics}
    assert described == {"__events": False, "__consumer_offsets": True, "plain": False}
    listed = {n: _topic_metadata(image, n, 0).is_internal for n in names}
    assert listed == described
    assert is_internal_topic("__transaction_state") and "__share_group_state" in INTERNAL_TOPICS
