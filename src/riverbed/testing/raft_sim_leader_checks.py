"""The raft simulation's checks on leaders that need the whole cluster's view (a mixin of
`riverbed.testing.raft_sim.Simulation`); the per-node and per-commit invariants are
`riverbed.testing.raft_sim_checks.Checker`'s.

- Check-quorum counts FetchSnapshot as following (Kafka does): a leader whose majority
  fetched or downloaded its snapshot within 1.5 x fetch timeout must not resign.
- The refused-connection shortcut (``raft_sim_links.RefusalChecks``) is checked after each
  input against the leaders of the moment and any pre-vote the node granted.
- A leader's high watermark only rises over what a majority holds durably
  (`durable_view`: a wiped voter still counts what it flushed before the wipe).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from riverbed.raft.actions import Action, SendResponse
from riverbed.raft.messages import VoteResponse
from riverbed.raft.roles import Role
from riverbed.testing.raft_sim_checks import InvariantError
from riverbed.testing.raft_sim_links import RefusalChecks

if TYPE_CHECKING:
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.log import MemoryLog
    from riverbed.raft.node import RaftNode
    from riverbed.raft.snapshots import MemorySnapshotStore
    from riverbed.testing.raft_sim import SimNode


class LeaderChecksMixin:
    if TYPE_CHECKING:  # provided by Simulation
        now: int
        config: RaftConfig
        voters: frozenset[int]
        nodes: dict[int, SimNode]
        stats: Counter[str]
        refusal_checks: RefusalChecks
        snapshot_follows: dict[tuple[int, int], dict[int, int]]

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
