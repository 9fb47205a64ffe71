"""Admin APIs: topics, partitions, configs, reassignments (through the controller) and
DescribeLogDirs.

CreateTopics (19), DeleteTopics (20), CreatePartitions (37), AlterConfigs (33),
IncrementalAlterConfigs (44), AlterPartitionReassignments (45) and ElectLeaders (43,
PREFERRED or UNCLEAN; see `riverbed.metadata.partition_control`) are controller
operations: the metadata service turns the
request into metadata records against the current image, appends them to the metadata
log, replays them and returns the response; the broker opens or deletes partition logs
when the new image is published (CreateTopics and CreatePartitions answer once the new
logs exist). ListPartitionReassignments (46) reads the partitions' adding/removing replicas
from the image. DescribeConfigs (32) reads the image and the static
broker config (sources and synonyms). DescribeLogDirs (35) reports every log dir with
the partitions stored in it, their sizes (and a follower's offset lag: the leader's HW minus
its log end, Kafka's fetcher lag), the dir's total/usable bytes, and a replica
moving to another dir there as a future replica (``is_future_key``, its offset lag);
AlterReplicaLogDirs (34) starts such moves (``riverbed.storage.log_moves``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Container
from typing import TYPE_CHECKING, TypeVar

from riverbed.metadata.feature_control import set_upgrade_types
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.acl import ResourceType
from riverbed.security.api_operations import CONFIG_RESOURCES, LEGACY_ALTER_CONFIG_RESOURCES
from riverbed.server.dynamic_listeners import OP_SET
from riverbed.server.forwarding import origin_of
from riverbed.server.network import RequestContext
from riverbed.storage.errors import StorageError

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

#: A config resource of a type the API does not know (Kafka's InvalidRequestException).
UNKNOWN_TYPE = int(ErrorCode.INVALID_REQUEST)


async def handle_create_topics(
    broker: Broker, ctx: RequestContext, req: CreateTopicsRequest
) -> CreateTopicsResponse:
    response = await broker.metadata.create_topics(req, origin_of(ctx))
    await broker.partitions.settled()  # answer once the new partitions take requests
    if broker.authz is not None:
        _withhold_configs(broker, ctx, response)
    mute_for_mutation_quota(ctx, response)
    return response


def mute_for_mutation_quota(ctx: RequestContext, response: object) -> None:
    """The active controller's mutation-quota throttle (in a CreateTopics, DeleteTopics
    or CreatePartitions response) mutes the client's connection here, as Kafka's
    sendForwardedResponse does on a broker and sendResponseMaybeThrottleWithControllerQuota
    on a controller listener (the request-time throttle is added by the dispatcher, the
    larger one answered)."""
    if not isinstance(
        response, CreateTopicsResponse | DeleteTopicsResponse | CreatePartitionsResponse
    ):
        return
    if response.throttle_time_ms > 0 and ctx.throttle is not None:
        ctx.throttle.throttle(response.throttle_time_ms)


def _withhold_configs(broker: Broker, ctx: RequestContext, response: CreateTopicsResponse) -> None:
    """Kafka's ReplicationControlManager.createTopic: a created topic's configs, partition
    count and replication factor are returned only to a principal that may DESCRIBE_CONFIGS
    it; to others TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED."""
    assert broker.authz is not None
    image = broker.metadata.image
    for t in response.topics:
        if t.error_code or broker.authz.may(
            image, ctx, Op.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name
        ):
            continue
        t.configs = []
        t.num_partitions = -1
        t.replication_factor = -1
        t.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


async def handle_delete_topics(
    broker: Broker, ctx: RequestContext, req: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    response = await broker.metadata.delete_topics(req, origin_of(ctx))
    mute_for_mutation_quota(ctx, response)
    return response


async def handle_create_partitions(
    broker: Broker, ctx: RequestContext, req: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    response = await broker.metadata.create_partitions(req, origin_of(ctx))
    await broker.partitions.settled()
    mute_for_mutation_quota(ctx, response)
    return response


async def handle_alter_configs(
    broker: Broker, ctx: RequestContext, req: AlterConfigsRequest
) -> AlterConfigsResponse:
    kept, refused = _checked(broker, req.resources, LEGACY_ALTER_CONFIG_RESOURCES)
    R = AlterConfigsResponse.AlterConfigsResourceResponse
    results = [
        R(resource_type=t, resource_name=n, error_code=c, error_message=m) for t, n, c, m in refused
    ]
    if refused and not kept:
        return AlterConfigsResponse(responses=results)
    req = AlterConfigsRequest(resources=kept, validate_only=req.validate_only)
    response = await broker.metadata.alter_configs(req, origin_of(ctx))
    response.responses.extend(results)
    return response


async def handle_incremental_alter_configs(
    broker: Broker, ctx: RequestContext, req: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    kept, refused = _checked(broker, req.resources, CONFIG_RESOURCES)
    R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    results = [
        R(resource_type=t, resource_name=n, error_code=c, error_message=m) for t, n, c, m in refused
    ]
    if refused and not kept:
        return IncrementalAlterConfigsResponse(responses=results)
    req = IncrementalAlterConfigsRequest(resources=kept, validate_only=req.validate_only)
    response = await broker.metadata.incremental_alter_configs(req, origin_of(ctx))
    response.responses.extend(results)
    return response


_Resource = TypeVar(
    "_Resource",
    AlterConfigsRequest.AlterConfigsResource,
    IncrementalAlterConfigsRequest.AlterConfigsResource,
)


def _checked(
    broker: Broker, resources: list[_Resource], known: Container[int]
) -> tuple[list[_Resource], list[tuple[int, str, int, str]]]:
    """The resources to forward, and (type, name, error code, message) of those refused
    here, as Kafka's ConfigAdminManager.preprocess: a resource type the API does not
    know (``known``: it was not authorized either), and a broker resource replacing this
    broker's listener key / trust stores, validated on the broker it alters
    (`riverbed.server.dynamic_listeners`)."""
    dynamic = broker.dynamic_listeners
    image = broker.metadata.image
    kept: list[_Resource] = []
    refused: list[tuple[int, str, int, str]] = []
    for res in resources:
        if res.resource_type not in known:
            unknown = f"Unknown resource type {res.resource_type}"
            refused.append((res.resource_type, res.resource_name, UNKNOWN_TYPE, unknown))
            continue
        if dynamic is None:
            kept.append(res)
            continue
        incremental = isinstance(res, IncrementalAlterConfigsRequest.AlterConfigsResource)
        changes = _changes(res)
        why = dynamic.refusal(image, res.resource_type, res.resource_name, changes, incremental)
        if why is None:
            kept.append(res)
        else:
            refused.append((res.resource_type, res.resource_name, int(why[0]), why[1]))
    return kept, refused


def _changes(
    res: AlterConfigsRequest.AlterConfigsResource
    | IncrementalAlterConfigsRequest.AlterConfigsResource,
) -> list[tuple[str, int, str | None]]:
    if isinstance(res, IncrementalAlterConfigsRequest.AlterConfigsResource):
        return [(c.name, c.config_operation, c.value) for c in res.configs]
    return [(c.name, OP_SET, c.value) for c in res.configs]


async def handle_elect_leaders(
    broker: Broker, ctx: RequestContext, req: ElectLeadersRequest
) -> ElectLeadersResponse:
    return await broker.metadata.elect_leaders(req, origin_of(ctx))


async def handle_describe_configs(
    broker: Broker, ctx: RequestContext, req: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    if any(r.resource_type not in CONFIG_RESOURCES for r in req.resources):
        return _describe_configs_refused(req)
    return broker.metadata.describe_configs(req)


def _describe_configs_refused(req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """A resource of an unknown type: Kafka's ConfigHelper throws InvalidRequestException
    for the request, answered by its error response: every resource INVALID_REQUEST with
    the error's own message."""
    R = DescribeConfigsResponse.DescribeConfigsResult
    return DescribeConfigsResponse(
        results=[
            R(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=UNKNOWN_TYPE,
                error_message=ErrorCode.INVALID_REQUEST.message,
                configs=[],
            )
            for r in req.resources
        ]
    )


