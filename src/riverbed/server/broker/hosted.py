"""A partition this node hosts (`HostedPartition`), and what requests are told about one:
the leader-epoch check, why a partition is not served (`NotServed`, with the current
leader), the leaders' endpoints (KIP-951), whether its log is offline, its producer state
and its last stable offset.

`riverbed.server.broker.partitions` keeps the hosted partitions (`PartitionManager`); the
handlers (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, transactions, the remote log
manager) read them through these.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from riverbed.metadata.image import MetadataImage, PartitionRegistration
from riverbed.producer.manager import ProducerStateManager
from riverbed.protocol.errors import ErrorCode
from riverbed.storage.config import LogConfig
from riverbed.storage.log import PartitionLog


@dataclass
class HostedPartition:
    """A partition this node hosts: its topic, registration and open log."""

    topic: str
    topic_id: uuid.UUID
    index: int
    registration: PartitionRegistration
    log: PartitionLog
    config: LogConfig


class ClaimsLeaderEpoch(Protocol):
    """A request's partition that names the leader epoch its client knows (Fetch,
    ListOffsets, OffsetForLeaderEpoch; -1 in versions without the field)."""

    @property
    def current_leader_epoch(self) -> int: ...


def leader_epoch_error(requested: ClaimsLeaderEpoch, leader_epoch: int) -> ErrorCode | None:
    """Kafka's ``checkCurrentLeaderEpoch`` for one partition of a request: a
    ``current_leader_epoch`` (-1, as decoded from old versions: no check) newer than ours
    is UNKNOWN_LEADER_EPOCH, an older one FENCED_LEADER_EPOCH; None when it may go on."""
    current = requested.current_leader_epoch
    if current < 0 or current == leader_epoch:
        return None
    return (
        ErrorCode.UNKNOWN_LEADER_EPOCH if current > leader_epoch else ErrorCode.FENCED_LEADER_EPOCH
    )


#: ``replica_id`` of Kafka's debugging consumer: it may read any replica, not only the leader.
DEBUGGING_REPLICA_ID = -2


@dataclass(frozen=True)
class NotServed:
    """Why this node does not serve a client's request for a partition, and the current
    leader (id, epoch) as this node's image knows it; -1 when unknown or irrelevant."""

    error: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1

    @property
    def names_leader(self) -> bool:
        """Does the answer carry the current leader (KIP-951 ``current_leader``)?"""
        return self.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def leader_endpoints(
    image: MetadataImage, leader_ids: Iterable[int], listener: str
) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) on ``listener`` for each named leader the image knows
    (KIP-951 ``node_endpoints``: the client can connect without a metadata round trip)."""
    out = []
    for leader_id in sorted(set(leader_ids)):
        reg = image.brokers.get(leader_id)
        ep = reg.endpoint(listener) if reg is not None and not reg.fenced else None
        if reg is not None and ep is not None:
            out.append((leader_id, ep.host, ep.port, reg.rack))
    return out


def log_offline(plog: PartitionLog) -> bool:
    """True when the partition's log dir went offline after a disk failure: the
    partition answers KAFKA_STORAGE_ERROR to everything (Kafka's offline partitions)."""
    return plog.log_dir.offline


def producer_state_of(plog: PartitionLog) -> ProducerStateManager | None:
    """The producer state attached to ``plog`` (`PartitionManager` attaches one to each)."""
    state = plog.producer_state
    return state if isinstance(state, ProducerStateManager) else None


def last_stable_offset(plog: PartitionLog) -> int:
    """The partition's LSO: the first offset of its earliest open transaction, never above
    the high watermark (Kafka's ``UnifiedLog.lastStableOffset``); the HW without one. Never
    below the log start either: DeleteRecords past an open transaction's first offset
    moves it up (Kafka's maybeIncrementFirstUnstableOffset takes the log start then)."""
    hw = int(plog.high_watermark)
    state = plog.producer_state
    if state is None:
        return hw
    return min(max(state.last_stable_offset(hw), plog.log_start_offset), hw)
