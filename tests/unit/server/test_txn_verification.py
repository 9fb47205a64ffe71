"""KIP-890 verification between brokers (server/broker/txn_verification.py): requests to
a coordinator on another node are AddPartitionsToTxn v4 VerifyOnly, batched (one in
flight per coordinator, one entry per transactional id), and their answers mapped for
Produce as Kafka's ReplicaManager does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode as E
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    Message,
)
from riverbed.server.broker.txn_verification import TxnVerifier

R = AddPartitionsToTxnResponse
COORDINATOR = 2


class FakeChannel:
    def __init__(self, answers: dict[str, E], lost: bool = False) -> None:
        self.answers = answers
        self.lost = lost
        self.requests: list[tuple[int, int, AddPartitionsToTxnRequest]] = []

    async def request(self, api_key: int, version: int, body: Message, timeout_s: float) -> Message:
        assert isinstance(body, AddPartitionsToTxnRequest)
        self.requests.append((api_key, version, body))
        await asyncio.sleep(0)  # in flight: later verifications queue up
        if self.lost:
            raise ConnectionError("connection reset")
        return R(
            error_code=0,
            results_by_transaction=[
                R.AddPartitionsToTxnResult(
                    transactional_id=t.transactional_id,
                    topic_results=[
                        R.AddPartitionsToTxnTopicResult(
                            name=topic.name,
                            results_by_partition=[
                                R.AddPartitionsToTxnPartitionResult(
                                    partition_index=p,
                                    partition_error_code=int(self.answers[t.transactional_id]),
                                )
                                for p in topic.partitions
                            ],
                        )
                        for topic in t.topics
                    ],
                )
                for t in body.transactions
            ],
        )

    def close(self) -> None:
        return None


def fake_broker() -> Any:
    values = {
        "transaction.partition.verification.enable": True,
        "transaction.state.log.num.partitions": 1,
        "request.timeout.ms": 1000,
    }
    config = SimpleNamespace(
        inter_broker_listener_name="PLAINTEXT",
        get=values.__getitem__,
        get_int=values.__getitem__,
    )
    image = SimpleNamespace(partition=lambda topic, p: SimpleNamespace(leader=COORDINATOR))
    return SimpleNamespace(config=config, metadata=SimpleNamespace(image=image), node_id=1)


def test_verifications_are_batched_per_coordinator_one_entry_per_id() -> None:
    channel = FakeChannel({"a": E.NONE, "b": E.TRANSACTION_ABORTABLE})
    verifier = TxnVerifier(fake_broker(), channel_factory=lambda node: channel)

    async def run() -> list[E]:
        return list(
            await asyncio.gather(
                verifier.verify("a", 10, 0, "t", 0),
                verifier.verify("b", 11, 0, "t", 1),
                verifier.verify("a", 10, 0, "t", 2),
            )
        )

    assert asyncio.run(run()) == [E.NONE, E.TRANSACTION_ABORTABLE, E.NONE]
    # the first request went alone; the two waiting meanwhile shared the next one
    assert [[t.transactional_id for t in req.transactions] for _, _, req in channel.requests] == [
        ["a"],
        ["b", "a"],
    ]
    for api_key, version, req in channel.requests:
        assert (api_key, version) == (ApiKey.ADD_PARTITIONS_TO_TXN, 4)
        assert all(t.verify_only for t in req.transactions)


def test_a_lost_request_answers_network_exception() -> None:
    channel = FakeChannel({}, lost=True)
    verifier = TxnVerifier(fake_broker(), channel_factory=lambda node: channel)
    assert asyncio.run(verifier.verify("a", 10, 0, "t", 0)) == E.NETWORK_EXCEPTION
