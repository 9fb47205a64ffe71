"""The active controller's broker liveness: Kafka's sessions and the early fence of a broker
whose process is gone (silence, then a refused probe of an endpoint known to reach it)."""

from __future__ import annotations

from riverbed.metadata.broker_liveness import (
    CONFIRM_EVERY_MS,
    PROBE_AFTER_MS,
    PROBE_EVERY_MS,
    BrokerLiveness,
    LivenessConfig,
    Probe,
)

SESSION_MS = 9000


def active(**kw: object) -> BrokerLiveness:
    live = BrokerLiveness(LivenessConfig(session_timeout_ms=SESSION_MS, **kw))  # type: ignore[arg-type]
    live.observe({1: 10, 2: 20}, now_ms=0)
    live.activate(0, {})
    if live.config.early_fence:  # both endpoints confirmed as reaching the brokers
        assert live.to_probe([1, 2], 0, active=True) == [(1, 10), (2, 20)]
        live.probed(1, 10, Probe.ACCEPTED)
        live.probed(2, 20, Probe.ACCEPTED)
    return live


def test_session_expires_without_heartbeat() -> None:
    live = active(early_fence=False)
    live.heartbeat(2, 20, 5000)
    assert live.to_fence([1, 2], SESSION_MS) == []
    fenced = live.to_fence([1, 2], SESSION_MS + 1)
    assert [b for b, _ in fenced] == [1]
    assert live.session_live(2, SESSION_MS + 1) and not live.session_live(1, SESSION_MS + 1)


def test_a_new_controller_starts_every_lease_afresh() -> None:
    live = active(early_fence=False)
    live.activate(50_000, {})
    assert live.to_fence([1, 2], 50_000 + SESSION_MS) == []


def test_silent_broker_whose_endpoint_refuses_is_fenced_early() -> None:
    live = active()
    t = PROBE_EVERY_MS  # a probe at most every PROBE_EVERY_MS (the confirmation was at 0)
    live.heard(2, t - 100)
    assert live.to_probe([1, 2], t - 1, active=True) == []
    assert live.to_probe([1, 2], t, active=True) == [(1, 10)]  # 2 was heard from
    live.probed(1, 10, Probe.REFUSED)
    assert [b for b, _ in live.to_fence([1, 2], t + 5)] == [1]


def test_no_answer_and_accepted_probes_fence_nobody() -> None:
    live = active()
    t = PROBE_EVERY_MS
    assert live.to_probe([1, 2], t, active=True) == [(1, 10), (2, 20)]
    live.probed(1, 10, Probe.NO_ANSWER)  # partitioned
    live.probed(2, 20, Probe.ACCEPTED)  # paused: its kernel still accepts
    assert live.to_fence([1, 2], t + 5) == []


def test_contact_after_the_probe_started_makes_a_refusal_stale() -> None:
    live = active()
    t = PROBE_EVERY_MS
    assert live.to_probe([1], t, active=True) == [(1, 10)]
    live.heard(1, t + 1)
    live.probed(1, 10, Probe.REFUSED)
    assert live.to_fence([1], t + 5) == []


def test_refusal_counts_only_for_an_endpoint_once_reached() -> None:
    live = BrokerLiveness(LivenessConfig(session_timeout_ms=SESSION_MS))
    live.observe({1: 10}, 0)
    live.activate(0, {})
    assert live.to_probe([1], 0, active=True) == [(1, 10)]
    live.probed(1, 10, Probe.REFUSED)  # e.g. an address advertised for outside clients
    assert live.to_fence([1], PROBE_AFTER_MS * 2) == []
    # not probed again before CONFIRM_EVERY_MS
    assert live.to_probe([1], PROBE_AFTER_MS * 2, active=True) == []
    assert live.to_probe([1], CONFIRM_EVERY_MS, active=True) == [(1, 10)]


def test_a_standby_only_confirms_endpoints_and_a_new_controller_probes_the_silent() -> None:
    live = BrokerLiveness(LivenessConfig(session_timeout_ms=2000))
    live.observe({1: 10, 2: 20}, 0)
    assert live.to_probe([1, 2], 0, active=False) == [(1, 10), (2, 20)]
    live.probed(1, 10, Probe.ACCEPTED)
    live.probed(2, 20, Probe.ACCEPTED)
    assert live.to_probe([1, 2], 10_000, active=False) == []  # silence means nothing here
    # node 1 was the previous controller, last heard from at 9_000; activation at 12_000
    live.activate(12_000, {1: 9_000})
    assert live.to_probe([1, 2], 12_000, active=True) == [(1, 10)]
    live.probed(1, 10, Probe.REFUSED)
    assert [b for b, _ in live.to_fence([1, 2], 12_010)] == [1]


def test_a_controller_elected_at_once_probes_the_lost_leaders_broker_at_once() -> None:
    # a refused reconnect elects the new quorum leader ~0.1 s after the old one died
    # (riverbed.raft.refusals): its broker has not been silent for PROBE_AFTER_MS yet, but
    # it is the one whose death is likely; before, it was probed only PROBE_AFTER_MS after
    # the last contact, the fence came ~0.7 s later than it could
    live = BrokerLiveness(LivenessConfig(session_timeout_ms=2000))
    live.observe({1: 10, 2: 20}, 0)
    live.to_probe([1, 2], 0, active=False)
    live.probed(1, 10, Probe.ACCEPTED)
    live.probed(2, 20, Probe.ACCEPTED)
    live.activate(12_100, {1: 12_000})  # heard from node 1 100 ms ago
    assert live.to_probe([1, 2], 12_100, active=True) == [(1, 10)]
    live.probed(1, 10, Probe.REFUSED)
    assert [b for b, _ in live.to_fence([1, 2], 12_110)] == [1]
    # once only: a live broker's accepted probe puts it back under the silence rule
    live.activate(20_100, {2: 20_000})
    assert live.to_probe([1, 2], 20_100, active=True) == [(2, 20)]
    live.probed(2, 20, Probe.ACCEPTED)
    assert live.to_probe([1, 2], 20_200, active=True) == []
    assert [b for b, _ in live.to_fence([1, 2], 20_200)] == []


def test_a_probe_of_a_previous_incarnation_is_ignored() -> None:
    live = active()
    t = PROBE_EVERY_MS
    assert live.to_probe([1], t, active=True) == [(1, 10)]
    live.observe({1: 11, 2: 20}, t + 1)  # registered again meanwhile
    live.probed(1, 10, Probe.REFUSED)
    assert live.to_fence([1, 2], t + 2) == []
