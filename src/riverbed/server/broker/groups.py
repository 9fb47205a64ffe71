"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
TxnOffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

Each request goes to the shard of its group (`riverbed.server.coordinator`); an error
about the coordinator itself (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE) fills every error field of the response so the client looks
the coordinator up again. FindCoordinator (key type 0 = group, 1 = transaction; batched
keys v4+) creates ``__consumer_offsets`` / ``__transaction_state`` on first use, with
``offsets.topic.num.partitions`` / ``offsets.topic.replication.factor`` /
``offsets.topic.segment.bytes`` (and the ``transaction.state.log.*`` equivalents),
``cleanup.policy=compact``, and answers the leader of the key's partition on the
listener the request came in on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from riverbed.coordinator.records import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, partition_for
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    Message,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.acl import ResourceType
from riverbed.server.broker.authorization import authorized_operations
from riverbed.server.broker.error_response import error_response
from riverbed.server.broker.hosted import NotServed, producer_state_of
from riverbed.server.coordinator import CoordinatorError
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.coordinator.group import Reply
    from riverbed.coordinator.shard import GroupShard
    from riverbed.server.broker.dispatch import Broker

#: What runs on a group's shard: (shard, reply, now_ms); the shard answers through reply.
ShardOp = Callable[["GroupShard", "Reply", int], None]


class OffsetFetchTopics(Protocol):
    """OffsetFetch's topics (v0-v7 at the top level, v8+ per group)."""

    @property
    def name(self) -> str: ...

    @property
    def partition_indexes(self) -> list[int]: ...


log = logging.getLogger(__name__)

E = ErrorCode
_KEY_GROUP = 0
_KEY_TRANSACTION = 1


def _client_host(ctx: RequestContext) -> str:
    """Kafka's member host: ``/`` and the client's address, without the port."""
    host, sep, port = str(ctx.peer).rpartition(":")
    return f"/{host if sep and port.isdigit() else ctx.peer}"


async def _answer(
    broker: Broker, ctx: RequestContext, req: Message, group_id: str, op: ShardOp
) -> Message:
    """The response ``op`` gives on the group's shard (the coordinator's error in every
    error field when the shard cannot take it)."""
    version = response_body_version(ctx.header)
    try:
        response = await broker.groups.call(group_id, ctx.header.api_version, op)
    except CoordinatorError as exc:
        return error_response(ctx.header.api_key, req, version, exc.code)
    if not isinstance(response, Message):
        raise TypeError(f"group {group_id!r} answered {type(response).__name__}")
    return response


# ---------------------------------------------------------------------- FindCoordinator
def _internal_topic(broker: Broker, key_type: int) -> tuple[str, int, int, dict[str, str]]:
    cfg = broker.config
    if key_type == _KEY_GROUP:
        return (
            OFFSETS_TOPIC,
            cfg.get_int("offsets.topic.num.partitions"),
            cfg.get_int("offsets.topic.replication.factor"),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(cfg.get("offsets.topic.segment.bytes")),
                "compression.type": "producer",
            },
        )
    return (
        TRANSACTION_STATE_TOPIC,
        cfg.get_int("transaction.state.log.num.partitions"),
        cfg.get_int("transaction.state.log.replication.factor"),
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg.get("transaction.state.log.segment.bytes")),
            "min.insync.replicas": str(cfg.get("transaction.state.log.min.isr")),
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
        },
    )


async def ensure_internal_topic(broker: Broker, key_type: int) -> ErrorCode:
    """Create the internal topic of ``key_type`` unless it exists (Kafka does this on the
    first FindCoordinator); NONE once it exists and its local logs are open."""
    name, partitions, rf, configs = _internal_topic(broker, key_type)
    if broker.metadata.image.topic(name) is not None:
        return E.NONE
    async with broker.groups.create_lock:
        if broker.metadata.image.topic(name) is None:
            request = CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=rf,
                        assignments=[],
                        configs=[
                            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                            for k, v in configs.items()
                        ],
                    )
                ],
                timeout_ms=30_000,
                validate_only=False,
            )
            try:
                response = await broker.metadata.create_topics(request)
            except Exception as exc:
                log.warning("creating %s failed: %r", name, exc)
                return E.COORDINATOR_NOT_AVAILABLE
            code = response.topics[0].error_code if response.topics else 0
            if code not in (0, int(E.TOPIC_ALREADY_EXISTS)):
                log.warning(
                    "creating %s failed: %s (%s)",
                    name,
                    E.of(code).name,
                    response.topics[0].error_message,
                )
                return E.COORDINATOR_NOT_AVAILABLE
            log.info("created internal topic %s (%d partitions, rf %d)", name, partitions, rf)
    await broker.partitions.settled()
    return E.NONE


