"""The state machine seam: what the metadata controller (or any replicated state) plugs in.

KRaft's listener contract (KIP-595/KIP-630) in riverbed's terms:

- ``apply(entries)``: committed entries, in offset order, exactly once per incarnation
  (``EntryKind.LEADER_CHANGE`` control entries included so the position is exact; most
  machines skip them);
- ``snapshot_records()``: the records that rebuild the current state from empty (for the
  metadata image: ``riverbed.metadata.image.image_to_records`` encoded with
  ``encode_record``); called exactly when the machine's position is the snapshot's end
  offset. ``RaftDriver`` consumes the returned iterable on a worker thread, so a lazy
  generator over an immutable state (the metadata image is one) keeps a big snapshot off
  the event loop;
- ``load_snapshot(snapshot_id, records)``: replace the state with a snapshot's records
  (start-up, or after a FetchSnapshot download); entries after it follow via ``apply``.

``run_state_machine_actions`` executes the actions that concern the state machine and the
snapshot store, synchronously and in order, and returns the rest (sends, quorum-state
writes, flushes) for the I/O shell.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Protocol

from riverbed.raft.actions import Action, CommitEntries, CreateSnapshot, LoadSnapshot
from riverbed.raft.messages import Entry, SnapshotId
from riverbed.raft.node import RaftNode
from riverbed.raft.snapshot_format import iter_snapshot_chunks, read_snapshot


class StateMachine(Protocol):
    def apply(self, entries: tuple[Entry, ...]) -> None: ...
    def snapshot_records(self) -> Iterable[bytes]: ...
    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None: ...


def run_state_machine_actions(
    node: RaftNode,
    machine: StateMachine,
    actions: list[Action],
    now_ms: int,
    *,
    defer_snapshots: bool = False,
) -> list[Action]:
    """With ``defer_snapshots`` a CreateSnapshot is returned with the other actions (the
    caller writes it in the background from ``machine.snapshot_records()`` taken *now*)."""
    rest: list[Action] = []
    queue = deque(actions)
    while queue:
        action = queue.popleft()
        if isinstance(action, CommitEntries):
            machine.apply(action.entries)
        elif isinstance(action, LoadSnapshot):
            sid = action.snapshot_id
            data = node.snapshots.read(sid, 0, node.snapshots.size(sid))
            machine.load_snapshot(sid, read_snapshot(data, sid).records)
        elif isinstance(action, CreateSnapshot) and defer_snapshots:
            rest.append(action)
        elif isinstance(action, CreateSnapshot):
            sid = action.snapshot_id
            data = b"".join(iter_snapshot_chunks(sid, machine.snapshot_records(), now_ms=now_ms))
            node.snapshots.write(sid, data)
            queue.extend(node.on_snapshot_written(sid, now_ms))
        else:
            rest.append(action)
    return rest
