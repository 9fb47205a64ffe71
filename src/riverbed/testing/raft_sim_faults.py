"""The raft simulation's chaos (a mixin of `riverbed.testing.raft_sim.Simulation`).

Every 20-400 ms of the chaos phase at most one fault is drawn: a crash (losing what was
not flushed) or a restart, a two-sided partition (healed later) or a heal, new
drop/duplicate rates and a slow-network period, a leader's graceful resignation (crashing
after it half the time), a disk wipe (the replica returns with a new directory id, as with
KIP-853; at most ``(voters - 1) // 2`` voters per seed), a pause (SIGSTOP, the leader half
the time) or a one-way partition. State-machine faults come from the machine
itself (`machine_fault`, at a per-seed rate) and halt the node through the fault handler.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from riverbed.raft.roles import Role
from riverbed.server.fault_handler import RecordingFaultHandler
from riverbed.testing.raft_sim_checks import InvariantError
from riverbed.testing.raft_sim_links import Links

if TYPE_CHECKING:
    from riverbed.raft.actions import Action
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.node import RaftNode
    from riverbed.testing.raft_sim import SimNode, SimParams


class FaultsMixin:
    if TYPE_CHECKING:  # provided by Simulation
        p: SimParams
        rng: random.Random
        now: int
        config: RaftConfig
        voters: frozenset[int]
        nodes: dict[int, SimNode]
        links: Links
        stats: Counter[str]
        faults: RecordingFaultHandler
        chaos: bool
        machine_fault_rate: float
        partition: dict[int, int]
        drop_rate: float
        dup_rate: float
        slow_until: int
        wiped_voters: int

        def schedule(self, at: int, kind: str, *payload: Any) -> None: ...
        def trace(self, text: str) -> None: ...
        def feed(self, sn: SimNode, fn: Callable[[RaftNode], list[Action]]) -> None: ...
        def boot(self, sn: SimNode) -> None: ...
        def crash(self, sn: SimNode, wipe: bool = False) -> None: ...

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
