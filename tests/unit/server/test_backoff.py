"""Bounded exponential back-off with jitter from an injected rng (Kafka's ExponentialBackoff)."""

from __future__ import annotations

import random

import pytest

from riverbed.server.backoff import ExponentialBackoff, Retrier


def test_delays_double_within_the_jitter_and_stop_at_the_maximum() -> None:
    backoff = ExponentialBackoff(100, 1000)
    rng = random.Random(3)
    for failures, term in [(1, 100), (2, 200), (3, 400), (4, 800)]:
        for _ in range(50):
            assert term * 0.8 <= backoff.delay_ms(failures, rng) <= term * 1.2
    assert all(800 <= backoff.delay_ms(n, rng) <= 1000 for n in range(5, 200))


def test_the_same_seed_gives_the_same_delays_and_jitter_spreads_them() -> None:
    backoff = ExponentialBackoff(1000, 10_000)
    first = [backoff.delay_ms(2, random.Random(9)) for _ in range(3)]
    assert len(set(first)) == 1
    rng = random.Random(9)
    assert len({backoff.delay_ms(2, rng) for _ in range(20)}) > 10


def test_a_success_starts_the_retrier_over() -> None:
    retrier = Retrier(ExponentialBackoff(100, 10_000, jitter=0), random.Random(0))
    assert [retrier.failed() for _ in range(4)] == [100, 200, 400, 800]
    retrier.succeeded()
    assert retrier.failed() == 100


@pytest.mark.parametrize(("initial", "maximum"), [(-1, 10), (20, 10)])
def test_limits_are_checked(initial: int, maximum: int) -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(initial, maximum)
