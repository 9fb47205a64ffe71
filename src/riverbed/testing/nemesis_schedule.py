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


@dataclass(frozen=True)
class Fault:
    """One fault: after ``quiet_s`` undisturbed seconds, ``kind`` on ``target`` for
    ``hold_s`` seconds; ``pick`` chooses the node when the target is ``any``."""

    quiet_s: float
    kind: FaultKind
    target: FaultTarget
    hold_s: float
    pick: int = 0

    def __post_init__(self) -> None:
        assert self.quiet_s >= 0 and self.hold_s >= 0, self
        assert self.kind in FAULT_KINDS and self.target in FAULT_TARGETS, self

    def describe(self) -> str:
        return f"{self.kind} {self.target} for {self.hold_s:.1f} s after {self.quiet_s:.1f} s"


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
        faults.append(Fault(quiet, kind, target, hold, rng.randrange(1 << 30)))
        elapsed += quiet + hold
    return faults


def pick_node(fault: Fault, nodes: list[int], leader: int, controller: int) -> int:
    """The node ``fault`` hits, given the cluster's nodes and who leads now (-1: unknown,
    then the node is picked as for ``any``)."""
    assert nodes, "no node to hit"
    wanted = {"leader": leader, "controller": controller}.get(fault.target, -1)
    if wanted in nodes:
        return wanted
    return sorted(nodes)[fault.pick % len(nodes)]
