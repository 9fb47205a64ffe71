"""WriteTxnMarkers (api key 27, v0-1): a transaction coordinator ends a transaction in the
partitions this broker leads.

Per marker entry (producer id, producer epoch, COMMIT/ABORT, coordinator epoch, topics and
partitions), as Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``:

- a partition this node does not lead -> NOT_LEADER_OR_FOLLOWER, an unknown one ->
  UNKNOWN_TOPIC_OR_PARTITION, an offline log dir -> KAFKA_STORAGE_ERROR;
- the marker is one transactional control batch (``build_end_txn_marker_batch``: the
  producer id and epoch, no sequence, the record's value the coordinator epoch) appended
  as leader with the coordinator's origin and acks=-1 ("the marker append is acks=-1"):
  refused up front when the ISR is below ``min.insync.replicas``, answered once the ISR
  holds it, REQUEST_TIMED_OUT after ``request.timeout.ms``;
- the producer state checks it under the log's lock: an older producer epoch ->
  INVALID_PRODUCER_EPOCH, a coordinator epoch older than the last one seen for the
  producer -> TRANSACTION_COORDINATOR_FENCED; appended, it ends the producer's open
  transaction (the LSO moves on) and an ABORT with data goes to the ``.txnindex``;
- a marker appended to ``__consumer_offsets-<p>`` is told to the group coordinator
  (``TxnMarkerListener.on_txn_marker``, right after the append: its pending transactional
  offsets commit or go) before the replication wait.

Every partition of every entry is answered with its own error code.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from riverbed.coordinator.records import OFFSETS_TOPIC
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from riverbed.server.broker.hosted import NotServed
from riverbed.server.network import RequestContext
from riverbed.server.request_permits import park_current_request
from riverbed.storage.errors import StorageError
from riverbed.storage.log import ORIGIN_COORDINATOR

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

__all__ = ["TxnMarkerListener", "handle_write_txn_markers", "write_txn_markers"]

R = WriteTxnMarkersResponse


class TxnMarkerListener(Protocol):
    """The group coordinator's side of a marker in ``__consumer_offsets`` (docs/CONTRACTS.md:
    the hook for WriteTxnMarkers). Never raises."""

    def on_txn_marker(
        self, partition: int, producer_id: int, commit: bool, offset: int
    ) -> None: ...


def _write_marker(
    broker: Broker, marker: WriteTxnMarkersRequest.WritableTxnMarker, topic: str, index: int
) -> tuple[ErrorCode, asyncio.Future[ErrorCode] | None]:
    """Append the marker to one partition: (error, the acks=-1 wait when appended)."""
    hosted = broker.partitions.leader_partition(topic, index)
    if isinstance(hosted, NotServed):
        return hosted.error, None
    replicas = broker.partitions.replicas
    if replicas is not None:
        refused = replicas.check_produce(hosted, -1)
        if refused != ErrorCode.NONE:
            return refused, None
    batch = build_end_txn_marker_batch(
        marker.transaction_result,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        coordinator_epoch=marker.coordinator_epoch,
        now_ms=int(time.time() * 1000),
    )
    try:
        info = broker.partitions.append(hosted, bytearray(batch), origin=ORIGIN_COORDINATOR)
    except StorageError as exc:
        return ErrorCode.of(exc.error_code), None
    except OSError:
        return ErrorCode.KAFKA_STORAGE_ERROR, None
    listener = broker.txn_marker_listener
    if topic == OFFSETS_TOPIC and listener is not None:
        listener.on_txn_marker(
            index, marker.producer_id, marker.transaction_result, info.first_offset
        )
    if replicas is None:
        return ErrorCode.NONE, None
    # the delayed produce's future itself (no coroutine, no task): a marker the ISR
    # already holds is answered without a loop turn
    return ErrorCode.NONE, replicas.acks_future(
        hosted, info.last_offset + 1, broker.config.get_int("request.timeout.ms")
    )


async def handle_write_txn_markers(
    broker: Broker, ctx: RequestContext, req: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    return await write_txn_markers(broker, req)


async def write_txn_markers(broker: Broker, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """The markers of ``req`` appended and answered (also this node's own transaction
    coordinator's, called in-process: `riverbed.server.txn_markers`)."""
    answers: list[R.WritableTxnMarkerResult] = []
    waits: list[tuple[R.WritableTxnMarkerPartitionResult, asyncio.Future[ErrorCode]]] = []
    # every marker is appended before the first await: the appends keep request order
    for marker in req.markers:
        topics = []
        for t in marker.topics:
            parts = []
            for index in t.partition_indexes:
                error, wait = _write_marker(broker, marker, t.name, index)
                part = R.WritableTxnMarkerPartitionResult(
                    partition_index=index, error_code=int(error)
                )
                if wait is not None:
                    waits.append((part, wait))
                parts.append(part)
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        answers.append(R.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    if any(not w.done() for _, w in waits):
        park_current_request()  # a delayed produce holds no request permit
    for part, wait in waits:  # all parked at once: awaited in turn, each done or not
        part.error_code = int(await wait)
    return WriteTxnMarkersResponse(markers=answers)