async def _find_one(
    broker: Broker, ctx: RequestContext, key: str, key_type: int
) -> tuple[ErrorCode, int, str, int]:
    if key_type not in (_KEY_GROUP, _KEY_TRANSACTION):
        return E.INVALID_REQUEST, -1, "", -1
    code = await ensure_internal_topic(broker, key_type)
    if code != E.NONE:
        return code, -1, "", -1
    name = _internal_topic(broker, key_type)[0]
    image = broker.metadata.image
    topic = image.topic(name)
    if topic is None or not topic.partitions:
        return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    reg = topic.partitions.get(partition_for(key, len(topic.partitions)))
    leader = reg.leader if reg is not None else -1
    broker_reg = image.brokers.get(leader)
    endpoint = broker_reg.endpoint(ctx.listener_name) if broker_reg is not None else None
    if endpoint is None or broker_reg is None or broker_reg.fenced:
        return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return E.NONE, leader, endpoint.host, endpoint.port


async def handle_find_coordinator(
    broker: Broker, ctx: RequestContext, req: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    if ctx.header.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys or []:
            code, node, host, port = await _find_one(broker, ctx, key, req.key_type)
            coordinators.append(
                FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node,
                    host=host,
                    port=port,
                    error_code=int(code),
                    error_message=None if code == E.NONE else code.name,
                )
            )
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    code, node, host, port = await _find_one(broker, ctx, req.key, req.key_type)
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=int(code),
        error_message=None if code == E.NONE else code.name,
        node_id=node,
        host=host,
        port=port,
        coordinators=[],
    )


# ---------------------------------------------------------------------- membership
async def handle_join_group(broker: Broker, ctx: RequestContext, req: JoinGroupRequest) -> Message:
    client_id = ctx.header.client_id or ""
    host = _client_host(ctx)
    return await _answer(
        broker,
        ctx,
        req,
        req.group_id,
        lambda shard, reply, now: shard.join_group(reply, req, client_id, host, now),
    )


async def handle_sync_group(broker: Broker, ctx: RequestContext, req: SyncGroupRequest) -> Message:
    return await _answer(
        broker, ctx, req, req.group_id, lambda shard, reply, now: shard.sync_group(reply, req, now)
    )


async def handle_heartbeat(broker: Broker, ctx: RequestContext, req: HeartbeatRequest) -> Message:
    return await _answer(
        broker, ctx, req, req.group_id, lambda shard, reply, now: shard.heartbeat(reply, req, now)
    )


async def handle_leave_group(
    broker: Broker, ctx: RequestContext, req: LeaveGroupRequest
) -> Message:
    return await _answer(
        broker, ctx, req, req.group_id, lambda shard, reply, now: shard.leave_group(reply, req, now)
    )


# ---------------------------------------------------------------------- offsets
def _unknown_partitions(
    broker: Broker, req: OffsetCommitRequest | TxnOffsetCommitRequest
) -> set[tuple[str, int]]:
    """The partitions of a commit that do not exist (UNKNOWN_TOPIC_OR_PARTITION alone)."""
    image = broker.metadata.image
    unknown: set[tuple[str, int]] = set()
    for t in req.topics:
        topic = image.topic(t.name)
        for p in t.partitions:
            if topic is None or p.partition_index not in topic.partitions:
                unknown.add((t.name, p.partition_index))
    return unknown


async def handle_offset_commit(
    broker: Broker, ctx: RequestContext, req: OffsetCommitRequest
) -> Message:
    unknown = _unknown_partitions(broker, req)
    return await _answer(
        broker,
        ctx,
        req,
        req.group_id,
        lambda shard, reply, now: shard.offset_commit(reply, req, now, unknown),
    )


