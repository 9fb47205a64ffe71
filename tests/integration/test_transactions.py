"""The transaction coordinator in a real broker process, with real transactional clients
(issue 19): confluent-kafka, kafka-python and aiokafka producers with a transactional id,
and the coordinator's APIs on the wire.

The tests check the coordinator's side (EndTxn's answer, DescribeTransactions, the
``__transaction_state`` records it wrote, read back with a Fetch and parsed with Kafka's
formats) and, end to end, what a read_committed consumer sees once the coordinator's
markers are written: every committed record, no aborted or fenced one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from riverbed.coordinator.records import TRANSACTION_STATE_TOPIC, partition_for
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    MetadataRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from riverbed.testing.cluster import BrokerProcess
from riverbed.transaction.records import TxnMetadata, TxnState, parse_record

from .test_wire_protocol import Client, create_topic, fetch_req, produce_req

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

QUIET = {"log_level": 3}
TXN_PARTITIONS = 5
S = TxnState


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        overrides={
            "num.partitions": "1",
            "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
            # timed-out transactions are looked for every half second
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
        }
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture
def client(node: BrokerProcess) -> Iterator[Client]:
    c = Client(node.port)
    yield c
    c.close()


def txn_log(c: Client, tid: str) -> list[TxnMetadata | None]:
    """Every ``__transaction_state`` record of ``tid``, in log order."""
    partition = partition_for(tid, TXN_PARTITIONS)
    resp = c.call(ApiKey.FETCH, 12, fetch_req(TRANSACTION_STATE_TOPIC, [(partition, 0, 1 << 22)]))
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0, part
    out: list[TxnMetadata | None] = []
    data = part.records or b""
    for pos, h in iter_batches(data):
        assert h.compression == 0  # uncompressed, as Kafka forces it
        for rec in iter_records(memoryview(data)[pos : pos + h.size]):
            parsed = parse_record(
                bytes(rec.key or b""), None if rec.value is None else bytes(rec.value)
            )
            if parsed is not None and parsed.transactional_id == tid:
                out.append(parsed.value)
    return out


def states(c: Client, tid: str) -> list[TxnState | None]:
    return [None if m is None else m.state for m in txn_log(c, tid)]


def describe(c: Client, tid: str) -> Any:
    resp = c.call(
        ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[tid])
    )
    (state,) = resp.transaction_states
    return state


def wait_for(what: str, check: Any, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def wait_state(c: Client, tid: str, state: str) -> Any:
    """DescribeTransactions once ``tid`` is in ``state`` (markers are written after
    EndTxn is answered)."""
    wait_for(f"{tid} {state}", lambda: describe(c, tid).transaction_state == state)
    return describe(c, tid)


def committed_values(
    node: BrokerProcess, topic: str, last: bytes, partition: int = 0
) -> list[bytes]:
    """What a read_committed consumer reads of the partition, up to the value ``last``."""
    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"rc-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while last not in out:
            assert time.monotonic() < deadline, f"read_committed got only {out}"
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(bytes(msg.value() or b""))
        return out
    finally:
        c.close()


def txn_producer(node: BrokerProcess, tid: str, **extra: Any) -> Producer:
    return Producer(
        {"bootstrap.servers": node.bootstrap, "transactional.id": tid, **QUIET, **extra}
    )


# ---------------------------------------------------------------------- confluent-kafka
def test_confluent_commit_writes_prepare_commit_after_ongoing(
    node: BrokerProcess, client: Client
) -> None:
    topic = "txn-commit"
    create_topic(client, topic, partitions=2)
    p = txn_producer(node, "tid-commit")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"a", partition=0)
    p.produce(topic, b"b", partition=1)
    p.commit_transaction(30)
    log = txn_log(client, "tid-commit")
    got = [m.state for m in log if m is not None]
    # InitProducerId: Empty; AddPartitionsToTxn: Ongoing; EndTxn: PrepareCommit (then,
    # once markers are written, CompleteCommit)
    assert got[:3] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT], got
    prepare = log[2]
    assert prepare is not None
    assert prepare.partitions == {(topic, 0), (topic, 1)}
    d = describe(client, "tid-commit")
    assert d.error_code == 0
    assert d.transaction_state in ("PrepareCommit", "CompleteCommit")
    assert d.producer_id == prepare.producer_id


def test_confluent_abort_writes_prepare_abort(node: BrokerProcess, client: Client) -> None:
    topic = "txn-abort"
    create_topic(client, topic)
    p = txn_producer(node, "tid-abort")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"a")
    p.flush(10)
    p.abort_transaction(30)
    got = [s for s in states(client, "tid-abort")]
    assert got[:3] == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT], got


def test_a_second_producer_fences_the_first(node: BrokerProcess, client: Client) -> None:
    """Zombie fencing: InitProducerId of a second producer with the same transactional id
    bumps the epoch; the first producer's next transactional request is refused and it
    fails fatally (librdkafka: fenced)."""
    topic = "txn-fence"
    create_topic(client, topic)
    first = txn_producer(node, "tid-fence")
    first.init_transactions(30)
    second = txn_producer(node, "tid-fence")
    second.init_transactions(30)
    epochs = [m.producer_epoch for m in txn_log(client, "tid-fence") if m is not None]
    assert epochs == [0, 1], epochs
    first.begin_transaction()
    first.produce(topic, b"zombie")
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    # the zombie's partition never joined a transaction
    assert S.ONGOING not in states(client, "tid-fence")


# ---------------------------------------------------------------------- the wire
def test_find_coordinator_for_transactional_ids_batched(
    client: Client, node: BrokerProcess
) -> None:
    resp = client.call(
        ApiKey.FIND_COORDINATOR,
        4,
        FindCoordinatorRequest(key_type=1, coordinator_keys=["tid-x", "tid-y"]),
    )
    assert [(c.key, c.error_code, c.node_id, c.port) for c in resp.coordinators] == [
        ("tid-x", 0, 1, node.port),
        ("tid-y", 0, 1, node.port),
    ]


def test_find_coordinator_v6_and_an_unknown_key_type(client: Client, node: BrokerProcess) -> None:
    """Kafka 4.1's FindCoordinator v6: the same batched answer; key type 2 (share groups,
    KIP-932) is INVALID_REQUEST, riverbed having none."""
    for key_type, code, node_id in ((1, 0, 1), (2, ErrorCode.INVALID_REQUEST, -1)):
        resp = client.call(
            ApiKey.FIND_COORDINATOR,
            6,
            FindCoordinatorRequest(key_type=key_type, coordinator_keys=["tid-v6"]),
        )
        assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == [
            ("tid-v6", code, node_id)
        ]


def test_init_producer_id_v0_and_coordinator_errors(client: Client) -> None:
    """aiokafka's v0 InitProducerId with a transactional id; a timeout above
    transaction.max.timeout.ms; EndTxn and AddPartitionsToTxn refusals."""
    ok = client.call(
        ApiKey.INIT_PRODUCER_ID,
        0,
        InitProducerIdRequest(transactional_id="tid-wire", transaction_timeout_ms=60_000),
    )
    if ok.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:  # first use of the topic
        wait_for("the coordinator", lambda: describe(client, "tid-wire").error_code != 14)
        ok = client.call(
            ApiKey.INIT_PRODUCER_ID,
            0,
            InitProducerIdRequest(transactional_id="tid-wire", transaction_timeout_ms=60_000),
        )
    assert ok.error_code == 0 and ok.producer_id >= 0 and ok.producer_epoch == 0, ok
    too_long = client.call(
        ApiKey.INIT_PRODUCER_ID,
        0,
        InitProducerIdRequest(transactional_id="tid-wire", transaction_timeout_ms=900_001),
    )
    assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    # no transaction is open: EndTxn is INVALID_TXN_STATE
    end = client.call(
        ApiKey.END_TXN,
        0,
        EndTxnRequest(
            transactional_id="tid-wire",
            producer_id=ok.producer_id,
            producer_epoch=ok.producer_epoch,
            committed=True,
        ),
    )
    assert end.error_code == ErrorCode.INVALID_TXN_STATE, end
    # an epoch that is not the current one: v0 knows only INVALID_PRODUCER_EPOCH
    stale = client.call(
        ApiKey.END_TXN,
        0,
        EndTxnRequest(
            transactional_id="tid-wire",
            producer_id=ok.producer_id,
            producer_epoch=ok.producer_epoch + 5,
            committed=True,
        ),
    )
    assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, stale
    T = AddPartitionsToTxnRequest
    add = client.call(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        0,
        T(
            v3_and_below_transactional_id="tid-wire",
            v3_and_below_producer_id=ok.producer_id,
            v3_and_below_producer_epoch=ok.producer_epoch,
            v3_and_below_topics=[
                T.AddPartitionsToTxnTopic(name="no-such-topic", partitions=[0]),
            ],
        ),
    )
    (topic,) = add.results_by_topic_v3_and_below
    assert topic.results_by_partition[0].partition_error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    listed = client.call(ApiKey.LIST_TRANSACTIONS, 1, ListTransactionsRequest(duration_filter=-1))
    assert listed.error_code == 0
    assert ("tid-wire", ok.producer_id, "Empty") in {
        (t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states
    }
    unknown = describe(client, "tid-never-used")
    assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_verify_only_from_a_broker(client: Client) -> None:
    """AddPartitionsToTxn v4 VerifyOnly (KIP-890): a partition not in the transaction is
    TRANSACTION_ABORTABLE; an unknown producer id INVALID_PRODUCER_ID_MAPPING."""
    init = client.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        InitProducerIdRequest(
            transactional_id="tid-verify", transaction_timeout_ms=60_000, producer_id=-1,
            producer_epoch=-1,
        ),
    )  # fmt: skip
    assert init.error_code == 0, init
    create_topic(client, "txn-verify")
    T = AddPartitionsToTxnRequest
    topics = [T.AddPartitionsToTxnTopic(name="txn-verify", partitions=[0])]
    resp = client.call(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        4,
        T(
            transactions=[
                T.AddPartitionsToTxnTransaction(
                    transactional_id="tid-verify",
                    producer_id=init.producer_id,
                    producer_epoch=init.producer_epoch,
                    verify_only=True,
                    topics=topics,
                ),
                T.AddPartitionsToTxnTransaction(
                    transactional_id="tid-verify",
                    producer_id=init.producer_id + 1000,
                    producer_epoch=0,
                    verify_only=True,
                    topics=topics,
                ),
            ]
        ),
    )
    codes = [
        r.topic_results[0].results_by_partition[0].partition_error_code
        for r in resp.results_by_transaction
    ]
    assert codes == [ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.INVALID_PRODUCER_ID_MAPPING]
    # VerifyOnly changes nothing
    assert states(client, "tid-verify") == [S.EMPTY]


# ---------------------------------------------------------------------- other clients
def test_kafka_python_transactional_producer(node: BrokerProcess, client: Client) -> None:
    from kafka import KafkaProducer

    create_topic(client, "txn-kafka-python")
    p = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="tid-kafka-python")
    try:
        p.init_transactions()
        for value, commit in ((b"one", True), (b"two", False), (b"three", True)):
            p.begin_transaction()
            p.send("txn-kafka-python", value).get(timeout=30)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(timeout=5)
    got = states(client, "tid-kafka-python")
    assert got[:3] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT], got
    assert committed_values(node, "txn-kafka-python", b"three") == [b"one", b"three"]
    wait_state(client, "tid-kafka-python", "CompleteCommit")


def test_aiokafka_transactional_producer(node: BrokerProcess, client: Client) -> None:
    """aiokafka speaks v0 of every transactional API."""
    from aiokafka import AIOKafkaProducer

    create_topic(client, "txn-aiokafka")

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="tid-aiokafka")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait("txn-aiokafka", b"one")
            with pytest.raises(RuntimeError):
                async with p.transaction():  # an exception aborts the transaction
                    await p.send_and_wait("txn-aiokafka", b"two")
                    raise RuntimeError("abort it")
            async with p.transaction():
                await p.send_and_wait("txn-aiokafka", b"three")
        finally:
            await asyncio.wait_for(p.stop(), 30)

    asyncio.run(asyncio.wait_for(run(), 90))
    got = states(client, "tid-aiokafka")
    assert got[:3] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT], got
    assert S.PREPARE_ABORT in got
    assert committed_values(node, "txn-aiokafka", b"three") == [b"one", b"three"]


def test_api_versions_show_the_transaction_version(client: Client) -> None:
    """transaction.version is a feature level of the metadata log (new clusters: 2);
    ApiVersions v4 shows it (v3 leaves out a supported feature of minimum level 0, as
    Kafka, KAFKA-17492), finalized at 2 now that Produce v12 and TxnOffsetCommit v5 add
    partitions implicitly (a Java producer seeing 2 leaves the adds to them)."""
    resp = client.call(ApiKey.API_VERSIONS, 4, ApiVersionsRequest())
    assert resp.error_code == 0
    supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    assert supported["transaction.version"] == (0, 2)
    finalized = {f.name: f.max_version_level for f in resp.finalized_features}
    maxima = {k.api_key: k.max_version for k in resp.api_keys}
    assert maxima[ApiKey.PRODUCE] >= 12 and maxima[ApiKey.TXN_OFFSET_COMMIT] >= 5
    assert finalized["transaction.version"] == 2
    assert finalized["metadata.version"] > 0
    assert resp.finalized_features_epoch >= 0
    v3 = client.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    assert "transaction.version" not in {f.name for f in v3.supported_features}
    assert "metadata.version" in {f.name for f in v3.supported_features}


def test_cli_lists_and_describes_transactions(
    node: BrokerProcess, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    from riverbed.cli.main import main

    topic = "txn-cli"
    create_topic(client, topic)
    p = txn_producer(node, "tid-cli")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(10)  # AddPartitionsToTxn done: the transaction is Ongoing
    wait_for("Ongoing", lambda: describe(client, "tid-cli").transaction_state == "Ongoing")
    capsys.readouterr()
    assert main(["transactions", "describe", "-b", node.bootstrap,
                 "--transactional-id", "tid-cli", "--json"]) == 0  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    assert d["state"] == "Ongoing" and d["partitions"] == [f"{topic}-0"], d
    assert d["coordinator"] == 1 and d["duration_ms"] >= 0
    assert main(["transactions", "list", "-b", node.bootstrap, "--state", "Ongoing",
                 "--json"]) == 0  # fmt: skip
    listed = json.loads(capsys.readouterr().out)["transactions"]
    assert {"transactional_id": "tid-cli", "coordinator": 1, "producer_id": d["producer_id"],
            "state": "Ongoing"} in listed  # fmt: skip
    assert all(r["state"] == "Ongoing" for r in listed)
    p.abort_transaction(30)
    assert main(["transactions", "describe", "-b", node.bootstrap,
                 "--transactional-id", "never-used"]) != 0  # fmt: skip


# ---------------------------------------------------------------------- end to end
def test_confluent_transactions_in_a_row_read_committed(
    node: BrokerProcess, client: Client
) -> None:
    """Commit, abort, an empty commit, commit, an empty abort, commit: each completes
    (markers written, Complete record) and read_committed sees the committed records."""
    topic, tid = "txn-row", "tid-row"
    create_topic(client, topic)
    p = txn_producer(node, tid)
    p.init_transactions(30)
    plan = [(b"a0 a1", True), (b"b0", False), (b"", True), (b"c0", True), (b"", False),
            (b"d0", True)]  # fmt: skip
    for values, commit in plan:
        p.begin_transaction()
        for v in values.split():
            p.produce(topic, v)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(10)  # written (its partition added) before the abort
            p.abort_transaction(30)
    d = wait_state(client, tid, "CompleteCommit")
    assert d.topics == []  # a completed transaction holds no partitions
    assert committed_values(node, topic, b"d0") == [b"a0", b"a1", b"c0", b"d0"]
    got = [s for s in states(client, tid) if s in (S.PREPARE_COMMIT, S.PREPARE_ABORT)]
    # the empty transactions never reach the coordinator (librdkafka sends no EndTxn)
    assert got == [S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_COMMIT, S.PREPARE_COMMIT]
    log = [m for m in txn_log(client, tid) if m is not None]
    completes = [m.state for m in log if m.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)]
    assert completes == [S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.COMPLETE_COMMIT,
                         S.COMPLETE_COMMIT]  # fmt: skip


def test_a_fenced_producers_open_transaction_is_aborted(
    node: BrokerProcess, client: Client
) -> None:
    """A second producer's InitProducerId aborts the first one's open transaction (fence,
    then abort, then the new epoch); the first producer's late writes never become
    visible, the second producer's transaction commits."""
    topic, tid = "txn-zombie", "tid-zombie"
    create_topic(client, topic)
    zombie = txn_producer(node, tid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie-1")
    zombie.flush(10)
    wait_state(client, tid, "Ongoing")
    fresh = txn_producer(node, tid)
    fresh.init_transactions(30)
    zombie.produce(topic, b"zombie-2")
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    assert info.value.args[0].fatal()
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh")
    fresh.commit_transaction(30)
    assert committed_values(node, topic, b"fresh") == [b"fresh"]
    log = [m for m in txn_log(client, tid) if m is not None]
    aborted = next(m for m in log if m.state is S.PREPARE_ABORT)
    assert aborted.partitions == {(topic, 0)} and aborted.producer_epoch == 1
    assert wait_state(client, tid, "CompleteCommit").producer_epoch == 2


def test_a_transaction_past_its_timeout_is_aborted(node: BrokerProcess, client: Client) -> None:
    """transaction.timeout.ms: the coordinator's timer aborts the open transaction (fence:
    epoch + 1, then abort) and its records are never read as committed."""
    topic, tid = "txn-timeout", "tid-timeout"
    create_topic(client, topic)
    p = txn_producer(node, tid, **{"transaction.timeout.ms": 2000, "message.timeout.ms": 1500})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"left open")
    p.flush(10)
    before = wait_state(client, tid, "Ongoing")
    after = wait_state(client, tid, "CompleteAbort")
    assert after.producer_epoch == before.producer_epoch + 1
    # a plain producer's record after it: read_committed gets past the aborted one
    plain = Producer({"bootstrap.servers": node.bootstrap, **QUIET})
    plain.produce(topic, b"after")
    assert plain.flush(10) == 0
    assert committed_values(node, topic, b"after") == [b"after"]


