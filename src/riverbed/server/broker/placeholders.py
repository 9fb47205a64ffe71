"""APIs whose real implementation belongs to later issues, answered with proper errors.

- Group coordination (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete):
  COORDINATOR_NOT_AVAILABLE (retriable; the group coordinator issue replaces these).
  Consumers that assign partitions themselves and keep no committed offsets work.
- SASL: no mechanism is enabled -> SaslHandshake UNSUPPORTED_SASL_MECHANISM with an
  empty mechanism list, SaslAuthenticate ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    response_class,
)
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

_NO_COORDINATOR = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)


async def handle_find_coordinator(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    keys = list(req.coordinator_keys or ([req.key] if req.key else []))
    return FindCoordinatorResponse(
        error_code=_NO_COORDINATOR,
        error_message="the group coordinator is not available yet",
        node_id=-1,
        host="",
        port=-1,
        coordinators=[
            FindCoordinatorResponse.Coordinator(
                key=k, node_id=-1, host="", port=-1, error_code=_NO_COORDINATOR
            )
            for k in keys
        ],
    )


async def handle_offset_commit(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=_NO_COORDINATOR
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


async def handle_offset_fetch(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    groups = [
        OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=g.group_id, topics=[], error_code=_NO_COORDINATOR
        )
        for g in (req.groups or [])
    ]
    return OffsetFetchResponse(error_code=_NO_COORDINATOR, topics=[], groups=groups)


async def handle_describe_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return DescribeGroupsResponse(
        groups=[
            DescribeGroupsResponse.DescribedGroup(error_code=_NO_COORDINATOR, group_id=g)
            for g in req.groups
        ]
    )


async def handle_delete_groups(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return DeleteGroupsResponse(
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=_NO_COORDINATOR)
            for g in req.groups_names
        ]
    )


def error_only(code: ErrorCode) -> Any:
    """A handler answering the API's response with just a top-level ``error_code``."""

    async def handler(broker: Broker, ctx: RequestContext, req: Any) -> Any:
        resp = response_class(ctx.header.api_key)()
        if hasattr(resp, "error_code"):
            resp.error_code = int(code)
        return resp

    return handler
