"""ApiVersions (18), Metadata (3) and DescribeCluster (60): what clients learn first.

Metadata answers from the current metadata image: the brokers' endpoints for the
listener the request came in on, this node as controller, and per topic its id and
partitions (leader, leader epoch, replicas, ISR). A requested topic that does not exist
is created when ``auto.create.topics.enable`` is on and the request allows it (v4+ flag;
always allowed before v4), through the controller like CreateTopics, and answered once
this node's image shows it (LEADER_NOT_AVAILABLE while the controller has it and the
image not yet); an invalid name is INVALID_TOPIC_EXCEPTION, otherwise
UNKNOWN_TOPIC_OR_PARTITION. A null topic list (v1+) or an empty one in v0 means every topic.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping, Set
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from riverbed.metadata.controller import topic_name_error
from riverbed.metadata.feature_control import SUPPORTED_FEATURES
from riverbed.metadata.image import PartitionRegistration
from riverbed.metadata.records import (
    TRANSACTION_VERSION_FEATURE,
)
from riverbed.metadata.topic_names import is_internal_topic
from riverbed.protocol.api_versions import ApiKey, is_supported
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeTopicPartitionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from riverbed.protocol.primitives import ZERO_UUID
from riverbed.security.acl import ResourceType
from riverbed.server.broker.authorization import authorized_operations, cluster_operations
from riverbed.server.broker.auto_create import AUTO_CREATE_TOPICS_VERSION
from riverbed.server.forwarding import Origin, origin_of
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage
    from riverbed.server.broker.dispatch import Broker

log = logging.getLogger(__name__)

#: "authorized operations not requested" (Kafka's Integer.MIN_VALUE sentinel).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def valid_topic_name(name: str | None) -> bool:
    """Kafka's topic name rules (one definition: the controller's ``topic_name_error``)."""
    return name is not None and topic_name_error(name) is None


async def handle_api_versions(
    broker: Broker, ctx: RequestContext, req: ApiVersionsRequest
) -> ApiVersionsResponse:
    response = api_versions_response(ctx, broker.api_versions)
    if response.error_code == 0:
        add_features(response, broker.metadata.image, broker.api_versions, ctx.header.api_version)
    return response


#: The first versions of TV2 (KIP-890 part 2: the broker adds the partition / group).
TV2_VERSIONS: dict[ApiKey, int] = {ApiKey.PRODUCE: 12, ApiKey.TXN_OFFSET_COMMIT: 5}


def client_transaction_version(level: int, versions: Mapping[ApiKey, tuple[int, int]]) -> int:
    """The transaction version clients are told is finalized. A Kafka 4.x Java producer
    that sees transaction.version 2 stops sending AddPartitionsToTxn / AddOffsetsToTxn and
    relies on Produce v12 / TxnOffsetCommit v5 adding the partition; while this broker
    serves either below that version it is told 1 (its transactions then add partitions
    themselves), whatever the level."""
    if any(versions.get(key, (0, 0))[1] < v for key, v in TV2_VERSIONS.items()):
        return min(level, 1)
    return level


#: ApiVersions versions from this one on may list a feature whose minimum level is 0.
FEATURE_LEVEL_0_VERSION = 4


def add_features(
    response: ApiVersionsResponse,
    image: MetadataImage,
    versions: Mapping[ApiKey, tuple[int, int]],
    api_version: int = FEATURE_LEVEL_0_VERSION,
) -> None:
    """ApiVersions v3+: supported features, and the levels finalized in the metadata log
    (``FeatureLevelRecord`` s; the epoch is the image's offset, as a KRaft broker's).
    Below v4 a supported feature of minimum level 0 (transaction.version) is left out, as
    Kafka's: "Some older clients will have deserialization problems if a feature's
    minimum supported level is 0" (KAFKA-17492)."""
    R = ApiVersionsResponse
    response.supported_features = [
        R.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
        for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
        if lo > 0 or api_version >= FEATURE_LEVEL_0_VERSION
    ]
    finalized = dict(image.features)
    if TRANSACTION_VERSION_FEATURE in finalized:
        level = finalized[TRANSACTION_VERSION_FEATURE]
        finalized[TRANSACTION_VERSION_FEATURE] = client_transaction_version(level, versions)
    response.finalized_features_epoch = image.offset
    response.finalized_features = [
        R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
        for name, level in sorted(finalized.items())
        if level > 0
    ]


def api_versions_response(
    ctx: RequestContext, versions: Mapping[ApiKey, tuple[int, int]]
) -> ApiVersionsResponse:
    """The versions the listener ``ctx`` came in on serves (its `listener_api_versions`)."""
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(versions.items())
    ]
    # A newer version than ours is answered at v0 (see protocol.headers) with
    # UNSUPPORTED_VERSION and our ranges, so the client retries with a version we speak.
    supported = is_supported(ctx.header.api_key, ctx.header.api_version)
    code = 0 if supported else int(ErrorCode.UNSUPPORTED_VERSION)
    return ApiVersionsResponse(error_code=code, api_keys=keys, throttle_time_ms=0)


