"""The answer to a throttled consumer fetch (Kafka 4.x's FetchContext.getThrottledResponse)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from riverbed.protocol.messages import FetchResponse, encode
from riverbed.server.broker.fetch_throttle import response_bytes, throttled_response
from riverbed.server.splice import FileRecords, SplicedResponse
from riverbed.storage.log_files import FileRange


def test_a_throttled_fetch_answers_no_partitions_and_keeps_the_leader_endpoints() -> None:
    endpoint = FetchResponse.NodeEndpoint(node_id=3, host="127.0.0.1", port=9095, rack=None)
    P = FetchResponse.PartitionData
    full = FetchResponse(
        session_id=77,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t", partitions=[P(partition_index=0, records=b"x" * 10)]
            )
        ],
        node_endpoints=[endpoint],
    )
    answer = throttled_response(full, 250)
    assert (answer.throttle_time_ms, answer.error_code, answer.session_id) == (250, 0, 0)
    assert answer.responses == []
    assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == [(3, "127.0.0.1", 9095)]


def _fetch_response(partitions: int, records: bytes | None) -> FetchResponse:
    P = FetchResponse.PartitionData
    return FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                topic_id=uuid.UUID(int=5),
                partitions=[P(partition_index=i, records=records) for i in range(partitions)],
            )
        ]
    )


def test_the_fetch_quota_counts_the_whole_response_as_kafkas_size_of() -> None:
    """A fetch of many partitions without data still costs its consumer bytes (Kafka's
    ``FetchResponse.sizeOf``: every partition's fields), not only its records."""
    empty = _fetch_response(50, None)
    assert response_bytes(empty, 16) == len(encode(empty, 16)) > 50 * 30
    with_data = _fetch_response(1, b"r" * 1000)
    assert response_bytes(with_data, 12) == len(encode(with_data, 12)) > 1000


def test_a_spliced_responses_files_are_counted_at_their_real_size(tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"b" * 70_000)
    fd = os.open(segment, os.O_RDONLY)
    files = [FileRecords([FileRange(segment, 100, 65_000, fd)])]
    body = _fetch_response(1, files[0].token)
    spliced = SplicedResponse(body, files, compact=True)
    as_bytes = _fetch_response(1, b"b" * 65_000)
    try:
        # the same as the response with the records in memory: the token's 16 bytes and
        # its one-byte length prefix replaced by the file range and its three-byte one
        assert response_bytes(spliced, 16) == len(encode(as_bytes, 16))
    finally:
        files[0].ranges[0].close()
