"""Forwarding a client's metadata write in an Envelope (Kafka's EnvelopeRequest, API 58).

A broker that is not the active controller sends every metadata write a client asked for
(`ENVELOPED_APIS`: CreateTopics, CreateAcls, IncrementalAlterConfigs, ...) to the active
controller inside an Envelope, as Kafka's ForwardingManager does, so that the controller
acts for the client and not for the broker: ``RequestData`` is the client's
request header and body at the client's version (so the controller knows which version's
rules apply: KIP-599's strict versions), ``RequestPrincipal`` the client's principal
(Kafka's DefaultKafkaPrincipalBuilder serde: a version-prefixed DefaultPrincipalData) and
``ClientHostAddress`` the client's IP address bytes. The EnvelopeResponse carries the
inner response header and body (``ResponseData``) or an envelope error.

Kafka's rules kept (ControllerApis.handleEnvelopeRequest, ForwardingManager):
- the sender must hold CLUSTER_ACTION on the cluster (`CONTROLLER_RULES`), else the
  envelope is answered CLUSTER_AUTHORIZATION_FAILED;
- an embedded request that does not decode or is not one of the forwarded APIs is answered
  INVALID_REQUEST, a principal that does not decode PRINCIPAL_DESERIALIZATION_FAILURE;
- an envelope error reaches the client as UNKNOWN_SERVER_ERROR ("it would not be
  expected"); the inner response is the client's answer, its throttle_time_ms the
  controller's mutation-quota throttle, which the forwarding broker applies to the
  client's connection (sendForwardedResponse); the controller mutes nothing (its peer is
  the broker).

The controller authorizes the embedded request as the client's own
(`riverbed.server.controller_apis`), as Kafka's ControllerApis does with the envelope's
principal and address: the controller's image is the one that counts (an ACL removed a
moment ago on the controller refuses a write a lagging broker would still let through),
and a principal holding CLUSTER_ACTION passes no write of its own through the controller
listener that its ACLs do not allow. riverbed's broker also authorizes the client before it
forwards (so a refused item is answered without a round trip).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from riverbed.protocol.base import Message
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.headers import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from riverbed.protocol.messages import (
    DefaultPrincipalData,
    EnvelopeRequest,
    EnvelopeResponse,
    decode,
    encode,
)
from riverbed.protocol.primitives import INT16
from riverbed.security.api_operations import CLIENT_METADATA_WRITES
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.network import RequestContext

log = logging.getLogger(__name__)

#: The client metadata writes a broker forwards in an Envelope (Kafka's KafkaApis
#: ``forwardToController``; AllocateProducerIds and AlterPartition are the broker's own).
ENVELOPED_APIS: frozenset[int] = CLIENT_METADATA_WRITES
#: DefaultPrincipalData's version (Kafka's HIGHEST_SUPPORTED_VERSION)
PRINCIPAL_DATA_VERSION = 0
_SIZE_PREFIX = 4


@dataclass(frozen=True, slots=True)
class Origin:
    """The client a metadata write acts for: who, which client id, at which version of the
    API, from where (an Envelope's contents besides the body)."""

    principal: KafkaPrincipal
    client_id: str
    api_version: int
    client_host: str = ""


class EnvelopeError(Exception):
    """An envelope the controller cannot open; ``code`` goes into the EnvelopeResponse."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def principal_bytes(principal: KafkaPrincipal) -> bytes:
    """Kafka's KafkaPrincipalSerde: int16 version + DefaultPrincipalData at it."""
    data = DefaultPrincipalData(type=principal.type, name=principal.name)
    return INT16.pack(PRINCIPAL_DATA_VERSION) + encode(data, PRINCIPAL_DATA_VERSION)


def principal_of(raw: bytes | None) -> KafkaPrincipal:
    if raw is None or len(raw) < 2:
        raise EnvelopeError(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, "no principal")
    version = INT16.unpack_from(raw, 0)[0]
    if version != PRINCIPAL_DATA_VERSION:
        raise EnvelopeError(
            ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, f"principal data version {version}"
        )
    try:
        data = decode(DefaultPrincipalData, raw, version, 2)
    except ProtocolError as exc:
        raise EnvelopeError(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, str(exc)) from None
    return KafkaPrincipal(data.type, data.name)


def host_bytes(peer: str) -> bytes:
    """The IP address bytes of a ``host:port`` peer (empty when it is no IP address)."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    try:
        return ipaddress.ip_address(host.strip("[]")).packed
    except ValueError:
        return b""


def host_of(raw: bytes) -> str:
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return ""


def wrap_request(api_key: int, request: Message, origin: Origin) -> EnvelopeRequest:
    """``request`` as the client sent it (its version and client id) in an Envelope."""
    header = RequestHeader(api_key, origin.api_version, 0, origin.client_id)
    return EnvelopeRequest(
        request_data=encode_request(header, request)[_SIZE_PREFIX:],
        request_principal=principal_bytes(origin.principal),
        client_host_address=host_bytes(origin.client_host),
    )


def unwrap_request(envelope: EnvelopeRequest) -> tuple[RequestHeader, Message, Origin]:
    """The embedded request and whom it acts for (EnvelopeError when it cannot be had)."""
    try:
        header, body = decode_request(envelope.request_data)
    except ProtocolError as exc:
        raise EnvelopeError(ErrorCode.INVALID_REQUEST, f"embedded request: {exc}") from None
    if header.api_key not in ENVELOPED_APIS:
        raise EnvelopeError(
            ErrorCode.INVALID_REQUEST, f"api key {header.api_key} is not forwarded in envelopes"
        )
    origin = Origin(
        principal_of(envelope.request_principal),
        header.client_id or "",
        header.api_version,
        host_of(envelope.client_host_address),
    )
    return header, body, origin


def wrap_response(header: RequestHeader, response: Message) -> EnvelopeResponse:
    return EnvelopeResponse(response_data=encode_response(header, response)[_SIZE_PREFIX:])


def unwrap_response(api_key: int, origin: Origin, envelope: EnvelopeResponse) -> Message:
    """The embedded response (EnvelopeError with the envelope's error, if any)."""
    if envelope.error_code != 0 or envelope.response_data is None:
        code = ErrorCode.of(envelope.error_code or int(ErrorCode.UNKNOWN_SERVER_ERROR))
        raise EnvelopeError(code, f"the controller refused the envelope: {code.name}")
    header = RequestHeader(api_key, origin.api_version, 0, origin.client_id)
    return decode_response(header, envelope.response_data)


#: Runs an embedded request (its header, body) for its origin on the active controller.
RunFor = Callable[[RequestHeader, Message, Origin], Awaitable[Message]]


async def serve_envelope(envelope: EnvelopeRequest, run_for: RunFor) -> EnvelopeResponse:
    """The controller's answer to an Envelope: the embedded request run for its origin
    (authorized as its own, by ``run_for``); an error while running it (NOT_CONTROLLER after a leader change, ...) is the embedded
    request's error response, as the same request sent bare is answered."""
    from riverbed.server.broker.error_response import error_code_of, error_response
    from riverbed.server.broker.versioning import fit_to_version

    try:
        header, body, origin = unwrap_request(envelope)
    except EnvelopeError as exc:
        log.warning("refused an envelope: %s", exc)
        return EnvelopeResponse(error_code=int(exc.code))
    try:
        response = await run_for(header, body, origin)
    except Exception as exc:  # answered, as the controller listener answers a bare request
        code = error_code_of(exc)
        if code is not ErrorCode.NOT_CONTROLLER:
            log.exception("enveloped request api_key=%s failed", header.api_key)
        response = error_response(header.api_key, body, header.api_version, code)
    fit_to_version(response, header.api_version)
    return wrap_response(header, response)


def peer_of(origin: Origin) -> str:
    """``origin``'s address as a connection's ``host:port`` peer (ACL hosts match it)."""
    host = origin.client_host
    return f"[{host}]:0" if ":" in host else f"{host}:0"


def origin_of(ctx: RequestContext) -> Origin:
    """Whom a client's request acts for (its connection's principal and address)."""
    return Origin(ctx.principal, ctx.header.client_id or "", ctx.header.api_version, ctx.peer)