def _controller_id(broker: Broker) -> int:
    """The controller id clients are told (Metadata, DescribeCluster): as a KRaft broker
    in Kafka, a live broker rather than the quorum leader: every broker forwards controller
    requests to the active controller, and a client that cached a quorum leader killed a
    moment ago would wait for it (librdkafka: "waiting for controller") instead of
    retrying. Riverbed names itself (alive: it is answering) when registered and unfenced,
    else the active controller."""
    image = broker.metadata.image
    me = broker.config.node_id
    reg = image.brokers.get(me)
    if reg is not None and not reg.fenced:
        return int(me)
    return broker.metadata.active_controller_id()


def recently_fenced(broker: Broker) -> Callable[[int], bool]:
    """Fenced brokers a Metadata answer still lists (riverbed.metadata.recently_fenced:
    librdkafka moves a dead leader's partitions cleanly only while the dead broker is
    listed)."""
    now_ms = broker.clock.now_ms()
    return lambda broker_id: broker.recently_fenced.listed(broker_id, now_ms)


def _brokers(
    image: MetadataImage, listener: str, include_fenced: Callable[[int], bool] = lambda _: False
) -> list[tuple[int, str, int, str | None]]:
    """Registered brokers with an endpoint on ``listener``: the unfenced ones, and the fenced
    ones ``include_fenced`` names."""
    out = []
    for broker_id, reg in sorted(image.brokers.items()):
        if reg.fenced and not include_fenced(broker_id):
            continue
        ep = reg.endpoint(listener)
        if ep is not None:
            out.append((broker_id, ep.host, ep.port, reg.rack))
    return out


def _refused_topic(
    name: str | None,
    topic_id: uuid.UUID = ZERO_UUID,
    code: ErrorCode = ErrorCode.TOPIC_AUTHORIZATION_FAILED,
) -> MetadataResponse.MetadataResponseTopic:
    """A topic answered with an error only: a topic asked for by id keeps its id and no
    name (Kafka: the name of a topic the principal may not DESCRIBE is not told)."""
    return MetadataResponse.MetadataResponseTopic(
        error_code=int(code),
        name=name,
        topic_id=topic_id,
        partitions=[],
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


PartitionEntry = TypeVar(
    "PartitionEntry",
    MetadataResponse.MetadataResponsePartition,
    DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition,
)


def partition_entry(
    cls: type[PartitionEntry], index: int, reg: PartitionRegistration
) -> PartitionEntry:
    """A partition as Metadata and DescribeTopicPartitions describe it (LEADER_NOT_AVAILABLE
    without a leader; riverbed has no offline replicas to list)."""
    return cls(
        error_code=0 if reg.leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
        partition_index=index,
        leader_id=reg.leader,
        leader_epoch=reg.leader_epoch,
        replica_nodes=list(reg.replicas),
        isr_nodes=list(reg.isr),
        offline_replicas=[],
    )


def _topic_metadata(
    image: MetadataImage, name: str, ops: int, being_created: Set[str] = frozenset()
) -> MetadataResponse.MetadataResponseTopic:
    """``ops``: the topic's KIP-430 bitfield, or AUTHORIZED_OPERATIONS_OMITTED;
    ``being_created``: topics the controller has that this node's image does not show yet."""
    topic = image.topic(name)
    if topic is None:
        if name in being_created:
            code = ErrorCode.LEADER_NOT_AVAILABLE
        elif valid_topic_name(name):
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION
        return MetadataResponse.MetadataResponseTopic(
            error_code=int(code), name=name, partitions=[], topic_authorized_operations=ops
        )
    P = MetadataResponse.MetadataResponsePartition
    parts = [partition_entry(P, index, reg) for index, reg in sorted(topic.partitions.items())]
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=name,
        topic_id=topic.topic_id,
        is_internal=is_internal_topic(name),
        partitions=parts,
        topic_authorized_operations=ops,
    )


#: What the controller answers for a topic that exists (once created) after an auto-create.
_EXISTS = frozenset({0, int(ErrorCode.TOPIC_ALREADY_EXISTS)})