async def handle_alter_partition_reassignments(
    broker: Broker, ctx: RequestContext, req: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    response = await broker.metadata.alter_partition_reassignments(req, origin_of(ctx))
    await broker.partitions.settled()  # new replicas' logs exist before the answer
    return response


async def handle_list_partition_reassignments(
    broker: Broker, ctx: RequestContext, req: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    return broker.metadata.list_partition_reassignments(req)


def _partition_dir(broker: Broker, topic: str, index: int) -> str:
    found = broker.partitions.log_manager.log_dir_of(topic, index)
    return os.path.realpath(found) if found is not None else ""


async def handle_alter_replica_log_dirs(
    broker: Broker, ctx: RequestContext, req: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    log_manager = broker.partitions.log_manager
    R = AlterReplicaLogDirsResponse

    def alter() -> dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]]:
        # in a thread: retargeting a move waits for its running copy step
        results: dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]] = {}
        for d in req.dirs:
            for t in d.topics:
                for index in t.partitions:
                    code = 0
                    try:
                        log_manager.alter_log_dir(t.name, index, d.path)
                    except StorageError as e:
                        code = e.error_code
                    parts = results.setdefault(t.name, [])
                    parts.append(
                        R.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=code)
                    )
        return results

    results = await asyncio.to_thread(alter)
    return R(
        throttle_time_ms=0,
        results=[
            R.AlterReplicaLogDirTopicResult(topic_name=name, partitions=parts)
            for name, parts in results.items()
        ],
    )


