"""Replication quotas: the token bucket on an injected clock, the throttled-replicas
configs, and the broker's view of them over a metadata image."""

from types import SimpleNamespace

from riverbed.replication.throttle import (
    RATE_UNLIMITED,
    ReplicationQuota,
    is_throttled,
    throttled_partitions,
)
from riverbed.server.replication.throttling import ReplicationThrottles


def test_token_bucket_bounds_bytes_by_rate_on_the_injected_clock():
    q = ReplicationQuota(1000)  # 1000 B/s, a burst of one second's worth
    assert not q.exceeded(0)
    q.record(1500, 0)  # one batch may go into debt
    assert q.exceeded(0) and q.exceeded(499) and q.exceeded(500)
    assert not q.exceeded(501) and q.available(600) == 100
    # over 10 s of a greedy sender taking 100 B whenever allowed: rate * time + burst
    sent, now = 0, 1000
    while now < 11_000:
        if not q.exceeded(now):
            q.record(100, now)
            sent += 100
        now += 1
    assert 10_000 <= sent <= 10_000 + 1000 + 100, sent
    # idle time refills at most one burst
    assert not q.exceeded(100_000)
    q.record(1000, 100_000)
    assert q.exceeded(100_000)


def test_unlimited_and_rate_changes():
    q = ReplicationQuota()
    assert q.rate_bytes_per_s == RATE_UNLIMITED and q.unlimited
    q.record(10**12, 0)
    assert not q.exceeded(0)
    q.set_rate(100)
    q.record(150, 0)
    assert q.exceeded(0) and not q.exceeded(600)


def test_throttled_replicas_config_as_kafka():
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 7) is None and is_throttled(" * ", 7, 42)
    assert throttled_partitions("", 1) == frozenset() and not is_throttled("", 1, 0)
    assert throttled_partitions("bad, 3 : 1 ,x:y", 1) == frozenset({3})


class _Image:
    def __init__(self, topic: dict[str, str], broker: dict[str, str]) -> None:
        self._topic, self._broker = topic, broker

    def topic_config(self, name: str) -> dict[str, str]:
        return self._topic if name == "t" else {}

    def broker_config(self, broker_id: object) -> dict[str, str]:
        return self._broker if str(broker_id) == "1" else {}


def test_broker_throttles_only_listed_out_of_sync_replicas():
    clock = SimpleNamespace(now=0)
    image = _Image(
        {
            "leader.replication.throttled.replicas": "0:1",
            "follower.replication.throttled.replicas": "1:1",
        },
        {"leader.replication.throttled.rate": "1000", "follower.replication.throttled.rate": "10"},
    )
    th = ReplicationThrottles(1, {}, lambda: image, lambda: clock.now)  # type: ignore[arg-type,return-value]
    assert th.leader_allowance(("t", 0), follower_in_isr=False) == 1000  # the burst
    th.leader_sent(("t", 0), False, 5000)
    assert th.leader_allowance(("t", 0), follower_in_isr=False) == 0
    assert th.leader_allowance(("t", 0), follower_in_isr=True) is None  # ISR never waits
    assert th.leader_allowance(("t", 1), follower_in_isr=False) is None  # not listed for 1
    assert th.leader_allowance(("u", 0), follower_in_isr=False) is None
    clock.now = 4500  # 5000 - 1000 burst at 1000 B/s: 500 B back after 4.5 s
    assert th.leader_allowance(("t", 0), follower_in_isr=False) == 500
    th.follower_received(("t", 1), False, 100)
    assert th.follower_holds_back(("t", 1), in_isr=False)
    assert not th.follower_holds_back(("t", 0), in_isr=False)
    # a new image without the rate lifts the throttle
    image = _Image(image._topic, {})
    assert not th.follower_holds_back(("t", 1), in_isr=False)
