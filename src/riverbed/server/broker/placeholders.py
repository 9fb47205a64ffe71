"""APIs whose real implementation belongs to later issues, answered with proper errors.

- SASL: no mechanism is enabled -> SaslHandshake UNSUPPORTED_SASL_MECHANISM with an
  empty mechanism list, SaslAuthenticate ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import Message
from riverbed.server.broker.error_response import error_response
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker


def error_only(code: ErrorCode) -> Callable[[Broker, RequestContext, Message], Awaitable[Message]]:
    """A handler answering the API's response with just a top-level ``error_code`` (the
    response class of every API served so has one: SaslHandshake, SaslAuthenticate)."""

    async def handler(broker: Broker, ctx: RequestContext, req: Message) -> Message:
        return error_response(ctx.header.api_key, req, response_body_version(ctx.header), code)

    return handler
