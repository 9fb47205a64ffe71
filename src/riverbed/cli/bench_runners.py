"""The runs behind `riverbed bench produce|consume|e2e` (and the peak run of `riverbed bench
latency`): throughput and latency, like kafka-*-perf-test.

Works against any Kafka-compatible broker (confluent-kafka).  Several client processes
(`--processes`) split the records between them; results are merged into one report:
records/s, MB/s (MiB = 2^20 bytes, as Kafka's tools), and latency avg/p50/p95/p99/p99.9/max.

- produce: latency = produce() call -> broker acknowledgement, as librdkafka measures it
  (`Message.latency()`; includes batching/linger).
- consume: reads `--num-records` from the beginning of the topic (partition by partition,
  each from its low watermark; processes split the partitions between them and each
  reads its own to a known end offset); latency = none, the figure is the time to fetch
  them all.
- e2e: a producer and a consumer in one process; latency = wall-clock send time (written
  into the record value) -> receive time.

`run_produce` / `run_consume` / `run_e2e` return a `BenchResult` for scripts
(benchmarks/broker_vs_tansu.py); progress goes to the callback `progress_to` names.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import struct
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from riverbed.cli.common import ADMIN_TIMEOUT_S, CliError, kafka_error_text

#: Latency samples kept per process; beyond that every k-th record is sampled.
LATENCY_SAMPLES_MAX = 200_000
#: Records librdkafka may queue per producer before produce() waits (bounded memory).
QUEUE_MESSAGES_MAX = 500_000
MIB = 1 << 20


@dataclass
class BenchResult:
    kind: str
    records: int
    bytes: int
    seconds: float
    errors: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["records_per_s"] = round(self.records_per_s, 1)
        d["mb_per_s"] = round(self.mb_per_s, 3)
        return d


def latency_summary(samples_ms: list[float] | array[float]) -> dict[str, float]:
    if not samples_ms:
        return {}
    s = sorted(samples_ms)

    def pct(p: float) -> float:
        return float(s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))])

    return {
        "avg": sum(s) / len(s),
        "p50": pct(0.50),
        "p95": pct(0.95),
        "p99": pct(0.99),
        "p99.9": pct(0.999),
        "max": s[-1],
    }


def _merge(kind: str, parts: list[dict[str, Any]]) -> BenchResult:
    samples = array("d")
    for p in parts:
        samples.frombytes(p["samples"])
    # Processes run concurrently: throughput is total work over the longest wall time.
    return BenchResult(
        kind=kind,
        records=sum(p["records"] for p in parts),
        bytes=sum(p["bytes"] for p in parts),
        seconds=max(p["seconds"] for p in parts),
        errors=sum(p["errors"] for p in parts),
        latency_ms=latency_summary(samples),
    )


# --------------------------------------------------------------------------- workers
#: Progress callback (records done) set by the CLI in the parent process.  Spawned worker
#: processes add to a shared counter instead (`_init_worker`), which the parent polls.
_PROGRESS: Callable[[int], None] | None = None
_SHARED_DONE: Any = None  # multiprocessing.Value("q") in a worker of a multi-process run
#: How often the parent moves the progress bar of a multi-process run.
PROGRESS_POLL_S = 0.2


def _tick(n: int) -> None:
    if _PROGRESS is not None:
        _PROGRESS(n)
    elif _SHARED_DONE is not None:
        with _SHARED_DONE.get_lock():
            _SHARED_DONE.value += n


def _init_worker(done: Any) -> None:
    global _SHARED_DONE
    _SHARED_DONE = done


@contextlib.contextmanager
def progress_to(advance: Callable[[int], None]) -> Iterator[None]:
    """Runs inside the block report the records they finish to ``advance`` (the CLI's
    progress bar; all process counts)."""
    global _PROGRESS
    _PROGRESS = advance
    try:
        yield
    finally:
        _PROGRESS = None


def _produce_worker(
    conf: dict[str, Any], topic: str, n: int, size: int, rate: float
) -> dict[str, Any]:
    from confluent_kafka import Producer

    payload = os.urandom(size)
    every = max(1, math.ceil(n / LATENCY_SAMPLES_MAX))
    samples = array("d")
    stats = {"ok": 0, "err": 0}

    def on_delivery(err: Any, msg: Any) -> None:
        # One shared callback; librdkafka measures produce() -> ack itself (msg.latency()),
        # so no per-record closure or clock read is needed on the hot path.
        if err is not None:
            stats["err"] += 1
            return
        stats["ok"] += 1
        if stats["ok"] % every == 0:
            latency = msg.latency()
            if latency is not None:
                samples.append(latency * 1000)

    producer = Producer({**conf, "on_delivery": on_delivery})
    produce = producer.produce
    start = time.perf_counter()
    for i in range(n):
        if rate > 0:
            ahead = i / rate - (time.perf_counter() - start)
            if ahead > 0:
                time.sleep(ahead)
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
            if i:
                _tick(1000)
    left = producer.flush(120)
    _tick(n - 1000 * ((n - 1) // 1000))  # the records since the last tick
    seconds = time.perf_counter() - start
    return {
        "records": stats["ok"],
        "bytes": stats["ok"] * size,
        "seconds": seconds,
        "errors": stats["err"] + left,
        "samples": samples.tobytes(),
    }


def consume_plan(
    watermarks: dict[int, tuple[int, int]], num_records: int, processes: int, topic: str = ""
) -> list[dict[int, tuple[int, int]]]:
    """Split a consume run by partition: each process gets {partition: (start, end)}.

    Partitions are taken in order, each from its low watermark up to what is still
    wanted (the last one may stop short of its high watermark), then dealt round-robin
    to at most ``processes`` processes.  The ranges add up to exactly ``num_records``:
    every process knows where each of its partitions ends, whatever way the producer's
    partitioner spread the records.
    """
    assert processes >= 1 and num_records >= 0
    ranges: list[tuple[int, tuple[int, int]]] = []
    left = num_records
    for p in sorted(watermarks):
        low, high = watermarks[p]
        take = min(left, max(0, high - low))
        if take:
            ranges.append((p, (low, low + take)))
            left -= take
    if left:
        raise CliError(
            f"topic {topic or '?'} holds {num_records - left} records, fewer than "
            f"--num-records {num_records}"
        )
    n = max(1, min(processes, len(ranges)))
    plans: list[dict[int, tuple[int, int]]] = [{} for _ in range(n)]
    for i, (p, rng) in enumerate(ranges):
        plans[i % n][p] = rng
    return [plan for plan in plans if plan]


def _consume_worker(
    conf: dict[str, Any], topic: str, plan: dict[int, tuple[int, int]], timeout_s: float
) -> dict[str, Any]:
    """Read each partition of ``plan`` from its start offset to its end offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _end) in plan.items()])
    ends = {p: end for p, (_start, end) in plan.items()}
    n = sum(end - start for start, end in plan.values())
    count = 0
    nbytes = 0
    errors = 0
    start = time.perf_counter()
    last = start
    while ends and time.perf_counter() - last < timeout_s:
        batch = consumer.consume(num_messages=min(10_000, max(1, n - count)), timeout=0.5)
        if not batch:
            # A partition whose last offsets hold no data record (compaction, control
            # records) ends where the consumer's position passes its end.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
            continue
        # Per-record Python work is the client's bottleneck: keep it to the offset check.
        got = 0
        for m in batch:
            if m.error() is not None:
                errors += 1
                continue
            p = m.partition()
            offset = m.offset()
            end = None if p is None else ends.get(p)
            if p is None or end is None or offset is None or offset >= end:
                continue  # past this partition's share (written after the run started)
            got += 1
            nbytes += len(m)
            if offset == end - 1:
                del ends[p]
                consumer.pause([TopicPartition(topic, p)])
        count += got
        last = time.perf_counter()
        _tick(got)
    seconds = last - start
    consumer.close()
    return {"records": count, "bytes": nbytes, "seconds": seconds, "errors": errors, "samples": b""}


