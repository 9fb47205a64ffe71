"""`riverbed bench latency`: send-to-ack latency at a fixed rate, like OpenMessaging
Benchmark's fixed-rate producer.

Without ``--rate`` the run first finds the peak: an unpaced `run_produce` of
``--peak-records`` records with the same client settings; then it produces at
``--rate-fraction`` (default 0.5) of that peak for ``--duration-s`` seconds. With
``--rate N`` it produces at N records/s straight away.

Latency is measured from each record's *intended* send time (``start + i / rate``), not
from the moment ``produce()`` was called, so a client or broker that falls behind the
schedule shows up in the figures instead of silently lowering the rate (the "coordinated
omission" OMB corrects too). Latency is taken from a uniform random sample of the
records (each with probability 1 / ``sample_every``, `DEFAULT_SAMPLE_EVERY`): only a sampled
record carries a delivery callback, so the client's Python work per record is one
``produce()`` call and the client does not take the CPU the brokers it measures need (a
callback on every record cost about as much CPU as the three brokers of an RF3 run). The
report is p50/p95/p99/p99.9/max of intended-send -> acknowledgement over the sample, the
sample's size, the achieved rate, and the peak when it was measured.
"""

from __future__ import annotations

import math
import os
import random
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from riverbed.cli.bench_runners import (
    LATENCY_SAMPLES_MAX,
    BenchResult,
    ensure_topic,
    latency_summary,
    producer_conf,
    run_produce,
)

#: Records sent (and acknowledged) before the clock starts: connections, metadata.
WARMUP_RECORDS = 500
#: Longest nap of the pacing loop between records that are due (it serves deliveries).
PACE_POLL_S = 0.001
#: librdkafka's poll() counts whole milliseconds: a shorter timeout returns at once, so a
#: pacing loop polling for the few microseconds until the next record is due spins a core
#: (at 80,000 records/s it took ~9 us of CPU per record, as much as the brokers measured).
POLL_RESOLUTION_S = 0.001
#: One record in this many (on average) is timed: ~38,000 samples in 5 s at 77,000/s.
DEFAULT_SAMPLE_EVERY = 10


def records_due(elapsed_s: float, rate: float, total: int) -> int:
    """How many records of a run at ``rate`` records/s should have been sent
    ``elapsed_s`` after its start (record i is due at ``i / rate``), at most ``total``."""
    if elapsed_s < 0:
        return 0
    return min(total, math.floor(elapsed_s * rate) + 1)


def pace_wait_s(sent: int, rate: float, elapsed_s: float) -> float:
    """How long to wait for deliveries before record ``sent`` is due: never negative (a
    negative poll timeout waits for ever in librdkafka) nor above `PACE_POLL_S`."""
    return min(PACE_POLL_S, max(0.0, sent / rate - elapsed_s))


def polls_for(wait_s: float) -> bool:
    """Whether a pacing wait of ``wait_s`` is spent in ``poll()`` (serving deliveries) or,
    shorter than poll's resolution, in ``time.sleep`` (no busy loop)."""
    return wait_s >= POLL_RESOLUTION_S


def intended_latency_ms(index: int, rate: float, start_s: float, acked_s: float) -> float:
    """Latency of record ``index`` acknowledged at ``acked_s``, from its intended send time."""
    return (acked_s - (start_s + index / rate)) * 1000


@dataclass(frozen=True)
class LatencyRun:
    """A fixed-rate run: the rate asked for, the peak it was derived from (None: --rate),
    and the result (records/s achieved, latency from intended send time)."""

    rate: float
    peak: float | None
    result: BenchResult
    #: Records timed (the latency sample) and the mean interval between them.
    sampled: int = 0
    sample_every: int = 1

    def as_dict(self) -> dict[str, Any]:
        d = self.result.as_dict()
        d["target_rate"] = round(self.rate, 1)
        d["peak_records_per_s"] = None if self.peak is None else round(self.peak, 1)
        d["latency_sampled"] = self.sampled
        d["sample_every"] = self.sample_every
        return d


def sample_gaps(every: int, seed: int) -> Iterator[int]:
    """Gaps between the indices of a uniform random sample that takes each record with
    probability ``1 / every`` (a Bernoulli sample: geometric gaps, at least 1): unlike every
    k-th record it cannot fall in step with the pacing loop's bursts."""
    rng = random.Random(seed)
    if every <= 1:
        while True:
            yield 1
    log_keep = math.log1p(-1.0 / every)
    while True:
        yield 1 + int(math.log(1.0 - rng.random()) / log_keep)


def sample_every_for(total: int, every: int) -> int:
    """The sampling interval of a run of ``total`` records: ``every``, widened so that the
    sample stays within `LATENCY_SAMPLES_MAX`."""
    return max(1, every, math.ceil(total / LATENCY_SAMPLES_MAX))


