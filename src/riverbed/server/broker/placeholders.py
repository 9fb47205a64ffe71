"""Requests the broker answers with a fixed error.

- SASL outside the SASL gate (a PLAINTEXT or SSL listener, or a SASL connection already
  authenticated whose session has no end): SaslHandshake and SaslAuthenticate
  ILLEGAL_SASL_STATE, the latter with Kafka's message (KafkaApis answers them so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import Message, SaslAuthenticateResponse
from riverbed.server.broker.error_response import error_response
from riverbed.server.network import RequestContext

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

#: KafkaApis.handleSaslAuthenticateRequest's message.
SASL_AUTHENTICATE_AFTER_LOGIN = "SaslAuthenticate request received after successful authentication"


async def sasl_outside_the_gate(broker: Broker, ctx: RequestContext, req: Message) -> Message:
    version = response_body_version(ctx.header)
    reply = error_response(ctx.header.api_key, req, version, ErrorCode.ILLEGAL_SASL_STATE)
    if isinstance(reply, SaslAuthenticateResponse):
        reply.error_message = SASL_AUTHENTICATE_AFTER_LOGIN
    return reply