async def handle_txn_offset_commit(
    broker: Broker, ctx: RequestContext, req: TxnOffsetCommitRequest
) -> Message:
    """TxnOffsetCommit (KIP-98 / KIP-447): the offsets are written as the producer's
    transactional batch and stay pending until its marker (`riverbed.coordinator.txn_offsets`);
    first verified with the transaction coordinator (KIP-890 part 1) unless the producer's
    transaction is open in the group's partition already. From v5 on (KIP-890 part 2,
    transaction.version 2) the client sends no AddOffsetsToTxn: the group's partition is
    added to the transaction here instead of verified."""
    add = ctx.header.api_version >= TXN_COMMIT_IMPLICIT_ADD_VERSION
    verified, still_holds = await _verify_txn_commit(broker, req, add)
    if verified != E.NONE:
        code = txn_commit_error(verified, ctx.header.api_version)
        return error_response(ctx.header.api_key, req, response_body_version(ctx.header), code)
    unknown = _unknown_partitions(broker, req)
    key = broker.groups.hold_txn_guard(req.group_id, req.producer_id, still_holds)
    try:
        return await _answer(
            broker,
            ctx,
            req,
            req.group_id,
            lambda shard, reply, now: shard.txn_offset_commit(reply, req, now, unknown),
        )
    finally:
        broker.groups.release_txn_guard(key, still_holds)


#: Verification errors a TxnOffsetCommit answers COORDINATOR_NOT_AVAILABLE (Kafka's
#: coordinator maps the NOT_ENOUGH_REPLICAS its replica manager makes of them): retried.
_VERIFY_RETRIABLE = frozenset(
    {
        E.CONCURRENT_TRANSACTIONS,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.NOT_ENOUGH_REPLICAS,
    }
)
#: TxnOffsetCommit versions from this one on know TRANSACTION_ABORTABLE (KIP-890).
TXN_COMMIT_ABORTABLE_VERSION = 4
#: From this version on the group's partition is added to the transaction here (Kafka's
#: ``addPartition`` for "txn offset commit version >= 5", KIP-890 part 2).
TXN_COMMIT_IMPLICIT_ADD_VERSION = 5


def txn_commit_error(code: ErrorCode, version: int) -> ErrorCode:
    """A TxnOffsetCommit's answer for its verification's error (Kafka's mapping)."""
    if code in _VERIFY_RETRIABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if code == E.NETWORK_EXCEPTION:
        return E.COORDINATOR_LOAD_IN_PROGRESS
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code == E.TRANSACTION_ABORTABLE and version < TXN_COMMIT_ABORTABLE_VERSION:
        return E.INVALID_TXN_STATE
    return code


def _holds() -> bool:
    return True


async def _verify_txn_commit(
    broker: Broker, req: TxnOffsetCommitRequest, add: bool = False
) -> tuple[ErrorCode, Callable[[], bool]]:
    """KIP-890 part 1 for the group's ``__consumer_offsets`` partition: NONE when verified
    (``add``: added, part 2) or nothing to verify (the producer's transaction is open
    there, verification is off, or this node cannot take the commit: the shard answers
    that), and the check the write makes again right before its append (a marker
    meanwhile ended the transaction)."""
    if not add and not broker.txn_verifier.enabled():
        return E.NONE, _holds
    try:
        partition = broker.groups.partition_of(req.group_id)
    except CoordinatorError:
        return E.NONE, _holds
    hosted = broker.partitions.leader_partition(OFFSETS_TOPIC, partition)
    if isinstance(hosted, NotServed):
        return E.NONE, _holds
    state = producer_state_of(hosted.log)
    pid, epoch = req.producer_id, req.producer_epoch
    guard = state.begin_verification(pid, epoch) if state is not None else None
    if state is None or guard is None:
        return E.NONE, _holds
    code = await broker.txn_verifier.verify(
        req.transactional_id, pid, epoch, OFFSETS_TOPIC, partition, add
    )
    # a marker of the producer meanwhile ended the verified transaction (a failed
    # verification drops the guard)
    held = state.end_verification(req.producer_id, guard, code == E.NONE)
    if code == E.NONE and not held:
        return E.INVALID_TXN_STATE, _holds
    return code, lambda: state.end_verification(pid, guard)


