"""The metrics page's data: the nodes' ``/metrics`` (``--metrics-url``, repeatable), scraped
each time the page polls, summed over the nodes and turned into rates between scrapes.

Throughput is Kafka's BrokerTopicMetrics totals (``kafka_server_brokertopicmetrics_
{messagesin,bytesin,bytesout}_total``, all topics) per second; latency is the p99 of each
request type's ``kafka_network_requestmetrics_totaltimems`` histogram over the interval
(the bucket counts' differences, interpolated inside the bucket as Prometheus'
``histogram_quantile`` does); ISR changes are ``kafka_server_replicamanager_isr{shrinks,
expands}_total`` per interval. A scrape reads at most `SCRAPE_BYTES_MAX` per node within
`SCRAPE_TIMEOUT_S`; the last `SAMPLES_MAX` points are kept; the charts show the
`REQUEST_TYPES_SHOWN_MAX` busiest request types.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

#: Largest /metrics body read from one node.
SCRAPE_BYTES_MAX = 32 * 1024 * 1024
#: Bytes read from a node's response at a time.
SCRAPE_CHUNK_BYTES = 64 * 1024
#: How long one node's scrape may take, seconds.
SCRAPE_TIMEOUT_S = 5.0
#: Points kept for the charts (one per poll of the page, every 2 s).
SAMPLES_MAX = 720
#: Request types charted (the busiest over the kept points).
REQUEST_TYPES_SHOWN_MAX = 8
#: The quantile charted.
LATENCY_QUANTILE = 0.99

_TOTALS = {
    "kafka_server_brokertopicmetrics_messagesin": "messages_in",
    "kafka_server_brokertopicmetrics_bytesin": "bytes_in",
    "kafka_server_brokertopicmetrics_bytesout": "bytes_out",
    "kafka_server_replicamanager_isrshrinks": "isr_shrinks",
    "kafka_server_replicamanager_isrexpands": "isr_expands",
}
_LATENCY = "kafka_network_requestmetrics_totaltimems"
_RATES = ("messages_in", "bytes_in", "bytes_out", "isr_shrinks", "isr_expands")
_RATES = ("messages_in", "bytes_in", "bytes_out", "isr_shrinks", "isr_expands")

Buckets = dict[float, float]  # upper bound (ms) -> cumulative count


@dataclass(frozen=True, slots=True)
class Scrape:
    t: float
    totals: dict[str, float]
    latency: dict[str, Buckets]  # request type -> buckets


@dataclass(frozen=True, slots=True)
class Point:
    t: float
    rates: dict[str, float]  # per second (throughput) or per interval (ISR changes)
    p99_ms: dict[str, float | None]
    requests: dict[str, float]


def parse(text: str, t: float) -> Scrape:
    """One node's exposition (all-topic totals and request-time buckets)."""
    totals = dict.fromkeys(_TOTALS.values(), 0.0)
    latency: dict[str, Buckets] = {}
    for family in text_string_to_metric_families(text):
        if family.name in _TOTALS:
            for s in family.samples:
                if s.name.endswith("_total") and "topic" not in s.labels:
                    totals[_TOTALS[family.name]] += s.value
        elif family.name == _LATENCY:
            for s in family.samples:
                if s.name.endswith("_bucket") and "request" in s.labels:
                    le = float(s.labels["le"])
                    per = latency.setdefault(s.labels["request"], {})
                    per[le] = per.get(le, 0.0) + s.value
    return Scrape(t, totals, latency)


def combine(scrapes: Iterable[Scrape], t: float) -> Scrape:
    """The cluster's scrape: every node's counters summed."""
    totals: dict[str, float] = dict.fromkeys(_TOTALS.values(), 0.0)
    latency: dict[str, Buckets] = {}
    for s in scrapes:
        for k, v in s.totals.items():
            totals[k] += v
        for request, buckets in s.latency.items():
            per = latency.setdefault(request, {})
            for le, n in buckets.items():
                per[le] = per.get(le, 0.0) + n
    return Scrape(t, totals, latency)


def quantile(q: float, buckets: Buckets) -> float | None:
    """``histogram_quantile``: the bucket holding rank q*count, linearly interpolated
    (the +Inf bucket answers its lower bound); None without observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            inside = count - below
            return le if inside <= 0 else lower + (le - lower) * (rank - below) / inside
        lower, below = le, count
    return lower


def point(prev: Scrape, cur: Scrape) -> Point:
    dt = max(cur.t - prev.t, 1e-3)
    rates = {}
    for k in ("messages_in", "bytes_in", "bytes_out"):
        rates[k] = max(0.0, cur.totals[k] - prev.totals[k]) / dt
    for k in ("isr_shrinks", "isr_expands"):
        rates[k] = max(0.0, cur.totals[k] - prev.totals[k])
    p99: dict[str, float | None] = {}
    requests: dict[str, float] = {}
    for request, buckets in cur.latency.items():
        before = prev.latency.get(request, {})
        delta = {le: max(0.0, n - before.get(le, 0.0)) for le, n in buckets.items()}
        p99[request] = quantile(LATENCY_QUANTILE, delta)
        requests[request] = max(delta.values(), default=0.0)
    return Point(cur.t, rates, p99, requests)


@dataclass
class MetricsHistory:
    """Points between consecutive scrapes of the cluster (see the module docstring)."""

    last: Scrape | None = None
    points: deque[Point] = field(default_factory=lambda: deque(maxlen=SAMPLES_MAX))

    def add(self, scrape: Scrape) -> None:
        if self.last is not None and scrape.t > self.last.t:
            self.points.append(point(self.last, scrape))
        self.last = scrape

    def as_json(self) -> dict[str, object]:
        points = list(self.points)
        busiest: dict[str, float] = {}
        for p in points:
            for request, n in p.requests.items():
                busiest[request] = busiest.get(request, 0.0) + n
        shown = sorted(busiest, key=lambda r: (-busiest[r], r))[:REQUEST_TYPES_SHOWN_MAX]
        return {
            "t": [p.t for p in points],
            **{k: [p.rates[k] for p in points] for k in _RATES},
            "p99_ms": {r: [p.p99_ms.get(r) for p in points] for r in sorted(shown)},
            "totals": self.last.totals if self.last is not None else {},
        }


async def scrape_one(session: aiohttp.ClientSession, url: str, t: float) -> Scrape:
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    async with session.get(url, timeout=timeout) as resp:
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status}")
        # the whole body (StreamReader.read(n) answers what has arrived, up to n: a node's
        # exposition larger than one chunk came back cut mid-line), bounded
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(SCRAPE_CHUNK_BYTES):
            size += len(chunk)
            if size > SCRAPE_BYTES_MAX:
                raise ValueError(f"body above SCRAPE_BYTES_MAX = {SCRAPE_BYTES_MAX} bytes")
            chunks.append(chunk)
    return parse(b"".join(chunks).decode("utf-8", "replace"), t)


async def scrape_all(urls: list[str], t: float) -> tuple[Scrape, list[str]]:
    """Every node's scrape combined, and one error line per node that failed."""
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(
            *(scrape_one(session, u, t) for u in urls), return_exceptions=True
        )
    errors = [
        f"{url}: {r or type(r).__name__}" for url, r in zip(urls, results, strict=True)
        if isinstance(r, BaseException)
    ]  # fmt: skip
    return combine((r for r in results if isinstance(r, Scrape)), t), errors
