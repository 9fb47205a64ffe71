"""Outputs of ``RaftNode``: what the shell must do, in list order.

Order matters: ``PersistQuorumState`` comes before the messages that depend on it (a vote
is durable before the reply leaves), ``CommitEntries`` before a ``CreateSnapshot`` whose
end offset is the state machine's position right after those entries.

=========================  ===============================================================
SendRequest                send an RPC; the reply comes back through
                           ``handle_response(src, correlation_id, response)``
SendResponse               answer a request received with ``handle_request``
PersistQuorumState         write the quorum-state file (temp + fsync + rename) *now*
FlushLog                   fsync the log up to ``end_offset`` (may be slow and run in the
                           background); then call ``on_log_flushed(end_offset)``
CommitEntries              entries below the high watermark, in order, exactly once per
                           incarnation: apply them to the state machine
LoadSnapshot               replace the state machine's state with this snapshot
CreateSnapshot             write the state machine's image (its position is exactly
                           ``snapshot_id.end_offset``) with ``SnapshotStore.write``; then
                           call ``on_snapshot_written(snapshot_id)``
LeaderChanged              the known leader or epoch changed (for listeners)
=========================  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from riverbed.raft.messages import Entry, Request, Response, SnapshotId
from riverbed.raft.quorum_state import QuorumState


@dataclass(frozen=True)
class SendRequest:
    dest: int
    correlation_id: int
    request: Request


@dataclass(frozen=True)
class SendResponse:
    dest: int
    correlation_id: int
    response: Response


@dataclass(frozen=True)
class PersistQuorumState:
    state: QuorumState


@dataclass(frozen=True)
class FlushLog:
    end_offset: int


@dataclass(frozen=True)
class CommitEntries:
    entries: tuple[Entry, ...]
    high_watermark: int


@dataclass(frozen=True)
class LoadSnapshot:
    snapshot_id: SnapshotId


@dataclass(frozen=True)
class CreateSnapshot:
    snapshot_id: SnapshotId


@dataclass(frozen=True)
class CompleteSnapshotDownload:
    """The last chunk of a downloaded snapshot is written: the shell validates the partial
    file (``raft.snapshots.finish_download``: CRC of every batch, header and footer), then
    fsyncs and renames it, off its event loop, and reports back with
    ``RaftNode.on_snapshot_downloaded``; the log is replaced only then."""

    snapshot_id: SnapshotId


@dataclass(frozen=True)
class DeleteSnapshots:
    """Remove these snapshot files (all below the log start, a newer snapshot covers
    them) off the event loop. The core serves them no more from now on; a crash before
    the shell got to it leaves them to the start-up cleanup."""

    snapshot_ids: tuple[SnapshotId, ...]


@dataclass(frozen=True)
class LeaderChanged:
    epoch: int
    leader_id: int


Action = (
    SendRequest
    | SendResponse
    | PersistQuorumState
    | FlushLog
    | CommitEntries
    | LoadSnapshot
    | CreateSnapshot
    | CompleteSnapshotDownload
    | DeleteSnapshots
    | LeaderChanged
)
