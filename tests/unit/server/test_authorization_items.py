"""Per-item authorization answers: `split` serves the allowed items and `with_refused`
answers each refused one with its code (riverbed.server.broker.authorization)."""

from __future__ import annotations

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from riverbed.server.broker.authorization import Verdict, split, with_refused


def test_refused_resources_are_answered_alone_and_the_rest_served():
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(
        resources=[R(resource_type=2, resource_name=n) for n in ("a", "b", "c")]
    )
    verdict = Verdict(None, "resources", {1: ErrorCode.TOPIC_AUTHORIZATION_FAILED})
    allowed, refused = split(ApiKey.DESCRIBE_CONFIGS, req, verdict)
    assert allowed is not None
    assert [r.resource_name for r in allowed.resources] == ["a", "c"]
    assert [r.resource_name for r in req.resources] == ["a", "b", "c"]  # untouched
    served = DescribeConfigsResponse(
        results=[
            DescribeConfigsResponse.DescribeConfigsResult(resource_type=2, resource_name=n)
            for n in ("a", "c")
        ]
    )
    merged = with_refused(ApiKey.DESCRIBE_CONFIGS, served, refused, 4)
    assert isinstance(merged, DescribeConfigsResponse)
    assert {(r.resource_name, r.error_code) for r in merged.results} == {
        ("a", 0),
        ("c", 0),
        ("b", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    }


def test_add_partitions_to_txn_v3_is_all_or_nothing():
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    req = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx",
        v3_and_below_topics=[T(name="ok", partitions=[0, 1]), T(name="no", partitions=[0])],
    )
    verdict = Verdict(None, "v3_and_below_topics", {1: ErrorCode.TOPIC_AUTHORIZATION_FAILED})
    allowed, refused = split(ApiKey.ADD_PARTITIONS_TO_TXN, req, verdict)
    assert allowed is None  # nothing is added to the transaction
    merged = with_refused(ApiKey.ADD_PARTITIONS_TO_TXN, None, refused, 3)
    assert isinstance(merged, AddPartitionsToTxnResponse)
    answers = {
        (t.name, p.partition_index): p.partition_error_code
        for t in merged.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert answers == {
        ("ok", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("ok", 1): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("no", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    assert merged.error_code == 0
