"""`riverbed bench latency`: send-to-ack latency at a fixed rate, like OpenMessaging
Benchmark's fixed-rate producer.

Without ``--rate`` the run first finds the peak: an unpaced `run_produce` of
``--peak-records`` records with the same client settings; then it produces at
``--rate-fraction`` (default 0.5) of that peak for ``--duration-s`` seconds. With
``--rate N`` it produces at N records/s straight away.

Latency is measured from each record's *intended* send time (``start + i / rate``), not
from the moment ``produce()`` was called, so a client or broker that falls behind the
schedule shows up in the figures instead of silently lowering the rate (the "coordinated
omission" OMB corrects too). The record's index travels in its first 8 bytes, so the
delivery callback needs no per-record closure. The report is p50/p95/p99/p99.9/max of
intended-send -> acknowledgement, the achieved rate, and the peak when it was measured.
"""

from __future__ import annotations

import math
import os
import struct
import time
from array import array
from dataclasses import dataclass
from typing import Any

from riverbed.cli.bench import (
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
#: Bytes of the index at the start of every value.
INDEX_BYTES = 8
_INDEX = struct.Struct(">q")


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

    def as_dict(self) -> dict[str, Any]:
        d = self.result.as_dict()
        d["target_rate"] = round(self.rate, 1)
        d["peak_records_per_s"] = None if self.peak is None else round(self.peak, 1)
        return d


def _paced_worker(
    conf: dict[str, Any], topic: str, rate: float, seconds: float, size: int
) -> dict[str, Any]:
    from confluent_kafka import Producer

    total = max(1, int(rate * seconds))
    every = max(1, math.ceil(total / LATENCY_SAMPLES_MAX))
    samples = array("d")
    stats = {"ok": 0, "err": 0}
    clock = time.perf_counter
    start = 0.0
    unpack = _INDEX.unpack_from

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            stats["err"] += 1
            return
        stats["ok"] += 1
        (i,) = unpack(msg.value())
        if i >= 0 and i % every == 0:
            samples.append(intended_latency_ms(i, rate, start, clock()))

    producer = Producer({**conf, "on_delivery": on_delivery})
    pad = os.urandom(max(0, size - INDEX_BYTES))
    for _ in range(WARMUP_RECORDS):  # index -1: not counted
        producer.produce(topic, _INDEX.pack(-1) + pad)
    producer.flush(60)
    stats["ok"] = stats["err"] = 0
    start = clock()
    sent = 0
    while sent < total:
        due = records_due(clock() - start, rate, total)
        if sent >= due:
            producer.poll(pace_wait_s(sent, rate, clock() - start))
            continue
        while sent < due:
            try:
                producer.produce(topic, _INDEX.pack(sent) + pad)
            except BufferError:
                producer.poll(PACE_POLL_S)
                continue
            sent += 1
        producer.poll(0)
    left = producer.flush(120)
    return {
        "records": stats["ok"],
        "bytes": stats["ok"] * size,
        "seconds": clock() - start,
        "errors": stats["err"] + left,
        "samples": samples.tobytes(),
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
) -> LatencyRun:
    """Send-to-ack latency at ``rate`` records/s, or (rate <= 0) at ``rate_fraction`` of
    the peak an unpaced run of ``peak_records`` reaches first."""
    extra = extra or {}
    size = max(INDEX_BYTES, record_size)
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
    part = _paced_worker(conf, topic, rate, duration_s, size)
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
    return LatencyRun(rate, peak, result)


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
        line += (
            f", send-to-ack from intended send time: {lat['p50']:.2f} ms 50th, "
            f"{lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, {lat['p99.9']:.2f} ms 99.9th, "
            f"{lat['max']:.2f} ms max."
        )
    print(line)
    if r.errors:
        print(f"errors: {r.errors}")
