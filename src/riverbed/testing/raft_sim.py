"""Seeded deterministic simulation of a KRaft quorum (``riverbed.raft``).

One ``random.Random(seed)`` drives everything: event scheduling, message delays (reordering
follows), drops and duplicates, slow-network periods (replies outliving request timeouts),
network partitions, crashes that lose unflushed log writes and partial snapshot downloads,
restarts, pauses (SIGSTOP), one-way partitions, connections as the shell sees them
(refused by a dead process's live host, reset, timed out: ``raft_sim_links``, with the
invariants of the refused-connection shortcut), graceful leader resignation, a disk wipe
(the replica comes back with a new directory id and never votes again under its id, as
with KIP-853), client appends, slow
fsyncs, and state-machine exceptions: an apply or snapshot load that raises goes through
the shell's ``GuardedMachine`` to the fault handler, the node halts (losing what it had
not flushed) and a supervisor restarts it; its applied offset never passes an entry the
machine did not apply. Check-quorum is checked too: a leader whose majority fetched or
downloaded its snapshot (FetchSnapshot) within 1.5 x fetch timeout must not resign. Snapshot and batching knobs vary per seed (a snapshot every 5-80 records, fetched
in 40 B - 2 KB chunks) so KIP-630 paths run in every seed. The client also runs the real
metadata controller's operations (``raft_sim_metadata``: register broker, create topics
with several partitions, ...) on the active leader, each one ``append`` = one batch, and
every node replays committed metadata into its image as the server does. After every
event the invariants in ``raft_sim_checks`` are checked, and the atomicity invariant of
``raft_sim_metadata``: commits, snapshots and every image any node publishes end on
whole operations (never half a topic). Then a calm phase (no faults, everyone
restarted and connected) must elect a leader and commit every new record on every node
within bounded simulated time. ``--wire`` sends every message through ``raft.wire`` and
the message engine's bytes.

Replay one seed, soak many (``make soak SEEDS=100000`` does the latter)::

    .venv/bin/python -m riverbed.testing.raft_sim --seed 1234 --voters 3 --observers 1 -v
    .venv/bin/python -m riverbed.testing.raft_sim --seeds 100000

A failure raises ``SimulationFailure`` whose message starts with that replay command.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from riverbed.protocol.messages import decode, encode, request_class, response_class
from riverbed.raft import wire
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
from riverbed.raft.config import RaftConfig
from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import (
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    VoteResponse,
)
from riverbed.raft.node import AppendQueueFullError, NotLeaderError, RaftNode
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_format import read_snapshot
from riverbed.raft.snapshots import MemorySnapshotStore, finish_download
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.server.raft_driver import GuardedMachine
from riverbed.testing.raft_sim_checks import Checker, InvariantError
from riverbed.testing.raft_sim_links import Links, Outcome, RefusalChecks, failure, is_refusal
from riverbed.testing.raft_sim_metadata import (
    MetadataChecker,
    MetadataClient,
    SimStateMachine,
    encoded,
)


class SimulationFailure(AssertionError):
    pass


METADATA_OP_SHARE = 0.35  # client events that run a controller operation (when active)


_RESPONSE_API = {
    VoteResponse: wire.API_VOTE,
    BeginQuorumEpochResponse: wire.API_BEGIN_QUORUM_EPOCH,
    EndQuorumEpochResponse: wire.API_END_QUORUM_EPOCH,
    FetchResponse: wire.API_FETCH,
    FetchSnapshotResponse: wire.API_FETCH_SNAPSHOT,
    DescribeQuorumResponse: wire.API_DESCRIBE_QUORUM,
}


def through_wire(msg: Any) -> Any:
    """The message as the peer would decode it from Kafka wire bytes."""
    api = _RESPONSE_API.get(type(msg))
    if api is None:
        api, version, wire_msg = wire.encode_request(msg)
        data = encode(wire_msg, version)
        return wire.decode_request(api, decode(request_class(api), data, version))
    version = wire.WIRE_VERSIONS[api]
    data = encode(wire.encode_response(msg), version)
    return wire.decode_response(api, decode(response_class(api), data, version))


@dataclass(frozen=True)
class SimParams:
    seed: int
    voters: int = 3
    observers: int = 1
    chaos_ms: int = 8000
    calm_ms: int = 30000
    calm_records: int = 5
    wire: bool = False  # send every message through raft.wire + the codec's bytes
    verbose: bool = False

    def replay_command(self) -> str:
        return (
            f".venv/bin/python -m riverbed.testing.raft_sim --seed {self.seed} "
            f"--voters {self.voters} --observers {self.observers} "
            f"--chaos-ms {self.chaos_ms}{' --wire' if self.wire else ''} -v"
        )


def sim_config(
    voters: frozenset[int], directory_ids: dict[int, str], rng: random.Random
) -> RaftConfig:
    """Kafka's defaults scaled down ~4x (a seed covers many elections in little CPU time);
    the snapshot and batching knobs vary per seed so every KIP-630 path gets exercised."""
    return RaftConfig(
        voters=voters,
        cluster_id="sim",
        election_timeout_ms=250,
        fetch_timeout_ms=500,
        election_backoff_max_ms=250,
        append_linger_ms=rng.choice((0, 5, 20)),
        request_timeout_ms=rng.choice((400, 600, 1200)),  # Kafka: 2000 = fetch timeout
        fetch_max_wait_ms=100,
        snapshot_minimum_records=rng.choice((5, 25, 25, 80)),
        max_replication_lag_ms=rng.choice((300, 1500, 1500, 6000)),
        fetch_bytes_max=rng.choice((60, 600, 600, 5000)),
        fetch_snapshot_bytes_max=rng.choice((40, 150, 150, 2000)),
        voter_directory_ids=directory_ids,
    )


@dataclass
class Disk:
    log: MemoryLog = field(default_factory=MemoryLog)
    snapshots: MemorySnapshotStore = field(default_factory=MemorySnapshotStore)
    quorum_state: QuorumState | None = None
    directory_id: str = ""


@dataclass
class SimNode:
    node_id: int
    disk: Disk
    sm: SimStateMachine
    node: RaftNode | None = None
    guard: GuardedMachine | None = None  # the shell's view of sm (applied offset, faults)
    incarnation: int = 0
    tick_version: int = 0
    request_incarnation: dict[tuple[int, int], int] = field(default_factory=dict)
    wiped_coverage: int | None = None
    metadata_op: tuple[int, int] | None = None  # (epoch, last offset) of the op in flight

    @property
    def alive(self) -> bool:
        return self.node is not None


class Simulation:
    def __init__(self, params: SimParams) -> None:
        self.p = params
        self.rng = random.Random(params.seed)
        self.now = 0
        self.seq = 0
        self.queue: list[tuple[int, int, str, tuple[Any, ...]]] = []
        self.voters = frozenset(range(1, params.voters + 1))
        ids = list(range(1, params.voters + params.observers + 1))
        self.dir_ids = {v: f"dir-{v}-0" for v in self.voters}
        self.config = sim_config(self.voters, self.dir_ids, self.rng)
        # chance that a state-machine apply or snapshot load raises (chaos phase only)
        self.machine_fault_rate = self.rng.choice((0.0, 0.0, 0.002, 0.01))
        self.faults = RecordingFaultHandler()
        # (leader, epoch) -> voter -> last time the leader served it a snapshot chunk
        self.snapshot_follows: dict[tuple[int, int], dict[int, int]] = {}
        self.checker = Checker(self.voters)
        self.metadata = MetadataClient(random.Random(self.rng.getrandbits(64)))
        self.metadata_checker = MetadataChecker(self.checker.committed)
        self.nodes = {
            i: SimNode(i, Disk(directory_id=f"dir-{i}-0"), self.new_machine(i)) for i in ids
        }
        self.partition: dict[int, int] = {}  # node -> side; empty = connected
        self.drop_rate = 0.0
        self.dup_rate = 0.0
        self.slow_until = 0
        self.chaos = True
        self.wiped_voters = 0
        self.key_counter = 0
        self.events = 0
        self.stats: Counter[str] = Counter()
        self.links = Links(self.stats)
        if params.voters >= 3 and self.rng.random() < 0.3:
            src, dst = self.rng.sample(sorted(self.voters), 2)
            self.links.misdirected = (src, dst)
        self.refusal_checks = RefusalChecks(
            self.stats, self.config.fetch_timeout_ms, self.config.majority
        )
        self.log_lines: list[str] = []

    # --- scheduling --------------------------------------------------------------------------
    def schedule(self, at: int, kind: str, *payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def trace(self, text: str) -> None:
        line = f"{self.now:>7} {text}"
        if self.p.verbose:
            print(line)
        self.log_lines.append(line)
        if len(self.log_lines) > 200:
            del self.log_lines[:100]

    def reschedule_tick(self, sn: SimNode) -> None:
        assert sn.node is not None
        sn.tick_version += 1
        self.schedule(sn.node.next_deadline_ms(), "tick", sn.node_id, sn.tick_version)

    # --- node lifecycle ------------------------------------------------------------------------
    def new_machine(self, node_id: int) -> SimStateMachine:
        def on_image(image: Any, loaded: Any) -> None:
            self.stats["metadata images checked"] += 1
            self.metadata_checker.check_image(node_id, image, loaded)

        sm = SimStateMachine(self.metadata.controller, lambda: self.now, on_image)
        sm.fault = self.machine_fault  # type: ignore[method-assign]
        return sm

    def machine_fault(self) -> bool:
        return (
            self.chaos
            and self.machine_fault_rate > 0
            and (self.rng.random() < self.machine_fault_rate)
        )

    def halt(self, sn: SimNode) -> None:
        """The fault handler ran (FaultHalt): the process is gone with what it had not
        flushed; a supervisor restarts it, and the start-up path recovers."""
        what, cause = self.faults.faults[-1]
        guard = sn.guard
        assert guard is not None
        self.stats["state machine faults"] += 1
        self.trace(f"node {sn.node_id} halted: {what}: {cause}")
        # the shell's applied offset stays before the entries the machine did not apply
        if guard.applied_offset != sn.sm.kv.applied:
            raise InvariantError(
                f"node {sn.node_id}: applied offset {guard.applied_offset} after a failed "
                f"apply, but the machine applied up to {sn.sm.kv.applied}"
            )
        self.crash(sn)
        self.schedule(self.now + self.rng.randint(10, 500), "restart", sn.node_id)

    def boot(self, sn: SimNode) -> None:
        sn.incarnation += 1
        self.links.host_down.discard(sn.node_id)
        sn.sm = self.new_machine(sn.node_id)
        sn.guard = GuardedMachine(sn.sm, self.faults)
        sn.metadata_op = None
        sn.request_incarnation = {}
        node = RaftNode(
            sn.node_id,
            self.config,
            sn.disk.log,
            sn.disk.snapshots,
            random.Random(self.rng.getrandbits(64)),
            quorum_state=sn.disk.quorum_state,
            directory_id=sn.disk.directory_id,
        )
        sn.node = node
        self.checker.on_restart(sn.node_id, wiped=False)
        self.trace(f"boot node {sn.node_id} (incarnation {sn.incarnation})")
        self.feed(sn, lambda n: n.start(self.now))

    def crash(self, sn: SimNode, wipe: bool = False) -> None:
        if sn.node is None:
            return
        host_down = self.chaos and self.rng.random() < 0.2
        self.trace(f"crash node {sn.node_id}{' + wipe disk' if wipe else ''} host down {host_down}")
        self.stats["wipes" if wipe else "crashes"] += 1
        sn.node = None
        self.links.crashed(sn.node_id, host_down)
        for (src, corr), src_inc in sn.request_incarnation.items():
            self.reset(sn.node_id, src, src_inc, corr)
        sn.disk.log = sn.disk.log.durable_copy()
        sn.disk.snapshots = sn.disk.snapshots.durable_copy()
        start = sn.disk.log.start_offset
        if start > 0 and not any(s.end_offset >= start for s in sn.disk.snapshots.list()):
            raise InvariantError(
                f"node {sn.node_id}: durable log starts at {start} without a durable snapshot"
            )
        if wipe:
            if sn.wiped_coverage is None:  # what it had as a voter, before any wipe
                sn.wiped_coverage = sn.disk.log.flushed_end_offset
            sn.disk = Disk(directory_id=f"dir-{sn.node_id}-{sn.incarnation}")
            self.checker.on_restart(sn.node_id, wiped=True)

    # --- actions -----------------------------------------------------------------------------
    def connected(self, a: int, b: int) -> bool:
        return self.partition.get(a, 0) == self.partition.get(b, 0) and (a, b) not in self.links.cut

    def request_outcome(self, src: int, dst: int, corr: int) -> bool:
        """Whether a request goes out (``raft_sim_links``); if not, the shell's failure."""
        peer = self.nodes[dst]
        ways = (self.connected(src, dst), self.connected(dst, src))
        outcome = self.links.request(src, dst, peer.incarnation if peer.alive else None, ways)
        if outcome is Outcome.DELIVER and self.rng.random() >= self.drop_rate:
            return True
        after = (
            self.rng.randint(1, 5) if outcome is Outcome.REFUSED else self.config.request_timeout_ms
        )
        self.fail_request(src, self.nodes[src].incarnation, dst, corr, failure(outcome), after)
        return False

    def fail_request(
        self, src: int, src_inc: int, dst: int, corr: int, exc: BaseException, after: int
    ) -> None:
        self.schedule(self.now + after, "failed", src, src_inc, dst, corr, exc)

    def send(self, src: int, dst: int, kind: str, corr: int, msg: Any, dst_inc: int) -> None:
        if kind == "req" and not self.request_outcome(src, dst, corr):
            return
        if kind == "resp" and (not self.connected(src, dst) or self.rng.random() < self.drop_rate):
            # the requester's shell times out waiting for it
            timeout = self.rng.randint(1, self.config.request_timeout_ms // 2)
            self.fail_request(dst, dst_inc, src, corr, TimeoutError(), timeout)
            return
        copies = 2 if self.rng.random() < self.dup_rate else 1
        src_inc = self.nodes[src].incarnation
        if self.p.wire:
            msg = through_wire(msg)
        for _ in range(copies):
            # a slow network period: some messages outlive the request timeout, so late
            # replies to requests already retried are common
            slow = self.slow_until > self.now and self.rng.random() < 0.3
            delay = self.rng.randint(1, 900) if slow else self.rng.randint(1, 12)
            self.schedule(self.now + delay, "msg", src, src_inc, dst, dst_inc, kind, corr, msg)

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

    def reset(self, dead: int, src: int, src_inc: int, corr: int) -> None:
        """``dead``'s process died with ``src``'s request on its connection: its host's
        kernel resets the connection (if the host lives and its packets reach ``src``)."""
        if dead not in self.links.host_down and self.connected(dead, src):
            exc = ConnectionResetError("connection closed")
            self.fail_request(src, src_inc, dead, corr, exc, self.rng.randint(1, 5))

    def feed(self, sn: SimNode, fn: Callable[[RaftNode], list[Action]]) -> None:
        node = sn.node
        assert node is not None
        old_hw = node.high_watermark
        old_rejected = node.rejected_inputs
        refusals_before = self.refusal_checks.before(node, self.now)
        try:
            actions = fn(node)
            self.run_actions(sn, actions)
        except FaultHalt:
            self.halt(sn)
            return
        if sn.node is node:
            self.check_refusals(node, refusals_before, actions)
        if node.rejected_inputs > old_rejected:
            self.stats["rejected inputs"] += node.rejected_inputs - old_rejected
        if sn.node is not node:
            return
        assert sn.guard is not None
        if sn.guard.applied_offset != sn.sm.kv.applied:
            raise InvariantError(
                f"node {node.node_id}: shell applied offset {sn.guard.applied_offset}, "
                f"machine at {sn.sm.kv.applied}"
            )
        self.checker.check_node(node)
        if not self.metadata_checker.is_batch_boundary(node.applied_offset):
            raise InvariantError(
                f"node {node.node_id}: commits delivered up to {node.applied_offset}, "
                "inside a batch"
            )
        if node.role is Role.LEADER and node.high_watermark > old_hw:
            self.checker.check_leader_hw(node, old_hw, self.durable_view())
        self.reschedule_tick(sn)

    def check_refusals(
        self, node: RaftNode, before: tuple[int, Role, bool], actions: list[Action]
    ) -> None:
        leaders = {
            i: n.node
            for i, n in self.nodes.items()
            if n.node is not None and n.node.role is Role.LEADER
        }
        granted = any(
            isinstance(a, SendResponse)
            and isinstance(a.response, VoteResponse)
            and a.response.pre_vote
            and a.response.vote_granted
            for a in actions
        )
        self.refusal_checks.after(node, before, leaders, granted, self.now)

    def durable_view(self) -> dict[int, tuple[MemoryLog, MemorySnapshotStore, int]]:
        # a wiped voter still holds what it flushed before the wipe as far as safety goes:
        # it never votes again, so only its acks (old and new) matter
        out = {}
        for v in self.voters:
            sn = self.nodes[v]
            coverage = -1 if sn.wiped_coverage is None else sn.wiped_coverage
            out[v] = (sn.disk.log, sn.disk.snapshots, coverage)
        return out

    # --- events ------------------------------------------------------------------------------
    def handle(self, kind: str, payload: tuple[Any, ...]) -> None:
        target = payload[2] if kind == "msg" else payload[0] if payload else -1
        if self.links.paused(target, self.now):
            # a stopped process handles nothing until it resumes (its kernel still takes
            # connections and buffers what arrives); the requester's shell times out
            resume = self.links.paused_until[target] + self.rng.randint(0, 5)
            timeout = self.config.request_timeout_ms
            if kind == "msg" and payload[4] == "req" and resume - self.now >= timeout:
                src, src_inc, _, _, _, corr, _ = payload
                self.fail_request(src, src_inc, target, corr, TimeoutError(), timeout)
            self.schedule(resume, kind, *payload)
            return
        if kind == "failed":
            nid, inc, dst, corr, exc = payload
            sn = self.nodes[nid]
            if sn.alive and sn.incarnation == inc:
                self.stats[f"requests failed: {type(exc).__name__}"] += 1
                refused = is_refusal(exc)
                self.feed(sn, lambda n: n.request_failed(dst, corr, refused, self.now))
        elif kind == "tick":
            nid, version = payload
            sn = self.nodes[nid]
            if sn.alive and version == sn.tick_version:
                before = self.leader_view(sn)
                self.feed(sn, lambda n: n.tick(self.now))
                if before is not None:
                    self.check_quorum_kept(sn, *before)
        elif kind == "msg":
            self.deliver(*payload)
        elif kind in ("flush", "snapshot", "snapshot delete", "download done"):
            self.disk_done(kind, payload)
        elif kind == "fault":
            if self.chaos:
                self.inject_fault()
                self.schedule(self.now + self.rng.randint(20, 400), "fault")
        elif kind == "client":
            if self.chaos:
                self.client_append()
                self.schedule(self.now + self.rng.randint(1, 40), "client")
        elif kind == "restart":
            (nid,) = payload
            sn = self.nodes[nid]
            if not sn.alive:
                self.boot(sn)
        elif kind == "heal":
            self.partition = {}
            self.links.cut.clear()
            self.trace("partition healed")

    def deliver(
        self, src: int, src_inc: int, dst: int, dst_inc: int, mkind: str, corr: int, msg: Any
    ) -> None:
        """A request or response arrives (a response only at the incarnation that asked)."""
        sn = self.nodes[dst]
        if not sn.alive and mkind == "req":
            self.reset(dst, src, src_inc, corr)  # sent on the connection to a dead process
        if not sn.alive or not self.connected(src, dst):
            return
        if mkind == "req":
            if self.p.verbose:
                self.trace(f"{src}->{dst} #{corr} {msg}")
            sn.request_incarnation[(src, corr)] = src_inc
            self.feed(sn, lambda n: n.handle_request(src, corr, msg, self.now))
        elif dst_inc == sn.incarnation:
            if isinstance(msg, FetchResponse):
                if msg.diverging_epoch is not None:
                    self.stats["diverging"] += 1
                if msg.snapshot_id is not None:
                    self.stats["fetch->snapshot id"] += 1
            elif isinstance(msg, FetchSnapshotResponse):
                self.stats[f"fetch_snapshot error {msg.error_code}"] += 1
            if self.p.verbose:
                self.trace(f"{src}->{dst} #{corr} {msg}")
            self.feed(sn, lambda n: n.handle_response(src, corr, msg, self.now))

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

    def leader_view(self, sn: SimNode) -> tuple[int, int, dict[int, int]] | None:
        """(epoch, start ms, voter -> last Fetch ms) of a leader, before its tick."""
        node = sn.node
        ls = node.leader_state if node is not None else None
        if node is None or ls is None or node.role is not Role.LEADER:
            return None
        fetches = {v: ls.replicas[v].last_fetch_ms for v in self.voters if v in ls.replicas}
        return node.epoch, ls.started_ms, fetches

    def check_quorum_kept(
        self, sn: SimNode, epoch: int, started_ms: int, fetches: dict[int, int]
    ) -> None:
        """Check-quorum counts FetchSnapshot as following (Kafka does): a leader whose
        majority fetched or downloaded its snapshot within 1.5 x fetch timeout must not
        resign; without that a snapshot download restarts with every new leader."""
        window = self.config.fetch_timeout_ms * 3 // 2
        since = self.now - window
        if self.now - started_ms < window:
            return
        follows = self.snapshot_follows.get((sn.node_id, epoch), {})
        fetching = {v for v, ms in fetches.items() if ms >= since and v != sn.node_id}
        downloading = {v for v, ms in follows.items() if ms >= since} - fetching
        majority = len(self.voters) // 2 + 1
        active = 1 + len(fetching) + len(downloading)
        node = sn.node
        if active < majority or not downloading:
            return
        if 1 + len(fetching) < majority:
            self.stats["leader kept by FetchSnapshot"] += 1
        if node is not None and node.epoch == epoch and node.role is Role.RESIGNED:
            raise InvariantError(
                f"node {sn.node_id} resigned epoch {epoch} by check-quorum while voters "
                f"{sorted(fetching | downloading)} followed it ({sorted(downloading)} "
                f"downloading its snapshot)"
            )

    def client_append(self) -> None:
        leaders = [
            sn
            for sn in self.nodes.values()
            if sn.node
            and sn.node.role is Role.LEADER
            and not self.links.paused(sn.node_id, self.now)
        ]
        if not leaders:
            return
        sn = self.rng.choice(leaders)
        if self.rng.random() < METADATA_OP_SHARE:
            if self.metadata_ready(sn):
                self.metadata_append(sn)
            return
        values = []
        for _ in range(self.rng.randint(1, 3)):
            self.key_counter += 1
            key = f"k{self.rng.randint(0, 30)}"
            values.append(f"set {key} v{self.key_counter}".encode())
        self.append_to(sn, values)

    def metadata_ready(self, sn: SimNode) -> bool:
        """The service's rule: an active controller (its epoch's LeaderChange committed
        and applied, so its image is current) with no operation of its own in flight."""
        node = sn.node
        ls = node.leader_state if node is not None else None
        if node is None or ls is None or node.role is not Role.LEADER:
            return False
        if node.high_watermark <= ls.epoch_start_offset or node.applied_offset < (
            node.high_watermark
        ):
            return False
        op = sn.metadata_op
        return op is None or op[0] != node.epoch or node.applied_offset > op[1]

    def metadata_append(self, sn: SimNode) -> None:
        assert sn.node is not None
        name, records = self.metadata.next_op(sn.sm.image, self.now)
        if records:
            self.stats["metadata ops"] += 1
            self.trace(f"node {sn.node_id} controller op {name}: {len(records)} records")
            self.append_to(sn, encoded(records), metadata=True)

    def append_to(self, sn: SimNode, values: list[bytes], metadata: bool = False) -> bool:
        node = sn.node
        assert node is not None
        try:
            last, actions = node.append(values, self.now)
        except (NotLeaderError, AppendQueueFullError):
            return False
        self.metadata_checker.on_append(node.epoch, last, metadata)
        if metadata:
            sn.metadata_op = (node.epoch, last)
        try:
            self.run_actions(sn, actions)
        except FaultHalt:
            self.halt(sn)
            return True
        self.checker.check_node(node)
        self.reschedule_tick(sn)
        return True

    def inject_fault(self) -> None:
        r = self.rng.random()
        alive = [sn for sn in self.nodes.values() if sn.alive]
        dead = [sn for sn in self.nodes.values() if not sn.alive]
        if r < 0.18 and alive:
            self.crash(self.rng.choice(alive))
        elif r < 0.36 and dead:
            self.boot(self.rng.choice(dead))
        elif r < 0.46:
            ids = sorted(self.nodes)
            self.partition = {i: self.rng.randint(0, 1) for i in ids}
            self.trace(f"partition {self.partition}")
            self.schedule(self.now + self.rng.randint(100, 2000), "heal")
        elif r < 0.52:
            self.partition = {}
        elif r < 0.62:
            self.drop_rate = self.rng.choice((0.0, 0.0, 0.05, 0.2, 0.5))
            self.dup_rate = self.rng.choice((0.0, 0.02, 0.1))
            if self.rng.random() < 0.3:
                self.slow_until = self.now + self.rng.randint(200, 2000)
                self.trace(f"slow network until {self.slow_until}")
        elif r < 0.70:
            leaders = [
                sn
                for sn in alive
                if sn.node
                and sn.node.role is Role.LEADER
                and not self.links.paused(sn.node_id, self.now)
            ]
            if leaders:
                sn = self.rng.choice(leaders)
                self.trace(f"node {sn.node_id} resigns")
                self.feed(sn, lambda n: n.resign(self.now))
                if self.rng.random() < 0.5:
                    self.crash(sn)
                    self.schedule(self.now + self.rng.randint(10, 1000), "restart", sn.node_id)
        elif r < 0.73 and alive:
            sn = self.rng.choice(alive)
            is_voter = sn.node_id in self.voters
            if not is_voter or (self.p.voters > 1 and self.wiped_voters < (self.p.voters - 1) // 2):
                self.wiped_voters += is_voter
                self.crash(sn, wipe=True)
                self.schedule(self.now + self.rng.randint(10, 1000), "restart", sn.node_id)
        elif r < 0.80 and alive:
            self.pause(alive)
        elif r < 0.86:
            self.cut_one_way()

    def pause(self, alive: list[SimNode]) -> None:
        """SIGSTOP a node (the leader half the time) for up to three fetch timeouts."""
        leaders = [sn for sn in alive if sn.node and sn.node.role is Role.LEADER]
        sn = self.rng.choice(leaders if leaders and self.rng.random() < 0.5 else alive)
        until = self.now + self.rng.randint(50, 3 * self.config.fetch_timeout_ms)
        self.links.paused_until[sn.node_id] = max(until, self.links.paused_until.get(sn.node_id, 0))
        self.stats["pauses"] += 1
        self.trace(f"pause node {sn.node_id} until {until}")

    def cut_one_way(self) -> None:
        """A one-way partition: everything a node sends, or everything sent to it, is lost."""
        node = self.rng.choice(sorted(self.nodes))
        others = [i for i in self.nodes if i != node]
        outgoing = self.rng.random() < 0.5
        self.links.cut |= {(node, o) if outgoing else (o, node) for o in others}
        self.stats["one-way partitions"] += 1
        self.trace(f"one-way partition: {'from' if outgoing else 'to'} node {node}")
        self.schedule(self.now + self.rng.randint(100, 2000), "heal")

    # --- phases ------------------------------------------------------------------------------
    def run_until(self, deadline: int, done: Callable[[], bool] | None = None) -> bool:
        while self.queue and self.queue[0][0] <= deadline:
            at, _, kind, payload = heapq.heappop(self.queue)
            self.now = max(self.now, at)
            self.events += 1
            self.handle(kind, payload)
            if done is not None and done():
                return True
        self.now = max(self.now, deadline)
        return done() if done is not None else True

    def calm_leader(self) -> SimNode | None:
        alive = [sn for sn in self.nodes.values() if sn.node is not None]
        leaders = [sn for sn in alive if sn.node and sn.node.role is Role.LEADER]
        if len(leaders) != 1:
            return None
        return leaders[0]

    def run(self) -> None:
        for sn in self.nodes.values():
            self.boot(sn)
        self.schedule(self.rng.randint(0, 300), "fault")
        self.schedule(self.rng.randint(0, 50), "client")
        self.run_until(self.p.chaos_ms)
        # calm: everyone up and connected, no loss; liveness must follow
        self.chaos = False
        self.partition = {}
        self.links.calm()
        self.drop_rate = self.dup_rate = 0.0
        for sn in self.nodes.values():
            if not sn.alive:
                self.boot(sn)
        self.trace("--- calm ---")
        deadline = self.now + self.p.calm_ms
        wanted = {f"calm{i}": f"c{self.p.seed}-{i}" for i in range(self.p.calm_records)}

        def all_applied() -> bool:
            for sn in self.nodes.values():
                if sn.node is None:
                    return False
                if any(sn.sm.data.get(k) != v for k, v in wanted.items()):
                    return False
            return True

        while self.now < deadline:
            leader = self.calm_leader()
            if leader is not None and leader.node is not None:
                missing = [
                    f"set {k} {v}".encode() for k, v in wanted.items() if leader.sm.data.get(k) != v
                ]
                if missing:
                    self.append_to(leader, missing)
            if self.run_until(min(deadline, self.now + 500), all_applied):
                break
        if not all_applied():
            states = "; ".join(sn.node.describe() for sn in self.nodes.values() if sn.node)
            raise InvariantError(
                f"liveness: records appended in the calm phase were not applied on every "
                f"node within {self.p.calm_ms} ms: {states}"
            )
        self.final_check()
        self.stats["leaders elected"] += len(self.checker.leaders)
        self.stats["committed offsets"] += self.checker.max_committed

    def final_check(self) -> None:
        states = {nid: dict(sn.sm.data) for nid, sn in self.nodes.items()}
        first = next(iter(states.values()))
        for nid, st in states.items():
            sn = self.nodes[nid]
            assert sn.node is not None
            hw = sn.node.applied_offset
            ref = self.checker.reference_state(hw)
            if st != ref:
                raise InvariantError(f"node {nid}: final state differs from the committed log")
            self.metadata_checker.check_state(nid, sn.sm.image, hw)
            if set(st) - set(first) and nid != next(iter(states)):
                pass


def run_seed(params: SimParams) -> Simulation:
    sim = Simulation(params)
    try:
        sim.run()
    except (InvariantError, AssertionError, Exception) as exc:
        tail = "\n".join(sim.log_lines[-40:])
        raise SimulationFailure(
            f"replay: {params.replay_command()}\nseed {params.seed} failed at t={sim.now}ms: "
            f"{type(exc).__name__}: {exc}\nlast events:\n{tail}"
        ) from exc
    return sim


def params_for(seed: int, voters: int | None = None, observers: int | None = None) -> SimParams:
    """Cluster shape for a soak seed: sizes 1, 3, 5 in turn, 0-2 observers."""
    v = voters if voters is not None else (1, 3, 5)[seed % 3]
    o = observers if observers is not None else (seed // 3) % 3
    return SimParams(seed=seed, voters=v, observers=o)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m riverbed.testing.raft_sim", description=__doc__)
    ap.add_argument("--seed", type=int, help="run this one seed")
    ap.add_argument("--seeds", type=int, default=100, help="soak: run seeds 0..N-1")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--voters", type=int)
    ap.add_argument("--observers", type=int)
    ap.add_argument("--chaos-ms", type=int, default=SimParams.chaos_ms)
    ap.add_argument("--wire", action="store_true", help="messages through Kafka wire bytes")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = (
        [args.seed]
        if args.seed is not None
        else range(args.first_seed, args.first_seed + args.seeds)
    )
    started = time.monotonic()
    failures = 0
    events = 0
    stats: Counter[str] = Counter()
    for seed in seeds:
        base = params_for(seed, args.voters, args.observers)
        params = SimParams(
            seed=seed,
            voters=base.voters,
            observers=base.observers,
            chaos_ms=args.chaos_ms,
            wire=args.wire,
            verbose=args.verbose,
        )
        try:
            sim = run_seed(params)
            events += sim.events
            stats.update(sim.stats)
        except SimulationFailure as exc:
            failures += 1
            print(exc, file=sys.stderr)
            if args.seed is not None:
                return 1
    n = len(seeds)
    print(f"{n - failures}/{n} seeds passed, {events} events, {time.monotonic() - started:.1f}s")
    print("  " + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
