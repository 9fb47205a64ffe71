"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31) on broker listeners.

Describe is answered from this broker's metadata image; Create and Delete are controller
writes, forwarded to the active controller (`QuorumMetadata.create_acls/delete_acls`), as
Kafka's brokers forward them. Without an authorizer (`authorizer.class.name` unset) each
is answered SECURITY_DISABLED, as Kafka does. Rules: `riverbed.metadata.acl_control`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.metadata.acl_control import describe_acls
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from riverbed.server.forwarding import origin_of
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

_DISABLED = int(ErrorCode.SECURITY_DISABLED)
_DISABLED_TEXT = "No Authorizer is configured."


async def handle_describe_acls(
    broker: Broker, ctx: RequestContext, req: DescribeAclsRequest
) -> DescribeAclsResponse:
    if broker.authz is None:
        return DescribeAclsResponse(error_code=_DISABLED, error_message=_DISABLED_TEXT)
    return describe_acls(broker.metadata.image, req)


async def handle_create_acls(
    broker: Broker, ctx: RequestContext, req: CreateAclsRequest
) -> CreateAclsResponse:
    if broker.authz is None:
        R = CreateAclsResponse.AclCreationResult
        return CreateAclsResponse(
            results=[R(error_code=_DISABLED, error_message=_DISABLED_TEXT) for _ in req.creations]
        )
    return await broker.metadata.create_acls(req, origin_of(ctx))


async def handle_delete_acls(
    broker: Broker, ctx: RequestContext, req: DeleteAclsRequest
) -> DeleteAclsResponse:
    if broker.authz is None:
        R = DeleteAclsResponse.DeleteAclsFilterResult
        return DeleteAclsResponse(
            filter_results=[
                R(error_code=_DISABLED, error_message=_DISABLED_TEXT) for _ in req.filters
            ]
        )
    return await broker.metadata.delete_acls(req, origin_of(ctx))
