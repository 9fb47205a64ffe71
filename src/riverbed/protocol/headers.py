"""Request/response headers and whole-frame encode/decode.

Wire format (Kafka protocol guide): a frame is ``int32 size`` + header + body.

- RequestHeader v0: api_key int16, api_version int16, correlation_id int32.
- RequestHeader v1: v0 + client_id (classic nullable string, int16 length).
- RequestHeader v2: v1 + tagged-field section (client_id stays a classic string).
- ResponseHeader v0: correlation_id int32; v1: v0 + tagged-field section.

The request header is v2 when the API version is flexible (v0 only for ControlledShutdown
v0), else v1; the response header is v1 when flexible, else v0 - except ApiVersions
responses, which always use v0 so a client can read them whatever version it asked for.
An ApiVersions request at a version riverbed does not advertise still decodes (to an
empty body) so the server can answer with a v0 body carrying UNSUPPORTED_VERSION and the
supported ranges (``riverbed.protocol.api_versions.api_versions_response``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache

from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey, is_accepted, is_supported
from riverbed.protocol.base import Message
from riverbed.protocol.codec import UnsupportedVersionError
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    decode,
    decode_prefix,
    encode_into,
    message_spec,
    request_class,
    response_class,
)
from riverbed.protocol.primitives import INT16, INT32, Reader, Writer
from riverbed.protocol.schema import VERSION_MAX

REQUEST_HEADER_FIXED_SIZE = 8  # api_key + api_version + correlation_id


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    # Tagged fields of header v2, kept raw ([(tag, bytes)]); none are defined today.
    tagged_fields: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class ResponseHeader:
    correlation_id: int
    tagged_fields: list[tuple[int, bytes]] = field(default_factory=list)


class UnsupportedRequestError(UnsupportedVersionError):
    """A request for an API or version riverbed does not serve; carries the parsed header
    so the server can log it (Kafka closes the connection in this case)."""

    header: RequestHeader | None = None


#: (api key, version, direction) answers `_flexible` remembers: the requests and
#: responses of one node use a few dozen; the bound keeps odd versions from growing it.
FLEXIBLE_CACHE_ENTRIES_MAX = 4096


@lru_cache(maxsize=FLEXIBLE_CACHE_ENTRIES_MAX)
def _flexible(api_key: int, api_version: int, response: bool) -> bool:
    """Whether the API version is flexible; open-ended ranges extend past the known max
    (as in Kafka) so a too-new ApiVersions request still parses with the right header.
    Remembered: every request header and response header asks (the message specs are
    constants), and the look-up was ~5 us of a ~30 us follower Fetch decode."""
    try:
        cls = response_class(api_key) if response else request_class(api_key)
    except ProtocolError:
        return False
    flex = message_spec(cls).flexible_versions
    if flex.hi == VERSION_MAX:
        return api_version >= flex.lo
    return api_version in flex


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if _flexible(api_key, api_version, response=False) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if _flexible(api_key, api_version, response=True) else 0


#: The fixed start of a header v1/v2: api key, api version, correlation id, client id length.
_HEADER_START = struct.Struct(">hhih")


def decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parse the request header; returns (header, offset of the body).

    Every request of every connection starts here, so the usual shape (header v1/v2 with
    a client id, or null, and no tagged fields) is read with one ``unpack_from`` and a
    slice; anything else, malformed frames included, takes `_decode_request_header`,
    which gives the same header or the same error (issue 23: ~10 Reader calls on each of
    the three requests of a replicated acks=all record).
    """
    if len(frame) >= _HEADER_START.size:
        api_key, api_version, correlation_id, n = _HEADER_START.unpack_from(frame, 0)
        hv = request_header_version(api_key, api_version)
        end = _HEADER_START.size + max(n, 0)
        # (v2: only an empty tagged-field section, one zero byte)
        tags = hv >= 2
        if hv >= 1 and n >= -1 and end + tags <= len(frame) and (not tags or frame[end] == 0):
            if n == -1:
                client_id = None
            else:
                try:
                    client_id = str(frame[_HEADER_START.size : end], "utf-8")
                except UnicodeDecodeError:
                    return _decode_request_header(frame)
            header = RequestHeader(api_key, api_version, correlation_id, client_id)
            return header, end + tags
    return _decode_request_header(frame)