async def handle_describe_log_dirs(
    broker: Broker, ctx: RequestContext, req: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    wanted: dict[str, set[int]] | None = None
    if req.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in req.topics}
    dirs = [os.path.abspath(d) for d in broker.config.log_dirs]
    real = {os.path.realpath(d): d for d in dirs}  # the log manager resolves symlinks
    per_dir: dict[str, dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]]] = {
        d: {} for d in dirs
    }

    def add(topic: str, index: int, d: str, size: int, lag: int, future: bool) -> None:
        if wanted is not None and index not in wanted.get(topic, ()):
            return
        bucket = per_dir.get(real.get(d, d))
        if bucket is None:
            bucket = per_dir.setdefault(dirs[0] if dirs else d, {})
        bucket.setdefault(topic, []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=index, partition_size=size, offset_lag=lag, is_future_key=future
            )
        )

    replicas = broker.partitions.replicas  # None: a bare log manager
    for (topic, index), hosted in sorted(broker.partitions.partitions.items()):
        d = _partition_dir(broker, topic, index)
        lag = replicas.offset_lag((topic, index)) if replicas is not None else 0
        add(topic, index, d, int(hosted.log.size_bytes), lag, False)
    moving = broker.partitions.log_manager.future_logs()
    for (topic, index), (dest, size, lag) in sorted(moving.items()):
        # a replica moving between dirs: Kafka's "future" replica in its target dir
        add(topic, index, os.path.realpath(dest), size, lag, True)
    offline = {os.path.abspath(d) for d in broker.partitions.log_manager.offline_dirs()}
    results = []
    for d, topics in per_dir.items():
        try:
            if d in offline:
                # Kafka: an offline dir answers KAFKA_STORAGE_ERROR and lists nothing
                raise OSError(f"log dir {d} is offline")
            usage = shutil.disk_usage(d)
            code, total, usable = 0, usage.total, usage.free
        except OSError:
            code, total, usable = int(ErrorCode.KAFKA_STORAGE_ERROR), -1, -1
            topics = {}
        results.append(
            DescribeLogDirsResponse.DescribeLogDirsResult(
                error_code=code,
                log_dir=d,
                topics=[
                    DescribeLogDirsResponse.DescribeLogDirsTopic(name=name, partitions=parts)
                    for name, parts in sorted(topics.items())
                ],
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


async def handle_update_features(
    broker: Broker, ctx: RequestContext, req: UpdateFeaturesRequest
) -> UpdateFeaturesResponse:
    """UpdateFeatures (57), forwarded to the active controller
    (`riverbed.metadata.feature_control`); a v0 request's AllowDowngrade becomes its
    upgrade type first (the forwarded request is the newest version)."""
    set_upgrade_types(req, ctx.header.api_version)
    return await broker.metadata.update_features(req, origin_of(ctx))
