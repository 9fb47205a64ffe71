"""The raft simulation's shell side (a mixin of `riverbed.testing.raft_sim.Simulation`):
what the server's raft driver does with a `RaftNode`'s actions, and the background disk
work that finishes later.

Requests and responses go to the network; a persisted quorum state is durable at once;
commits are checked against the ground truth, then applied through the shell's
``GuardedMachine``. Flushes, snapshot writes, snapshot deletes and completed snapshot
downloads run on the shell's worker thread in Kafka: here they finish after a random delay,
and a crash before then means they never happened (an fsync that started before a
truncation does not vouch for what was written after it).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from riverbed.raft.actions import (
    Action,
    CommitEntries,
    CompleteSnapshotDownload,
    CreateSnapshot,
    DeleteSnapshots,
    FlushLog,
    LeaderChanged,
    LoadSnapshot,
    PersistQuorumState,
    SendRequest,
    SendResponse,
)
from riverbed.raft.messages import FetchSnapshotResponse
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_format import read_snapshot
from riverbed.raft.snapshots import finish_download
from riverbed.testing.raft_sim_checks import Checker, InvariantError
from riverbed.testing.raft_sim_metadata import MetadataChecker

if TYPE_CHECKING:
    from riverbed.raft.node import RaftNode
    from riverbed.testing.raft_sim import SimNode


class ShellMixin:
    if TYPE_CHECKING:  # provided by Simulation
        rng: random.Random
        now: int
        voters: frozenset[int]
        nodes: dict[int, SimNode]
        stats: Counter[str]
        checker: Checker
        metadata_checker: MetadataChecker
        snapshot_follows: dict[tuple[int, int], dict[int, int]]

        def schedule(self, at: int, kind: str, *payload: Any) -> None: ...
        def trace(self, text: str) -> None: ...
        def feed(self, sn: SimNode, fn: Callable[[RaftNode], list[Action]]) -> None: ...
        def send(
            self, src: int, dst: int, kind: str, corr: int, msg: Any, dst_inc: int
        ) -> None: ...

    def run_actions(self, sn: SimNode, actions: list[Action]) -> None:
        node = sn.node
        assert node is not None
        for a in actions:
            if isinstance(a, SendRequest):
                self.send(sn.node_id, a.dest, "req", a.correlation_id, a.request, -1)
            elif isinstance(a, SendResponse):
                self.send_response(sn, a)
            elif isinstance(a, PersistQuorumState):
                sn.disk.quorum_state = a.state
                self.checker.on_persist(sn.node_id, a.state.leader_epoch)
            elif isinstance(a, FlushLog):
                delay = self.rng.choice((0, 1, 2, 5, 20))
                self.schedule(
                    self.now + delay,
                    "flush",
                    sn.node_id,
                    sn.incarnation,
                    a.end_offset,
                    sn.disk.log.truncations,
                )
            elif isinstance(a, CommitEntries):
                # ground truth first: the image checks compare against the committed log
                self.checker.on_commit(sn.node_id, a.entries)
                self.metadata_checker.on_commit(a.entries)
                assert sn.guard is not None
                sn.guard.apply(a.entries)
            elif isinstance(a, LeaderChanged):
                self.trace(f"node {sn.node_id}: epoch {a.epoch} leader {a.leader_id}")
            else:
                self.run_snapshot_action(sn, a)

    def send_response(self, sn: SimNode, a: SendResponse) -> None:
        node = sn.node
        assert node is not None
        resp = a.response
        if (
            isinstance(resp, FetchSnapshotResponse)
            and resp.error_code == 0
            and node.role is Role.LEADER
            and a.dest in self.voters
        ):
            follows = self.snapshot_follows.setdefault((sn.node_id, node.epoch), {})
            follows[a.dest] = self.now
        inc = sn.request_incarnation.pop((a.dest, a.correlation_id), -1)
        self.send(sn.node_id, a.dest, "resp", a.correlation_id, a.response, inc)

    def run_snapshot_action(self, sn: SimNode, a: Action) -> None:
        """LoadSnapshot, CreateSnapshot, DeleteSnapshots, CompleteSnapshotDownload."""
        if isinstance(a, LoadSnapshot):
            self.stats["snapshot loads"] += 1
            assert sn.guard is not None
            records = read_snapshot(sn.disk.snapshots.get(a.snapshot_id)).records
            sn.guard.load_snapshot(a.snapshot_id, records)
            self.checker.check_snapshot_state(sn.node_id, a.snapshot_id, sn.sm.data)
            self.trace(f"node {sn.node_id} loaded snapshot {a.snapshot_id}")
        elif isinstance(a, CreateSnapshot):
            self.stats["snapshots written"] += 1
            if not self.metadata_checker.is_batch_boundary(a.snapshot_id.end_offset):
                raise InvariantError(
                    f"node {sn.node_id}: snapshot {a.snapshot_id} ends inside a batch"
                )
            data = sn.sm.snapshot(a.snapshot_id)
            self.checker.check_snapshot_state(sn.node_id, a.snapshot_id, sn.sm.data)
            # a crash before the rename loses it: write after a delay
            delay = self.rng.choice((0, 1, 10))
            self.schedule(
                self.now + delay, "snapshot", sn.node_id, sn.incarnation, a.snapshot_id, data
            )
        elif isinstance(a, DeleteSnapshots):
            # unlinked on the shell's worker thread: later (a crash may come first)
            delay = self.rng.choice((0, 2, 20))
            self.schedule(
                self.now + delay, "snapshot delete", sn.node_id, sn.incarnation, a.snapshot_ids
            )
        elif isinstance(a, CompleteSnapshotDownload):
            # validated, fsynced and renamed on the shell's worker thread: later
            delay = self.rng.choice((0, 1, 5, 30))
            self.schedule(
                self.now + delay, "download done", sn.node_id, sn.incarnation, a.snapshot_id
            )

    def disk_done(self, kind: str, payload: tuple[Any, ...]) -> None:
        """A disk operation the shell ran in the background finished (unless the node
        crashed meanwhile: then it never happened)."""
        if kind == "flush":
            nid, inc, end, truncations = payload
            sn = self.nodes[nid]
            if sn.alive and sn.incarnation == inc:
                # like storage's recovery point: an fsync that started before a truncation
                # does not vouch for what was written after it
                if sn.disk.log.truncations == truncations:
                    sn.disk.log.flush(end)
                self.feed(sn, lambda n: n.on_log_flushed(end, self.now))
        elif kind == "snapshot":
            nid, inc, sid, data = payload
            sn = self.nodes[nid]
            if sn.alive and sn.incarnation == inc:
                sn.disk.snapshots.write(sid, data)
                self.feed(sn, lambda n: n.on_snapshot_written(sid, self.now))
        elif kind == "snapshot delete":
            nid, inc, sids = payload
            sn = self.nodes[nid]
            if sn.alive and sn.incarnation == inc:
                for sid in sids:
                    sn.disk.snapshots.delete(sid)
                self.stats["snapshots deleted"] += len(sids)
        elif kind == "download done":
            nid, inc, sid = payload
            sn = self.nodes[nid]
            if sn.alive and sn.incarnation == inc:
                problem = finish_download(sn.disk.snapshots, sid)
                self.stats[
                    "snapshot downloads " + ("completed" if problem is None else "rejected")
                ] += 1
                self.feed(sn, lambda n: n.on_snapshot_downloaded(sid, problem, self.now))
