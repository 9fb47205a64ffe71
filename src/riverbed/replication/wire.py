"""AlterIsr proposals <-> Kafka's AlterPartition request/response (api key 56, v3).

Partitions are named by topic id (v2+) and the new ISR is sent with broker epochs
(``NewIsrWithEpochs``, KIP-903) so that the controller refuses a replica that restarted
since it last fetched (INELIGIBLE_REPLICA). A top-level error (NOT_CONTROLLER,
STALE_BROKER_EPOCH, ...) applies to every partition of the request.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from riverbed.replication.actions import AlterIsr, AlterIsrResult

ALTER_PARTITION_VERSION = 3

Item = tuple[uuid.UUID, int, AlterIsr]  # (topic id, partition, proposal)


def alter_partition_request(
    broker_id: int, broker_epoch: int, items: Sequence[Item]
) -> AlterPartitionRequest:
    topics: dict[uuid.UUID, AlterPartitionRequest.TopicData] = {}
    for topic_id, index, req in items:
        topic = topics.setdefault(topic_id, AlterPartitionRequest.TopicData(topic_id=topic_id))
        topic.partitions.append(
            AlterPartitionRequest.PartitionData(
                partition_index=index,
                leader_epoch=req.leader_epoch,
                new_isr_with_epochs=[
                    AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=e)
                    for b, e in zip(req.new_isr, req.broker_epochs, strict=True)
                ],
                leader_recovery_state=0,
                partition_epoch=req.partition_epoch,
            )
        )
    return AlterPartitionRequest(
        broker_id=broker_id, broker_epoch=broker_epoch, topics=list(topics.values())
    )


def alter_partition_results(
    items: Sequence[Item], response: AlterPartitionResponse | None, error: ErrorCode
) -> list[AlterIsrResult]:
    """One result per item; ``response`` None (lost, timed out) uses ``error`` for all."""
    if response is not None and response.error_code:
        error = ErrorCode.of(response.error_code)  # unknown codes: UNKNOWN_SERVER_ERROR
    if response is None or error is not ErrorCode.NONE:
        return [AlterIsrResult(req, error) for _, _, req in items]
    found: dict[tuple[uuid.UUID, int], AlterPartitionResponse.PartitionData] = {}
    for t in response.topics:
        for p in t.partitions:
            found[(t.topic_id, p.partition_index)] = p
    out = []
    for topic_id, index, req in items:
        got = found.get((topic_id, index))
        if got is None:
            out.append(AlterIsrResult(req, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        elif got.error_code:
            out.append(AlterIsrResult(req, ErrorCode.of(got.error_code)))
        else:
            out.append(
                AlterIsrResult(
                    req,
                    ErrorCode.NONE,
                    leader_id=got.leader_id,
                    leader_epoch=got.leader_epoch,
                    partition_epoch=got.partition_epoch,
                    isr=tuple(got.isr),
                )
            )
    return out