def _fetch_group(
    broker: Broker,
    ctx: RequestContext,
    group_id: str,
    topics: Sequence[OffsetFetchTopics] | None,
    member: tuple[str | None, int] = (None, -1),
    require_stable: bool = False,
) -> OffsetFetchResponse.OffsetFetchResponseGroup:
    """One group's offsets; ``member`` (OffsetFetch v9+: member id, epoch) is checked
    against a KIP-848 group; ``require_stable`` (v7+): partitions with pending
    transactional offsets answer UNSTABLE_OFFSET_COMMIT. All topics (``topics`` None):
    only those the principal may DESCRIBE (Kafka filters them; named ones are checked
    before, `riverbed.security.api_operations`)."""
    refused: list[OffsetFetchTopics] = []
    if topics is not None and broker.authz is not None:  # v8+: each group's own topics
        image, authz = broker.metadata.image, broker.authz
        ok = [authz.may(image, ctx, Op.DESCRIBE, ResourceType.TOPIC, t.name) for t in topics]
        refused = [t for t, yes in zip(topics, ok, strict=True) if not yes]
        topics = [t for t, yes in zip(topics, ok, strict=True) if yes]
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    try:
        _partition, shard = broker.groups.shard_of(group_id)
    except CoordinatorError as exc:
        return OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=group_id, topics=[], error_code=exc.error_code
        )
    code = shard.consumer_fetch_check(group_id, *member)
    if code != E.NONE:
        return OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=group_id, topics=[], error_code=int(code)
        )
    fetched = shard.offset_fetch(group_id, wanted, require_stable)
    fetched.topics += [_refused_offsets(t) for t in refused]
    if topics is None and broker.authz is not None:
        image, authz = broker.metadata.image, broker.authz
        fetched.topics = [
            t
            for t in fetched.topics
            if authz.may(image, ctx, Op.DESCRIBE, ResourceType.TOPIC, t.name)
        ]
    return fetched


def _refused_offsets(topic: OffsetFetchTopics) -> OffsetFetchResponse.OffsetFetchResponseTopics:
    """A named topic the principal may not DESCRIBE: each partition TOPIC_AUTHORIZATION_FAILED
    (Kafka's OffsetFetch answers it per topic, the group's other topics served)."""
    R = OffsetFetchResponse
    return R.OffsetFetchResponseTopics(
        name=topic.name,
        partitions=[
            R.OffsetFetchResponsePartitions(
                partition_index=p,
                committed_offset=-1,
                error_code=int(E.TOPIC_AUTHORIZATION_FAILED),
            )
            for p in topic.partition_indexes
        ],
    )


async def handle_offset_fetch(
    broker: Broker, ctx: RequestContext, req: OffsetFetchRequest
) -> Message:
    # require_stable (v7+): a partition with pending transactional offsets is
    # UNSTABLE_OFFSET_COMMIT (the consumer retries until the transaction ends)
    stable = ctx.header.api_version >= 7 and req.require_stable
    v8 = ctx.header.api_version >= 8
    await broker.groups.wait_ready([g.group_id for g in req.groups or []] if v8 else [req.group_id])
    if v8:
        groups = [
            _fetch_group(broker, ctx, g.group_id, g.topics, (g.member_id, g.member_epoch), stable)
            for g in req.groups or []
        ]
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups, topics=[], error_code=0)
    one = _fetch_group(broker, ctx, req.group_id, req.topics, require_stable=stable)
    if one.error_code and ctx.header.api_version < 2:
        # v0/v1 have no top-level error: every requested partition carries it
        return error_response(
            ctx.header.api_key, req, response_body_version(ctx.header), E.of(one.error_code)
        )
    topics = [
        OffsetFetchResponse.OffsetFetchResponseTopic(
            name=t.name,
            partitions=[
                OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=p.partition_index,
                    committed_offset=p.committed_offset,
                    committed_leader_epoch=p.committed_leader_epoch,
                    metadata=p.metadata,
                    error_code=p.error_code,
                )
                for p in t.partitions
            ],
        )
        for t in one.topics
    ]
    return OffsetFetchResponse(
        throttle_time_ms=0, topics=topics, error_code=one.error_code, groups=[]
    )


