"""Produce (api key 0): validate each partition's batches and append them as leader.

Per partition, in request order (appends happen before the handler's first ``await``, so
pipelined produces on one connection reach the log in the order they were sent):

- unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION (v13+ names topics by id
  (KIP-516): an unknown id -> UNKNOWN_TOPIC_ID); a partition this node does
  not lead at the current leader epoch -> NOT_LEADER_OR_FOLLOWER, with the current leader
  in ``current_leader`` and its endpoint (on the request's listener) in
  ``node_endpoints`` from v10 on (KIP-951: the client redirects without a metadata
  round trip); an offline log dir -> KAFKA_STORAGE_ERROR;
- no records -> INVALID_RECORD; more bytes than the topic's ``segment.bytes`` ->
  RECORD_LIST_TOO_LARGE; old message sets (magic 0/1) -> UNSUPPORTED_FOR_MESSAGE_FORMAT;
- storage validates every batch (magic 2, CRC-32C, lengths -> CORRUPT_MESSAGE; a batch
  above ``max.message.bytes`` -> MESSAGE_TOO_LARGE; anything else not appendable ->
  INVALID_RECORD) and every record Kafka checks one by one (a keyless record on a
  compacted topic -> INVALID_RECORD, a CreateTime outside the topic's bounds ->
  INVALID_TIMESTAMP): such a batch is refused as a whole and, from v8 on (KIP-467), the
  answer lists each bad record in ``record_errors`` (its index in the batch and why) with
  a summary in ``error_message``, so that the client fails only those records
  (`riverbed.storage.record_checks`); storage assigns offsets by patching the batch
  header in place;
- idempotent producers (``riverbed.producer.state``, checked by the log under its lock):
  an exact retry of one of the producer's last 5 batches is answered with its original
  base offset and not appended again; a gap in the sequence is
  OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH;
- the response carries the base offset, ``log_append_time_ms`` (-1 for CreateTime
  topics, as clients expect) and the log start offset.

Transactional batches (KIP-890 part 1, ``transaction.partition.verification.enable``):
a produce with a ``transactional_id`` whose batch would open the producer's transaction
(of the batch's epoch) in a partition is first verified with the transaction coordinator
(`riverbed.server.broker.txn_verification`); such partitions are appended after the
request's other partitions, once verified (an error answers the partition, nothing is
appended; a marker of the producer meanwhile answers INVALID_TXN_STATE). From v12 on
(KIP-890 part 2, transaction.version 2) the leader adds the partition to the
transaction instead of verifying it: the client sends no AddPartitionsToTxn.

acks=0 writes no response at all, and closes the connection when a partition failed (as
Kafka: there is no response to carry the error); acks must be 0, 1 or -1 (else
INVALID_REQUIRED_ACKS).
acks=-1 (all): NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than the
topic's ``min.insync.replicas``; after the append the partition waits (a delayed produce,
`riverbed.server.replication.manager`) until every ISR member has the batch, then answers
NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum meanwhile,
or REQUEST_TIMED_OUT after the request's ``timeout_ms``. Each partition's wait is parked at
its append (no task of its own), and the request is answered once all are done.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from riverbed.metadata.records import ZERO_UUID
from riverbed.producer.manager import ProducerStateManager
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import ProduceRequest, ProduceResponse
from riverbed.protocol.record_batch import has_transactional_records
from riverbed.protocol.records import BatchHeader, parse_header
from riverbed.server.broker.hosted import (
    HostedPartition,
    NotServed,
    leader_endpoints,
    producer_state_of,
)
from riverbed.server.broker.txn_verification import produce_error
from riverbed.server.network import CloseConnection, RequestContext
from riverbed.server.replication import cycle_trace
from riverbed.server.request_permits import park_current_request
from riverbed.storage.errors import StorageError

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker
    from riverbed.server.metrics.traffic import TopicCounters, TrafficStats

log = logging.getLogger(__name__)

_VALID_ACKS = (0, 1, -1)
#: From this version on a NOT_LEADER_OR_FOLLOWER answer names the leader (KIP-951).
PRODUCE_CURRENT_LEADER_VERSION = 10
#: From this version on the leader adds a transaction's partition itself (KIP-890 part 2).
PRODUCE_IMPLICIT_ADD_VERSION = 12
#: Position of the magic byte in a batch / message set (after offset, length, epoch|crc).
_MAGIC_OFFSET = 16


PartitionResponse = ProduceResponse.PartitionProduceResponse
TopicResponse = ProduceResponse.TopicProduceResponse
PartitionData = ProduceRequest.PartitionProduceData


def _partition_error(index: int, code: ErrorCode, message: str | None = None) -> PartitionResponse:
    return ProduceResponse.PartitionProduceResponse(
        index=index,
        error_code=int(code),
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        error_message=message,
    )


async def handle_produce(
    broker: Broker, ctx: RequestContext, req: ProduceRequest
) -> ProduceResponse | None:
    if cycle_trace.TRACE is not None:
        cycle_trace.TRACE.event("produce_in")
    run = _ProduceRun(broker, req, ctx.header.api_version)
    # every partition that needs no verification is appended before the first await
    responses = [run.append_topic(topic) for topic in req.topic_data]
    if run.verifications:
        await run.append_verified()
    if run.waits:
        await run.acknowledged()
    stats = broker.topic_stats
    if stats is not None and (
        len(responses) != 1
        or len(parts := responses[0].partition_responses) != 1
        or parts[0].error_code
    ):
        # a partition answered NONE was counted by its append (the usual request: one
        # partition, nothing more to count here; each operation on the request path
        # costs a metrics-on broker its share: issue 21's 3%)
        _count_unappended(stats, req, run, responses)
    if req.acks == 0:
        _close_if_any_failed(responses)
        return None
    endpoints = [
        ProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
        for i, h, p, r in leader_endpoints(broker.metadata.image, run.leaders, ctx.listener_name)
    ]
    return ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=endpoints)


#: A partition appended once verified: its topic's answers, its place in them, the topic
#: name, the partition's data and the verification.
_Deferred = tuple[list[PartitionResponse], int, str, PartitionData, "Verification"]


class _ProduceRun:
    """One Produce request's steps (`handle_produce`): appends in request order, the
    KIP-890 verified appends after them, then the acks=all waits."""

    __slots__ = (
        "acks_ok",
        "broker",
        "leaders",
        "names",
        "names_leader",
        "no_txn_id",
        "req",
        "verifications",
        "version",
        "waits",
    )

    def __init__(self, broker: Broker, req: ProduceRequest, version: int) -> None:
        self.broker = broker
        self.req = req
        self.version = version
        self.acks_ok = req.acks in _VALID_ACKS
        #: from v10 a NOT_LEADER_OR_FOLLOWER answer names the leader (KIP-951)
        self.names_leader = version >= PRODUCE_CURRENT_LEADER_VERSION
        #: Kafka: transactional records need the request's transactional id (authorized
        #: to write it), else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        self.no_txn_id = not req.transactional_id and has_transactional_records(req.topic_data)
        self.leaders: list[int] = []  # named in NOT_LEADER_OR_FOLLOWER answers
        self.names: list[str | None] = []  # each topic's name (v13+: None for an unknown id)
        self.waits: list[tuple[PartitionResponse, asyncio.Future[ErrorCode]]] = []  # acks=all
        self.verifications: list[_Deferred] = []

    def append_topic(self, topic: ProduceRequest.TopicProduceData) -> TopicResponse:
        """Answer or append each of ``topic``'s partitions (those to verify first are
        deferred to `append_verified`)."""
        parts: list[PartitionResponse] = []
        name = _topic_name(self.broker, topic)
        self.names.append(name)
        for pd in topic.partition_data:
            refused = self._refusal(name, pd)
            if refused is not None:
                parts.append(refused)
                continue
            assert name is not None  # else refused
            verification = _verification(
                self.broker, self.req.transactional_id, name, pd, self.version
            )
            if verification is not None:  # appended once verified
                self.verifications.append((parts, len(parts), name, pd, verification))
                parts.append(_partition_error(pd.index, ErrorCode.NONE))
                continue
            part = self._append(name, pd)
            if self.names_leader and part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                self.leaders.append(part.current_leader.leader_id)
            parts.append(part)
        return TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=parts)

    def _refusal(self, name: str | None, pd: PartitionData) -> PartitionResponse | None:
        """The request-level errors, answered per partition before any append."""
        if name is None:
            return _partition_error(pd.index, ErrorCode.UNKNOWN_TOPIC_ID)
        if not self.acks_ok:
            return _partition_error(pd.index, ErrorCode.INVALID_REQUIRED_ACKS)
        if self.no_txn_id:
            return _partition_error(pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return None

    def _append(self, name: str, pd: PartitionData) -> PartitionResponse:
        req = self.req
        part, wait = _produce_partition(
            self.broker, name, pd.index, pd.records, self.names_leader, req.acks, req.timeout_ms
        )
        if wait is not None:
            self.waits.append((part, wait))
        return part

    async def append_verified(self) -> None:
        """Verify the deferred partitions with their coordinator, then append each one
        whose verification still holds (else answer it INVALID_TXN_STATE / the error)."""
        codes = await asyncio.gather(*(v[4].verify() for v in self.verifications))
        for (parts, i, name, pd, v), code in zip(self.verifications, codes, strict=True):
            if not v.still_holds(code == ErrorCode.NONE) and code == ErrorCode.NONE:
                code = ErrorCode.INVALID_TXN_STATE  # the verified transaction ended meanwhile
            if code != ErrorCode.NONE:
                message = "the partition was not verified in the transaction"
                error = produce_error(code, self.version)
                parts[i] = _partition_error(pd.index, error, f"{message}: {code.name}")
                continue
            parts[i] = self._append(name, pd)

    async def acknowledged(self) -> None:
        """acks=all: each waiting partition's answer is its delayed produce's outcome."""
        errors = await _acknowledged([w for _, w in self.waits])
        for (part, _), error in zip(self.waits, errors, strict=True):
            part.error_code = int(error)
        if cycle_trace.TRACE is not None:
            cycle_trace.TRACE.event("produce_out")


async def _acknowledged(futures: list[asyncio.Future[ErrorCode]]) -> list[ErrorCode]:
    """The outcome of each partition's delayed produce (parked at its append). One
    partition (the common case) is awaited directly: no gather, so its completion reaches
    this handler in one event-loop pass."""
    if not all(f.done() for f in futures):
        park_current_request()  # a delayed produce holds no request permit
    if len(futures) == 1:
        return [await futures[0]]
    return list(await asyncio.gather(*futures))


def _count_unappended(
    stats: TrafficStats, req: ProduceRequest, run: _ProduceRun, responses: list[TopicResponse]
) -> None:
    """Kafka's TotalProduceRequestsPerSec (each partition of the request) and
    riverbed's FailedProduceRequestsPerSec (each answered with an error, acks=all waits
    included) per topic, for the partitions the appends did not count: an append counts
    its partition in the total (`_append_partition`), so here each partition answered
    with an error is failed, and counted in the total too unless it was appended and
    failed its acks=all wait; a topic id this node does not know counts under the id."""
    waited = {id(part) for part, _ in run.waits}
    for topic, name, answer in zip(req.topic_data, run.names, responses, strict=True):
        counters: TopicCounters | None = None
        for part in answer.partition_responses:
            if not part.error_code:
                continue
            if counters is None:
                counters = stats.produce_topic(name or str(topic.topic_id))
            counters.failed_produce += 1
            if id(part) not in waited:
                counters.total_produce += 1


def _topic_name(broker: Broker, topic: ProduceRequest.TopicProduceData) -> str | None:
    """The topic a Produce names: by name (v0-12), or by id (v13+; None: unknown id)."""
    if topic.name or topic.topic_id == ZERO_UUID:
        return topic.name
    found = broker.metadata.image.topic_by_id(topic.topic_id)
    return found.name if found is not None else None


def _close_if_any_failed(responses: list[ProduceResponse.TopicProduceResponse]) -> None:
    """acks=0: as Kafka, no response can carry an error, so the connection is closed and
    the producer learns something went wrong (it refreshes its metadata)."""
    failed = [
        f"{t.name or t.topic_id}-{p.index}: {ErrorCode.of(p.error_code).name}"
        for t in responses
        for p in t.partition_responses
        if p.error_code
    ]
    if failed:
        raise CloseConnection(f"produce with acks=0 failed: {', '.join(failed[:5])}")


@dataclass
class Verification:
    """A KIP-890 verification of one partition's transactional batch."""

    broker: Broker
    state: ProducerStateManager
    tid: str
    header: BatchHeader
    topic: str
    partition: int
    guard: int
    add: bool = False  # Produce v12+: add the partition (TV2), not only verify

    async def verify(self) -> ErrorCode:
        h = self.header
        verifier = self.broker.txn_verifier
        return await verifier.verify(
            self.tid, h.producer_id, h.producer_epoch, self.topic, self.partition, self.add
        )

    def still_holds(self, verified: bool = True) -> bool:
        return self.state.end_verification(self.header.producer_id, self.guard, verified)


