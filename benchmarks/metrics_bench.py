"""Metrics benchmark (issue 21): what the hot-path counters cost, and scrape time.

Run: ``.venv/bin/python -m benchmarks.metrics_bench [--messages 200000] [--rounds 3]
[--pairs 2] [--slices N] [--sequential [--pin]] [--linger-ms 20] [--batch-records 20]
[--control] [--partitions 10000] [--only produce|record|scrape]``

- ``produce``: two broker processes in the same run, one with the request/topic counters
  (``riverbed.metrics.enable=true``, the default) and one without; confluent-kafka
  produces ``--messages`` 100-byte messages (acks=1, ``--linger-ms`` 20, batches of
  ``--batch-records`` 20 records: small batches of one size in both brokers, so the
  per-request work shows and weighs the same) to each, ``--rounds`` times (the first
  broker alternating), the rounds spread over ``--pairs`` pairs of brokers started in
  alternating order. The figure is each broker's own CPU time per message (from
  /proc/<pid>/task/*/schedstat), whose ratio off / on is the throughput ratio of a
  CPU-bound broker; printed per round (with the Produce requests per message and bytes
  per request librdkafka sent, and a speed probe of each CPU) and over all rounds.
  Why both brokers run at once on one CPU (`ab_brokers.BROKER_CPU`, the producer on the others):
  this machine's virtual CPUs each run at one of two speeds for seconds at a time (a
  fixed piece of pure Python takes ~6 or ~12 ms of CPU, per CPU: the host's load on the
  vCPU's core), so a broker measured alone costs 8-9 or 12-16 us per message by the
  speed of its CPU during its round, more than the effect measured (an A/A control of
  back-to-back rounds gave single-round CPU ratios of 0.59-1.05). At once on one CPU,
  both meet the same speed: A/A rounds within 2% of 1.0. The price: the two brokers
  switching on one CPU cost each ~15-20% more CPU per message than alone, which
  shrinks the measured difference by as much; ``--slices N`` alternates the brokers in
  N slices of a round instead (each alone on the CPU during its slice: no switching,
  more noise), ``--sequential`` runs each broker's messages back to back as before
  (rates that mean something; ``--pin``: the brokers on one CPU).
- ``record``: in-process, the CPU time the request metrics add to one produce request on
  the network layer's path (a request decoded afresh, its handler coroutine with and
  without the stamps and counters, the stamps' share of the fold; the two alternate, the
  median paired difference is printed); with ``produce`` in the same run, set beside the
  off broker's CPU per request: the modelled ratio.
- ``scrape``: one broker with ``--partitions`` partitions (topics of 100 partitions);
  ``/metrics`` is read ``--scrapes`` times; printed: the exposition's size, its series
  count, the scrape times (the issue's goal with 10,000 partitions: < 1 s) and the
  broker's CPU time per scrape (not moved by other processes' load).

Not a test: it never asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.ab_brokers import (
    BROKER_CPU,
    check_cpus,
    cpu_since,
    cpu_speed_ms,
    pin,
    produce,
    producers_off_broker_cpu,
    run_ns,
    shared_round,
    speeds_text,
)
from riverbed.testing.cluster import BrokerProcess

#: Partitions per topic in the scrape benchmark.
PARTITIONS_PER_TOPIC = 100
#: Topics per CreateTopics request (one metadata batch each).
TOPICS_PER_REQUEST = 5
VALUE = b"v" * 100


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat)."""
    assert pid is not None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _producer(broker: BrokerProcess, args: argparse.Namespace, stats: list[str]) -> Producer:
    """A producer of the rounds' batches (``stats``: librdkafka's statistics, the last
    one read after the round for its requests and bytes sent)."""
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": 1,
            "linger.ms": args.linger_ms,
            "batch.size": args.batch_bytes,
            "batch.num.messages": args.batch_records,
            "log_level": 3,
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "stats_cb": stats.append,
        }
    )


#: librdkafka's statistics period (its Produce request and byte counts per round).
STATS_INTERVAL_MS = 100


def _sent(p: Producer, stats: list[str]) -> tuple[int, int]:
    """(Produce requests, bytes) the producer has sent to brokers so far (its next
    statistics)."""
    seen = len(stats)
    deadline = time.monotonic() + 10 * STATS_INTERVAL_MS / 1000
    while len(stats) == seen and time.monotonic() < deadline:
        p.poll(STATS_INTERVAL_MS / 1000)
    doc = json.loads(stats[-1])
    brokers = [b for b in doc["brokers"].values() if b["nodeid"] >= 0]
    return sum(b["req"].get("Produce", 0) for b in brokers), sum(b["txbytes"] for b in brokers)


