"""Loop stalls and collector pauses as metrics (issue 23: where the latency tail goes)."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from riverbed.server.metrics.stalls import (
    BUSY_LATE_MS,
    BUSY_SHARE_MIN,
    STALL_LOG_INTERVAL_MS,
    STALL_LOG_MS,
    STALL_MS,
    StallCollector,
    StallStats,
    next_sample_interval_ms,
)


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
        sampler = asyncio.ensure_future(s.run(interval_ms=1, idle_interval_ms=1))
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


def test_the_sampler_slows_down_while_the_loop_is_idle() -> None:
    """A busy loop (its thread on a CPU for at least BUSY_SHARE_MIN of a sample, or a late
    sample) keeps the short interval; an idle one the long one."""
    assert next_sample_interval_ms(0.001, 0.010, 0.0, 10, 250) == 10  # 10% of a CPU
    assert next_sample_interval_ms(0.0, 0.010, BUSY_LATE_MS / 1000, 10, 250) == 10
    idle_cpu_s = BUSY_SHARE_MIN * 0.250 * 0.9
    assert next_sample_interval_ms(idle_cpu_s, 0.250, 0.0, 10, 250) == 250


class _CountingStats(StallStats):
    def __init__(self) -> None:
        super().__init__()
        self.samples = 0

    def woke(self, late_s: float) -> None:
        self.samples += 1
        super().woke(late_s)


@pytest.mark.parametrize("busy", [False, True])
def test_an_idle_loop_is_sampled_at_the_idle_interval(busy: bool) -> None:
    """Over 0.3 s, an idle loop thread (its CPU clock still) is sampled at the 100 ms idle
    interval, a busy one (its CPU clock running as fast as the wall clock) every 2 ms."""
    s = _CountingStats()
    loop_cpu = time.monotonic if busy else (lambda: 0.0)

    async def main() -> None:
        sampler = asyncio.ensure_future(
            s.run(interval_ms=2, idle_interval_ms=100, thread_time=loop_cpu)
        )
        await asyncio.sleep(0.3)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)

    asyncio.run(main())
    if busy:
        assert s.samples >= 30, s.samples
    else:
        # the first at 2 ms, then one per 100 ms (a late one, on a loaded machine, is followed
        # by a 2 ms one)
        assert 2 <= s.samples <= 15, s.samples


def test_a_long_stall_is_told_with_what_the_loop_thread_did_meanwhile() -> None:
    s = StallStats()
    late = STALL_LOG_MS / 1000
    assert s.stall_line(late - 0.001, 0.2, 0.1, 0.0, now_s=1.0) is None  # under the bound
    line = s.stall_line(0.150, 0.160, 0.030, 0.020, now_s=2.0)
    assert line is not None
    assert line.startswith("event loop stalled 150 ms: in the 160 ms since the sampler last ran")
    assert "thread ran 30 ms and was off a CPU 130 ms" in line
    assert line.endswith("garbage collection took 20 ms of it")


def test_stall_lines_are_rate_limited_and_count_what_they_left_out() -> None:
    s = StallStats()
    every_s = STALL_LOG_INTERVAL_MS / 1000
    late = STALL_LOG_MS / 1000 + 0.001
    assert s.stall_line(late, late, 0.0, 0.0, now_s=100.0) is not None
    assert s.stall_line(late, late, 0.0, 0.0, now_s=100.0 + every_s / 2) is None
    assert s.stall_line(late, late, 0.0, 0.0, now_s=100.0 + every_s * 0.9) is None
    line = s.stall_line(late, late, 0.0, 0.0, now_s=100.0 + every_s)
    assert line is not None and line.endswith(
        f"; 2 more stall(s) over {STALL_LOG_MS} ms since the last such line"
    )
    again = s.stall_line(late, late, 0.0, 0.0, now_s=100.0 + 2 * every_s)
    assert again is not None and "more stall(s)" not in again


def test_the_sampler_logs_a_loop_held_past_the_log_bound(caplog: pytest.LogCaptureFixture) -> None:
    s = StallStats()
    caplog.set_level(logging.WARNING, logger="riverbed.server.metrics.stalls")

    async def main() -> None:
        sampler = asyncio.ensure_future(s.run(interval_ms=1, idle_interval_ms=1))
        await asyncio.sleep(0.005)
        time.sleep(STALL_LOG_MS / 1000 + 0.02)  # a callback holding the loop
        for _ in range(1000):
            if any("event loop stalled" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.001)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)

    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "event loop stalled" in r.getMessage()]
    assert lines, "no stall line"
    # time.sleep held the loop without a CPU: the line tells that from a busy loop
    off = re.search(r"was off a CPU (\d+) ms", lines[0])
    assert off is not None and int(off.group(1)) >= STALL_LOG_MS * 0.8, lines[0]
