"""The raft simulation's network as the shell sees it, and the invariants of the
refused-connection shortcut (``riverbed.raft.refusals``, issue 23).

Connections: a request from ``src`` to ``dst`` goes over ``src``'s connection to ``dst``'s
current process, made on first use. What the shell then feeds the node
(``request_failed``, refused or not, by ``raft_driver.is_refusal``):

- ``dst``'s process is dead and its host lives: its kernel closed the connection when it
  died (the requests waiting there fail with a reset) and refuses the next connect
  (ECONNREFUSED) -- if the host's answer can reach ``src``;
- ``dst``'s host is down too, or the path is cut (a partition drops packets, both ways or
  one way: a connect needs its SYN and the SYN-ACK through): no answer, the shell's
  request timeout;
- ``dst`` is paused (SIGSTOP): its kernel still completes connections, the request waits
  until it resumes and the shell times out meanwhile;
- ``misdirected`` (some seeds, chaos only): ``src``'s address for ``dst`` is wrong, every
  connect from ``src`` to ``dst`` is refused although ``dst`` lives;
- every request the shell never got a reply for fails with its timeout.

Invariants (``RefusalChecks``), after every event:

1. a refusal taken as evidence (a follower made Prospective at once, or a pre-vote granted
   on it within the fetch timeout) is only ever about a leader that is not the live
   leader of that epoch;
2. no election (Prospective -> Candidate) that began with such a shortcut while a live
   leader of the epoch still holds the quorum (a majority fetched from it within the
   fetch timeout).

``BROKEN_REFUSAL_RULES`` breaks the rule's parts; the simulation must catch each.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from riverbed.raft import node as raft_node
from riverbed.raft import refusals
from riverbed.raft.node import RaftNode
from riverbed.raft.roles import Role
from riverbed.server import raft_driver
from riverbed.testing.raft_sim_checks import InvariantError


class Outcome(enum.Enum):
    DELIVER = "deliver"
    REFUSED = "refused"  # ECONNREFUSED from dst's host
    LOST = "lost"  # no answer: the shell's request timeout


@dataclass
class Links:
    """Connections, pauses, one-way cuts and hosts that are down."""

    stats: Counter[str]
    cut: set[tuple[int, int]] = field(default_factory=set)  # (a, b): a -> b dropped
    paused_until: dict[int, int] = field(default_factory=dict)
    host_down: set[int] = field(default_factory=set)
    conns: dict[tuple[int, int], int] = field(default_factory=dict)  # -> dst incarnation
    misdirected: tuple[int, int] | None = None

    def paused(self, node_id: int, now: int) -> bool:
        return self.paused_until.get(node_id, -1) > now

    def request(
        self, src: int, dst: int, dst_incarnation: int | None, ways: tuple[bool, bool]
    ) -> Outcome:
        """A request src -> dst (``dst_incarnation`` None: its process is dead); ``ways``:
        can packets go src -> dst, dst -> src."""
        forward, back = ways
        if not forward or (dst_incarnation is None and dst in self.host_down):
            return Outcome.LOST
        key = (src, dst)
        if dst_incarnation is None:
            self.conns.pop(key, None)
            if not back:
                return Outcome.LOST  # the host's reset never comes back
            self.stats["connections refused"] += 1
            return Outcome.REFUSED
        if self.conns.get(key) == dst_incarnation:
            return Outcome.DELIVER
        if not back:
            return Outcome.LOST  # no SYN-ACK
        if key == self.misdirected:
            self.stats["connections refused by a live peer (misdirected)"] += 1
            return Outcome.REFUSED
        self.conns[key] = dst_incarnation
        return Outcome.DELIVER

    def crashed(self, node_id: int, host_down: bool) -> None:
        for key in [k for k in self.conns if k[1] == node_id]:
            del self.conns[key]
        if host_down:
            self.host_down.add(node_id)
        self.paused_until.pop(node_id, None)

    def calm(self) -> None:
        self.cut.clear()
        self.paused_until.clear()
        self.misdirected = None


def failure(outcome: Outcome) -> BaseException:
    """The exception the transport raises for a request that was not delivered."""
    if outcome is Outcome.REFUSED:
        return ConnectionRefusedError("Connect call failed")
    return TimeoutError()


def is_refusal(exc: BaseException) -> bool:
    """The shell's decision (looked up at call time, so a broken rule patched in is used)."""
    return raft_driver.is_refusal(exc)