def test_cli_aborts_an_open_transaction_by_its_start_offset(
    node: BrokerProcess, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """KIP-664: `transactions abort` writes the ABORT marker of the producer whose open
    transaction starts at the offset; the last stable offset moves past it, so
    read_committed reads the record produced after it (and never the aborted one)."""
    from riverbed.cli.main import main

    topic, tid = "txn-cli-abort", "tid-cli-abort"
    create_topic(client, topic)
    p = txn_producer(node, tid)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"stuck")
    p.flush(10)
    plain = Producer({"bootstrap.servers": node.bootstrap, **QUIET})
    plain.produce(topic, b"after")
    assert plain.flush(10) == 0
    args = ["-b", node.bootstrap, "--topic", topic, "--partition", "0"]
    capsys.readouterr()
    assert main(["transactions", "describe-producers", *args, "--json"]) == 0
    (open_txn,) = [
        q for q in json.loads(capsys.readouterr().out)["producers"]
        if q["current_txn_start_offset"] >= 0
    ]  # fmt: skip
    assert open_txn["current_txn_start_offset"] == 0
    assert main(["transactions", "abort", *args, "--start-offset", "1"]) != 0  # none there
    assert main(["transactions", "abort", *args, "--start-offset", "0"]) == 0
    assert committed_values(node, topic, b"after") == [b"after"]
    capsys.readouterr()
    assert main(["transactions", "describe-producers", *args, "--json"]) == 0
    starts = [
        q["current_txn_start_offset"] for q in json.loads(capsys.readouterr().out)["producers"]
    ]
    assert all(s < 0 for s in starts), starts
    # the coordinator still finishes the transaction it knows (markers are idempotent)
    p.abort_transaction(30)
    wait_state(client, tid, "CompleteAbort")