def _e2e_worker(
    conf: dict[str, Any], topic: str, n: int, size: int, timeout_s: float
) -> dict[str, Any]:
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    producer_only = ("acks", "linger.ms")
    consumer = Consumer(
        {
            **{k: v for k, v in conf.items() if k not in producer_only},
            "group.id": "riverbed-bench-e2e",
            "enable.auto.commit": False,
        }
    )
    md = consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    parts = sorted(md.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in parts])
    # Wait until the assignment has resolved its end offsets, so no record is missed.
    consumer.consume(num_messages=1, timeout=1.0)
    producer = Producer({k: v for k, v in conf.items() if k != "fetch.wait.max.ms"})
    pad = b"x" * max(0, size - 8)
    samples = array("d")
    received = 0
    errors = 0
    start = time.perf_counter()
    last = start
    sent = 0
    while received < n and time.perf_counter() - last < timeout_s:
        if sent < n:
            producer.produce(topic, value=struct.pack(">q", time.time_ns()) + pad)
            sent += 1
            producer.poll(0)
            if sent % 100 != 0 and sent < n:
                continue
        producer.flush(0)
        for msg in consumer.consume(num_messages=1000, timeout=0.01):
            if msg.error() is not None:
                errors += 1
                continue
            (sent_ns,) = struct.unpack_from(">q", msg.value() or bytes(8))
            samples.append((time.time_ns() - sent_ns) / 1e6)
            received += 1
            last = time.perf_counter()
    seconds = last - start
    producer.flush(10)
    consumer.close()
    return {
        "records": received,
        "bytes": received * size,
        "seconds": seconds,
        "errors": errors + (n - received),
        "samples": samples.tobytes(),
    }


