"""What a leader tracks for its epoch: each replica's replicated offset, parked (long-poll)
fetches, the append linger buffer (one batch per append), and the high-watermark rule.

High watermark rule (KIP-595): the largest offset that a majority of voters have *flushed*
(the leader's own flushed end offset, and each voter's last fetch offset — followers only
fetch after flushing), taken only once it is past the epoch start offset (so the leader's
LeaderChange record is committed, which commits every earlier epoch's entries with it),
and never moved backwards. The node aligns it down to a batch boundary of its log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from riverbed.raft.messages import FetchRequest


@dataclass
class ReplicaProgress:
    replica_id: int
    end_offset: int = -1  # last fetch offset (= its flushed log end offset)
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # last Fetch *or* FetchSnapshot served (check-quorum, as Kafka's
    # updateCheckQuorumForFollowingVoter): a voter downloading a snapshot is following
    last_active_ms: int = -1
    high_watermark_sent: int = -1  # in the last fetch reply (a newer one is not parked)


@dataclass
class ParkedFetch:
    src: int
    correlation_id: int
    request: FetchRequest
    deadline_ms: int


@dataclass
class LeaderState:
    epoch: int
    epoch_start_offset: int
    voters: frozenset[int]
    local_id: int
    started_ms: int
    replicas: dict[int, ReplicaProgress] = field(default_factory=dict)
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    pending_batches: list[list[bytes]] = field(default_factory=list)  # one per append
    pending_records: int = 0  # records in pending_batches
    linger_deadline_ms: int | None = None
    begin_epoch_acked: set[int] = field(default_factory=set)
    begin_epoch_next_ms: int = 0
    observers_max: int = 1024  # observer progress entries kept; oldest dropped beyond

    def __post_init__(self) -> None:
        for v in self.voters:
            if v != self.local_id:
                self.replicas[v] = ReplicaProgress(v)

    def progress(self, replica_id: int) -> ReplicaProgress:
        p = self.replicas.get(replica_id)
        if p is None:
            if len(self.replicas) >= len(self.voters) + self.observers_max:
                oldest = min(
                    (r for r in self.replicas.values() if r.replica_id not in self.voters),
                    key=lambda r: r.last_fetch_ms,
                )
                del self.replicas[oldest.replica_id]
            p = self.replicas[replica_id] = ReplicaProgress(replica_id)
        return p

    def majority_flushed_offset(self, local_flushed: int) -> int:
        offsets = sorted(
            [local_flushed]
            + [self.replicas[v].end_offset for v in self.voters if v != self.local_id],
            reverse=True,
        )
        return offsets[len(self.voters) // 2]

    def next_high_watermark(self, current: int, local_flushed: int) -> int:
        candidate = self.majority_flushed_offset(local_flushed)
        if candidate > self.epoch_start_offset and candidate > current:
            return candidate
        return current

    def voters_active_since(self, since_ms: int) -> int:
        """Voters (the leader included) that sent a Fetch or FetchSnapshot at or after
        ``since_ms``."""
        return 1 + sum(
            1
            for v in self.voters
            if v != self.local_id and self.replicas[v].last_active_ms >= since_ms
        )
