"""Controller mutation quotas (KIP-599), sans-I/O: ``controller_mutation_rate`` partition
mutations per second per (user, client id), enforced with Kafka's token bucket.

Kafka's ControllerMutationQuotaManager measures with a ``TokenBucket``: the bucket holds
at most ``burst = quota.window.num * window_seconds * rate`` tokens (full at first), is
refilled at ``rate`` tokens per second, and a mutation of N partitions takes N tokens,
which may leave it negative. "If a value < 0 is observed, the time required to bring it
to zero is -value / refill rate (quota bound) * 1000": the throttle time.

Two ways of recording (Kafka's ``newQuotaFor(request, strictSinceVersion)``):

- strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): the quota is checked
  *before* the mutation is recorded ("checkQuotas; record(permits, checkQuotas=false)"):
  with tokens left the mutation is accepted whole even if it overdraws the bucket; with
  the bucket below zero it is refused (THROTTLING_QUOTA_EXCEEDED) and not recorded;
- permissive (older versions, whose clients do not know the error): recorded always, the
  throttle time (if the bucket went below zero) only delays the client.

Which quota applies to a client, and under which metric tags it is shared, is the same
precedence as the other client quotas (`riverbed.security.client_quotas.QuotaBook`).
"""

from __future__ import annotations

from riverbed.security.client_quotas import (
    QUOTA_SENSORS_MAX,
    QuotaBook,
    QuotaWindows,
    java_round,
)


class TokenBucket:
    """Kafka's ``TokenBucket`` stat (seconds): see the module docstring."""

    __slots__ = ("last_update_ms", "tokens")

    def __init__(self) -> None:
        # as Kafka's: 0 tokens at time 0, so the first refill fills the bucket
        self.tokens = 0.0
        self.last_update_ms: int | None = None

    def _refill(self, rate: float, burst: float, now_ms: int) -> None:
        elapsed_ms = (
            burst / rate * 1000 if self.last_update_ms is None else now_ms - self.last_update_ms
        )
        self.tokens = min(burst, self.tokens + rate * max(0.0, elapsed_ms) / 1000.0)
        self.last_update_ms = now_ms

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        self._refill(rate, burst, now_ms)
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now_ms: int) -> None:
        self._refill(rate, burst, now_ms)
        self.tokens = min(burst, self.tokens - value)

    def full(self, rate: float, burst: float, now_ms: int) -> bool:
        return self.measure(rate, burst, now_ms) >= burst


def bucket_throttle_ms(tokens: float, rate: float) -> int:
    """ControllerMutationQuotaManager.throttleTimeMs: ``round(-tokens / rate * 1000)``."""
    return max(0, java_round(-tokens / rate * 1000))


class MutationQuotaManager:
    """Token buckets of ``controller_mutation_rate`` by metric tags (bounded: full, i.e.
    idle, buckets go first when ``sensors_max`` is reached)."""

    def __init__(
        self, windows: QuotaWindows | None = None, *, sensors_max: int = QUOTA_SENSORS_MAX
    ) -> None:
        self.windows = windows or QuotaWindows()
        self.sensors_max = sensors_max
        #: tags -> (bucket, the rate it was last used with)
        self._buckets: dict[tuple[str, str], tuple[TokenBucket, float]] = {}

    def burst(self, rate: float) -> float:
        return self.windows.samples * self.windows.window_ms / 1000.0 * rate

    def _bucket(self, tags: tuple[str, str], rate: float, now_ms: int) -> TokenBucket:
        found = self._buckets.get(tags)
        if found is None:
            if len(self._buckets) >= self.sensors_max:
                self._evict(now_ms)
            bucket = TokenBucket()
        else:
            bucket = found[0]
        self._buckets[tags] = (bucket, rate)
        return bucket

    def _evict(self, now_ms: int) -> None:
        for tags, (b, rate) in list(self._buckets.items()):
            if b.full(rate, self.burst(rate), now_ms):
                del self._buckets[tags]
        while len(self._buckets) >= self.sensors_max:
            del self._buckets[next(iter(self._buckets))]

    def try_record(
        self, book: QuotaBook, user: str, client_id: str, permits: float, now_ms: int
    ) -> int:
        """Strict: 0 when the mutation is accepted (and recorded), else the throttle time
        of the refusal (nothing recorded)."""
        found = self._find(book, user, client_id, now_ms)
        if found is None:
            return 0
        bucket, rate, burst = found
        tokens = bucket.measure(rate, burst, now_ms)
        if tokens < 0:
            return max(1, bucket_throttle_ms(tokens, rate))
        bucket.record(permits, rate, burst, now_ms)
        return 0

    def record(
        self, book: QuotaBook, user: str, client_id: str, permits: float, now_ms: int
    ) -> int:
        """Permissive: record, and return the throttle time the bucket is now in (0: none).
        A negative ``permits`` gives tokens back (a mutation the controller refused)."""
        found = self._find(book, user, client_id, now_ms)
        if found is None:
            return 0
        bucket, rate, burst = found
        bucket.record(permits, rate, burst, now_ms)
        return bucket_throttle_ms(bucket.tokens, rate) if bucket.tokens < 0 else 0

    def _find(
        self, book: QuotaBook, user: str, client_id: str, now_ms: int
    ) -> tuple[TokenBucket, float, float] | None:
        """(bucket, rate, burst) of a client; None without a quota."""
        if not book.enabled:
            return None
        tags, rate = book.resolve(user, client_id)
        if rate is None:  # (a stored rate is > 0: client_quota_control validates it)
            return None
        return self._bucket(tags, rate, now_ms), rate, self.burst(rate)

    @property
    def sensor_count(self) -> int:
        return len(self._buckets)
