"""The fault schedule of a nemesis run (`riverbed.testing.nemesis`): which process fault
comes when, drawn from a seed so that a failing run's faults can be replayed.

A schedule is a list of `Fault`, applied one after another: wait ``quiet_s`` (the
cluster serves undisturbed), inject the fault on its target, hold it ``hold_s``, heal it,
wait until the node serves again, then the next one. Faults never overlap, so with
replication factor 3 and ``min.insync.replicas`` 2 at most one replica is away at a time
and every acknowledged write must survive; the holds are drawn around the session
timeout, so that some pauses fence the paused broker and some do not.

The kinds (what a supervisor and an operator do to a node, as Jepsen's nemeses do):

- ``kill``: SIGKILL (a crash: nothing flushed, an unclean shutdown), restarted after the
  hold on the same data;
- ``pause``: SIGSTOP, SIGCONT after the hold (a node that is slow, not dead: a long GC,
  a stalled VM; it must come back without a restart and never act on stale state);
- ``term``: SIGTERM (a controlled shutdown), restarted after the hold.

The targets: ``leader`` (the leader of partition 0 of the nemesis topic at that moment),
``controller`` (the active controller), ``any`` (a node picked by ``pick`` among all).
One fault in `WIDE_ONE_IN` hits two nodes at once (``width`` 2: the target and another
picked one): two replicas away leave a partition one in-sync replica, below
``min.insync.replicas``, so writes wait; two voters away leave the quorum without a
majority. Acknowledged writes must still survive, and the cluster must serve again once
they are back. (Never all three: a SIGKILL is an unclean shutdown, and a partition whose
last in-sync replica restarts uncleanly stays leaderless until an unclean election is
asked for, by design: `riverbed.metadata.partition_control`.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal["kill", "pause", "term"]
FaultTarget = Literal["leader", "controller", "any"]

FAULT_KINDS: tuple[FaultKind, ...] = ("kill", "pause", "term")
FAULT_TARGETS: tuple[FaultTarget, ...] = ("leader", "controller", "any")

#: Undisturbed time before each fault.
QUIET_S_MIN = 1.0
QUIET_S_MAX = 5.0
#: How long a fault is held: around a test cluster's 3 s session timeout.
HOLD_S_MIN = 0.5
HOLD_S_MAX = 6.0
#: Faults in one schedule at most (a run's length bounds it long before this).
FAULTS_MAX = 10_000
#: One fault in this many hits two nodes at once.
WIDE_ONE_IN = 4


@dataclass(frozen=True)
class Fault:
    """One fault: after ``quiet_s`` undisturbed seconds, ``kind`` on ``target`` for
    ``hold_s`` seconds; ``pick`` chooses the node when the target is ``any``."""

    quiet_s: float
    kind: FaultKind
    target: FaultTarget
    hold_s: float
    pick: int = 0
    #: nodes hit at once: 1, or 2 (the target and a picked other)
    width: int = 1

    def __post_init__(self) -> None:
        assert self.quiet_s >= 0 and self.hold_s >= 0, self
        assert self.kind in FAULT_KINDS and self.target in FAULT_TARGETS, self
        assert self.width in (1, 2), self


def fault_schedule(seed: int, seconds: float) -> list[Fault]:
    """The faults of a run of about ``seconds`` (quiet and hold times add up to it; the
    restarts in between make the real run longer), the same for the same seed."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    elapsed = 0.0
    while len(faults) < FAULTS_MAX:
        quiet = round(rng.uniform(QUIET_S_MIN, QUIET_S_MAX), 3)
        hold = round(rng.uniform(HOLD_S_MIN, HOLD_S_MAX), 3)
        if elapsed + quiet + hold > seconds:
            break
        kind = rng.choice(FAULT_KINDS)
        target = rng.choice(FAULT_TARGETS)
        width = 2 if rng.randrange(WIDE_ONE_IN) == 0 else 1
        faults.append(Fault(quiet, kind, target, hold, rng.randrange(1 << 30), width))
        elapsed += quiet + hold
    return faults


def pick_nodes(fault: Fault, nodes: list[int], leader: int, controller: int) -> list[int]:
    """The nodes ``fault`` hits, its target first, given the cluster's nodes and who
    leads now (-1: unknown, then the target is picked as for ``any``)."""
    assert len(nodes) > fault.width, "a fault must leave a node up"
    ordered = sorted(nodes)
    wanted = {"leader": leader, "controller": controller}.get(fault.target, -1)
    first = wanted if wanted in nodes else ordered[fault.pick % len(ordered)]
    if fault.width == 1:
        return [first]
    others = [n for n in ordered if n != first]
    return [first, others[fault.pick % len(others)]]
