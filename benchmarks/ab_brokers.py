"""A/B of two broker processes at once on one CPU: the method of `benchmarks.metrics_bench`
and `benchmarks.authorizer_throughput` (their docstrings say why).

This machine's virtual CPUs each run at one of two speeds for seconds at a time (a fixed
piece of pure Python takes ~6 or ~12 ms of CPU, per CPU: the host's load on the vCPU's
core), so a broker measured alone costs 1x or 2x by the speed of its CPU during its round.
Both brokers pinned to `BROKER_CPU` and fed at once, the producer alternating message by
message between them, meet the same speed: their CPU ratio is the figure (A/A rounds
within ~2% of 1.0). Each broker's CPU is read from /proc/<pid>/task/*/schedstat (exact,
where /proc/<pid>/stat counts 10 ms ticks), and `cpu_speed_ms` probes each CPU's speed of
the moment for the round's printout.
"""

from __future__ import annotations

import contextlib
import os
import time

from confluent_kafka import Producer

#: The CPU the brokers run on (both of them; the producers run on the others).
BROKER_CPU = 1
#: Iterations of `cpu_speed_ms`'s loop (~6 ms on a fast vCPU of this machine).
SPEED_PROBE_LOOPS = 50_000


def check_cpus() -> str | None:
    """Why this process cannot run the shared method (None: it can)."""
    allowed = os.sched_getaffinity(0)
    if BROKER_CPU in allowed and len(allowed) >= 2:
        return None
    return (
        f"the brokers run on CPU {BROKER_CPU} and the producers on another one"
        f" (this process has {allowed})"
    )


def producers_off_broker_cpu() -> list[int]:
    """This process (and the librdkafka threads it starts later: they inherit it) off
    `BROKER_CPU`; returns every CPU it had, for `cpu_speed_ms`. Call before making any
    producer."""
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(cpus) - {BROKER_CPU})
    return cpus


def pin(pid: int | None, cpu: int = BROKER_CPU) -> None:
    """Every thread of process ``pid`` on ``cpu`` only (the threads it starts later
    inherit it)."""
    assert pid is not None
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), {cpu})


def run_ns(pid: int | None) -> dict[str, int]:
    """Each thread's CPU time so far in ns (/proc/<pid>/task/*/schedstat: exact, where
    /proc/<pid>/stat counts 10 ms ticks)."""
    assert pid is not None
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),  # a thread ended
            open(f"/proc/{pid}/task/{tid}/schedstat") as f,
        ):
            out[tid] = int(f.read().split()[0])
    return out


def cpu_since(pid: int | None, before: dict[str, int]) -> float:
    """CPU seconds the process's threads spent since ``before`` (`run_ns`)."""
    now = run_ns(pid)
    return sum(ns - before.get(tid, 0) for tid, ns in now.items()) / 1e9


def cpu_speed_ms(cpus: list[int]) -> list[float]:
    """Each CPU's speed right now: the CPU ms a fixed piece of pure Python takes on it.
    On this machine's virtual CPUs it is either ~6 or ~12 ms, per CPU, for seconds at a
    time (the host's other load: a vCPU's hardware thread shares its core or not), which
    is what made sequential rounds cost either 8-9 or 12-16 us per message."""
    allowed = os.sched_getaffinity(0)
    out = []
    for cpu in cpus:
        os.sched_setaffinity(0, {cpu})
        start = time.process_time()
        d: dict[int, int] = {}
        for i in range(SPEED_PROBE_LOOPS):
            d[i & 1023] = d.get(i & 511, 0) + i
        out.append((time.process_time() - start) * 1e3)
    os.sched_setaffinity(0, allowed)
    return out


def speeds_text(cpus: list[int], speeds: list[float]) -> str:
    """`cpu_speed_ms`'s figures for a round's line."""
    return "CPU speed probe " + ", ".join(
        f"CPU {c} {ms:.1f} ms" for c, ms in zip(cpus, speeds, strict=True)
    )


def produce(p: Producer, topic: str, value: bytes) -> None:
    """One message, waiting while the producer's queue is full."""
    while True:
        try:
            p.produce(topic, value=value)
            return
        except BufferError:  # its queue is full: let it send
            p.poll(0.01)


def shared_round(
    pids: dict[str, int | None],
    producers: dict[str, Producer],
    topic: str,
    value: bytes,
    messages: int,
    slices: int = 0,
) -> dict[str, tuple[float, float]]:
    """One round, the brokers (``pids``, in the order the producer serves them, each fed
    by ``producers[name]``) pinned to one CPU: both take ``messages`` at once, the
    producer alternating between them message by message, or, ``slices`` N, each takes
    them in N slices alternating with the other's (each alone on the CPU during its
    slice); returns each broker's (CPU s, seconds its messages took)."""
    order = list(pids)
    cpu = dict.fromkeys(order, 0.0)
    wall = dict.fromkeys(order, 0.0)
    if not slices:
        first, second = (producers[name] for name in order)
        before = {name: run_ns(pids[name]) for name in order}
        start = time.perf_counter()
        for _ in range(messages):
            produce(first, topic, value)
            produce(second, topic, value)
        for p in producers.values():
            assert p.flush(120) == 0
        for name in order:
            cpu[name] = cpu_since(pids[name], before[name])
            wall[name] = time.perf_counter() - start
        return {name: (cpu[name], wall[name]) for name in order}
    size = messages // slices
    for _ in range(slices):
        for name in order:
            p, pid = producers[name], pids[name]
            ran, start = run_ns(pid), time.perf_counter()
            for _ in range(size):
                produce(p, topic, value)
            assert p.flush(120) == 0
            wall[name] += time.perf_counter() - start
            cpu[name] += cpu_since(pid, ran)
    return {name: (cpu[name], wall[name]) for name in order}