def _verification(
    broker: Broker, tid: str | None, topic: str, pd: PartitionData, version: int
) -> Verification | None:
    """The verification (or, v12+, the add) the partition's batch needs first (None:
    none; Kafka verifies a transactional batch of a produce with a transactional id whose
    transaction is not open in the partition)."""
    records = pd.records
    add = version >= PRODUCE_IMPLICIT_ADD_VERSION
    if not tid or not records or not (add or broker.txn_verifier.enabled()):
        return None
    try:
        h = parse_header(records)
    except ProtocolError:
        return None  # the append answers it
    if not h.is_transactional or h.is_control:
        return None
    hosted = broker.partitions.leader_partition(topic, pd.index)
    if isinstance(hosted, NotServed):
        return None
    state = producer_state_of(hosted.log)
    if state is None:
        return None
    guard = state.begin_verification(h.producer_id, h.producer_epoch)
    if guard is None:
        return None  # the transaction is open here: verified before
    return Verification(broker, state, tid, h, topic, pd.index, guard, add)


def _not_served(index: int, why: NotServed, names_leader: bool) -> PartitionResponse:
    part = _partition_error(index, why.error)
    if names_leader and why.names_leader:
        part.current_leader = ProduceResponse.LeaderIdAndEpoch(
            leader_id=why.leader_id, leader_epoch=why.leader_epoch
        )
    return part