async def handle_offset_delete(
    broker: Broker, ctx: RequestContext, req: OffsetDeleteRequest
) -> Message:
    return await _answer(
        broker, ctx, req, req.group_id, lambda shard, reply, now: shard.offset_delete(reply, req)
    )


# ---------------------------------------------------------------------- admin
async def handle_list_groups(
    broker: Broker, ctx: RequestContext, req: ListGroupsRequest
) -> ListGroupsResponse:
    states = set(req.states_filter or []) if ctx.header.api_version >= 4 else None
    # v5+: a types filter ("classic", "consumer"; case-insensitive, empty = all)
    types = {t.lower() for t in req.types_filter or []} if ctx.header.api_version >= 5 else set()
    listed = []
    code = E.NONE
    if broker.groups.loading():
        code = E.COORDINATOR_LOAD_IN_PROGRESS
    for shard in broker.groups.current_shards():
        found = []
        if not types or "classic" in types:
            found += [(g, "classic") for g in shard.list_groups(states)]
        if not types or "consumer" in types:
            found += [(g, "consumer") for g in shard.list_consumer_groups(states)]
        for (group_id, ptype, state), gtype in found:
            listed.append(
                ListGroupsResponse.ListedGroup(
                    group_id=group_id, protocol_type=ptype, group_state=state, group_type=gtype
                )
            )
    authz = broker.authz
    if authz is not None and not authz.may_describe_cluster(broker.metadata.image, ctx):
        # Kafka lists only the groups the principal may DESCRIBE
        image = broker.metadata.image
        listed = [
            g for g in listed if authz.may(image, ctx, Op.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    return ListGroupsResponse(throttle_time_ms=0, error_code=int(code), groups=listed)


async def handle_describe_groups(
    broker: Broker, ctx: RequestContext, req: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    out = []
    await broker.groups.wait_ready(req.groups)
    for group_id in req.groups:
        try:
            _partition, shard = broker.groups.shard_of(group_id)
        except CoordinatorError as exc:
            out.append(
                DescribeGroupsResponse.DescribedGroup(
                    error_code=exc.error_code,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
            continue
        described = shard.describe_group(group_id)
        if req.include_authorized_operations and not described.error_code:
            described.authorized_operations = authorized_operations(
                broker.authz, broker.metadata.image, ctx, ResourceType.GROUP, group_id
            )
        if ctx.header.api_version >= DESCRIBE_GROUPS_NOT_FOUND_VERSION:
            _not_found(described)
        out.append(described)
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)


#: From this version on an unknown group is GROUP_ID_NOT_FOUND (KIP-1043), not Dead.
DESCRIBE_GROUPS_NOT_FOUND_VERSION = 6


def _not_found(described: DescribeGroupsResponse.DescribedGroup) -> None:
    """KIP-1043 (DescribeGroups v6): "returns error code GROUP_ID_NOT_FOUND if the group
    ID is not found", with a message; older versions get the Dead group with no error."""
    if described.error_code == 0 and described.group_state == "Dead" and not described.members:
        described.error_code = int(ErrorCode.GROUP_ID_NOT_FOUND)
        described.error_message = f"Group {described.group_id} not found."


async def handle_delete_groups(
    broker: Broker, ctx: RequestContext, req: DeleteGroupsRequest
) -> DeleteGroupsResponse:
    async def one(group_id: str) -> DeleteGroupsResponse.DeletableGroupResult:
        try:
            code = await broker.groups.call(
                group_id,
                ctx.header.api_version,
                lambda shard, reply, now: shard.delete_group(reply, group_id, now),
            )
        except CoordinatorError as exc:
            code = exc.code
        if not isinstance(code, int):
            raise TypeError(f"DeleteGroups of {group_id!r} answered {type(code).__name__}")
        return DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=int(code))

    results = await asyncio.gather(*(one(g) for g in req.groups_names))
    return DeleteGroupsResponse(throttle_time_ms=0, results=list(results))
