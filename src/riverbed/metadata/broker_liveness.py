"""The active controller's view of which brokers are alive: sessions, and an early fence
for a broker whose process is gone (sans-I/O: times are the caller's monotonic ``now_ms``).

Sessions are Kafka's (``BrokerHeartbeatManager``): "The length of time in milliseconds that
a broker lease lasts if no heartbeats are made" (``broker.session.timeout.ms``); a broker
whose last heartbeat is older is fenced. As in Kafka the lease lives in memory only, and a
newly active controller starts every lease afresh (`activate`): it cannot know when the
brokers last heartbeated to its predecessor.

Beyond Kafka (issue 23): waiting out a whole session for a broker whose *process* died
leaves its partitions without a leader for that long. A connection that closed, or a
broker that went quiet, is no proof of death: a partition or a long pause looks the same
from here. The proof used is the broker's own host answering that nothing listens where
the broker registered: a TCP connection to its registered endpoint *refused* (the host's
kernel resets it). A paused broker's listening socket still completes connections (the
kernel does it), a partition drops packets (no answer, never a refusal), so neither is
fenced early. The rule, all of it required:

1. nothing heard from the broker (a heartbeat, or its fetch of the metadata log) for
   ``probe_after_ms`` (its long-polled metadata fetch arrives every few hundred ms while it
   lives) -- only then is it probed (`to_probe`), once per ``probe_every_ms``; or, on a
   newly active controller, the broker of the quorum leader it followed: silent since, it
   is probed at once (`activate`; a refused reconnect makes a controller fail-over take
   ~0.1 s, `riverbed.raft.refusals`, so the silence has not reached ``probe_after_ms``).
   The silence only spares live brokers probes; the next two rules decide;
2. the probe of its current registration (same broker epoch) was refused, and nothing was
   heard from the broker since that probe started (a later contact makes it stale);
3. an earlier probe of the same registration was accepted: the endpoint is known to reach
   the broker from here (an advertised address that refuses from inside the cluster, e.g.
   one meant for clients behind NAT, never counts).

Assumptions (`riverbed.testing.liveness_sim` models them and breaks the rule's parts):
nothing between the controller and a live broker answers for it with a reset (a firewall
that REJECTs with tcp-reset would turn a partition into a refusal), and a live broker's
listener stays open until it stops (a broker that closes it is shutting down, and a
restarted one registers again, which fences its previous incarnation anyway).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Silence (ms) after which a broker's registered endpoint is probed.
PROBE_AFTER_MS = 750
#: Least time (ms) between two probes of one broker.
PROBE_EVERY_MS = 1000
#: Least time (ms) between two probes of an endpoint no probe has reached yet.
CONFIRM_EVERY_MS = 30_000
#: Longest wait (ms) for a probe's TCP connection: no answer in time is no answer.
PROBE_TIMEOUT_MS = 1000


class Probe(enum.Enum):
    """A probe's outcome: a TCP connection to the broker's registered endpoint."""

    ACCEPTED = "accepted"  # something listens there
    REFUSED = "refused"  # the host answered: nothing listens there
    NO_ANSWER = "no answer"  # timed out or unreachable: tells nothing


@dataclass(frozen=True)
class LivenessConfig:
    session_timeout_ms: int
    early_fence: bool = True
    probe_after_ms: int = PROBE_AFTER_MS
    probe_every_ms: int = PROBE_EVERY_MS


@dataclass
class _Broker:
    epoch: int
    heartbeat_ms: int  # the lease: last heartbeat (or the session's start)
    contact_ms: int  # last thing heard from it (heartbeat or metadata fetch)
    probe_started_ms: int = -1  # the probe in flight or last answered
    probing: bool = False
    reachable: bool = False  # a probe of this registration was accepted
    refused_ms: int = -1  # start of a refused probe, if no contact since
    probe_now: bool = False  # the lost quorum leader's broker: probed without the silence


class BrokerLiveness:
    """Per registered broker: its lease, its last contact, its probes."""

    def __init__(self, config: LivenessConfig) -> None:
        self.config = config
        self._brokers: dict[int, _Broker] = {}

    def observe(self, brokers: Mapping[int, int], now_ms: int) -> None:
        """The registered brokers (id -> broker epoch) as the image has them, on every
        voter, active or not: what is known of a registration's endpoint outlives a change
        of controller (a standby confirms endpoints too, `to_probe`)."""
        for broker_id, epoch in brokers.items():
            self.registered(broker_id, epoch, now_ms)
        for gone in set(self._brokers) - set(brokers):
            del self._brokers[gone]

    def activate(self, now_ms: int, heard_ms: Mapping[int, int]) -> None:
        """This node became the active controller: every lease starts now (Kafka);
        ``heard_ms`` is when this node last heard from some brokers (as a follower, from the
        previous quorum leader): a broker silent since then is probed at once."""
        for broker_id, b in self._brokers.items():
            b.heartbeat_ms = now_ms
            b.contact_ms = min(now_ms, heard_ms.get(broker_id, now_ms))
            b.refused_ms = -1
            b.probe_now = b.contact_ms < now_ms

    def registered(self, broker_id: int, epoch: int, now_ms: int) -> None:
        """A registration (a new incarnation): a new lease, nothing known of its endpoint."""
        old = self._brokers.get(broker_id)
        if old is not None and old.epoch == epoch:
            return
        self._brokers[broker_id] = _Broker(epoch, now_ms, now_ms)

    def heartbeat(self, broker_id: int, epoch: int, now_ms: int) -> None:
        b = self._brokers.get(broker_id)
        if b is None or b.epoch != epoch:
            self.registered(broker_id, epoch, now_ms)
            return
        b.heartbeat_ms = max(b.heartbeat_ms, now_ms)
        self.heard(broker_id, now_ms)

    def heard(self, broker_id: int, at_ms: int) -> None:
        """Proof of life at ``at_ms`` (a heartbeat, or a metadata fetch it sent)."""
        b = self._brokers.get(broker_id)
        if b is not None and at_ms > b.contact_ms:
            b.contact_ms = at_ms
            if b.refused_ms >= 0 and at_ms >= b.refused_ms:
                b.refused_ms = -1

    def to_probe(
        self, unfenced: Iterable[int], now_ms: int, *, active: bool
    ) -> list[tuple[int, int]]:
        """(broker id, epoch) of the brokers to probe now, each marked as probing: on the
        active controller the silent ones; on any voter the registrations whose endpoint
        no probe has reached yet (at most every ``CONFIRM_EVERY_MS``)."""
        if not self.config.early_fence:
            return []
        out = []
        for broker_id in unfenced:
            b = self._brokers.get(broker_id)
            if b is None or b.probing:
                continue
            since = now_ms - b.probe_started_ms if b.probe_started_ms >= 0 else None
            if not b.reachable:
                due = since is None or since >= CONFIRM_EVERY_MS
            else:
                silent = now_ms - b.contact_ms >= self.config.probe_after_ms
                spaced = since is None or since >= self.config.probe_every_ms
                due = active and (b.probe_now or (silent and spaced))
            if due:
                b.probing, b.probe_started_ms = True, now_ms
                out.append((broker_id, b.epoch))
        return out

    def probed(self, broker_id: int, epoch: int, outcome: Probe) -> None:
        """A probe started by `to_probe` ended (of registration ``epoch``)."""
        b = self._brokers.get(broker_id)
        if b is None or b.epoch != epoch or not b.probing:
            return  # registered again since: that probe was of another incarnation
        b.probing = False
        b.probe_now = False
        if outcome is Probe.ACCEPTED:
            b.reachable = True
        elif outcome is Probe.REFUSED and b.contact_ms < b.probe_started_ms:
            b.refused_ms = b.probe_started_ms

    def to_fence(self, unfenced: Iterable[int], now_ms: int) -> list[tuple[int, str]]:
        """(broker id, why) of every unfenced broker to fence now."""
        out = []
        for broker_id in unfenced:
            b = self._brokers.get(broker_id)
            if b is None:
                continue
            if now_ms - b.heartbeat_ms > self.config.session_timeout_ms:
                out.append((broker_id, f"no heartbeat for {now_ms - b.heartbeat_ms} ms"))
            elif self._gone(b):
                out.append(
                    (broker_id, f"its process is gone: silent {now_ms - b.contact_ms} ms, "
                     "its registered endpoint refuses connections")
                )  # fmt: skip
        return out

    def _gone(self, b: _Broker) -> bool:
        return self.config.early_fence and b.reachable and b.refused_ms > b.contact_ms

    def session_live(self, broker_id: int, now_ms: int) -> bool:
        """Is the broker's lease (its last heartbeat within the session) still running? (A
        registration not seen yet starts its lease now.)"""
        b = self._brokers.get(broker_id)
        if b is None:
            return True
        return now_ms - b.heartbeat_ms <= self.config.session_timeout_ms

    def forget(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)