def _decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """`decode_request_header` field by field (any header, any error)."""
    r = Reader(frame)
    api_key = r.int16("RequestHeader.RequestApiKey")
    api_version = r.int16("RequestHeader.RequestApiVersion")
    correlation_id = r.int32("RequestHeader.CorrelationId")
    header = RequestHeader(api_key, api_version, correlation_id)
    hv = request_header_version(api_key, api_version)
    if hv >= 1:
        header.client_id = r.nullable_string(False, "RequestHeader.ClientId")
    if hv >= 2:
        header.tagged_fields = r.tagged_fields("RequestHeader.TaggedFields")
    return header, r.pos


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Message]:
    """Decode a request frame (the bytes after the 4-byte size).

    Raises UnsupportedRequestError (with ``.header``) for APIs/versions riverbed does not
    advertise, ProtocolError for malformed bytes. Trailing bytes after the body are
    ignored (as by Kafka).
    """
    buf = frame if isinstance(frame, bytes) else bytes(frame)
    if len(buf) >= 4:
        api_key, api_version = INT16.unpack_from(buf, 0)[0], INT16.unpack_from(buf, 2)[0]
    else:
        raise ProtocolError(f"request frame of {len(buf)} bytes is shorter than a header")
    supported = is_accepted(api_key, api_version)
    if not supported and api_key != ApiKey.API_VERSIONS:
        err = UnsupportedRequestError(
            f"unsupported request api_key={api_key} version={api_version}",
            api_key=api_key,
            api_version=api_version,
        )
        try:
            err.header, _ = decode_request_header(buf)
        except ProtocolError:
            err.header = None
        raise err
    header, pos = decode_request_header(buf)
    if not supported:
        # ApiVersions newer than ours: answer from an empty request (see module docstring)
        return header, ApiVersionsRequest()
    # Decode in place from the header's end (no copy of a possibly large frame). Bytes after
    # the body are ignored, as Kafka's broker does: some clients (librdkafka 2.x Metadata
    # v12) send a few extra bytes.
    body, _ = decode_prefix(request_class(api_key), buf, api_version, pos)
    return header, body


def _frame(out: bytearray) -> bytes:
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def response_body_version(header: RequestHeader) -> int:
    """The version a response body is written at: the request's, except an ApiVersions
    request at an unsupported version is answered at v0."""
    if header.api_key == ApiKey.API_VERSIONS and not is_supported(
        header.api_key, header.api_version
    ):
        return 0
    return header.api_version


def encode_response(header: RequestHeader, body: Message) -> bytes:
    """A whole response frame (size prefix included) answering ``header``."""
    version = response_body_version(header)
    out = bytearray(4)
    out += INT32.pack(header.correlation_id)
    if response_header_version(header.api_key, version) >= 1:
        out += b"\x00"
    encode_into(body, version, out)
    return _frame(out)


def encode_request(header: RequestHeader, body: Message) -> bytes:
    """A whole request frame (size prefix included), for riverbed's own clients."""
    w = Writer()
    w.raw(b"\x00\x00\x00\x00")
    w.int16(header.api_key)
    w.int16(header.api_version)
    w.int32(header.correlation_id)
    hv = request_header_version(header.api_key, header.api_version)
    if hv >= 1:
        w.nullable_string(header.client_id, compact=False)
    if hv >= 2:
        w.tagged_fields(header.tagged_fields)
    encode_into(body, header.api_version, w.out)
    return _frame(w.out)


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response frame (after the size), to match it to a request."""
    if len(frame) < 4:
        raise ProtocolError("response frame shorter than its correlation id")
    value: int = INT32.unpack_from(frame, 0)[0]
    return value


def decode_response(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Message:
    """Decode the response frame (after the size) to the request described by ``header``."""
    buf = frame if isinstance(frame, bytes) else bytes(frame)
    r = Reader(buf)
    correlation_id = r.int32("ResponseHeader.CorrelationId")
    if correlation_id != header.correlation_id:
        raise ProtocolError(
            f"response correlation id {correlation_id} != request's {header.correlation_id}",
            api_key=header.api_key,
        )
    if response_header_version(header.api_key, header.api_version) >= 1:
        r.tagged_fields("ResponseHeader.TaggedFields")
    try:
        return decode(response_class(header.api_key), buf, header.api_version, r.pos)
    except ProtocolError:
        if header.api_key != ApiKey.API_VERSIONS or header.api_version == 0:
            raise
        # a broker that does not know our ApiVersions version answers at v0 (as Kafka's
        # client does, fall back to reading the error and the broker's ranges from v0)
        return decode(response_class(header.api_key), buf, 0, r.pos)


__all__ = [
    "SUPPORTED_VERSIONS",
    "RequestHeader",
    "ResponseHeader",
    "UnsupportedRequestError",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "peek_correlation_id",
    "request_header_version",
    "response_body_version",
    "response_header_version",
]