class RefusalChecks:
    """Invariants 1 and 2 of the module docstring, with their coverage counts."""

    def __init__(self, stats: Counter[str], fetch_timeout_ms: int, majority: int) -> None:
        self.stats = stats
        self.fetch_timeout_ms = fetch_timeout_ms
        self.majority = majority
        #: node id -> the epoch in which it took the shortcut, until it leaves that round
        self.shortcut_epoch: dict[int, int] = {}

    def before(self, node: RaftNode, now: int) -> tuple[int, Role, bool]:
        """What ``after`` compares with: shortcuts taken, role, and whether the node may
        grant a pre-vote on a refusal alone (its leader heard from within the timeout)."""
        on_refusal = (
            node.role is Role.FOLLOWER
            and now - node.last_leader_contact_ms < self.fetch_timeout_ms
            and node.leader_gone()
        )
        return node.refusal_shortcuts, node.role, on_refusal

    def after(
        self,
        node: RaftNode,
        before: tuple[int, Role, bool],
        leaders: dict[int, RaftNode],
        granted_pre_vote: bool,
        now: int,
    ) -> None:
        shortcuts, role, on_refusal = before
        if node.refusal_shortcuts > shortcuts:
            self.shortcut_epoch[node.node_id] = node.epoch
            refusal = node.leader_refusal
            assert refusal is not None
            what = "pre-voted at once" if node.is_voter else "left its leader"
            self.check_evidence(node, refusal.leader_id, leaders, what)
            self.stats[
                "refusal shortcuts" if node.is_voter else "observers' refusal shortcuts"
            ] += 1
        if on_refusal and granted_pre_vote:
            self.stats["pre-votes granted on a refusal"] += 1
            self.check_evidence(node, node.leader_id, leaders, "granted a pre-vote")
        campaigns = role is Role.PROSPECTIVE and node.role in (Role.CANDIDATE, Role.LEADER)
        if campaigns and self.shortcut_epoch.get(node.node_id) == node.epoch - 1:
            self.stats["elections after a refusal shortcut"] += 1
            self.check_election(node, leaders, now)
        if node.role is not Role.PROSPECTIVE:
            self.shortcut_epoch.pop(node.node_id, None)

    def check_evidence(
        self, node: RaftNode, leader_id: int, leaders: dict[int, RaftNode], what: str
    ) -> None:
        leader = leaders.get(leader_id)
        if leader is not None and leader.epoch == node.epoch:
            raise InvariantError(
                f"node {node.node_id} {what} on a refused connection to leader {leader_id} "
                f"of epoch {node.epoch}, whose process lives and leads"
            )

    def check_election(self, node: RaftNode, leaders: dict[int, RaftNode], now: int) -> None:
        epoch = node.epoch - 1
        for leader in leaders.values():
            ls = leader.leader_state
            if leader.epoch != epoch or ls is None:
                continue
            if ls.voters_active_since(now - self.fetch_timeout_ms) >= self.majority:
                raise InvariantError(
                    f"node {node.node_id} campaigns in epoch {node.epoch} after a refused-"
                    f"connection shortcut while leader {leader.node_id} of epoch {epoch} "
                    "lives and holds the quorum"
                )


# --- deliberately broken rules (tests/simulation: each must make the simulation fail) -----
def _timeout_is_refusal(exc: BaseException) -> bool:
    # a request that timed out taken as refused (a pause or a partition then looks like death)
    return isinstance(exc, ConnectionRefusedError | TimeoutError)


def _refusal_without_confirmation(
    refusal: refusals.Refusal,
    *,
    epoch: int,
    leader_id: int,
    last_contact_ms: int,
    answered: object,
) -> bool:
    # a refusal counts even from an endpoint that never answered this process
    return (
        refusal.leader_id == leader_id >= 0
        and refusal.epoch == epoch
        and (refusal.sent_ms > last_contact_ms)
    )


#: name -> (owner, attribute, replacement) for ``monkeypatch.setattr``.
BROKEN_REFUSAL_RULES: dict[str, tuple[object, str, object]] = {
    "timeout-is-refusal": (raft_driver, "is_refusal", _timeout_is_refusal),
    "refusal-without-confirmation": (
        raft_node,
        "refusal_proves_leader_gone",
        _refusal_without_confirmation,
    ),
}
