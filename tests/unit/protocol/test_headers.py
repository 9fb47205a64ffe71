"""Request/response headers, whole frames, and the ApiVersions special cases."""

from __future__ import annotations

import struct

import pytest

from riverbed.protocol import headers as h
from riverbed.protocol.api_versions import (
    API_LISTENERS,
    BROKER_LISTENER,
    SUPPORTED_VERSIONS,
    ApiKey,
    api_versions_response,
    is_supported,
    listener_api_versions,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    decode,
    message_spec,
    request_class,
    response_class,
)


def test_header_versions() -> None:
    assert h.request_header_version(ApiKey.METADATA, 8) == 1
    assert h.request_header_version(ApiKey.METADATA, 9) == 2
    assert h.request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert h.response_header_version(ApiKey.METADATA, 8) == 0
    assert h.response_header_version(ApiKey.METADATA, 9) == 1
    assert h.response_header_version(ApiKey.API_VERSIONS, 3) == 0
    # open-ended flexible ranges extend past the spec's max (a too-new ApiVersions request)
    assert h.request_header_version(ApiKey.API_VERSIONS, 42) == 2


def test_request_frame_v1_bytes() -> None:
    frame = h.encode_request(
        h.RequestHeader(ApiKey.METADATA, 1, 7, "cli"),
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="foo")]),
    )
    # api key 3, version 1, correlation 7, client id "cli", topics ["foo"]
    expected = "0003" "0001" "00000007" "0003636c69" "00000001" "0003666f6f"  # fmt: skip
    assert frame[4:].hex() == expected
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4


def test_request_frame_v2_bytes_and_decode() -> None:
    req = ApiVersionsRequest(client_software_name="kcat", client_software_version="1.0")
    frame = h.encode_request(h.RequestHeader(ApiKey.API_VERSIONS, 3, 7, "cli"), req)
    # header v2: key, version, correlation id, classic client id, empty tagged fields
    assert frame.hex() == "0000001800120003000000070003636c6900" + ("056b63617404312e3000")
    header, body = h.decode_request(frame[4:])
    assert header == h.RequestHeader(18, 3, 7, "cli")
    assert body == req
    # bytes after the body are ignored, as Kafka's broker does
    assert h.decode_request(frame[4:] + b"\x00\x00\x00") == (header, body)


def test_response_frames() -> None:
    hdr = h.RequestHeader(ApiKey.METADATA, 9, 41, None)
    resp = MetadataResponse(cluster_id="c", controller_id=1)
    frame = h.encode_response(hdr, resp)
    assert frame[4:8] == struct.pack(">i", 41)
    assert frame[8] == 0  # response header v1 tagged fields
    assert h.peek_correlation_id(frame[4:]) == 41
    assert h.decode_response(hdr, frame[4:]) == resp
    with pytest.raises(ProtocolError, match="correlation"):
        h.decode_response(h.RequestHeader(ApiKey.METADATA, 9, 42), frame[4:])


def test_api_versions_response_always_uses_header_v0() -> None:
    hdr = h.RequestHeader(ApiKey.API_VERSIONS, 3, 5, "c")
    frame = h.encode_response(hdr, api_versions_response())
    body = frame[8:]  # size + correlation id only, no tagged-field byte
    got = decode(ApiVersionsResponse, body, 3)
    assert got.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in got.api_keys} == {
        int(k): v for k, v in SUPPORTED_VERSIONS.items()
    }


def test_api_versions_above_supported_gets_v0_error_answer() -> None:
    # a client asking ApiVersions v9 (flexible header v2, body we cannot know)
    raw = struct.pack(">hhih", 18, 9, 8, 1) + b"x" + b"\x00" + b"\x02\x41\x07\x09"
    header, body = h.decode_request(raw)
    assert (header.api_version, header.correlation_id, header.client_id) == (9, 8, "x")
    assert isinstance(body, ApiVersionsRequest)
    assert h.response_body_version(header) == 0
    frame = h.encode_response(header, api_versions_response(ErrorCode.UNSUPPORTED_VERSION))
    got = decode(ApiVersionsResponse, frame[8:], 0)
    assert got.error_code == ErrorCode.UNSUPPORTED_VERSION
    keys = {k.api_key: k.max_version for k in got.api_keys}
    assert keys[ApiKey.API_VERSIONS] == SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]
    # riverbed's own client reads such an answer through the v0 fallback
    answer = h.decode_response(h.RequestHeader(18, 3, 8), frame[4:])
    assert isinstance(answer, ApiVersionsResponse)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_unsupported_request_versions() -> None:
    raw = struct.pack(">hhih", ApiKey.PRODUCE, 14, 9, 1) + b"p" + b"\x00"
    with pytest.raises(h.UnsupportedRequestError) as info:
        h.decode_request(raw)
    assert info.value.header == h.RequestHeader(0, 14, 9, "p")
    with pytest.raises(h.UnsupportedRequestError):
        h.decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(ProtocolError, match="shorter"):
        h.decode_request(b"\x00")
    with pytest.raises(ProtocolError):
        h.decode_request(struct.pack(">hhi", 3, 1, 1) + b"\x00")  # truncated client id


