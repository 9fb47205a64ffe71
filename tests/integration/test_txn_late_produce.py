"""A late produce delayed by a fault proxy past an abort (issue 19, "## Tests", second
bullet): KIP-890's motivating case with a real client and a real TCP proxy.

The broker advertises a `riverbed.testing.fault_proxy.HoldingProxy` in front of it, so
that a kafka-python transactional producer talks to it through the proxy. The producer
writes a record of its transaction (delivered), then the proxy holds its next Produce
(the transaction's second batch, sequence 1) on the wire. The client's request times
out (its delivery timeout too: no retry), the transaction becomes abortable and the
client aborts it, at the same producer epoch (a timeout is not an epoch-bump error);
the abort completes. Then the proxy lets the held Produce through.

- With KIP-890's verification (the default) the leader asks the coordinator, which has no
  ongoing transaction with the partition: the batch is refused (INVALID_TXN_STATE, or
  TRANSACTION_ABORTABLE to Produce v11+), not appended; the LSO equals the high
  watermark and ``riverbed transactions find-hanging`` reports nothing.
- Without it (``transaction.partition.verification.enable=false``, Kafka before 3.6) the
  same bytes are appended and open a transaction no coordinator knows: the LSO stays at
  it and find-hanging reports it. This shows the refusal above is verification's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import decode_request_header, decode_response
from riverbed.testing.cluster import BrokerProcess, scaled_s
from riverbed.testing.fault_proxy import HoldingProxy

from .test_transactions import wait_state
from .test_txn_faults import COMMITTED, UNCOMMITTED, find_hanging
from .test_txn_partitions import latest
from .test_wire_protocol import Client, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: The client's request and delivery timeouts: the held Produce fails after this long.
CLIENT_TIMEOUT_MS = 2000
#: Produce versions from this one on are answered TRANSACTION_ABORTABLE (KIP-890).
PRODUCE_TRANSACTION_ABORTABLE_VERSION = 11


@pytest.fixture(params=[True, False], ids=["verification", "no-verification"])
def proxied(request: pytest.FixtureRequest) -> Iterator[tuple[BrokerProcess, HoldingProxy, bool]]:
    verify: bool = request.param
    node = BrokerProcess(overrides={
        "num.partitions": "1",
        "transaction.state.log.num.partitions": "3",
        "transaction.partition.verification.enable": str(verify).lower(),
    })  # fmt: skip
    proxy = HoldingProxy("127.0.0.1", node.port)
    node.extra_overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    try:
        node.start()
        yield node, proxy, verify
    finally:
        proxy.close()
        node.close()


def test_a_produce_held_past_the_abort_by_a_proxy_is_refused(
    proxied: tuple[BrokerProcess, HoldingProxy, bool], capsys: pytest.CaptureFixture[str]
) -> None:
    node, proxy, verify = proxied
    topic, tid = "late-held", "tid-late-held"
    c = Client(node.port)  # the test's own view, not through the proxy
    create_topic(c, topic)
    p = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{proxy.port}", transactional_id=tid, linger_ms=0,
        request_timeout_ms=CLIENT_TIMEOUT_MS, delivery_timeout_ms=CLIENT_TIMEOUT_MS,
    )  # fmt: skip
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"early").get(scaled_s(10))
        proxy.hold(ApiKey.PRODUCE)
        with pytest.raises(KafkaError):
            p.send(topic, b"late").get(scaled_s(30))  # held: the request times out
        p.abort_transaction()
        aborted = wait_state(c, tid, "CompleteAbort")
        end = latest(c, topic, UNCOMMITTED)
        assert end == 2, "the early record and the abort marker"

        (frame,) = proxy.held
        header, _ = decode_request_header(frame)
        assert header.api_key == ApiKey.PRODUCE
        proxy.release()
        response = decode_response(header, proxy.wait_response(header.correlation_id, scaled_s(20)))
        answer = response.responses[0].partition_responses[0]
        hanging = find_hanging(node.bootstrap, topic, capsys)
        after = (latest(c, topic, UNCOMMITTED), latest(c, topic, COMMITTED))
    finally:
        p.close(timeout=5)
        c.close()
    if not verify:  # the same bytes, appended: a transaction no coordinator knows
        assert answer.error_code == ErrorCode.NONE, answer
        assert after == (end + 1, end), "appended, the late batch holds the LSO"
        assert [(h["producer_id"], h["start_offset"]) for h in hanging] == [
            (aborted.producer_id, end)
        ], hanging
        return
    refused = (
        ErrorCode.TRANSACTION_ABORTABLE
        if header.api_version >= PRODUCE_TRANSACTION_ABORTABLE_VERSION
        else ErrorCode.INVALID_TXN_STATE
    )
    assert answer.error_code == refused, answer
    assert after == (end, end), "appended, or an open transaction holds the LSO"
    assert hanging == []