async def _auto_create(broker: Broker, ctx: RequestContext, names: list[str]) -> set[str]:
    """Ask the controller to create each of ``names``; the ones it has (created now, or
    already: another node's Metadata created it a moment ago).

    Such a topic that this node's image does not show yet (the forwarded create waited
    `FORWARD_APPLY_WAIT_S` for it) is answered LEADER_NOT_AVAILABLE with no partitions, as
    Kafka's ZooKeeper-era broker answered a topic its controller had (TOPIC_ALREADY_EXISTS
    or REQUEST_TIMED_OUT from the create); its KRaft broker answers UNKNOWN_TOPIC_OR_PARTITION
    while its asynchronous create is in flight, but a client that knows the topic from
    another node must not be told it is unknown: librdkafka takes that as "partition count
    changed from 1 to 0" and fails the messages it holds for the topic, while it ignores
    LEADER_NOT_AVAILABLE without partitions as temporary."""
    # all at once, as Kafka sends one CreateTopics for a Metadata request's missing topics;
    # the requesting client's mutation quota pays (Kafka's Envelope of its context)
    origin = replace(origin_of(ctx), api_version=AUTO_CREATE_TOPICS_VERSION)
    created = await asyncio.gather(*(_auto_create_one(broker, name, origin) for name in names))
    return {name for name, ok in zip(names, created, strict=True) if ok}


async def _auto_create_one(broker: Broker, name: str, origin: Origin) -> bool:
    """Does the controller have ``name`` once asked to create it (`_auto_create`)?"""
    try:
        # one creation per name in flight on this broker (riverbed.server.broker.auto_create)
        response = await broker.auto_topic_creations.create(name, origin)
    except Exception:  # reported as UNKNOWN_TOPIC_OR_PARTITION
        log.exception("auto-creating topic %r failed", name)
        return False
    if response is None:  # too many other creations in flight: the client asks again
        return False
    return any(t.name == name and t.error_code in _EXISTS for t in response.topics)


async def handle_metadata(
    broker: Broker, ctx: RequestContext, req: MetadataRequest
) -> MetadataResponse:
    version = ctx.header.api_version
    image = broker.metadata.image
    being_created: set[str] = set()
    refused: list[str] = []  # named, and not for this principal to describe
    by_id: dict[str, uuid.UUID] = {}  # v12+: the topics asked for by id
    unknown_ids: list[uuid.UUID] = []  # v12+: ids naming no topic (UNKNOWN_TOPIC_ID)
    if req.topics is None or (version == 0 and not req.topics):
        names = sorted(image.topics_by_name)
        if broker.authz is not None:
            names, _ = broker.authz.visible_topics(
                image, ctx, names, explicit=False, auto_create=False
            )
    else:
        names = []
        for t in req.topics:
            name = t.name
            if name is None and t.topic_id != ZERO_UUID:
                found = image.topic_by_id(t.topic_id)
                if found is None:
                    unknown_ids.append(t.topic_id)
                    continue
                name = found.name
                by_id[name] = t.topic_id
            if name is not None:
                names.append(name)
        allow = req.allow_auto_topic_creation if version >= 4 else True
        if broker.authz is not None:
            auto = allow and broker.config.auto_create_topics_enable
            names, refused = broker.authz.visible_topics(
                image, ctx, names, explicit=True, auto_create=auto
            )
        missing = [n for n in names if image.topic(n) is None and valid_topic_name(n)]
        if missing and allow and broker.config.auto_create_topics_enable:
            being_created = await _auto_create(broker, ctx, missing)
            await broker.partitions.settled()
            image = broker.metadata.image

    def topic_ops(name: str) -> int:
        if not req.include_topic_authorized_operations:
            return AUTHORIZED_OPERATIONS_OMITTED
        return authorized_operations(broker.authz, image, ctx, ResourceType.TOPIC, name)

    brokers = [
        MetadataResponse.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
        for i, h, p, r in _brokers(image, ctx.listener_name, recently_fenced(broker))
    ]
    include_cluster_ops = req.include_cluster_authorized_operations and 8 <= version <= 10
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=_controller_id(broker),
        topics=[_topic_metadata(image, n, topic_ops(n), being_created) for n in names]
        + [_refused_topic(None if n in by_id else n, by_id.get(n, ZERO_UUID)) for n in refused]
        + [_refused_topic(None, i, ErrorCode.UNKNOWN_TOPIC_ID) for i in unknown_ids],
        cluster_authorized_operations=(
            cluster_operations(broker.authz, image, ctx)
            if include_cluster_ops
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


async def handle_describe_cluster(
    broker: Broker, ctx: RequestContext, req: DescribeClusterRequest
) -> DescribeClusterResponse:
    """DescribeCluster; v2 (KIP-1073) lists fenced brokers too when asked
    (``IncludeFencedBrokers``), each with ``IsFenced``."""
    image = broker.metadata.image
    with_fenced = req.include_fenced_brokers and ctx.header.api_version >= 2
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=_controller_id(broker),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=i, host=h, port=p, rack=r, is_fenced=image.brokers[i].fenced
            )
            for i, h, p, r in _brokers(image, ctx.listener_name, lambda _: with_fenced)
        ],
        cluster_authorized_operations=(
            cluster_operations(broker.authz, image, ctx)
            if req.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )
