"""ListOffsets (2), OffsetForLeaderEpoch (23) and DeleteRecords (21).

ListOffsets special timestamps (Kafka's): -2 earliest (log start offset: in the remote
tier for a tiered log), -4 earliest local (the local log start offset, v8+), -5 latest
tiered (the highest offset copied to the remote tier, -1 without one; v9+, KIP-1005),
-1 latest (the
high watermark; for ``isolation_level=READ_COMMITTED`` the last stable offset, and a
timestamp's answer must then lie below it, as Kafka's ``fetchOffsetForTimestamp``), -3 the
offset of the record with the largest timestamp (over the remote tier too); any other timestamp finds the first
offset whose timestamp is >= it through the time index (the remote time index first for a
tiered log, :mod:`riverbed.server.broker.remote_fetch`) (offset -1, timestamp -1 when
there is none). Version 0 answers in ``old_style_offsets``. From v10 on (KIP-1075) the
request's ``timeout_ms`` bounds a lookup in the remote tier (REQUEST_TIMED_OUT after it).

OffsetForLeaderEpoch returns the largest epoch <= the requested one and its end offset
(the start of the next epoch, or the log end offset for the current epoch), from the
leader-epoch cache.

DeleteRecords moves the log start offset forward (-1 means "up to the high watermark");
an offset above the high watermark is OFFSET_OUT_OF_RANGE.

All three are served by the partition's leader only (Kafka's fetchOnlyFromLeader): a
follower or a node that does not host the partition answers NOT_LEADER_OR_FOLLOWER
(these responses have no field for the current leader; clients refresh their metadata),
except for Kafka's debugging replica id (-2) in ListOffsets and OffsetForLeaderEpoch.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from riverbed.server.broker.hosted import DEBUGGING_REPLICA_ID, NotServed, last_stable_offset
from riverbed.server.broker.remote_fetch import max_timestamp_offset, offset_for_timestamp
from riverbed.server.network import RequestContext
from riverbed.storage.errors import StorageError
from riverbed.tiered.rsm import RemoteStorageError

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: ListOffsetsRequest.isolation_level of a read_committed consumer (v2+).
READ_COMMITTED = 1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
#: From this version on the request's timeout bounds remote lookups (KIP-1075).
LIST_OFFSETS_TIMEOUT_VERSION = 10


async def _list_one(
    broker: Broker,
    topic: str,
    p: ListOffsetsRequest.ListOffsetsPartition,
    version: int,
    replica_id: int,
    read_committed: bool = False,
    timeout_ms: int = 0,
) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    def answer(
        code: int, timestamp: int = -1, offset: int = -1, epoch: int = -1
    ) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
        return ListOffsetsResponse.ListOffsetsPartitionResponse(
            partition_index=p.partition_index,
            error_code=int(code),
            old_style_offsets=[offset] if version == 0 and code == 0 and offset >= 0 else [],
            timestamp=timestamp,
            offset=offset,
            leader_epoch=epoch,
        )

    hosted = broker.partitions.leader_partition(
        topic, p.partition_index, p, require_leader=replica_id != DEBUGGING_REPLICA_ID
    )
    if isinstance(hosted, NotServed):
        return answer(hosted.error)
    epoch = hosted.registration.leader_epoch
    plog = hosted.log
    ts = p.timestamp
    # the last offset a consumer of this isolation level may read up to
    fetchable = last_stable_offset(plog) if read_committed else plog.high_watermark
    if ts == EARLIEST_TIMESTAMP:  # a tiered log starts in the remote tier
        return answer(0, -1, plog.log_start_offset, epoch)
    if ts == EARLIEST_LOCAL_TIMESTAMP:
        return answer(0, -1, plog.local_log_start_offset, epoch)
    if ts == LATEST_TIMESTAMP:
        return answer(0, -1, fetchable, epoch)
    if ts == LATEST_TIERED_TIMESTAMP:  # Kafka: -1 / epoch -1 when nothing is remote
        remote = plog.highest_offset_in_remote
        return answer(
            0, -1, remote, plog.epoch_cache.epoch_for_offset(remote) if remote >= 0 else -1
        )
    if ts < 0 and ts != MAX_TIMESTAMP:
        return answer(ErrorCode.INVALID_REQUEST)
    if ts == MAX_TIMESTAMP:
        lookup = max_timestamp_offset(broker, topic, p.partition_index, plog)
    else:
        lookup = offset_for_timestamp(broker, topic, p.partition_index, plog, ts)
    try:
        found = await asyncio.wait_for(lookup, timeout_ms / 1000 if timeout_ms > 0 else None)
    except RemoteStorageError:
        return answer(ErrorCode.KAFKA_STORAGE_ERROR)
    except TimeoutError:
        return answer(ErrorCode.REQUEST_TIMED_OUT)
    if found is None:
        return answer(0, -1, -1, -1)
    if found.offset >= fetchable:
        return answer(0, -1, -1, -1)
    return answer(0, found.timestamp, found.offset, found.leader_epoch)


async def handle_list_offsets(
    broker: Broker, ctx: RequestContext, req: ListOffsetsRequest
) -> ListOffsetsResponse:
    version = ctx.header.api_version
    topics = []
    timeout_ms = req.timeout_ms if version >= LIST_OFFSETS_TIMEOUT_VERSION else 0
    for t in req.topics:
        committed = req.isolation_level == READ_COMMITTED
        parts = [
            await _list_one(broker, t.name, p, version, req.replica_id, committed, timeout_ms)
            for p in t.partitions
        ]
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


async def handle_offset_for_leader_epoch(
    broker: Broker, ctx: RequestContext, req: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    # v3+: -1 for consumers, -2 debugging; a follower's broker id (replication's truncation)
    replica_id = req.replica_id
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, epoch, end = 0, -1, -1
            hosted = broker.partitions.leader_partition(
                t.topic, p.partition, p, require_leader=replica_id != DEBUGGING_REPLICA_ID
            )
            if isinstance(hosted, NotServed):
                code = hosted.error
            else:
                epoch, end = hosted.log.end_offset_for_epoch(p.leader_epoch)
            parts.append(
                OffsetForLeaderEpochResponse.EpochEndOffset(
                    error_code=int(code), partition=p.partition, leader_epoch=epoch, end_offset=end
                )
            )
        topics.append(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts)
        )
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


async def handle_delete_records(
    broker: Broker, ctx: RequestContext, req: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, low = 0, -1
            hosted = broker.partitions.leader_partition(t.name, p.partition_index)
            if isinstance(hosted, NotServed):
                code = hosted.error
            else:
                plog = hosted.log
                offset = plog.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > plog.high_watermark:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    try:
                        plog.delete_records_before(offset)
                        low = plog.log_start_offset
                    except StorageError as exc:
                        code = exc.error_code
            parts.append(
                DeleteRecordsResponse.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=low, error_code=int(code)
                )
            )
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
