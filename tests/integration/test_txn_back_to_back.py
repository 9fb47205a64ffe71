"""Transactions back to back (issue 19's benchmark: short transactions).

EndTxn is answered once its PrepareCommit is written; the markers and the CompleteCommit
follow. A client that starts its next transaction at once (librdkafka, the Java client)
sends AddPartitionsToTxn while the previous one is still completing, which Kafka's
coordinator answers CONCURRENT_TRANSACTIONS and the client retries after a backoff
(20 ms). riverbed's coordinator holds such an add until the previous transaction has
completed (at most ``CONCURRENT_WAIT_MS``) and then answers it: every add sent right
after its EndTxn's answer succeeds.
"""

from __future__ import annotations

import time

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
)
from riverbed.testing.cluster import BrokerProcess, scaled_s

from .test_metrics import scrape, total
from .test_transactions import client, node
from .test_wire_protocol import Client, create_topic

__all__ = ["client", "node"]  # the fixtures: one broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TRANSACTIONS = 20
NOT_READY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def test_an_add_right_after_endtxn_waits_for_the_previous_transaction(
    node: BrokerProcess, client: Client
) -> None:
    codes = back_to_back(client, "tid-back-to-back", "txn-back-to-back")
    assert codes == [("NONE", "NONE")] * TRANSACTIONS, codes


def back_to_back(client: Client, tid: str, topic: str) -> list[tuple[str, str]]:
    """TRANSACTIONS adds and EndTxns of ``tid`` in ``topic`` (created) in a row: each
    (add's error, EndTxn's error)."""
    create_topic(client, topic)
    request = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000,
                                    producer_id=-1, producer_epoch=-1)  # fmt: skip
    deadline = time.monotonic() + scaled_s(30)
    # FindCoordinator creates __transaction_state: not available, then loading, meanwhile
    find = FindCoordinatorRequest(key=tid, key_type=1)
    while client.call(ApiKey.FIND_COORDINATOR, 3, find).error_code != ErrorCode.NONE or (
        (init := client.call(ApiKey.INIT_PRODUCER_ID, 4, request)).error_code in NOT_READY
    ):
        assert time.monotonic() < deadline, "no transaction coordinator"
        time.sleep(0.1)
    assert init.error_code == 0, init
    T = AddPartitionsToTxnRequest
    add = T(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=init.producer_id,
        v3_and_below_producer_epoch=init.producer_epoch,
        v3_and_below_topics=[T.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    )
    end = EndTxnRequest(transactional_id=tid, producer_id=init.producer_id,
                        producer_epoch=init.producer_epoch, committed=True)  # fmt: skip
    codes = []
    for _ in range(TRANSACTIONS):
        added = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add)
        ended = client.call(ApiKey.END_TXN, 3, end)
        codes.append((ErrorCode(added.results_by_topic_v3_and_below[0].results_by_partition[0]
                                .partition_error_code).name, ErrorCode(ended.error_code).name))  # fmt: skip
    return codes


def test_a_single_nodes_markers_are_written_without_a_request_to_itself(
    node: BrokerProcess, client: Client
) -> None:
    """The coordinator writes the markers of the partitions its own node leads in-process
    (`riverbed.server.txn_markers`): the transactions above committed (every add was
    answered NONE, which needs the previous transaction's markers written) while the
    node's listener served no WriteTxnMarkers request."""
    codes = back_to_back(client, "tid-in-process", "txn-in-process")
    assert codes == [("NONE", "NONE")] * TRANSACTIONS, codes
    samples = scrape(node.http_url)
    assert total(samples, "kafka_network_requestmetrics_requests_total", request="EndTxn") >= 1
    assert total(samples, "kafka_network_requestmetrics_requests_total",
                 request="WriteTxnMarkers") == 0  # fmt: skip
