"""Invariants of the raft simulation and its deterministic state machine.

``KVStateMachine`` applies ``set <key> <value>`` records (and skips the metadata records
of ``raft_sim_metadata``); its snapshot is the sorted map as
``<key>=<value>`` records in the real snapshot file format (``raft.snapshot_format``), so
loading a snapshot must reproduce the state exactly.

``Checker`` holds the ground truth the nodes must agree on and raises ``InvariantError``:

- at most one leader per epoch;
- a node's epoch never decreases, in memory or in its persisted quorum state (a wiped
  disk starts a new history);
- a node's high watermark never decreases while it runs, and when a leader advances it,
  a majority of voters have that offset durably (flushed log or snapshot) with the
  leader's entry at ``hw - 1``;
- every committed entry is identical on every node (checked as each node applies it), and
  every snapshot written or loaded equals the state replayed from the committed entries;
- every log starts at 0 or at a snapshot (a snapshot covers ``LBO - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import Entry, EntryKind, SnapshotId
from riverbed.raft.node import RaftNode
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_format import encode_snapshot, read_snapshot
from riverbed.raft.snapshots import MemorySnapshotStore


class InvariantError(AssertionError):
    pass


class KVStateMachine:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.applied = 0  # next offset expected

    def apply(self, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            if e.offset != self.applied:
                raise InvariantError(
                    f"state machine expected offset {self.applied}, got {e.offset}"
                )
            self.applied += 1
            if e.kind is EntryKind.DATA and e.value.startswith(b"set "):  # not metadata
                _, key, value = e.value.decode().split(" ", 2)
                self.data[key] = value

    def snapshot(self, sid: SnapshotId) -> bytes:
        if self.applied != sid.end_offset:
            raise InvariantError(f"snapshot {sid} requested at applied offset {self.applied}")
        records = [f"{k}={v}".encode() for k, v in sorted(self.data.items())]
        return encode_snapshot(sid, records)

    def load(self, sid: SnapshotId, data: bytes) -> None:
        contents = read_snapshot(data, sid)
        self.data = dict(r.decode().split("=", 1) for r in contents.records)
        self.applied = sid.end_offset


@dataclass
class Checker:
    voters: frozenset[int]
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader
    committed: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)  # node -> max epoch seen
    disk_epochs: dict[int, int] = field(default_factory=dict)
    hws: dict[int, int] = field(default_factory=dict)  # node -> hw this incarnation
    ref_cache: dict[int, dict[str, str]] = field(default_factory=dict)
    max_committed: int = 0

    def fail(self, msg: str) -> None:
        raise InvariantError(msg)

    # --- lifecycle ---------------------------------------------------------------------
    def on_restart(self, node_id: int, wiped: bool) -> None:
        self.hws.pop(node_id, None)
        if wiped:
            self.epochs.pop(node_id, None)
            self.disk_epochs.pop(node_id, None)

    def on_persist(self, node_id: int, epoch: int) -> None:
        if epoch < self.disk_epochs.get(node_id, 0):
            self.fail(f"node {node_id}: persisted epoch went back to {epoch}")
        self.disk_epochs[node_id] = epoch

    # --- per step ------------------------------------------------------------------------
    def check_node(self, node: RaftNode) -> None:
        nid = node.node_id
        if node.epoch < self.epochs.get(nid, 0):
            self.fail(f"node {nid}: epoch went back from {self.epochs[nid]} to {node.epoch}")
        self.epochs[nid] = node.epoch
        if node.role is Role.LEADER:
            other = self.leaders.setdefault(node.epoch, nid)
            if other != nid:
                self.fail(f"two leaders in epoch {node.epoch}: {other} and {nid}")
        hw = node.high_watermark
        if hw < self.hws.get(nid, 0):
            self.fail(f"node {nid}: high watermark went back from {self.hws[nid]} to {hw}")
        self.hws[nid] = hw
        if node.log.start_offset > 0 and not any(
            s.end_offset >= node.log.start_offset for s in node.snapshots.list()
        ):
            self.fail(f"node {nid}: log starts at {node.log.start_offset} without a snapshot")

    def check_leader_hw(
        self,
        leader: RaftNode,
        old_hw: int,
        durable: dict[int, tuple[MemoryLog, MemorySnapshotStore, int]],
    ) -> None:
        """The leader moved its HW past ``old_hw``: a majority must hold it durably."""
        hw = leader.high_watermark
        if hw <= old_hw:
            return
        epoch = leader.log.epoch_at(hw - 1)
        holders = 0
        for v in self.voters:
            log, snaps, wiped_coverage = durable[v]
            if wiped_coverage >= 0:
                # a wiped voter counts with what it flushed before the wipe, never with
                # its new log: it forgot the epochs it saw, so acks after the wipe do not
                # protect anything
                holders += wiped_coverage >= hw
                continue
            if log.flushed_end_offset < hw:
                continue
            if hw - 1 < log.start_offset - 1:
                holders += any(s.end_offset >= hw for s in snaps.list())
            elif log.epoch_at(hw - 1) == epoch:
                holders += 1
        if holders < len(self.voters) // 2 + 1:
            self.fail(
                f"leader {leader.node_id} epoch {leader.epoch} advanced HW to {hw} but only "
                f"{holders} voters hold it durably"
            )

    def on_commit(self, node_id: int, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            prev = self.committed.get(e.offset)
            cur = (e.epoch, e.value)
            if prev is None:
                if e.offset > 0 and e.offset - 1 not in self.committed:
                    # a node may commit past offsets whose entries it got via snapshot
                    pass
                self.committed[e.offset] = cur
                self.max_committed = max(self.max_committed, e.offset + 1)
            elif prev != cur:
                self.fail(
                    f"node {node_id}: committed offset {e.offset} is {cur!r}, "
                    f"another node committed {prev!r}"
                )

    def reference_state(self, end_offset: int) -> dict[str, str]:
        cached = self.ref_cache.get(end_offset)
        if cached is not None:
            return cached
        base = max((o for o in self.ref_cache if o <= end_offset), default=0)
        state = dict(self.ref_cache.get(base, {}))
        for off in range(base, end_offset):
            if off not in self.committed:
                self.fail(f"snapshot at {end_offset} but offset {off} was never committed")
            _, value = self.committed[off]
            if value.startswith(b"set "):  # control records (LeaderChange) change nothing
                _, key, val = value.decode().split(" ", 2)
                state[key] = val
        self.ref_cache[end_offset] = state
        return state

    def check_snapshot_state(self, node_id: int, sid: SnapshotId, state: dict[str, str]) -> None:
        ref = self.reference_state(sid.end_offset)
        if state != ref:
            self.fail(f"node {node_id}: snapshot {sid} state differs from the committed log")
