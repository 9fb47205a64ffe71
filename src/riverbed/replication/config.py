"""Replication settings of one partition, with Kafka's config names and defaults.

=================================  ========  =============================================
replica.lag.time.max.ms            30000     a follower that has not caught up with the
                                             leader's log end for this long leaves the ISR
min.insync.replicas                1         acks=all needs at least this many in the ISR
replica.fetch.backoff.ms           1000      follower pause after a failed fetch
replica.alter.partition.timeout    5000      an AlterPartition without an answer is sent
(riverbed; Kafka: request.timeout)           again after this long
=================================  ========  =============================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Delayed acks=all produces parked per partition; one more is answered REQUEST_TIMED_OUT
#: at once (its records are appended; an idempotent retry is deduplicated).
PENDING_PRODUCES_MAX = 100_000


@dataclass(frozen=True)
class ReplicaConfig:
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1
    replica_fetch_backoff_ms: int = 1_000
    alter_partition_timeout_ms: int = 5_000
    pending_produces_max: int = PENDING_PRODUCES_MAX

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms <= 0:
            raise ValueError("replica.lag.time.max.ms must be positive")
        if self.min_insync_replicas < 1:
            raise ValueError("min.insync.replicas must be at least 1")
        if self.replica_fetch_backoff_ms < 0 or self.alter_partition_timeout_ms <= 0:
            raise ValueError("replica back-off and AlterPartition timeout must be positive")

    @classmethod
    def from_configs(cls, values: Mapping[str, str]) -> ReplicaConfig:
        """From broker/topic config values (Kafka's keys; missing keys keep the default)."""
        d = cls()
        return cls(
            replica_lag_time_max_ms=int(
                values.get("replica.lag.time.max.ms", d.replica_lag_time_max_ms)
            ),
            min_insync_replicas=int(values.get("min.insync.replicas", d.min_insync_replicas)),
            replica_fetch_backoff_ms=int(
                values.get("replica.fetch.backoff.ms", d.replica_fetch_backoff_ms)
            ),
        )