def _produce_partition(
    broker: Broker,
    topic: str,
    index: int,
    records: bytes | None,
    names_leader: bool,
    acks: int = 1,
    timeout_ms: int = 0,
) -> tuple[PartitionResponse, asyncio.Future[ErrorCode] | None]:
    """(partition response, None or the acks=all delayed produce, parked at the append)."""
    hosted = broker.partitions.leader_partition(topic, index)
    if isinstance(hosted, NotServed):
        return _not_served(index, hosted, names_leader), None
    replicas = broker.partitions.replicas
    if acks == -1 and replicas is not None:
        error = replicas.check_produce(hosted, acks)
        if error is not ErrorCode.NONE:
            return _partition_error(index, error, "the ISR is below min.insync.replicas"), None
    part, end = _append_partition(broker, hosted, index, records)
    if acks != -1 or replicas is None or part.error_code:
        return part, None
    return part, replicas.acks_future(hosted, end, timeout_ms)


def _append_partition(
    broker: Broker, hosted: HostedPartition, index: int, records: bytes | None
) -> tuple[PartitionResponse, int]:
    """(partition response, the offset after its last record; -1 when nothing appended)."""
    if not records:
        return _partition_error(
            index, ErrorCode.INVALID_RECORD, "produce request without records"
        ), -1
    if len(records) > _MAGIC_OFFSET and records[_MAGIC_OFFSET] < 2:
        # Message sets v0/v1 (pre-0.11 clients): riverbed stores record batch v2 only.
        message = (
            f"message format v{records[_MAGIC_OFFSET]} is not supported; use record batches v2"
        )
        return _partition_error(index, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, message), -1
    if len(records) > hosted.config.segment_bytes:
        limit = hosted.config.segment_bytes
        message = f"{len(records)} bytes of records exceed segment.bytes {limit}"
        return _partition_error(index, ErrorCode.RECORD_LIST_TOO_LARGE, message), -1
    try:
        info = broker.partitions.append(hosted, bytearray(records))
    except StorageError as exc:
        part = _partition_error(index, ErrorCode(exc.error_code), str(exc))
        # KIP-467 (v8+; older versions drop both fields): the records that failed
        part.record_errors = [
            ProduceResponse.BatchIndexAndErrorMessage(
                batch_index=e.batch_index, batch_index_error_message=e.message
            )
            for e in exc.record_errors
        ]
        return part, -1
    except ProtocolError as exc:
        return _partition_error(index, ErrorCode.CORRUPT_MESSAGE, str(exc)), -1
    except OSError as exc:  # the disk failed under the log: the client may retry
        log.error("append to %s-%d failed: %s", hosted.topic, index, exc)
        return _partition_error(index, ErrorCode.KAFKA_STORAGE_ERROR, str(exc)), -1
    if cycle_trace.TRACE is not None:
        cycle_trace.TRACE.event("append", info.last_offset + 1)
    stats = broker.topic_stats
    if stats is not None:
        # Kafka's ReplicaManager: BytesIn = the records' size, MessagesIn = the append
        # info's count (an idempotent retry's too: its original batch's offsets); the
        # partition's TotalProduceRequests here too (`_count_unappended` counts the rest)
        counters = stats.topics.get(hosted.topic) or stats.produce_topic(hosted.topic)
        counters.total_produce += 1
        counters.bytes_in += len(records)
        counters.messages_in += (
            info.last_offset - info.first_offset + 1 if info.duplicate else info.records_count
        )
    log_append_time = info.log_append_time if hosted.config.log_append_time else -1
    part = ProduceResponse.PartitionProduceResponse(
        index=index,
        error_code=0,
        base_offset=info.first_offset,
        log_append_time_ms=log_append_time,
        log_start_offset=hosted.log.log_start_offset,
    )
    return part, info.last_offset + 1
