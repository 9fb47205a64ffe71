"""Sendfile splicing against the real message engine, and response version fitting.

For every Fetch version riverbed serves, a response whose records are streamed from
file ranges must be byte-identical to the same response encoded with the records
inline. Responses built for the newest version must encode at every older version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.headers import RequestHeader, encode_response
from riverbed.protocol.messages import (
    FetchResponse,
    FindCoordinatorResponse,
    ListOffsetsResponse,
    MetadataResponse,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker.versioning import fit_to_version
from riverbed.server.network import FileRecords, SplicedResponse, plan_size, splice_plan


@dataclass(frozen=True)
class Range:
    path: str
    position: int
    size: int


def _response(records: list[bytes]) -> FetchResponse:
    return FetchResponse(
        throttle_time_ms=0,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=i,
                        high_watermark=10,
                        last_stable_offset=10,
                        log_start_offset=0,
                        records=r,
                    )
                    for i, r in enumerate(records)
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[ApiKey.FETCH][1] + 1))
def test_spliced_fetch_equals_inline_encoding(version: int, tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    b1 = build_batch([SimpleRecord(b"v%d" % i, key=b"k") for i in range(20)], now_ms=1)
    b2 = build_batch([SimpleRecord(b"x" * 300)], base_offset=20, now_ms=2)
    seg.write_bytes(b"junk" + b1 + b2 + b"tail")
    header = RequestHeader(ApiKey.FETCH, version, 77, "c")

    inline = encode_response(header, _response([b1 + b2, b"", b2]))

    f0 = FileRecords([Range(str(seg), 4, len(b1)), Range(str(seg), 4 + len(b1), len(b2))])
    f2 = FileRecords([Range(str(seg), 4 + len(b1), len(b2))])
    body = _response([f0.token, b"", f2.token])
    spliced = SplicedResponse(body=body, files=[f0, f2], compact=version >= 12)
    parts = splice_plan(encode_response(header, body)[4:], spliced)
    data = seg.read_bytes()
    streamed = b"".join(
        p
        if isinstance(p, bytes)
        else b"".join(data[r.position : r.position + r.size] for r in p.ranges)
        for p in parts
    )
    assert struct.pack(">i", plan_size(parts)) + streamed == inline


@pytest.mark.parametrize(
    ("api_key", "build"),
    [
        (
            ApiKey.FIND_COORDINATOR,
            lambda: FindCoordinatorResponse(
                error_code=15,
                node_id=-1,
                host="",
                port=-1,
                coordinators=[FindCoordinatorResponse.Coordinator(key="g", error_code=15)],
            ),
        ),
        (
            ApiKey.LIST_OFFSETS,
            lambda: ListOffsetsResponse(
                topics=[
                    ListOffsetsResponse.ListOffsetsTopicResponse(
                        name="t",
                        partitions=[
                            ListOffsetsResponse.ListOffsetsPartitionResponse(
                                partition_index=0, timestamp=5, offset=3, leader_epoch=2
                            )
                        ],
                    )
                ]
            ),
        ),
        (
            ApiKey.METADATA,
            lambda: MetadataResponse(
                cluster_id="c",
                controller_id=1,
                brokers=[
                    MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=1, rack="r")
                ],
                topics=[MetadataResponse.MetadataResponseTopic(name="t", is_internal=False)],
            ),
        ),
    ],
)
def test_fit_to_version_makes_every_version_encodable(api_key: int, build: object) -> None:
    lo, hi = SUPPORTED_VERSIONS[ApiKey(api_key)]
    for version in range(lo, hi + 1):
        msg = build()  # type: ignore[operator]
        fit_to_version(msg, version)
        frame = encode_response(RequestHeader(api_key, version, 1, "c"), msg)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    # Fields a version carries are kept; those it lacks (and cannot ignore) are reset.
    newest = fit_to_version(build(), hi)  # type: ignore[operator]
    if api_key == ApiKey.FIND_COORDINATOR:
        assert (newest.error_code, newest.node_id) == (0, 0)  # v0-3 only fields
        assert [c.error_code for c in newest.coordinators] == [15]
    else:
        assert newest == build()  # type: ignore[operator]


def test_tokens_are_16_bytes_distinct_and_share_only_the_secret_prefix() -> None:
    """A token marks where a partition's file bytes go in the encoded response: two in one
    response must differ, and the length prefix the encoder wrote is for 16 bytes."""
    tokens = [FileRecords([]).token for _ in range(1000)]
    assert {len(t) for t in tokens} == {16}
    assert len(set(tokens)) == len(tokens)
    assert len({t[:8] for t in tokens}) == 1  # drawn once per process
