"""The RPCs of KRaft (KIP-595, KIP-630, KIP-996) as small frozen dataclasses.

The core speaks these; ``riverbed.raft.wire`` translates them to and from Kafka's wire
messages (VoteRequest/Response v0-1 plus a PreVote flag, BeginQuorumEpoch, EndQuorumEpoch,
Fetch as used by KRaft, FetchSnapshot, DescribeQuorum). Field names follow the JSON specs
in snake_case. The core replicates ``Entry`` values grouped into record batches: one
``append`` (one controller operation) is one batch, and ``Entry.batch_end`` marks the last
entry of each. Fetch, the high watermark, commit delivery, truncation and snapshots never
split a batch (Kafka's rule); the wire layer writes each batch as one Kafka record batch
(``partitionLeaderEpoch`` = the entry epoch, a control batch for a LeaderChange).

Error codes are Kafka's numbers (``riverbed.protocol.errors.ErrorCode`` has the same
values); only the ones KRaft uses are listed here so the core has no protocol dependency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Errors(IntEnum):
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    NOT_LEADER_OR_FOLLOWER = 6
    BROKER_NOT_AVAILABLE = 8
    REQUEST_TIMED_OUT = 7
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104


@dataclass(frozen=True, order=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


@dataclass(frozen=True, order=True)
class SnapshotId:
    """A snapshot contains every record below ``end_offset``; ``epoch`` is the epoch of
    the record at ``end_offset - 1`` (Kafka's OffsetAndEpoch for snapshots)."""

    end_offset: int
    epoch: int

    def file_stem(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}"


class EntryKind(IntEnum):
    DATA = 0
    LEADER_CHANGE = 1  # control record written by a new leader at the start of its epoch


@dataclass(frozen=True, slots=True)
class Entry:
    offset: int
    epoch: int
    value: bytes
    kind: EntryKind = EntryKind.DATA
    # the last entry of its record batch (one batch = one append = one operation): the
    # default makes a lone entry a batch of one
    batch_end: bool = True

    @property
    def size(self) -> int:
        # what the entry roughly costs on the wire (record overhead + value)
        return 20 + len(self.value)


# --- Vote (KIP-595, PreVote from KIP-996) ------------------------------------------------


@dataclass(frozen=True)
class VoteRequest:
    cluster_id: str
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False
    voter_id: int = -1


@dataclass(frozen=True)
class VoteResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    pre_vote: bool = False


# --- BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    voter_id: int = -1


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


# --- Fetch (pull replication) -------------------------------------------------------------


@dataclass(frozen=True)
class FetchRequest:
    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int
    max_wait_ms: int = 500
    replica_directory_id: str = ""  # KIP-853: tells a voter from a re-formatted replica


@dataclass(frozen=True)
class FetchResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    log_start_offset: int = 0
    entries: tuple[Entry, ...] = ()
    diverging_epoch: OffsetAndEpoch | None = None  # (end_offset, epoch) to truncate to
    snapshot_id: SnapshotId | None = None  # fetch offset below LBO: fetch this snapshot


# --- FetchSnapshot (KIP-630) --------------------------------------------------------------


@dataclass(frozen=True)
class FetchSnapshotRequest:
    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int


@dataclass(frozen=True)
class FetchSnapshotResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    snapshot_id: SnapshotId
    size: int = -1
    position: int = -1
    data: bytes = b""


# --- DescribeQuorum -----------------------------------------------------------------------


@dataclass(frozen=True)
class DescribeQuorumRequest:
    pass


@dataclass(frozen=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True)
class DescribeQuorumResponse:
    error_code: int
    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    current_voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = field(default_factory=tuple)


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
)