def _produce_rate(broker: BrokerProcess, topic: str, args: argparse.Namespace) -> float:
    stats: list[str] = []
    p = _producer(broker, args, stats)
    p.produce(topic, value=VALUE)  # metadata first
    assert p.flush(30) == 0
    start = time.perf_counter()
    for _ in range(args.messages):
        produce(p, topic, VALUE)
    assert p.flush(120) == 0
    return float(args.messages / (time.perf_counter() - start))


def _start_pair(args: argparse.Namespace, pair: int) -> dict[str, BrokerProcess]:
    """A broker with the counters and one without, started in alternating order (an A/A
    run showed the first-started broker of a pair spending ~5% more CPU)."""
    common = {"num.partitions": "1", "log.segment.bytes": str(256 * 1024 * 1024)}
    # --control: both brokers without the counters (an A/A run: the noise floor)
    enabled = {"on": "false" if args.control else "true", "off": "false"}
    names = ["on", "off"] if pair % 2 == 0 else ["off", "on"]
    brokers = {
        name: BrokerProcess(overrides={**common, "riverbed.metrics.enable": enabled[name]}).start()
        for name in names
    }
    if args.pin or not args.sequential:
        for broker in brokers.values():
            pin(broker.pid)
    return brokers


def _round_shared(
    brokers: dict[str, BrokerProcess], order: list[str], topic: str, args: argparse.Namespace
) -> dict[str, tuple[float, float, int, int]]:
    """One round of the default mode (`ab_brokers.shared_round`, ``--slices`` N: in
    slices); returns each broker's (CPU s, seconds its messages took, Produce requests,
    bytes sent)."""
    stats = {name: [] for name in order}  # type: dict[str, list[str]]
    producers = {name: _producer(brokers[name], args, stats[name]) for name in order}
    for p in producers.values():
        p.produce(topic, value=VALUE)  # metadata first
        assert p.flush(30) == 0
    sent = {name: _sent(producers[name], stats[name]) for name in order}
    pids = {name: brokers[name].pid for name in order}
    got = shared_round(pids, producers, topic, VALUE, args.messages, args.slices)
    out = {}
    for name in order:
        requests, sent_bytes = _sent(producers[name], stats[name])
        cpu, wall = got[name]
        out[name] = (cpu, wall, requests - sent[name][0], sent_bytes - sent[name][1])
    return out


