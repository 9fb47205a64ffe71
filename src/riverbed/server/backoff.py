"""Bounded exponential back-off with jitter for every retry loop in ``server/``.

Kafka's ``ExponentialBackoff`` (KIP-580): the n-th consecutive failure waits
``initial_ms * multiplier ** n``, times a random factor in ``[1 - jitter, 1 + jitter]``
so that many retriers do not march in step, and never more than ``max_ms``. The random
numbers come from an injected ``random.Random`` (seeded in tests and simulations).
:class:`Retrier` keeps the count of consecutive failures of one retry loop; a success
resets it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: Kafka's default jitter (``CommonClientConfigs.RETRY_BACKOFF_JITTER``).
BACKOFF_JITTER = 0.2
BACKOFF_MULTIPLIER = 2


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    initial_ms: int
    max_ms: int
    multiplier: int = BACKOFF_MULTIPLIER
    jitter: float = BACKOFF_JITTER

    def __post_init__(self) -> None:
        if not 0 <= self.initial_ms <= self.max_ms:
            raise ValueError(f"back-off needs 0 <= initial ({self.initial_ms}) <= max")
        if self.multiplier < 1 or not 0 <= self.jitter < 1:
            raise ValueError("back-off multiplier must be >= 1 and jitter in [0, 1)")

    def delay_ms(self, failures: int, rng: random.Random) -> int:
        """The wait after ``failures`` (>= 1) consecutive failures."""
        term = self.initial_ms
        for _ in range(max(0, failures - 1)):
            if term >= self.max_ms:
                break
            term *= self.multiplier
        factor = rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(self.max_ms, int(term * factor))


class Retrier:
    """The failure count of one retry loop and the wait it has earned."""

    def __init__(self, backoff: ExponentialBackoff, rng: random.Random) -> None:
        self.backoff = backoff
        self.rng = rng
        self.failures = 0

    def failed(self) -> int:
        """Count a failure; the milliseconds to wait before the next attempt."""
        self.failures += 1
        return self.backoff.delay_ms(self.failures, self.rng)

    def succeeded(self) -> None:
        self.failures = 0
