"""Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn (v0-3 from
clients; v4-5 batched, VerifyOnly, from partition leaders), AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions.

Each request for a transactional id goes to the transaction coordinator's shell
(`riverbed.server.txn_coordinator`): an error about the coordinator itself
(COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) is answered at
once so the client looks the coordinator up again; otherwise the core answers, at once or
once its ``__transaction_state`` record is committed. As Kafka's ``KafkaApis``:
AddPartitionsToTxn naming a partition that does not exist answers
UNKNOWN_TOPIC_OR_PARTITION for it and OPERATION_NOT_ATTEMPTED for the others, without
asking the coordinator; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for the versions
that predate it (the core maps it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.acl import ResourceType
from riverbed.server.network import RequestContext
from riverbed.transaction.api import ListFilter, PartitionsResult, Result, TxnResult
from riverbed.transaction.records import TopicPartition

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker
    from riverbed.server.txn_coordinator import CoreOp

E = ErrorCode
#: AddPartitionsToTxn v4+ comes from brokers, batched by transaction (KIP-890).
ADD_PARTITIONS_BATCHED_VERSION = 4
#: AddPartitionsToTxn v5+ adds that are not VerifyOnly are TV2 adds.
ADD_PARTITIONS_TV2_VERSION = 5
#: Transactions one batched AddPartitionsToTxn may carry.
ADD_PARTITIONS_TRANSACTIONS_MAX = 10_000
#: Most an add waits for its id's previous transaction to complete (see `_ask`).
CONCURRENT_WAIT_MS = 100
APTR = AddPartitionsToTxnResponse


async def _ask(
    broker: Broker, tid: str, op: CoreOp, *, await_completion: bool = False
) -> Result | ErrorCode:
    """The core's answer to ``op`` for ``tid``, or the coordinator error answered at once.

    With ``await_completion`` (an add that starts a transaction) an answer of
    CONCURRENT_TRANSACTIONS, "the previous transaction of this id is still completing"
    (its markers and Complete record are being written: Kafka's coordinator answers so
    and the client retries after a backoff, 20 ms in librdkafka and the Java client), is
    not sent at once: ``op`` is asked again after each step of the coordinator, for up to
    CONCURRENT_WAIT_MS, so the new transaction starts as soon as the previous one has
    completed instead of a client backoff later. Past that the answer goes as it is."""
    coordinator = broker.transactions
    await coordinator.wait_ready((tid,))
    deadline = coordinator.now_ms() + CONCURRENT_WAIT_MS
    while True:
        code = coordinator.check(tid)
        if code != E.NONE:
            return code
        progress = coordinator.progress()
        answer = await coordinator.call(op)
        left = deadline - coordinator.now_ms()
        if not await_completion or left <= 0 or not _concurrent(answer):
            return answer
        await coordinator.wait_progress(progress, left)


def _concurrent(answer: Result) -> bool:
    if isinstance(answer, PartitionsResult):
        return any(code is E.CONCURRENT_TRANSACTIONS for _, code in answer.errors)
    return isinstance(answer, TxnResult) and answer.error is E.CONCURRENT_TRANSACTIONS


def _txn_result(answer: Result | ErrorCode) -> TxnResult:
    if isinstance(answer, ErrorCode):
        return TxnResult(answer)
    if not isinstance(answer, TxnResult):
        raise TypeError(f"expected a TxnResult, got {answer!r}")
    return answer


# ---------------------------------------------------------------------- InitProducerId
async def init_transactional_producer_id(
    broker: Broker, ctx: RequestContext, req: InitProducerIdRequest
) -> InitProducerIdResponse:
    tid = req.transactional_id or ""
    version = ctx.header.api_version
    # v3+ (KIP-360): the producer id / epoch the client had, -1/-1 for none
    expected = None
    if version >= 3 and (req.producer_id, req.producer_epoch) != (-1, -1):
        expected = (req.producer_id, req.producer_epoch)
    # v6 (KIP-939): Enable2Pc, KeepPreparedTxn (False below v6)
    two_phase = (req.enable2_pc, req.keep_prepared_txn)
    # an id is handed out without waiting inside the core (else LOAD_IN_PROGRESS)
    await broker.producer_ids.wait_available()
    core = broker.transactions.core
    r = _txn_result(
        await _ask(
            broker,
            tid,
            lambda rid, now: core.init_producer_id(
                rid, tid, req.transaction_timeout_ms, expected, version, now, two_phase
            ),
        )
    )
    return InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=int(r.error),
        producer_id=r.producer_id,
        producer_epoch=r.producer_epoch,
        ongoing_txn_producer_id=r.ongoing_producer_id,
        ongoing_txn_producer_epoch=r.ongoing_producer_epoch,
    )


# ---------------------------------------------------------------------- AddPartitionsToTxn
def _partitions(
    topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],
) -> set[TopicPartition]:
    return {(t.name, p) for t in topics for p in t.partitions}


def _topic_results(
    errors: dict[TopicPartition, ErrorCode],
) -> list[APTR.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[APTR.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in sorted(errors.items()):
        by_topic.setdefault(topic, []).append(
            APTR.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=int(code)
            )
        )
    return [
        APTR.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
        for t, ps in by_topic.items()
    ]


async def _add_one(
    broker: Broker,
    tid: str,
    pid: int,
    epoch: int,
    parts: set[TopicPartition],
    verify_only: bool,
    version: int,
) -> dict[TopicPartition, ErrorCode]:
    image = broker.metadata.image
    unknown = {tp for tp in parts if image.partition(*tp) is None}
    if unknown:  # KafkaApis: "nonExistingTopicErrors", the rest not attempted
        return {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED
                for tp in parts}  # fmt: skip
    core = broker.transactions.core
    wanted = frozenset(parts)
    op: CoreOp
    if verify_only:
        op = lambda rid, now: core.verify_partitions(rid, tid, pid, epoch, wanted)  # noqa: E731
    else:
        tv = 2 if version >= ADD_PARTITIONS_TV2_VERSION else 0
        op = lambda rid, now: core.add_partitions(  # noqa: E731
            rid, tid, pid, epoch, wanted, version, now, tv
        )
    answer = await _ask(broker, tid, op, await_completion=not verify_only)
    if isinstance(answer, ErrorCode):
        return dict.fromkeys(parts, answer)
    if isinstance(answer, PartitionsResult):
        return dict(answer.errors)
    return dict.fromkeys(parts, answer.error)


async def verify_locally(
    broker: Broker, tid: str, pid: int, epoch: int, parts: set[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """A partition leader's VerifyOnly check when this node is the coordinator itself
    (KIP-890: ``server.broker.txn_verification``), as a v4 request would be answered."""
    return await _add_one(broker, tid, pid, epoch, parts, True, ADD_PARTITIONS_BATCHED_VERSION)


async def add_locally(
    broker: Broker, tid: str, pid: int, epoch: int, parts: set[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """A partition leader's TV2 add (Produce v12+, KIP-890 part 2) when this node is the
    coordinator itself, as a v5 request without VerifyOnly would be answered."""
    return await _add_one(broker, tid, pid, epoch, parts, False, ADD_PARTITIONS_TV2_VERSION)


async def handle_add_partitions_to_txn(
    broker: Broker, ctx: RequestContext, req: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    version = ctx.header.api_version
    if version < ADD_PARTITIONS_BATCHED_VERSION:
        errors = await _add_one(
            broker,
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            _partitions(req.v3_and_below_topics),
            False,
            version,
        )
        return APTR(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(errors))
    if len(req.transactions) > ADD_PARTITIONS_TRANSACTIONS_MAX:
        return APTR(throttle_time_ms=0, error_code=int(E.INVALID_REQUEST))
    results = []
    for t in req.transactions:
        errors = await _add_one(
            broker,
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            _partitions(t.topics),
            t.verify_only,
            version,
        )
        results.append(
            APTR.AddPartitionsToTxnResult(
                transactional_id=t.transactional_id, topic_results=_topic_results(errors)
            )
        )
    return APTR(throttle_time_ms=0, error_code=0, results_by_transaction=results)


# ---------------------------------------------------------------------- AddOffsetsToTxn, EndTxn
async def handle_add_offsets_to_txn(
    broker: Broker, ctx: RequestContext, req: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    core = broker.transactions.core
    version = ctx.header.api_version
    r = _txn_result(
        await _ask(
            broker,
            req.transactional_id,
            lambda rid, now: core.add_offsets(
                rid,
                req.transactional_id,
                req.producer_id,
                req.producer_epoch,
                req.group_id,
                version,
                now,
            ),
            await_completion=True,
        )
    )
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=int(r.error))


async def handle_end_txn(broker: Broker, ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    core = broker.transactions.core
    version = ctx.header.api_version
    r = _txn_result(
        await _ask(
            broker,
            req.transactional_id,
            lambda rid, now: core.end_txn(
                rid,
                req.transactional_id,
                req.producer_id,
                req.producer_epoch,
                req.committed,
                version,
                now,
            ),
        )
    )
    return EndTxnResponse(
        throttle_time_ms=0,
        error_code=int(r.error),
        producer_id=r.producer_id,
        producer_epoch=r.producer_epoch,
    )


# ---------------------------------------------------------------------- admin
async def handle_describe_transactions(
    broker: Broker, ctx: RequestContext, req: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    R = DescribeTransactionsResponse
    out = []
    await broker.transactions.wait_ready(req.transactional_ids)
    for tid in req.transactional_ids:
        code = broker.transactions.check(tid)
        if code != E.NONE:
            out.append(R.TransactionState(error_code=int(code), transactional_id=tid, topics=[]))
            continue
        (d,) = broker.transactions.core.describe([tid])
        out.append(
            R.TransactionState(
                error_code=int(d.error),
                transactional_id=tid,
                transaction_state=d.state,
                transaction_timeout_ms=d.timeout_ms,
                transaction_start_time_ms=d.start_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=[
                    R.TopicData(topic=t, partitions=list(ps))
                    for t, ps in d.topics
                    if _describable_topic(broker, ctx, t)
                ],
            )
        )
    return R(throttle_time_ms=0, transaction_states=out)


def _describable_topic(broker: Broker, ctx: RequestContext, topic: str) -> bool:
    """Kafka lists a described transaction's partitions only for the topics the principal
    may DESCRIBE (DESCRIBE on the transactional id alone does not show their names)."""
    authz = broker.authz
    return authz is None or authz.may(
        broker.metadata.image, ctx, Op.DESCRIBE, ResourceType.TOPIC, topic
    )


async def handle_list_transactions(
    broker: Broker, ctx: RequestContext, req: ListTransactionsRequest
) -> ListTransactionsResponse:
    R = ListTransactionsResponse
    shell = broker.transactions
    shell.reconcile()  # the partitions led now
    f = ListFilter(
        states=frozenset(req.state_filters),
        producer_ids=frozenset(req.producer_id_filters),
        duration_ms=req.duration_filter if ctx.header.api_version >= 1 else -1,
        id_pattern=req.transactional_id_pattern if ctx.header.api_version >= 2 else None,
    )
    code, listed, unknown = shell.core.list(f, shell.now_ms())
    if code == E.NONE and shell.loading():
        code = E.COORDINATOR_LOAD_IN_PROGRESS
    if broker.authz is not None:  # Kafka: only the ids the principal may DESCRIBE
        image, authz = broker.metadata.image, broker.authz
        X = ResourceType.TRANSACTIONAL_ID
        listed = [t for t in listed if authz.may(image, ctx, Op.DESCRIBE, X, t.transactional_id)]
    return R(
        throttle_time_ms=0,
        error_code=int(code),
        unknown_state_filters=unknown,
        transaction_states=[
            R.TransactionState(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state,
            )
            for t in listed
        ],
    )