def bench_produce(args: argparse.Namespace) -> float:
    """The rounds (module docstring); returns the off broker's CPU us per request."""
    rates: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}  # broker CPU s of each round
    pairs = max(1, min(args.pairs, args.rounds))
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin or not args.sequential:  # before any producer: librdkafka's threads inherit it
        producers_off_broker_cpu()
    for pair in range(pairs):
        brokers = _start_pair(args, pair)
        try:
            for r in range(pair, args.rounds, pairs):
                # each pair's rounds alternate which broker goes first (r % 2 would
                # give a pair's rounds all one order when there are two pairs)
                order = ["on", "off"] if (r // pairs) % 2 == 0 else ["off", "on"]
                if args.sequential:
                    extra = _sequential_round(brokers, order, f"bench-{r}", args, rates, cpu)
                else:
                    speeds = cpu_speed_ms(cpus)
                    got = _round_shared(brokers, order, f"bench-{r}", args)
                    for name in ("on", "off"):
                        cpu[name].append(got[name][0])
                        rates[name].append(args.messages / got[name][1])
                    extra = "; ".join(
                        f"{name} {got[name][2] / args.messages:.4f} requests per message,"
                        f" {got[name][3] / max(got[name][2], 1):,.0f} bytes per request"
                        for name in ("on", "off")
                    )
                    extra += "; " + speeds_text(cpus, speeds)
                us_on, us_off = (cpu[n][-1] / args.messages * 1e6 for n in ("on", "off"))
                print(
                    f"round {r} (pair {pair}): on {rates['on'][-1]:,.0f} msg/s,"
                    f" off {rates['off'][-1]:,.0f} msg/s;"
                    f" broker CPU per message on {us_on:.2f} us, off {us_off:.2f} us"
                    f" (ratio {us_off / us_on:.3f}); {extra}",
                    flush=True,
                )
        finally:
            for broker in brokers.values():
                broker.close()
    if args.sequential:
        # the machine is shared: each round's pair ran back to back, so the median of
        # the per-round ratios is the figure least moved by load from elsewhere
        ratios = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
        best_on, best_off = max(rates["on"]), max(rates["off"])
        print(
            f"best: on {best_on:,.0f} msg/s, off {best_off:,.0f} msg/s;"
            f" ratio {best_on / best_off:.3f}"
        )
        print(f"median of the per-round ratios on/off: {statistics.median(ratios):.3f}")
    # the broker's own CPU time per message: the throughput a CPU-bound broker reaches
    # scales with its inverse
    messages = args.messages * args.rounds
    per_on, per_off = sum(cpu["on"]) / messages * 1e6, sum(cpu["off"]) / messages * 1e6
    cpu_ratios = [b / a for a, b in zip(cpu["on"], cpu["off"], strict=True)]
    print(
        f"broker CPU per message: on {per_on:.2f} us, off {per_off:.2f} us;"
        f" CPU-bound throughput ratio on/off {per_off / per_on:.3f}"
        f" (median of the per-round CPU ratios {statistics.median(cpu_ratios):.3f})"
    )
    return float(per_off * args.batch_records)


def _sequential_round(
    brokers: dict[str, BrokerProcess],
    order: list[str],
    topic: str,
    args: argparse.Namespace,
    rates: dict[str, list[float]],
    cpu: dict[str, list[float]],
) -> str:
    """--sequential: one broker's messages, then the other's (each alone on the machine:
    rates that mean something, CPU per message moved by the CPU's speed of the moment)."""
    for name in order:
        broker = brokers[name]
        before = run_ns(broker.pid)
        rate = _produce_rate(broker, topic, args)
        cpu[name].append(cpu_since(broker.pid, before))
        rates[name].append(rate)
    return f"rate ratio {rates['on'][-1] / rates['off'][-1]:.3f}"


def bench_record_cost(args: argparse.Namespace) -> float:
    """In-process: what the request metrics add to one produce request (1 partition, 1
    batch of ``--batch-records`` records) on the network layer's path: each request is
    decoded from the wire afresh, given its context and permit, run in its handler
    coroutine (`run_with_permit`, or `TrafficStats.run_timed` with the counters) by a handler that
    answers at once (acks=1), stamped taken and sent, its stamps folded. The two paths
    alternate in chunks; returns the median of the chunks' paired differences in CPU
    microseconds per request (the machine's load moves each chunk, less their
    difference)."""
    import asyncio

    from riverbed.protocol.headers import RequestHeader, decode_request, encode_request
    from riverbed.protocol.messages import ProduceRequest, ProduceResponse
    from riverbed.protocol.records import SimpleRecord, build_batch
    from riverbed.server.metrics.traffic import TrafficStats
    from riverbed.server.network import RequestContext, Response
    from riverbed.server.request_permits import RequestPermit, run_with_permit
    from riverbed.server.request_timing import TAKEN, TimedPermit

    batch = build_batch([SimpleRecord(VALUE, timestamp=1) for _ in range(args.batch_records)])
    sent = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    frame = encode_request(RequestHeader(0, 9, 1, "b"), sent)[4:]

    stats = TrafficStats(lambda _id: None)

    async def handler(_ctx: RequestContext, body: object) -> Response | None:
        assert isinstance(body, ProduceRequest)
        topic = body.topic_data[0]
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(
                    name=topic.name,
                    partition_responses=[ProduceResponse.PartitionProduceResponse(index=0)],
                )
            ]
        )

    async def counting(ctx: RequestContext, body: object) -> Response | None:
        """`handler` plus the produce handler's own counting with metrics on (its
        append's bytes and records, then each partition: `riverbed.server.broker.produce`)."""
        assert isinstance(body, ProduceRequest)
        records = body.topic_data[0].partition_data[0].records
        assert records is not None
        counters = stats.produce_topic(body.topic_data[0].name)
        counters.bytes_in += len(records)
        counters.messages_in += args.batch_records  # the append info's records_count
        response = await handler(ctx, body)
        assert isinstance(response, ProduceResponse)
        for answer in response.responses:
            counters = stats.produce_topic(answer.name)
            counters.total_produce += len(answer.partition_responses)
            for part in answer.partition_responses:
                if part.error_code:
                    counters.failed_produce += 1
        return response

    permits = asyncio.Semaphore(1)
    clock = time.perf_counter

    def one(timed: bool) -> None:
        received = clock()
        header, body = decode_request(frame)
        ctx = RequestContext(header, "peer", "PLAINTEXT", 1, 0)
        timing = TimedPermit(permits, received) if timed else None
        coro = (
            run_with_permit(handler, RequestPermit(permits), ctx, body)
            if timing is None
            else stats.run_timed(counting, timing, ctx, body)
        )
        with contextlib.suppress(StopIteration):  # answered at once, as acks=1
            coro.send(None)
        if timing is not None:  # the writer
            timing.stamps[TAKEN] = clock()
            stats.sent([timing], clock())

    def chunk(timed: bool, n: int = 1000) -> float:
        cpu_start = time.process_time()
        for _ in range(n):
            one(timed)
        return (time.process_time() - cpu_start) / n * 1e6

    for _ in range(3):  # warm up both paths
        chunk(False)
        chunk(True)
    off, on, diffs = [], [], []
    for i in range(40):
        first = i % 2 == 0
        a = chunk(first)
        b = chunk(not first)
        per_on, per_off = (a, b) if first else (b, a)
        on.append(per_on)
        off.append(per_off)
        diffs.append(per_on - per_off)
    cost = statistics.median(diffs)
    print(
        f"one produce request ({args.batch_records} records in one batch) through the network"
        f" layer's path, CPU per request: without metrics {statistics.median(off):.2f} us,"
        f" with {statistics.median(on):.2f} us; the metrics' share {cost:.2f} us"
        " (median of 40 paired chunks)"
    )
    return cost


