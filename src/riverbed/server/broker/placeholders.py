"""APIs whose real implementation belongs to later issues, answered with proper errors.

- SASL: no mechanism is enabled -> SaslHandshake UNSUPPORTED_SASL_MECHANISM with an
  empty mechanism list, SaslAuthenticate ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import response_class
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker


def error_only(code: ErrorCode) -> Any:
    """A handler answering the API's response with just a top-level ``error_code``."""

    async def handler(broker: Broker, ctx: RequestContext, req: Any) -> Any:
        resp = response_class(ctx.header.api_key)()
        if hasattr(resp, "error_code"):
            resp.error_code = int(code)
        return resp

    return handler
