"""A controller listener's requests: Kafka's ControllerApis.

What a controller listener serves is `riverbed.server.quorum.CONTROLLER_API_VERSIONS`
(Raft's requests and the Fetch of the metadata partition, the broker lifecycle's
registrations and heartbeats, Envelope and the admin writes brokers forward); anything else closes the connection, as
Kafka's controller does for an API it does not expose. With an authorizer configured every
request is checked against `riverbed.security.api_operations.CONTROLLER_RULES` first, and a
request refused for some resources only is served for the others and answered per resource, as ControllerApis does.
An Envelope (a broker forwarding its client's metadata write) needs CLUSTER_ACTION; its
embedded request is then handled as if its client had sent it here: checked against the
same table with the envelope's principal and address (`riverbed.server.forwarding`).
SASL handshakes that reach here came outside the connection's SASL gate: ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, response_body_version
from riverbed.protocol.messages import EnvelopeRequest, Message
from riverbed.security.api_operations import CONTROLLER_RULES
from riverbed.server.broker.admin import mute_for_mutation_quota
from riverbed.server.broker.authorization import (
    BrokerAuthorizer,
    split,
    with_refused,
)
from riverbed.server.broker.cluster_info import api_versions_response
from riverbed.server.broker.error_response import error_code_of, error_response
from riverbed.server.broker.versioning import fit_to_version
from riverbed.server.forwarding import Origin, origin_of, peer_of, serve_envelope
from riverbed.server.network import CloseConnection, RequestContext
from riverbed.server.quorum import CONTROLLER_API_VERSIONS, QuorumMetadata

log = logging.getLogger("riverbed.server.node")

#: Raft replies are built at their exact wire version by ``raft.wire``.
_RAFT_EXACT = frozenset({1, 52, 53, 54, 55, 59})


class UnsupportedControllerApi(CloseConnection):
    """A request a controller listener does not serve; the connection is closed."""


class ControllerApis:
    """The handler of a node's controller listeners (the quorum opens after the
    listeners: ``quorum`` gives it once open, None before)."""

    def __init__(self, quorum: Callable[[], QuorumMetadata | None]) -> None:
        self._quorum = quorum
        #: `authorizer.class.name` set: every request is checked before it is served
        self.authorizer: BrokerAuthorizer | None = None

    async def handle(self, ctx: RequestContext, body: Message) -> Message:
        """The answer to a request read on a controller listener."""
        api_key = ctx.header.api_key
        if api_key not in CONTROLLER_API_VERSIONS:
            raise UnsupportedControllerApi(
                f"api key {api_key} is not served on {ctx.listener_name}"
            )
        if api_key == ApiKey.API_VERSIONS:
            return api_versions_response(ctx, CONTROLLER_API_VERSIONS)
        version = response_body_version(ctx.header)
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            # outside the SASL gate (PLAINTEXT, or already authenticated): Kafka's answer
            return error_response(api_key, body, version, ErrorCode.ILLEGAL_SASL_STATE)
        quorum = self._quorum()
        if quorum is None:
            raise UnsupportedControllerApi(f"api key {api_key} before the quorum is open")
        if self.authorizer is not None:
            v = self.authorizer.verdict(quorum.image, ctx, body, CONTROLLER_RULES)
            if v.whole is not None:  # ControllerApis throws: its error response, a
                # metadata-log Fetch's top-level error included
                return error_response(api_key, body, version, v.whole)
            if v.refused:  # Kafka's ControllerApis answers these per topic / resource
                allowed, refused = split(api_key, body, v)
                refused = self.authorizer.named_refusals(quorum.image, ctx, api_key, refused)
                served = None
                if allowed is not None:
                    served = await self._serve(quorum, ctx, allowed, version)
                return fit_to_version(with_refused(api_key, served, refused, version), version)
        if isinstance(body, EnvelopeRequest):

            async def as_its_client(header: RequestHeader, inner: Message, o: Origin) -> Message:
                return await self.handle(_client_context(ctx, header, o), inner)

            return await serve_envelope(body, as_its_client)
        return await self._serve(quorum, ctx, body, version)

    async def _serve(
        self, quorum: QuorumMetadata, ctx: RequestContext, body: Message, version: int
    ) -> Message:

        api_key = ctx.header.api_key
        try:
            response = await quorum.handle_controller_request(api_key, body, origin_of(ctx))
        except Exception as exc:
            code = error_code_of(exc)
            if code is not ErrorCode.NOT_CONTROLLER:
                log.exception("controller request api_key=%s failed", api_key)
            return error_response(api_key, body, version, code)
        if response is None and api_key == ApiKey.FETCH:
            # A controller only serves the metadata partition (Kafka's raft client answers
            # any other Fetch INVALID_REQUEST).
            return error_response(api_key, body, version, ErrorCode.INVALID_REQUEST)
        if response is None:
            raise UnsupportedControllerApi(
                f"api key {api_key} is not served on {ctx.listener_name}"
            )
        if api_key not in _RAFT_EXACT:
            fit_to_version(response, version)
        mute_for_mutation_quota(ctx, response)
        return response


def _client_context(ctx: RequestContext, header: RequestHeader, origin: Origin) -> RequestContext:
    """The context of an enveloped request: its client's header, principal and address on
    the envelope's connection; the forwarding broker throttles its client itself (the
    response carries the throttle), so nothing here mutes the broker's connection."""
    return ctx._replace(
        header=header,
        principal=origin.principal,
        peer=peer_of(origin),
        throttle=None,
        decisions=None,
    )
