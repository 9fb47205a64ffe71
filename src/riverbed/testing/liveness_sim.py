"""Seeded simulation of the controller's broker liveness (`riverbed.metadata.broker_liveness`):
does the early fence ever fence a broker whose process lives?

One seed: 3-5 brokers, two controller seats on brokers 1 and 2 (combined nodes: the active
one runs `BrokerLiveness` as `QuorumMetadata._track_liveness` / `_fence_expired` do, every
``POLL_MS``; the standby observes and confirms endpoints). Over ``duration_ms`` the chaos
draws, per broker and at random times:

- pauses (SIGSTOP) of up to twice the session: no messages, but the host's kernel still
  completes TCP connections to its listener (a probe is *accepted*);
- partitions of up to twice the session, both ways or one way: the broker's messages are
  lost (both ways, broker->controller) or arrive (controller->broker), a probe gets no
  answer (a partition drops packets);
- slow links: messages arrive up to ``SLOW_DELAY_MAX_MS`` late;
- deaths (SIGKILL): nothing more is sent; a probe is refused (the host lives) or gets no
  answer (the host is down too); a restart after a while listens again (a probe is
  accepted) and registers a new incarnation (a new broker epoch);
- an endpoint advertised for outside clients that refuses from inside (one broker in
  some seeds): its probes are refused while the broker lives;
- controller pauses, and controller fail-overs (the active seat's node dies, or leadership
  just moves): the new active seat learns when it last heard from the old one; a dead
  seat whose host lives is replaced within ``FAST_TAKEOVER_MS`` (its quorum peers'
  reconnects are refused), so the new seat probes its broker before it is long silent.

Invariants, checked at each fence: an early fence ("its process is gone") is only ever of
an incarnation that is dead; a session fence only of a broker with no heartbeat delivered
within the session. Liveness: a dead broker whose host refuses is fenced early (a seed
counts those that were), so passing is not vacuous. Coverage floors (tests/simulation)
keep the chaos reaching every path, and the deliberately broken rules of
``BROKEN_LIVENESS_RULES`` must each be caught.

A failure raises ``SimulationFailure`` whose message starts with the replay command:
``python -m riverbed.testing.liveness_sim --seed N``.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from riverbed.metadata import broker_liveness as bl
from riverbed.metadata.broker_liveness import BrokerLiveness, LivenessConfig, Probe
from riverbed.testing.sim_seeds import add_seed_options, chosen_seeds

#: How often the controller loop runs (write_forwarding.CONTROLLER_POLL_S).
POLL_MS = 50
#: A live broker's metadata fetch arrives at most this long after the previous one.
FETCH_EVERY_MS = 500
SLOW_DELAY_MAX_MS = 3000
#: A controller seat's node died with its host: the other takes over after the quorum's
#: fetch timeout.
TAKEOVER_MS = 2500
#: ... with its host up: the survivors' reconnects are refused, the other takes over at
#: once (riverbed.raft.refusals), before the old seat's broker has been silent long.
FAST_TAKEOVER_MS = (30, 300)


class SimulationFailure(AssertionError):
    pass


@dataclass(frozen=True)
class SimParams:
    seed: int
    brokers: int = 3
    session_ms: int = 2000
    heartbeat_ms: int = 500
    duration_ms: int = 60_000

    def replay_command(self) -> str:
        return f".venv/bin/python -m riverbed.testing.liveness_sim --seed {self.seed}"


def params_for(seed: int) -> SimParams:
    rng = random.Random(seed)
    session = rng.choice([2000, 4000, 9000])
    return SimParams(seed, rng.randint(3, 5), session, rng.choice([250, 500, session // 4]))


@dataclass
class _Broker:
    broker_id: int
    epoch: int = 1
    dead_since: int = -1  # -1: the process lives
    host_down: bool = False
    paused_until: int = -1
    cut_until: int = -1  # a partition
    one_way: bool = False  # only controller->broker is cut: its messages still arrive
    slow_until: int = -1
    misadvertised: bool = False
    last_heartbeat_in: int = -(10**9)  # when a heartbeat last reached the active seat

    def alive(self) -> bool:
        return self.dead_since < 0

    def sends(self, now: int) -> bool:
        return self.alive() and now >= self.paused_until

    def delivered(self, now: int) -> bool:
        return now >= self.cut_until or self.one_way


@dataclass(order=True)
class _Event:
    at: int
    order: int
    run: Callable[[], None] = field(compare=False)


class LivenessSim:
    def __init__(self, p: SimParams) -> None:
        self.p = p
        self.rng = random.Random(p.seed)
        self.now = 0
        self.events: list[_Event] = []
        self._order = 0
        self.stats: Counter[str] = Counter()
        self.trace: list[str] = []
        self.brokers = {i: _Broker(i) for i in range(1, p.brokers + 1)}
        if self.rng.random() < 0.3:
            self.brokers[p.brokers].misadvertised = True
        config = LivenessConfig(session_timeout_ms=p.session_ms)
        self.seats = {1: BrokerLiveness(config), 2: BrokerLiveness(config)}
        self.active = 1  # seat (= node) id of the active controller, -1 during a takeover
        self.controller_paused_until = -1
        self.fenced: dict[int, int] = {}  # broker id -> fenced epoch
        self.deaths_refusing: set[tuple[int, int]] = set()  # (broker, epoch) dead, host up
        self.lost_seat = (-1, 0)  # (seat, last heard) the active seat took over from

    # --- plumbing -----------------------------------------------------------------------
    def at(self, when: int, run: Callable[[], None]) -> None:
        self._order += 1
        heapq.heappush(self.events, _Event(when, self._order, run))

    def note(self, what: str) -> None:
        self.trace.append(f"{self.now:>6} {what}")
        del self.trace[:-40]

    def fail(self, what: str) -> None:
        trace = "\n".join(self.trace)
        raise SimulationFailure(f"replay: {self.p.replay_command()}\n{what}\nlast events:\n{trace}")

    def registrations(self) -> dict[int, int]:
        return {b.broker_id: b.epoch for b in self.brokers.values()}

    # --- brokers ------------------------------------------------------------------------
    def send(self, b: _Broker, heartbeat: bool) -> None:
        """A fetch (or heartbeat) of ``b`` that may reach the active seat."""
        epoch = b.epoch
        if not b.sends(self.now) or not b.delivered(self.now):
            return
        delay = self.rng.randint(1, 20)
        if self.now < b.slow_until:
            delay = self.rng.randint(1, SLOW_DELAY_MAX_MS)

        def arrive() -> None:
            seat = self.seats.get(self.active)
            if seat is None:
                return  # no active controller: the broker tries again later
            if self.now < self.controller_paused_until:
                # a paused controller reads it when it resumes
                self.at(self.controller_paused_until + self.rng.randint(0, 20), arrive)
                return
            if heartbeat:
                seat.heartbeat(b.broker_id, epoch, self.now)
                if epoch == b.epoch:
                    b.last_heartbeat_in = self.now
                    if self.fenced.get(b.broker_id) == epoch:
                        del self.fenced[b.broker_id]  # unfenced by its heartbeat
                        self.stats["unfenced"] += 1
            else:
                seat.heard(b.broker_id, self.now)

        self.at(self.now + delay, arrive)

    def broker_loop(self, b: _Broker, heartbeat: bool) -> None:
        self.send(b, heartbeat)
        every = self.p.heartbeat_ms if heartbeat else self.rng.randint(10, FETCH_EVERY_MS)
        self.at(self.now + every, lambda: self.broker_loop(b, heartbeat))

    def probe_outcome(self, b: _Broker, epoch: int) -> Probe:
        if not b.alive():
            return Probe.NO_ANSWER if b.host_down else Probe.REFUSED
        if b.misadvertised:
            return Probe.REFUSED
        if self.now < b.cut_until:
            return Probe.NO_ANSWER  # dropped, both ways or one way
        return Probe.ACCEPTED  # paused or slow: the kernel still accepts

    # --- the controller -----------------------------------------------------------------
    def controller_loop(self) -> None:
        self.at(self.now + POLL_MS, self.controller_loop)
        if self.now < self.controller_paused_until:
            return
        regs = self.registrations()
        for seat_id, seat in self.seats.items():
            if not self.brokers[seat_id].alive():
                continue
            seat.observe(regs, self.now)
            active = seat_id == self.active
            unfenced = [i for i in regs if self.fenced.get(i) != regs[i] and i != seat_id]
            for broker_id, epoch in seat.to_probe(unfenced, self.now, active=active):
                self.stats["probes"] += 1
                self.start_probe(seat, broker_id, epoch)
            if active:
                for broker_id, why in seat.to_fence(unfenced, self.now):
                    self.fence(broker_id, why)

    def start_probe(self, seat: BrokerLiveness, broker_id: int, epoch: int) -> None:
        b = self.brokers[broker_id]
        took = self.rng.randint(1, 30)
        outcome_at = self.now + took

        def done() -> None:
            outcome = self.probe_outcome(b, epoch)
            if outcome is Probe.NO_ANSWER:
                self.at(self.now + bl.PROBE_TIMEOUT_MS - took, lambda: answer(outcome))
            else:
                answer(outcome)

        def answer(outcome: Probe) -> None:
            self.stats[f"probe {outcome.value}"] += 1
            seat.probed(broker_id, epoch, outcome)

        self.at(outcome_at, done)

    def fence(self, broker_id: int, why: str) -> None:
        b = self.brokers[broker_id]
        epoch = b.epoch
        self.note(f"fence {broker_id} epoch {epoch}: {why}")
        self.fenced[broker_id] = epoch
        if "process is gone" in why:
            self.stats["early fences"] += 1
            seat, last_heard = self.lost_seat
            if broker_id == seat and self.now - last_heard < bl.PROBE_AFTER_MS:
                self.stats["lost controllers fenced before the silence rule"] += 1
            if b.alive():
                self.fail(f"broker {broker_id} fenced early while its process lives: {why}")
            self.deaths_refusing.discard((broker_id, epoch))
        else:
            self.stats["session fences"] += 1
            if self.now - b.last_heartbeat_in <= self.p.session_ms:
                self.fail(f"broker {broker_id} fenced with a heartbeat within the session")

    # --- chaos --------------------------------------------------------------------------
    def chaos(self) -> None:
        self.at(self.now + self.rng.randint(200, 3000), self.chaos)
        b = self.rng.choice(list(self.brokers.values()))
        span = self.rng.randint(100, 2 * self.p.session_ms)
        roll = self.rng.random()
        if not b.alive():
            return
        if roll < 0.2:
            b.paused_until = self.now + span
            self.stats["pauses"] += 1
            self.note(f"pause {b.broker_id} for {span}")
            if b.broker_id == self.active:  # the controller is that process too
                self.controller_paused_until = max(self.controller_paused_until, b.paused_until)
        elif roll < 0.4:
            b.cut_until, b.one_way = self.now + span, self.rng.random() < 0.3
            self.stats["partitions one way" if b.one_way else "partitions"] += 1
            self.note(f"partition {b.broker_id} for {span} one way {b.one_way}")
        elif roll < 0.5:
            b.slow_until = self.now + span
            self.stats["slow links"] += 1
        elif roll < 0.65:
            self.kill(b)
        elif roll < 0.72:
            self.controller_paused_until = self.now + span
            self.stats["controller pauses"] += 1
            self.note(f"controller pause for {span}")
        elif roll < 0.8 and self.active > 0:
            self.takeover(self.active)

    def kill(self, b: _Broker) -> None:
        b.dead_since, b.host_down = self.now, self.rng.random() < 0.2
        self.stats["deaths"] += 1
        self.note(f"kill {b.broker_id} epoch {b.epoch} host down {b.host_down}")
        if not b.host_down and not b.misadvertised and self.fenced.get(b.broker_id) != b.epoch:
            self.deaths_refusing.add((b.broker_id, b.epoch))
        if b.broker_id == self.active:
            self.takeover(b.broker_id)
        self.at(self.now + self.rng.randint(1000, 3 * self.p.session_ms), lambda: self.restart(b))

    def restart(self, b: _Broker) -> None:
        b.dead_since, b.host_down = -1, False
        b.paused_until = b.cut_until = b.slow_until = -1
        if (b.broker_id, b.epoch) in self.deaths_refusing:
            self.stats["dead brokers not fenced early"] += 1
        b.epoch += 1  # registers anew: a new incarnation
        b.last_heartbeat_in = self.now
        self.deaths_refusing = {d for d in self.deaths_refusing if d[0] != b.broker_id}
        self.stats["restarts"] += 1
        self.note(f"restart {b.broker_id} as epoch {b.epoch}")
        if b.broker_id in self.seats:  # a new process: it knows nothing of the others
            self.seats[b.broker_id] = BrokerLiveness(self.seats[b.broker_id].config)
            self.seats[b.broker_id].observe(self.registrations(), self.now)
        for seat in self.seats.values():
            seat.registered(b.broker_id, b.epoch, self.now)

    def takeover(self, old: int) -> None:
        """The other seat becomes active (after the quorum's fetch timeout when ``old``
        died), knowing when it last heard from ``old``."""
        new = 2 if old == 1 else 1
        last_heard = self.now
        self.active = -1
        self.stats["controller fail-overs"] += 1

        def activate() -> None:
            if not self.brokers[new].alive():
                self.at(self.now + TAKEOVER_MS, activate)  # no quorum yet
                return
            self.active = new
            self.lost_seat = (old, last_heard)
            self.seats[new].activate(self.now, {old: last_heard})
            for b in self.brokers.values():
                b.last_heartbeat_in = max(b.last_heartbeat_in, self.now)  # leases restart
            self.note(f"seat {new} active (last heard from {old} at {last_heard})")

        b = self.brokers[old]
        if b.alive():
            takes = self.rng.randint(50, 500)  # leadership just moves
        elif b.host_down:
            takes = TAKEOVER_MS
        else:
            takes = self.rng.randint(*FAST_TAKEOVER_MS)
            self.stats["fast controller fail-overs"] += 1
        self.at(self.now + takes, activate)

    # --- run ----------------------------------------------------------------------------
    def run(self) -> LivenessSim:
        for b in self.brokers.values():
            for seat in self.seats.values():
                seat.registered(b.broker_id, b.epoch, 0)
            self.at(self.rng.randint(0, self.p.heartbeat_ms), partial(self.broker_loop, b, True))
            self.at(self.rng.randint(0, FETCH_EVERY_MS), partial(self.broker_loop, b, False))
        self.seats[1].activate(0, {})
        self.at(POLL_MS, self.controller_loop)
        self.at(self.rng.randint(2000, 4000), self.chaos)
        while self.events and self.events[0].at <= self.p.duration_ms:
            event = heapq.heappop(self.events)
            self.now = event.at
            event.run()
        self.stats["seeds"] += 1
        return self


def run_seed(p: SimParams) -> LivenessSim:
    return LivenessSim(p).run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_seed_options(ap, seeds_default=1)
    args = ap.parse_args(argv)
    stats: Counter[str] = Counter()
    failed = 0
    seeds = chosen_seeds(args)
    for seed in seeds:
        try:
            stats.update(run_seed(params_for(seed)).stats)
        except SimulationFailure as exc:
            failed += 1
            print(exc)
    print(f"{len(seeds) - failed}/{len(seeds)} seeds passed; {dict(sorted(stats.items()))}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())


# --- deliberately broken rules (tests/simulation: each must make the simulation fail) -----
_probed = BrokerLiveness.probed


def _no_answer_is_refusal(self: BrokerLiveness, broker_id: int, epoch: int, outcome: Probe) -> None:
    # a probe that timed out taken as the host refusing (a partition then looks like death)
    _probed(self, broker_id, epoch, Probe.REFUSED if outcome is Probe.NO_ANSWER else outcome)


def _refusal_without_confirmation(self: BrokerLiveness, b: bl._Broker) -> bool:
    # a refusal counts even from an endpoint no probe ever reached
    return b.refused_ms > b.contact_ms


def _silence_alone(self: BrokerLiveness, b: bl._Broker) -> bool:
    # silence long enough to be probed is taken as death, whatever the probe answers
    return b.probe_started_ms > b.contact_ms and not b.probing


#: name -> (owner, attribute, replacement) for ``monkeypatch.setattr``.
BROKEN_LIVENESS_RULES: dict[str, tuple[object, str, object]] = {
    "no-answer-is-refusal": (BrokerLiveness, "probed", _no_answer_is_refusal),
    "refusal-without-confirmation": (BrokerLiveness, "_gone", _refusal_without_confirmation),
    "silence-alone": (BrokerLiveness, "_gone", _silence_alone),
}