def test_cli_finds_a_hanging_transaction_and_aborts_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A transactional batch no coordinator knows (possible only without KIP-890's
    verification, as before Kafka 3.6) hangs: find-hanging reports it, and not the
    Ongoing transaction its coordinator has on the same partition; once aborted, it is
    gone."""
    from riverbed.cli.main import main

    overrides = {"num.partitions": "1", "transaction.partition.verification.enable": "false"}
    with BrokerProcess(overrides=overrides) as b:
        c = Client(b.port)
        try:
            create_topic(c, "hang")
            init = c.call(
                ApiKey.INIT_PRODUCER_ID,
                4,
                InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000),
            )
            batch = build_batch(
                [SimpleRecord(b"hanging", timestamp=int(time.time() * 1000) - 1000)],
                producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                base_sequence=0, is_transactional=True,
            )  # fmt: skip
            # Kafka refuses transactional batches without a transactional id
            req = produce_req("hang", 0, batch)
            req.transactional_id = "unknown-to-the-coordinator"
            answer = c.call(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
            assert answer.error_code == 0
            known = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "known",
                              **QUIET})  # fmt: skip
            known.init_transactions(30)
            known.begin_transaction()
            known.produce("hang", b"ongoing")
            known.flush(10)
            wait_state(c, "known", "Ongoing")
            find = ["transactions", "find-hanging", "-b", b.bootstrap, "--topic", "hang",
                    "--max-transaction-timeout", "0", "--json"]  # fmt: skip
            capsys.readouterr()
            assert main(find) == 0
            rows = json.loads(capsys.readouterr().out)["hanging"]
            assert [(r["producer_id"], r["start_offset"]) for r in rows] == [(init.producer_id, 0)]
            assert main(["transactions", "abort", "-b", b.bootstrap, "--topic", "hang",
                         "--partition", "0", "--start-offset", "0"]) == 0  # fmt: skip
            capsys.readouterr()
            assert main(find) == 0
            assert json.loads(capsys.readouterr().out)["hanging"] == []
            known.abort_transaction(30)
        finally:
            c.close()


def test_the_transaction_state_topic_configs(client: Client, node: BrokerProcess) -> None:
    """__transaction_state is created on first use as Kafka creates it: compacted,
    uncompressed, transaction.state.log.min.isr, no unclean leader election."""
    from riverbed.protocol.messages import DescribeConfigsRequest as D

    p = txn_producer(node, "tid-configs")
    p.init_transactions(30)  # FindCoordinator created the topic (if no test did before)
    resp = client.call(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        D(resources=[D.DescribeConfigsResource(resource_type=2,
                                               resource_name=TRANSACTION_STATE_TOPIC,
                                               configuration_keys=None)]),
    )  # fmt: skip
    (res,) = resp.results
    assert res.error_code == 0, res
    configs = {c.name: c.value for c in res.configs}
    assert configs["cleanup.policy"] == "compact"
    assert configs["compression.type"] == "uncompressed"
    assert configs["unclean.leader.election.enable"] == "false"
    assert configs["min.insync.replicas"] == "1"  # the broker's transaction.state.log.min.isr
    md = client.call(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    (topic,) = [t for t in md.topics if t.name == TRANSACTION_STATE_TOPIC]
    assert topic.is_internal and len(topic.partitions) == TXN_PARTITIONS


def test_kafka_python_and_aiokafka_zombies_are_fenced(node: BrokerProcess, client: Client) -> None:
    """A second producer with the same transactional id fences the first: kafka-python's
    gets ProducerFencedError (PRODUCER_FENCED, AddPartitionsToTxn v2+), aiokafka's
    ProducerFenced (INVALID_PRODUCER_EPOCH: it speaks v0); their writes never become
    visible, the new producer's do."""
    import kafka.errors
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced
    from kafka import KafkaProducer

    topic = "txn-zombies"
    create_topic(client, topic)
    old = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="tid-kp-zombie")
    new = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="tid-kp-zombie")
    try:
        old.init_transactions()
        new.init_transactions()
        old.begin_transaction()
        with pytest.raises(kafka.errors.ProducerFencedError):
            old.send(topic, b"kafka-python zombie").get(timeout=30)
            old.commit_transaction()
        new.begin_transaction()
        new.send(topic, b"kafka-python fresh").get(timeout=30)
        new.commit_transaction()
    finally:
        old.close(timeout=2)
        new.close(timeout=5)

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="tid-ak-zombie")
        second = AIOKafkaProducer(
            bootstrap_servers=node.bootstrap, transactional_id="tid-ak-zombie"
        )
        await first.start()
        await second.start()
        try:
            with pytest.raises(ProducerFenced):
                async with first.transaction():
                    await first.send_and_wait(topic, b"aiokafka zombie")
            async with second.transaction():
                await second.send_and_wait(topic, b"aiokafka fresh")
        finally:
            await asyncio.wait_for(first.stop(), 30)
            await asyncio.wait_for(second.stop(), 30)

    asyncio.run(asyncio.wait_for(run(), 90))
    assert committed_values(node, topic, b"aiokafka fresh") == [
        b"kafka-python fresh",
        b"aiokafka fresh",
    ]


