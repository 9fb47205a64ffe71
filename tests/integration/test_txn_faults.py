"""Transactions under faults with real processes (issue 19, "## Tests").

- The producer killed mid-transaction: a confluent-kafka transactional producer in its own
  interpreter begins a transaction, produces, flushes and is SIGKILLed. With a short
  ``transaction.timeout.ms`` the coordinator fences (epoch + 1) and aborts it; the
  partition's LSO moves on (ListOffsets READ_COMMITTED reaches the high watermark, a
  read_committed consumer reads another producer's later record) and the killed
  producer's records are never read as committed.
- A late produce delayed past an abort: the next batch of an open transaction is encoded
  while the transaction is Ongoing and sent only after it was aborted (by the
  coordinator's timeout, by fencing with a new producer of the same transactional id, or
  by the producer's own abort). The broker refuses it (a stale epoch, or KIP-890's
  verification: the partition is not in an Ongoing transaction) and nothing hangs: the
  record is not appended, the LSO equals the high watermark, ``riverbed transactions
  find-hanging`` reports nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, encode_request
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.testing.cluster import BrokerProcess, scaled_s

from .test_transactions import client, committed_values, describe, node
from .test_txn_partitions import latest
from .test_wire_protocol import Client, create_topic, produce_req

__all__ = ["client", "node"]  # the fixtures: one broker, its cleanup timer every 0.5 s

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

QUIET = {"log_level": 3}
UNCOMMITTED, COMMITTED = 0, 1

#: The child: a transactional producer that leaves its transaction open and waits to die.
CHILD = """
import sys, time
from confluent_kafka import Producer
bootstrap, tid, topic = sys.argv[1:4]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
              "transaction.timeout.ms": 3000, "log_level": 3})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce(topic, b"killed-%d" % i)
assert p.flush(30) == 0
print("flushed", flush=True)
time.sleep(600)
"""


def wait_state(c: Client, tid: str, state: str, timeout_s: float = 20) -> Any:
    deadline = time.monotonic() + scaled_s(timeout_s)
    while (now := describe(c, tid)).transaction_state != state:
        assert time.monotonic() < deadline, f"{tid} is {now.transaction_state}, not {state}"
        time.sleep(0.1)
    return now


def test_a_producer_killed_mid_transaction_is_aborted_and_the_lso_moves_on(
    node: BrokerProcess, client: Client
) -> None:
    topic, tid = "txn-killed", "tid-killed"
    create_topic(client, topic)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, node.bootstrap, tid, topic],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "flushed", "the child did not produce"
        lso = latest(client, topic, COMMITTED)
        open_txn = describe(client, tid)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert latest(client, topic, UNCOMMITTED) == 5, "the 5 records are in the log"
    if open_txn.transaction_state == "Ongoing":  # read before it: the LSO held at its start
        assert lso == 0, lso
    aborted = wait_state(client, tid, "CompleteAbort")
    assert (aborted.producer_id, aborted.producer_epoch) == (
        open_txn.producer_id, open_txn.producer_epoch + 1
    ), "fenced, then aborted"  # fmt: skip
    # 5 records + the abort marker: the LSO is at the high watermark
    assert latest(client, topic, COMMITTED) == latest(client, topic, UNCOMMITTED) == 6

    other = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "tid-after",
                      **QUIET})  # fmt: skip
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, b"after")
    other.commit_transaction(30)
    assert committed_values(node, topic, b"after") == [b"after"]
    deadline = time.monotonic() + scaled_s(20)
    while latest(client, topic, COMMITTED) != 8:  # its record and its commit marker
        assert time.monotonic() < deadline, "the LSO did not pass the committed transaction"
        time.sleep(0.1)


def encoded_late_produce(topic: str, tid: str, pid: int, epoch: int) -> tuple[RequestHeader, bytes]:
    """The transaction's second batch (sequence 1), as the producer sent it before the
    abort: encoded now, delivered later (held back until after the abort)."""
    batch = build_batch(
        [SimpleRecord(b"late", timestamp=int(time.time() * 1000))],
        producer_id=pid, producer_epoch=epoch, base_sequence=1, is_transactional=True,
    )  # fmt: skip
    req = produce_req(topic, 0, batch)
    req.transactional_id = tid
    header = RequestHeader(ApiKey.PRODUCE, 9, 1_000_000, "late-producer")
    return header, encode_request(header, req)


def find_hanging(bootstrap: str, topic: str, capsys: pytest.CaptureFixture[str]) -> Any:
    from riverbed.cli.main import main

    capsys.readouterr()
    assert main(["transactions", "find-hanging", "-b", bootstrap, "--topic", topic,
                 "--max-transaction-timeout", "0", "--json"]) == 0  # fmt: skip
    return json.loads(capsys.readouterr().out)["hanging"]


#: How the transaction ends before its late batch arrives, and the broker's refusal.
LATE_CASES = {
    # the coordinator's timer: fence (epoch + 1), abort; the batch's epoch is stale
    "timeout": ErrorCode.INVALID_PRODUCER_EPOCH,
    # a new producer of the same transactional id: likewise
    "fence": ErrorCode.INVALID_PRODUCER_EPOCH,
    # the producer's own abort (same epoch): KIP-890 verification finds no open transaction
    "abort": ErrorCode.INVALID_TXN_STATE,
}


@pytest.mark.parametrize("how", list(LATE_CASES))
def test_a_produce_delayed_past_the_abort_is_refused_and_nothing_hangs(
    node: BrokerProcess, client: Client, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    topic, tid = f"txn-late-{how}", f"tid-late-{how}"
    create_topic(client, topic)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": 2000 if how == "timeout" else 60_000,
                  "message.timeout.ms": 1500 if how == "timeout" else 30_000, **QUIET})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"early")
    assert p.flush(10) == 0
    ongoing = wait_state(client, tid, "Ongoing")
    header, late = encoded_late_produce(topic, tid, ongoing.producer_id, ongoing.producer_epoch)
    if how == "fence":
        Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid,
                  **QUIET}).init_transactions(30)  # fmt: skip
    elif how == "abort":
        p.abort_transaction(30)
    # the fencing producer's InitProducerId ends with its id Empty, after the abort
    wait_state(client, tid, "Empty" if how == "fence" else "CompleteAbort")
    end = latest(client, topic, UNCOMMITTED)
    assert end == 2, "the early record and the abort marker"

    client.sock.sendall(late)  # released after the abort
    answer = client.recv(header).responses[0].partition_responses[0]
    assert answer.error_code == LATE_CASES[how], answer
    assert latest(client, topic, UNCOMMITTED) == end, "the late batch was appended"
    assert latest(client, topic, COMMITTED) == end, "an open transaction holds the LSO"
    assert find_hanging(node.bootstrap, topic, capsys) == []