def _fan_out(func: Any, jobs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    if len(jobs) == 1:
        return [func(*jobs[0])]
    ctx = multiprocessing.get_context("spawn")
    progress = _PROGRESS
    if progress is None:
        with ctx.Pool(len(jobs)) as pool:
            return pool.starmap(func, jobs)
    done = ctx.Value("q", 0)
    shown = 0
    with ctx.Pool(len(jobs), initializer=_init_worker, initargs=(done,)) as pool:
        pending = pool.starmap_async(func, jobs)
        while not pending.ready():
            pending.wait(PROGRESS_POLL_S)
            now = done.value
            progress(now - shown)
            shown = now
        return pending.get()


# --------------------------------------------------------------------------- API
def ensure_topic(bootstrap: str, topic: str, partitions: int, extra: dict[str, Any]) -> int:
    """Create `topic` with `partitions` unless it exists; return its partition count."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({**extra, "bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    if topic not in md.topics or not md.topics[topic].partitions:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic]
        try:
            fut.result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in kafka_error_text(exc):
                raise CliError(f"cannot create topic {topic}: {kafka_error_text(exc)}") from None
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
            tmd = md.topics.get(topic)
            if (
                tmd is not None
                and tmd.partitions
                and all(p.leader >= 0 for p in tmd.partitions.values())
            ):
                break
            time.sleep(0.1)
    return len(md.topics[topic].partitions)


def producer_conf(
    bootstrap: str,
    acks: str,
    batch_size: int,
    linger_ms: int,
    compression: str,
    extra: dict[str, Any],
) -> dict[str, Any]:
    return {
        **extra,
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "batch.size": batch_size,
        "linger.ms": linger_ms,
        "compression.type": compression,
        "queue.buffering.max.messages": QUEUE_MESSAGES_MAX,
    }


def run_produce(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    acks: str = "all",
    batch_size: int = 16384,
    linger_ms: int = 5,
    compression: str = "none",
    partitions: int = 1,
    processes: int = 1,
    throughput: float = -1,
    extra: dict[str, Any] | None = None,
) -> BenchResult:
    extra = extra or {}
    ensure_topic(bootstrap, topic, partitions, extra)
    conf = producer_conf(bootstrap, acks, batch_size, linger_ms, compression, extra)
    shares = [
        num_records // processes + (1 if i < num_records % processes else 0)
        for i in range(processes)
    ]
    rate = throughput / processes if throughput > 0 else -1
    return _merge(
        "produce",
        _fan_out(_produce_worker, [(conf, topic, n, record_size, rate) for n in shares if n]),
    )


def run_consume(
    bootstrap: str,
    topic: str,
    num_records: int,
    *,
    processes: int = 1,
    fetch_max_bytes: int = 52_428_800,
    timeout_s: float = 10.0,
    extra: dict[str, Any] | None = None,
) -> BenchResult:
    extra = extra or {}
    from confluent_kafka import Consumer, TopicPartition

    conf = {
        **extra,
        "bootstrap.servers": bootstrap,
        "group.id": "riverbed-bench",
        "enable.auto.commit": False,
        "fetch.max.bytes": fetch_max_bytes,
    }
    probe = Consumer(conf)
    try:
        md = probe.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        tmd = md.topics.get(topic)
        if tmd is None or not tmd.partitions:
            raise CliError(f"topic {topic} does not exist; run `riverbed bench produce` first")
        # Where each partition starts and ends now: a producer's partitioner rarely
        # spreads records evenly, so processes split by partition, not by record count.
        watermarks = {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=ADMIN_TIMEOUT_S)
            for p in sorted(tmd.partitions)
        }
    finally:
        probe.close()
    plans = consume_plan(watermarks, num_records, processes, topic)
    jobs = [(conf, topic, plan, timeout_s) for plan in plans]
    return _merge("consume", _fan_out(_consume_worker, jobs))


def run_e2e(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    acks: str = "all",
    partitions: int = 1,
    timeout_s: float = 10.0,
    extra: dict[str, Any] | None = None,
) -> BenchResult:
    extra = extra or {}
    ensure_topic(bootstrap, topic, partitions, extra)
    conf = {
        **extra,
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 0,
        "fetch.wait.max.ms": 10,
    }
    return _merge("e2e", [_e2e_worker(conf, topic, num_records, max(8, record_size), timeout_s)])
