"""The answer to a throttled consumer fetch (Kafka 4.x's FetchContext.getThrottledResponse)."""

from __future__ import annotations

from riverbed.protocol.messages import FetchResponse
from riverbed.server.broker.fetch_throttle import throttled_response


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
