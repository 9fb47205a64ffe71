"""Fetch and ListOffsets from the remote tier (tiered storage, KIP-405).

A consumer fetch whose offset is below the local log start of a tiered partition is
served by the remote log manager (`riverbed.server.remote_log`): as in Kafka, only the
first such partition of a request is read remotely (the others answer no data this time,
their consumers fetch again); the request is parked (its ``queued.max.requests`` permit
given back) while the bounded reader pool reads, for up to ``remote.fetch.max.wait.ms``.
The records are whole batches in memory: the response carries them as ordinary bytes
(no file ranges). Errors: KAFKA_STORAGE_ERROR (retriable) when the remote tier keeps
failing, OFFSET_OUT_OF_RANGE when the remote segment is gone.

Followers never read the remote tier through Fetch (KIP-405): below the leader's local
log start they get OFFSET_OUT_OF_RANGE naming the local log start as the log start, so
the follower restarts its log there (riverbed's follower logic); its remote log manager
then adopts the remote tier's start as the log start (Kafka answers
OFFSET_MOVED_TO_TIERED_STORAGE and its follower does the same in more steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from riverbed.protocol.messages import FetchRequest
from riverbed.server.request_permits import park_current_request
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_files import TimestampOffset
from riverbed.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

__all__ = ["max_timestamp_offset", "offset_for_timestamp", "read_remote", "remote_tier_serves"]


class RemoteFetchSlot(Protocol):
    """A fetch's partition routed to the remote tier, filled in by `read_remote`."""

    topic: str
    index: int
    fetch_offset: int
    remote_max_bytes: int
    error: int
    data: bytes
    size: int
    aborted: list[AbortedTxn] | None


def remote_tier_serves(broker: Broker, topic: str, p: FetchRequest.FetchPartition) -> bool:
    """Does the remote tier serve ``p``'s partition (a tiered partition of this node)?"""
    manager = broker.remote_log
    return manager is not None and manager.serves((topic, p.partition))


async def read_remote(
    broker: Broker, reads: Sequence[RemoteFetchSlot], read_committed: bool = False
) -> None:
    """Fill the first remote read (``reads``: the partitions routed to the remote tier,
    so the node has a remote log manager), with the aborted transactions of its range
    for ``read_committed``."""
    manager = broker.remote_log
    if manager is None:
        raise RuntimeError("a remote read without a remote log manager")
    first = reads[0]
    park_current_request()  # the delayed remote fetch holds no request permit
    result = await manager.read(
        (first.topic, first.index), first.fetch_offset, first.remote_max_bytes, read_committed
    )
    first.error = result.error
    first.data = result.data
    first.size = len(result.data)
    first.aborted = result.aborted


async def offset_for_timestamp(
    broker: Broker, topic: str, partition: int, plog: PartitionLog, timestamp: int
) -> TimestampOffset | None:
    """ListOffsets by time over the remote tier first (its offsets come before the
    local ones), then the local log. Raises RemoteStorageError."""
    manager = broker.remote_log
    if manager is not None and plog.tiered:
        found = await manager.offset_for_timestamp((topic, partition), timestamp)
        if found is not None:
            return found
    return plog.offset_for_timestamp(timestamp)


async def max_timestamp_offset(
    broker: Broker, topic: str, partition: int, plog: PartitionLog
) -> TimestampOffset | None:
    """ListOffsets MAX_TIMESTAMP (-3) over the remote tier and the local log: the record
    with the largest timestamp (the earlier one on a tie). Raises RemoteStorageError."""
    local = plog.max_timestamp_offset()
    manager = broker.remote_log
    if manager is None or not plog.tiered:
        return local
    remote = await manager.max_timestamp_offset(
        (topic, partition), local.timestamp if local is not None else -1
    )
    return remote if remote is not None else local