def test_advertised_versions() -> None:
    required = {
        ApiKey.API_VERSIONS: 3, ApiKey.METADATA: 12, ApiKey.PRODUCE: 10, ApiKey.FETCH: 12,
        ApiKey.LIST_OFFSETS: 7, ApiKey.OFFSET_FOR_LEADER_EPOCH: 4, ApiKey.CREATE_TOPICS: 7,
        ApiKey.DELETE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DESCRIBE_CONFIGS: 4,
        ApiKey.ALTER_CONFIGS: 2, ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
        ApiKey.DESCRIBE_CLUSTER: 1, ApiKey.FIND_COORDINATOR: 4, ApiKey.JOIN_GROUP: 9,
        ApiKey.SYNC_GROUP: 5, ApiKey.HEARTBEAT: 4, ApiKey.LEAVE_GROUP: 5,
        ApiKey.OFFSET_COMMIT: 8, ApiKey.OFFSET_FETCH: 8, ApiKey.LIST_GROUPS: 4,
        ApiKey.DESCRIBE_GROUPS: 5, ApiKey.DELETE_GROUPS: 2, ApiKey.OFFSET_DELETE: 0,
        ApiKey.INIT_PRODUCER_ID: 4, ApiKey.DELETE_RECORDS: 2, ApiKey.DESCRIBE_LOG_DIRS: 4,
        ApiKey.ELECT_LEADERS: 2, ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
        ApiKey.LIST_PARTITION_REASSIGNMENTS: 0, ApiKey.DESCRIBE_PRODUCERS: 0,
        ApiKey.SASL_HANDSHAKE: 1, ApiKey.SASL_AUTHENTICATE: 2,
    }  # fmt: skip
    for key, at_least in required.items():
        lo, hi = SUPPORTED_VERSIONS[key]
        assert lo == 0 and hi >= at_least, key
    # topics by id (v13+) are served to clients too (Kafka 4.1's maxima)
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE][1] == 13 and SUPPORTED_VERSIONS[ApiKey.FETCH][1] == 18
    for key in SUPPORTED_VERSIONS:
        if BROKER_LISTENER in API_LISTENERS[key]:
            continue
        # cluster-internal (controller listener only): every version of the spec
        spec_max = message_spec(request_class(key)).valid_versions.hi
        assert SUPPORTED_VERSIONS[key] == (0, spec_max), key
    for key, (_, hi) in SUPPORTED_VERSIONS.items():
        # the engine really has every advertised version of both directions
        for cls in (request_class(key), response_class(key)):
            assert message_spec(cls).valid_versions.lo == 0, key
            assert hi <= message_spec(cls).valid_versions.hi, key
    assert is_supported(0, 13) and not is_supported(0, 14) and not is_supported(4, 0)
    public = api_versions_response(
        versions=listener_api_versions(BROKER_LISTENER, SUPPORTED_VERSIONS)
    )
    assert ApiKey.VOTE not in {k.api_key for k in public.api_keys}


def test_error_codes() -> None:
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6 and ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable
    assert ErrorCode.UNSUPPORTED_VERSION == 35 and not ErrorCode.UNSUPPORTED_VERSION.retriable
    assert ErrorCode.OFFSET_OUT_OF_RANGE.message.startswith("The requested offset")
    assert ErrorCode.INVALID_PRODUCER_EPOCH == 47 and ErrorCode.PRODUCER_FENCED == 90
    assert ErrorCode.of(12345) is ErrorCode.UNKNOWN_SERVER_ERROR
    codes = [int(e) for e in ErrorCode]
    assert codes == list(range(-1, max(codes) + 1))  # no gaps
    assert all(e.message for e in ErrorCode)