def _paced_worker(
    conf: dict[str, Any], topic: str, rate: float, seconds: float, size: int, every: int
) -> dict[str, Any]:
    """Produce ``rate * seconds`` records at ``rate``; only the sampled records carry a
    delivery callback (a Python call per record was as much CPU as a broker): the others
    cost librdkafka alone, and are counted by what ``flush`` leaves undelivered."""
    from confluent_kafka import Producer

    total = max(1, int(rate * seconds))
    samples = array("d")
    errors = [0]
    clock = time.perf_counter
    start = 0.0

    def on_sampled(index: int, err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            return
        samples.append(intended_latency_ms(index, rate, start, clock()))

    producer = Producer(conf)
    produce = producer.produce
    payload = os.urandom(size)
    for _ in range(WARMUP_RECORDS):
        produce(topic, payload)
    producer.flush(60)
    gaps = sample_gaps(every, seed=total)
    start = clock()
    sent, sampled, next_sample = 0, 0, next(gaps) - 1
    while sent < total:
        due = records_due(clock() - start, rate, total)
        if sent >= due:
            wait = pace_wait_s(sent, rate, clock() - start)
            if polls_for(wait):
                producer.poll(wait)
            else:
                time.sleep(wait)
            continue
        while sent < due:
            try:
                if sent == next_sample:
                    produce(topic, payload, on_delivery=partial(on_sampled, sent))
                    sampled += 1
                    next_sample += next(gaps)
                else:
                    produce(topic, payload)
            except BufferError:
                producer.poll(PACE_POLL_S)
                continue
            sent += 1
        producer.poll(0)
    left = producer.flush(120)
    delivered = sent - left - errors[0]
    return {
        "records": delivered,
        "bytes": delivered * size,
        "seconds": clock() - start,
        "errors": errors[0] + left,
        "samples": samples.tobytes(),
        "sampled": sampled,
    }


def run_latency(
    bootstrap: str,
    topic: str,
    *,
    rate: float = -1,
    rate_fraction: float = 0.5,
    peak_records: int = 100_000,
    duration_s: float = 5.0,
    record_size: int = 100,
    acks: str = "all",
    batch_size: int = 16384,
    linger_ms: int = 5,
    compression: str = "none",
    partitions: int = 1,
    extra: dict[str, Any] | None = None,
    sample_every: int = DEFAULT_SAMPLE_EVERY,
) -> LatencyRun:
    """Send-to-ack latency at ``rate`` records/s, or (rate <= 0) at ``rate_fraction`` of
    the peak an unpaced run of ``peak_records`` reaches first; one record in
    ``sample_every`` (on average) is timed."""
    extra = extra or {}
    size = max(1, record_size)
    peak: float | None = None
    if rate <= 0:
        found = run_produce(
            bootstrap,
            topic,
            peak_records,
            size,
            acks=acks,
            batch_size=batch_size,
            linger_ms=linger_ms,
            compression=compression,
            partitions=partitions,
            extra=extra,
        )
        peak = found.records_per_s
        rate = peak * rate_fraction
    else:
        ensure_topic(bootstrap, topic, partitions, extra)
    conf = producer_conf(bootstrap, acks, batch_size, linger_ms, compression, extra)
    every = sample_every_for(max(1, int(rate * duration_s)), sample_every)
    part = _paced_worker(conf, topic, rate, duration_s, size, every)
    samples = array("d")
    samples.frombytes(part["samples"])
    result = BenchResult(
        kind="latency",
        records=part["records"],
        bytes=part["bytes"],
        seconds=part["seconds"],
        errors=part["errors"],
        latency_ms=latency_summary(samples),
    )
    return LatencyRun(rate, peak, result, part["sampled"], every)


def report(run: LatencyRun, as_json: bool) -> None:
    from riverbed.cli.common import print_json

    if as_json:
        print_json(run.as_dict())
        return
    r = run.result
    lat = r.latency_ms
    head = f"peak {run.peak:.1f} records/sec; " if run.peak is not None else ""
    line = (
        f"{head}at {run.rate:.1f} records/sec (achieved {r.records_per_s:.1f}): "
        f"{r.records} records in {r.seconds:.2f} s"
    )
    if lat:
        line += f"; {run.sampled} timed (1 in {run.sample_every})"
    if lat:
        line += (
            f", send-to-ack from intended send time: {lat['p50']:.2f} ms 50th, "
            f"{lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, {lat['p99.9']:.2f} ms 99.9th, "
            f"{lat['max']:.2f} ms max."
        )
    print(line)
    if r.errors:
        print(f"errors: {r.errors}")
