"""The client quotas applied to a broker's answer (`quota_enforcement` keeps the quotas),
as Kafka's RequestHandlerHelper and KafkaApis apply them after a request is handled:

- `counted`: whether the request's handler time counts against ``request_percentage``;
- `throttle_answer`: an answer (also one to a request refused in part or in items) with
  the request time and the produce or consumer fetch bytes recorded
  (``sendResponseMaybeThrottle``; a throttled consumer fetch answered empty,
  `fetch_throttle`);
- `throttle_error`: a failing handler's error response or a refusal of the whole request,
  with the request time alone recorded (``sendErrorResponseMaybeThrottle``).

A throttle > 0 goes into the answer's ``throttle_time_ms`` and mutes the connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    FetchRequest,
    FetchResponse,
    Message,
    ProduceRequest,
)
from riverbed.server.broker.fetch_throttle import consumer_fetch, throttle_fetch
from riverbed.server.broker.quota_enforcement import CLUSTER_ACTION_APIS, set_throttle_time
from riverbed.server.network import RequestContext, Response, SplicedResponse

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

#: responses whose handler may have set a throttle already (the controller mutation
#: quota): the request-time throttle does not lower it
_THROTTLED_BY_HANDLER = (
    CreateTopicsResponse,
    DeleteTopicsResponse,
    CreatePartitionsResponse,
)


def counted(broker: Broker, ctx: RequestContext, body: Message, refused: bool = False) -> bool:
    """Kafka's request quota, except for acks=0 produces and follower fetches (and the
    exemptions of `BrokerQuotas.measures_request_time`)."""
    if not broker.quotas.measures_request_time(broker.metadata.image, ctx, refused):
        return False
    if isinstance(body, ProduceRequest):
        return body.acks != 0
    return not isinstance(body, FetchRequest) or consumer_fetch(body)


def error_counted(ctx: RequestContext, code: ErrorCode) -> bool:
    """RequestHandlerHelper.handleError: a failing cluster action's error response is
    exempt, unless it is a ClusterAuthorizationException."""
    return ctx.header.api_key not in CLUSTER_ACTION_APIS or (
        code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )


def throttle_answer(
    broker: Broker, ctx: RequestContext, body: Message, response: Response | None, handler_ns: int
) -> Response | None:
    """Record the request time (``handler_ns`` < 0: not counted) and the produce or
    consumer fetch bytes; the answer, a throttled consumer fetch's the empty one."""
    image = broker.metadata.image
    throttle = 0
    if handler_ns >= 0:
        throttle = broker.quotas.record_request_time(image, ctx, handler_ns)
    if isinstance(body, ProduceRequest):
        throttle = max(throttle, broker.quotas.record_produce(image, ctx))
    elif isinstance(response, (FetchResponse, SplicedResponse)) and consumer_fetch(body):
        response, throttle = throttle_fetch(broker, ctx, response, throttle)
    if throttle > 0:
        _mute(ctx, response, throttle)
    return response


def throttle_error(broker: Broker, ctx: RequestContext, response: Message, handler_ns: int) -> None:
    """Record the request time of an error response (``handler_ns`` < 0: not counted)."""
    if handler_ns >= 0:
        throttle = broker.quotas.record_request_time(broker.metadata.image, ctx, handler_ns)
        if throttle > 0:
            _mute(ctx, response, throttle)


def _mute(ctx: RequestContext, response: Response | None, throttle: int) -> None:
    if ctx.throttle is not None:
        ctx.throttle.throttle(throttle)
    msg = response.body if isinstance(response, SplicedResponse) else response
    if isinstance(msg, _THROTTLED_BY_HANDLER):  # the larger throttle is answered
        throttle = max(throttle, msg.throttle_time_ms)
    if msg is not None:
        set_throttle_time(msg, throttle)
