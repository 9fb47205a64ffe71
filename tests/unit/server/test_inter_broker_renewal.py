"""KIP-368 on riverbed's own connections: when a node's SASL session is renewed."""

from __future__ import annotations

import asyncio
import random

from riverbed.server.inter_broker import RENEW_AT_FRACTION, NodeConnection, renewal_time


def test_a_session_is_renewed_within_kafkas_window_of_its_lifetime() -> None:
    rng = random.Random(7)
    lo, hi = RENEW_AT_FRACTION
    points = [renewal_time(100.0, 10_000, rng) for _ in range(500)]
    assert all(p is not None and 100.0 + 10 * lo <= p <= 100.0 + 10 * hi for p in points)
    # spread over the window, so a fleet's renewals do not come at once
    assert max(p for p in points if p) - min(p for p in points if p) > 10 * (hi - lo) * 0.8
    # the same seed, the same points: the draw is the caller's, not a global one
    assert [renewal_time(0.0, 1000, random.Random(3)) for _ in range(2)] == [
        renewal_time(0.0, 1000, random.Random(3))
    ] * 2


def test_a_session_without_a_lifetime_never_ends() -> None:
    assert renewal_time(5.0, 0, random.Random(1)) is None


def test_session_ending_compares_the_loops_time_with_the_renewal_point() -> None:
    async def check() -> None:
        reader = asyncio.StreamReader()
        conn = NodeConnection(reader, None, renew_by=50.0)  # type: ignore[arg-type]
        assert not conn.session_ending(49.9)
        assert conn.session_ending(50.0)
        forever = NodeConnection(reader, None)  # type: ignore[arg-type]
        assert not forever.session_ending(1e12)

    asyncio.run(check())