def bench_scrape(args: argparse.Namespace) -> None:
    topics = max(1, args.partitions // PARTITIONS_PER_TOPIC)
    with BrokerProcess(overrides={"num.partitions": "1"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        start = time.perf_counter()
        names = [f"scrape-{i}" for i in range(topics)]
        for at in range(0, len(names), TOPICS_PER_REQUEST):
            chunk = names[at : at + TOPICS_PER_REQUEST]
            futures = admin.create_topics(
                [NewTopic(n, PARTITIONS_PER_TOPIC, 1) for n in chunk], request_timeout=600
            )
            try:
                for f in futures.values():
                    f.result(600)
            except Exception:
                print(broker.log_tail())
                raise
        want = topics * PARTITIONS_PER_TOPIC

        def hosted() -> float:
            text = urllib.request.urlopen(broker.http_url + "/metrics", timeout=60).read()
            for line in text.decode().splitlines():
                if line.startswith("kafka_server_replicamanager_partitioncount "):
                    return float(line.split()[1])
            return 0.0

        while hosted() < want:
            time.sleep(1)
        print(f"{want} partitions created and open in {time.perf_counter() - start:.1f} s")
        times, cpu = [], []
        size = 0
        for _ in range(args.scrapes):
            t, c = time.perf_counter(), _cpu_s(broker.pid)
            body = urllib.request.urlopen(broker.http_url + "/metrics", timeout=60).read()
            times.append(time.perf_counter() - t)
            cpu.append(_cpu_s(broker.pid) - c)
            size = len(body)
        series = sum(1 for line in body.decode().splitlines() if not line.startswith("#"))
        print(
            f"/metrics: {size:,} bytes, {series:,} series; scrape s: "
            f"min {min(times):.3f} median {statistics.median(times):.3f} max {max(times):.3f};"
            f" broker CPU s per scrape: median {statistics.median(cpu):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=20)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--batch-records", type=int, default=20)
    parser.add_argument("--control", action="store_true", help="A/A: counters off in both")
    parser.add_argument("--pairs", type=int, default=2, help="broker pairs, started in turn")
    parser.add_argument(
        "--sequential", action="store_true", help="one broker's messages, then the other's"
    )
    parser.add_argument(
        "--slices", type=int, default=0, help="a round's messages in slices, in turn (0: at once)"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help=f"--sequential: brokers on CPU {BROKER_CPU}, producers elsewhere",
    )
    parser.add_argument("--only", choices=("produce", "record", "scrape"))
    args = parser.parse_args()
    refused = check_cpus() if args.pin or not args.sequential else None
    if refused:
        parser.error(f"{refused}; --sequential runs anywhere")
    cost_us = bench_record_cost(args) if args.only in (None, "record") else None
    if args.only in (None, "produce"):
        request_us = bench_produce(args)
        if cost_us is not None:
            # the two CPU figures of one run: the throughput a CPU-bound broker keeps
            print(
                f"metrics' work per request {cost_us:.2f} us of the broker's {request_us:.1f} us"
                f" without them: modelled ratio on/off {request_us / (request_us + cost_us):.3f}"
            )
    if args.only in (None, "scrape"):
        bench_scrape(args)


if __name__ == "__main__":
    main()
