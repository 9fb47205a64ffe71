"""Inputs and outputs of the partition core (``leader``, ``follower``, ``partition``).

A follower asks with a ``FetchPosition`` (Kafka's Fetch with ``replica_id`` >= 0 or the
KIP-903 ``ReplicaState``); the leader core answers with a ``FetchAnswer`` (error, high
watermark, log start, optional KIP-320 diverging epoch) and the shell then reads records
from ``fetch_offset``; the follower core gets both back as a ``FetchResult``.

Actions, to be done by the shell in list order:

=======================  ==================================================================
AlterIsr                 send AlterPartition to the controller for this partition; the
                         answer goes back through ``on_alter_partition_response``
HighWatermarkChanged     set the log's high watermark (consumers see data below it; wake
                         parked fetches; checkpoint to replication-offset-checkpoint)
ProduceCompleted         answer a parked acks=all produce with ``error`` (NONE: committed)
StateChange              a line for state-change.log (become leader/follower, ISR, truncation)
=======================  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from riverbed.protocol.errors import ErrorCode

NO_EPOCH = -1


@dataclass(frozen=True)
class FetchPosition:
    """A follower's fetch for one partition."""

    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int = NO_EPOCH
    replica_epoch: int = -1  # the follower's broker epoch (KIP-903); -1 unknown


@dataclass(frozen=True)
class FetchAnswer:
    """The leader core's verdict on a follower fetch (records are read by the shell)."""

    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), KIP-320

    @property
    def read_records(self) -> bool:
        return self.error is ErrorCode.NONE and self.diverging_epoch is None


@dataclass(frozen=True)
class FetchResult:
    """A fetch response for the follower core: the request it answers and what came back."""

    position: FetchPosition
    answer: FetchAnswer
    records: Any = None  # handed to ReplicaLog.append_as_follower unchanged


@dataclass(frozen=True)
class AlterIsr:
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]  # per new_isr member, -1 unknown (KIP-903)


@dataclass(frozen=True)
class HighWatermarkChanged:
    high_watermark: int


@dataclass(frozen=True)
class ProduceCompleted:
    request_id: int
    error: ErrorCode


@dataclass(frozen=True)
class StateChange:
    message: str


Action = AlterIsr | HighWatermarkChanged | ProduceCompleted | StateChange


@dataclass(frozen=True)
class AlterIsrResult:
    """The controller's answer to an ``AlterIsr`` (top-level or per-partition error)."""

    request: AlterIsr
    error: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()
