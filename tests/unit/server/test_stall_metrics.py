"""Loop stalls and collector pauses as metrics (issue 23: where the latency tail goes)."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from riverbed.server.metrics.stalls import STALL_MS, StallCollector, StallStats


def test_only_wake_ups_later_than_the_stall_bound_count() -> None:
    s = StallStats()
    s.woke(0.001)
    s.woke(STALL_MS / 1000 + 0.001)
    s.woke(0.040)
    assert s.stalls == 2 and s.stall_max_s == pytest.approx(0.040)


def test_gc_hook_times_each_collection_by_generation() -> None:
    s = StallStats()
    ticks = iter([1.0, 1.002, 5.0, 5.030])
    hook = s.gc_hook(clock=lambda: next(ticks))
    hook("start", {"generation": 0})
    hook("stop", {"generation": 0})
    hook("start", {"generation": 2})
    hook("stop", {"generation": 2})
    assert s.gc_pauses == [1, 0, 1]
    assert s.gc_pause_s[0] == pytest.approx(0.002) and s.gc_pause_max_s[2] == pytest.approx(0.03)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StallCollector(s))
    text = generate_latest(registry).decode()
    assert 'python_gc_pauses_total{generation="2"} 1.0' in text
    assert "riverbed_event_loop_stalls_total 0.0" in text


def test_the_sampler_sees_a_blocked_loop_and_a_full_collection() -> None:
    s = StallStats()

    async def main() -> None:
        sampler = asyncio.ensure_future(s.run(interval_ms=1))
        await asyncio.sleep(0.005)  # the sampler is asleep in the loop
        before = s.stalls  # a loaded machine may have stalled the loop already
        time.sleep(0.05)  # a callback holding the loop for 50 ms
        for _ in range(1000):  # until the sampler has woken after the block
            if s.stalls > before:
                break
            await asyncio.sleep(0.001)
        gc.collect()
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)

    hooks = len(gc.callbacks)
    asyncio.run(main())
    assert s.stalls >= 1 and s.stall_max_s >= 0.04
    assert s.gc_pauses[2] >= 1  # the full collection, timed by the hook
    assert len(gc.callbacks) == hooks  # removed when the sampler ends
