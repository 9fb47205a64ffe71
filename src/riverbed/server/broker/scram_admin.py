"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) on broker listeners.

Describe is answered from this broker's metadata image; Alter is a controller write,
forwarded to the active controller (`QuorumMetadata.alter_user_scram_credentials`), as
Kafka's brokers forward it. Rules: `riverbed.metadata.scram_control`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.metadata.scram_control import describe_user_scram_credentials
from riverbed.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from riverbed.server.forwarding import origin_of
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker


async def handle_describe_user_scram_credentials(
    broker: Broker, ctx: RequestContext, req: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    return describe_user_scram_credentials(broker.metadata.image, req)


async def handle_alter_user_scram_credentials(
    broker: Broker, ctx: RequestContext, req: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    return await broker.metadata.alter_user_scram_credentials(req, origin_of(ctx))
