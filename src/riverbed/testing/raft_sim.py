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

from riverbed.raft.actions import Action
from riverbed.raft.config import RaftConfig
from riverbed.raft.log import MemoryLog
from riverbed.raft.node import AppendQueueFullError, NotLeaderError, RaftNode
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.roles import Role
from riverbed.raft.snapshots import MemorySnapshotStore
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.server.raft_driver import GuardedMachine
from riverbed.testing.raft_sim_checks import Checker, InvariantError
from riverbed.testing.raft_sim_faults import FaultsMixin
from riverbed.testing.raft_sim_leader_checks import LeaderChecksMixin
from riverbed.testing.raft_sim_links import Links, RefusalChecks, is_refusal
from riverbed.testing.raft_sim_metadata import (
    MetadataChecker,
    MetadataClient,
    SimStateMachine,
    encoded,
)
from riverbed.testing.raft_sim_network import NetworkMixin
from riverbed.testing.raft_sim_network import through_wire as through_wire  # re-exported
from riverbed.testing.raft_sim_shell import ShellMixin
from riverbed.testing.sim_seeds import add_seed_options, chosen_seeds


class SimulationFailure(AssertionError):
    pass


METADATA_OP_SHARE = 0.35  # client events that run a controller operation (when active)


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


class Simulation(NetworkMixin, ShellMixin, LeaderChecksMixin, FaultsMixin):
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
    add_seed_options(ap)
    ap.add_argument("--voters", type=int)
    ap.add_argument("--observers", type=int)
    ap.add_argument("--chaos-ms", type=int, default=SimParams.chaos_ms)
    ap.add_argument("--wire", action="store_true", help="messages through Kafka wire bytes")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = chosen_seeds(args)
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
