"""Replication throttling (Kafka's replication quotas, KIP-73), sans I/O.

Configs, with Kafka's names:

======================================  ====================================================
leader.replication.throttled.rate       broker (dynamic), bytes/s a leader sends to
                                        throttled out-of-sync followers; default Long.MAX
follower.replication.throttled.rate     broker (dynamic), bytes/s a follower fetches for its
                                        throttled out-of-sync replicas; default Long.MAX
leader.replication.throttled.replicas   topic, ``partition:broker,...`` or ``*``: the
                                        partitions whose leader on ``broker`` is throttled
follower.replication.throttled.replicas topic, same form: the partitions whose follower on
                                        ``broker`` is throttled
======================================  ====================================================

As Kafka: only replicas outside the ISR are throttled (a reassignment's adding replicas, a
follower catching up), so acks=all latency of in-sync followers never pays for a move.
A quota is a token bucket on the injected clock: ``rate`` tokens (bytes) a second, holding
at most ``BURST_S`` seconds of them; sending takes the bytes even into debt (a batch is
never split), and a throttled replica gets no data while the bucket is empty.
"""

from __future__ import annotations

#: Kafka's "no throttle" rate (Long.MAX_VALUE).
RATE_UNLIMITED = 2**63 - 1
#: Seconds of tokens a quota's bucket holds (the burst a throttled replica may take).
BURST_S = 1.0


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """Partitions ``value`` (a ``*.replication.throttled.replicas`` config) throttles on
    ``broker_id``; None means every partition (``*``)."""
    value = value.strip()
    if value == "*":
        return None
    out: set[int] = set()
    for item in value.split(","):
        part, sep, broker = item.strip().partition(":")
        ok = sep and part.strip().isdigit() and broker.strip().lstrip("-").isdigit()
        if ok and int(broker) == broker_id:
            out.add(int(part))
    return frozenset(out)


def is_throttled(value: str, broker_id: int, partition: int) -> bool:
    parts = throttled_partitions(value, broker_id)
    return parts is None or partition in parts


class ReplicationQuota:
    """One broker's leader- or follower-side replication quota (a token bucket)."""

    def __init__(self, rate_bytes_per_s: int = RATE_UNLIMITED) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._tokens = self._capacity()
        self._last_ms: int | None = None

    def _capacity(self) -> float:
        return self.rate_bytes_per_s * BURST_S

    def set_rate(self, rate_bytes_per_s: int) -> None:
        if rate_bytes_per_s != self.rate_bytes_per_s:
            self.rate_bytes_per_s = rate_bytes_per_s
            self._tokens = min(self._tokens, self._capacity())

    @property
    def unlimited(self) -> bool:
        return self.rate_bytes_per_s >= RATE_UNLIMITED

    def _refill(self, now_ms: int) -> None:
        if self._last_ms is not None and now_ms > self._last_ms:
            gained = (now_ms - self._last_ms) * self.rate_bytes_per_s / 1000
            self._tokens = min(self._capacity(), self._tokens + gained)
        if self._last_ms is None or now_ms > self._last_ms:
            self._last_ms = now_ms

    def exceeded(self, now_ms: int) -> bool:
        """Is the bucket empty (throttled replicas get nothing now)?"""
        if self.unlimited:
            return False
        self._refill(now_ms)
        return self._tokens <= 0

    def available(self, now_ms: int) -> int:
        """Bytes that may go now (0: none; a read still returns one whole batch, the debt
        is paid back before the next)."""
        if self.unlimited:
            return RATE_UNLIMITED
        self._refill(now_ms)
        return max(0, int(self._tokens))

    def record(self, size_bytes: int, now_ms: int) -> None:
        """``size_bytes`` of throttled replication went out (or came in)."""
        if self.unlimited or size_bytes <= 0:
            return
        self._refill(now_ms)
        self._tokens -= size_bytes
