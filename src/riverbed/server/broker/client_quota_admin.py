"""DescribeClientQuotas (48) and AlterClientQuotas (49) on broker listeners.

Describe is answered from this broker's metadata image; Alter is a controller write,
forwarded to the active controller (`QuorumMetadata.alter_client_quotas`), as Kafka's
brokers forward it. Rules: `riverbed.metadata.client_quota_control`; enforcement:
`riverbed.server.broker.quota_enforcement`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.metadata.client_quota_control import describe_client_quotas
from riverbed.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from riverbed.server.forwarding import origin_of
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker


async def handle_describe_client_quotas(
    broker: Broker, ctx: RequestContext, req: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    return describe_client_quotas(broker.metadata.image, req)


async def handle_alter_client_quotas(
    broker: Broker, ctx: RequestContext, req: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    return await broker.metadata.alter_client_quotas(req, origin_of(ctx))
