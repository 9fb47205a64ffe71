"""The quotas of a consumer's Fetch once its response is ready, as Kafka's
KafkaApis.handleFetchRequest (``processResponseCallback``) applies them.

Kafka records the request time (``quotas.request``) and the response's bytes
(``quotas.fetch``) and takes the larger throttle. When it is > 0 the fetch bytes are
unrecorded ("we are going to return an empty response") and the answer is
``fetchContext.getThrottledResponse(maxThrottleTimeMs)``: ``FetchResponse.of(NONE,
throttle, INVALID_SESSION_ID, <no partitions>)``. Not the partitions without their records:
no partition at all, whichever quota was violated. Kafka's clients expect exactly that
(KIP-219; the Java FetchSessionHandler: "if the broker wants to throttle the client, it
will respond to a full fetch request with an empty response and a throttleTimeMs") and
fetch the same positions again once the throttle is over. riverbed keeps no fetch
sessions, so the session id is always 0 (INVALID_SESSION_ID).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import FetchRequest, FetchResponse, Message, encode
from riverbed.server.broker.fetch import replica_of
from riverbed.server.network import RequestContext, SplicedResponse
from riverbed.server.splice import plan_size, splice_plan

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

FetchAnswer = FetchResponse | SplicedResponse


def consumer_fetch(body: Message) -> bool:
    """A client's Fetch (a follower's is replication: neither quota applies to it)."""
    return isinstance(body, FetchRequest) and replica_of(body)[0] < 0


def _body(response: FetchAnswer) -> FetchResponse:
    """The response body (a spliced one's ``records`` are its file tokens)."""
    body = response.body if isinstance(response, SplicedResponse) else response
    assert isinstance(body, FetchResponse)  # the fetch handler's
    return body


def response_bytes(response: FetchAnswer, version: int) -> int:
    """The bytes the fetch quota counts for ``response``: Kafka's ``FetchResponse.sizeOf``
    (the whole body at the request's version, every partition's fields and its records,
    without the response header), so that a fetch of many partitions with little or no
    data is counted too. Encoded once more to be measured: only when a fetch quota is on."""
    body = _body(response)
    encoded = encode(body, version)
    if isinstance(response, SplicedResponse):
        return plan_size(splice_plan(encoded, response))  # the tokens' real sizes
    return len(encoded)


def throttled_response(response: FetchAnswer, throttle_ms: int) -> FetchResponse:
    """Kafka 4.x's ``FetchContext.getThrottledResponse``: no partitions, session 0, the
    node endpoints of the leader hints kept (KIP-951); the file ranges ``response``
    pinned are released."""
    body = _body(response)
    if isinstance(response, SplicedResponse):
        for f in response.files:
            for rng in f.ranges:
                rng.close()
    return FetchResponse(
        throttle_time_ms=throttle_ms,
        error_code=0,
        session_id=0,
        responses=[],
        node_endpoints=list(body.node_endpoints or ()),
    )


def throttle_fetch(
    broker: Broker, ctx: RequestContext, response: FetchAnswer, request_throttle_ms: int
) -> tuple[FetchAnswer, int]:
    """A consumer's fetch response with the quotas applied (the response, or the empty
    throttled one) and the throttle (0: none; else the caller mutes the connection)."""
    quotas, image = broker.quotas, broker.metadata.image
    size = 0
    if quotas.fetch_quota_enabled(image):
        size = response_bytes(response, response_body_version(ctx.header))
    throttle = quotas.record_fetch(image, ctx, size, request_throttle_ms)
    if throttle <= 0:
        return response, 0
    return throttled_response(response, throttle), throttle