def test_an_idle_transactional_id_expires() -> None:
    """transactional.id.expiration.ms: an id idle that long is tombstoned in
    __transaction_state by the timer of transaction.remove.expired.transaction.cleanup
    .interval.ms, and is then unknown (TRANSACTIONAL_ID_NOT_FOUND)."""
    overrides = {
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transactional.id.expiration.ms": "1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
    }
    with BrokerProcess(overrides=overrides) as b:
        c = Client(b.port)
        try:
            p = txn_producer(b, "tid-expires")
            p.init_transactions(30)
            assert describe(c, "tid-expires").error_code == 0
            wait_for(
                "the id's expiry",
                lambda: (
                    describe(c, "tid-expires").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                ),
            )
            assert txn_log(c, "tid-expires")[-1] is None  # the tombstone
        finally:
            c.close()


def test_a_transaction_survives_a_sigkill_of_its_only_broker() -> None:
    """The broker (coordinator and partition leader) is SIGKILLed with a transaction open
    and another one committed: after the restart the coordinator loads both from
    __transaction_state (the committed one CompleteCommit), the producer commits the open
    one, and read_committed sees both transactions' records."""
    overrides = {"num.partitions": "1", "transaction.state.log.num.partitions": "1"}
    with BrokerProcess(overrides=overrides) as b:
        c = Client(b.port)
        create_topic(c, "txn-restart")
        c.close()
        p = txn_producer(b, "tid-restart")
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("txn-restart", b"before")
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce("txn-restart", b"across")
        p.flush(10)
        c = Client(b.port)
        wait_state(c, "tid-restart", "Ongoing")
        c.close()
        b.restart(kill=True)
        c = Client(b.port)
        try:
            d = wait_state(c, "tid-restart", "Ongoing")  # loaded from the log
            assert [(t.topic, list(t.partitions)) for t in d.topics] == [("txn-restart", [0])]
            p.commit_transaction(60)
            wait_state(c, "tid-restart", "CompleteCommit")
        finally:
            c.close()
        assert committed_values(b, "txn-restart", b"across") == [b"before", b"across"]
