"""Transactions under transaction.version 2 (KIP-890 part 2) against a real broker process,
spoken with riverbed's own codec (no installed client speaks Produce v12 / TxnOffsetCommit
v5 in a transaction yet): the client sends no AddPartitionsToTxn / AddOffsetsToTxn, the
broker adds the partition and the group itself, EndTxn v5 ends the transaction with a new
epoch, and the next transaction starts with that epoch. A Produce v11 in the same position
is refused (it only verifies), so the implicit add is v12's doing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from riverbed.coordinator.records import OFFSETS_TOPIC
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    TxnOffsetCommitRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.testing.cluster import BrokerProcess, scaled_s

from .test_txn_partitions import cluster_node, init_producer, latest  # noqa: F401 (a fixture)
from .test_wire_protocol import Client, create_topic, produce_req

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC, TID, GROUP = "txn-tv2", "tid-tv2", "group-tv2"


def _produce(c: Client, version: int, batch: bytes) -> Any:
    req = produce_req(TOPIC, 0, batch)
    req.transactional_id = TID
    return c.call(ApiKey.PRODUCE, version, req).responses[0].partition_responses[0]


def _describe(c: Client) -> Any:
    req = DescribeTransactionsRequest(transactional_ids=[TID])
    (state,) = c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, req).transaction_states
    assert state.error_code == 0, state
    return state


def _in_transaction(state: Any) -> set[str]:
    return {t.topic for t in state.topics}


def _until_stable(c: Client, end_offset: int) -> None:
    deadline = time.monotonic() + scaled_s(20)
    while latest(c, TOPIC, 1) != end_offset and time.monotonic() < deadline:
        time.sleep(0.1)  # the coordinator writes the marker
    assert latest(c, TOPIC, 1) == latest(c, TOPIC, 0) == end_offset


def test_produce_v12_and_txn_offset_commit_v5_add_implicitly(
    cluster_node: BrokerProcess,  # noqa: F811 (the fixture)
) -> None:
    c = Client(cluster_node.port)
    try:
        create_topic(c, TOPIC)
        init = init_producer(c, TID)
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(epoch: int, seq: int, value: bytes) -> bytes:
            return build_batch(
                [SimpleRecord(value)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                is_transactional=True,
            )

        # v11 only verifies: the partition is not in the transaction
        early = _produce(c, 11, batch(epoch, 0, b"v11"))
        assert early.error_code == ErrorCode.TRANSACTION_ABORTABLE, early
        assert latest(c, TOPIC, 0) == 0

        first = _produce(c, 12, batch(epoch, 0, b"one"))
        assert first.error_code == 0, first
        state = _describe(c)
        assert state.transaction_state == "Ongoing" and _in_transaction(state) == {TOPIC}
        assert latest(c, TOPIC, 1) == 0  # open: the LSO holds at its first offset

        c.call(
            ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP])
        )
        T = TxnOffsetCommitRequest
        commit = T(
            transactional_id=TID,
            group_id=GROUP,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            topics=[
                T.TxnOffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                    ],
                )
            ],
        )
        deadline = time.monotonic() + scaled_s(30)
        while True:  # the first use of the group creates __consumer_offsets
            answer = c.call(ApiKey.TXN_OFFSET_COMMIT, 5, commit)
            code = answer.topics[0].partitions[0].error_code
            retriable = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            )
            if code not in retriable or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 0, answer
        assert _in_transaction(_describe(c)) == {TOPIC, OFFSETS_TOPIC}

        end = EndTxnRequest(
            transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=True
        )
        ended = c.call(ApiKey.END_TXN, 5, end)
        assert ended.error_code == 0, ended
        assert ended.producer_id == pid and ended.producer_epoch == epoch + 1  # TV2 epoch bump
        _until_stable(c, 2)  # the record and the COMMIT marker

        # the next transaction: the new epoch, again without AddPartitionsToTxn
        second = _produce(c, 12, batch(epoch + 1, 0, b"two"))
        assert second.error_code == 0, second
        assert latest(c, TOPIC, 1) == 2
        end.producer_epoch = epoch + 1
        end.committed = False
        assert c.call(ApiKey.END_TXN, 5, end).error_code == 0
        _until_stable(c, 4)
    finally:
        c.close()
