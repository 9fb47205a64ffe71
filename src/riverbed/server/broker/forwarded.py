"""Controller APIs that broker listeners serve by passing them on to the quorum.

DescribeQuorum (55) and UnregisterBroker (64) list ``broker`` among their listeners in
Kafka's specs (tools such as ``kafka-metadata-quorum --bootstrap-server`` and
``kafka-cluster unregister`` talk to a broker): the broker forwards them to the quorum
leader / active controller and answers with its response, as Kafka's ``KafkaApis`` does
with ``forwardToController``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.protocol.messages import (
    DescribeQuorumRequest,
    Message,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from riverbed.server.forwarding import origin_of
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker


async def handle_describe_quorum(
    broker: Broker, ctx: RequestContext, req: DescribeQuorumRequest
) -> Message:
    return await broker.metadata.describe_quorum(req)


async def handle_unregister_broker(
    broker: Broker, ctx: RequestContext, req: UnregisterBrokerRequest
) -> UnregisterBrokerResponse:
    return await broker.metadata.unregister_broker(req, origin_of(ctx))
