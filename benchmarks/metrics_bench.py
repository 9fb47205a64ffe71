"""Metrics benchmark (issue 21): what the hot-path counters cost, and scrape time.

Run: ``.venv/bin/python -m benchmarks.metrics_bench [--messages 200000] [--rounds 3]
[--partitions 10000] [--only produce|scrape]``

- ``produce``: two broker processes in the same run, one with the request/topic counters
  (``riverbed.metrics.enable=true``, the default) and one without; confluent-kafka
  produces ``--messages`` 100-byte messages (acks=1, linger 5 ms) to each, alternated,
  ``--rounds`` times; printed: each rate, the best of each, and the ratio on / off (the
  issue's goal: >= 0.97).
- ``scrape``: one broker with ``--partitions`` partitions (topics of 100 partitions);
  ``/metrics`` is read ``--scrapes`` times; printed: the exposition's size, its series
  count and the scrape times (the issue's goal with 10,000 partitions: < 1 s).

Not a test: it never asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.cluster import BrokerProcess

#: Partitions per topic in the scrape benchmark.
PARTITIONS_PER_TOPIC = 100
VALUE = b"v" * 100


def _produce_rate(broker: BrokerProcess, topic: str, messages: int) -> float:
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 5, "log_level": 3})
    p.produce(topic, value=VALUE)  # metadata first
    assert p.flush(30) == 0
    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                p.produce(topic, value=VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return messages / (time.perf_counter() - start)


def bench_produce(args: argparse.Namespace) -> None:
    common = {"num.partitions": "1", "log.segment.bytes": str(256 * 1024 * 1024)}
    on = BrokerProcess(overrides={**common, "riverbed.metrics.enable": "true"}).start()
    off = BrokerProcess(overrides={**common, "riverbed.metrics.enable": "false"}).start()
    rates: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for r in range(args.rounds):
            order = [("on", on), ("off", off)] if r % 2 == 0 else [("off", off), ("on", on)]
            for name, broker in order:
                rate = _produce_rate(broker, f"bench-{r}", args.messages)
                rates[name].append(rate)
                print(f"round {r} metrics {name:3}: {rate:,.0f} msg/s", flush=True)
    finally:
        on.close()
        off.close()
    best_on, best_off = max(rates["on"]), max(rates["off"])
    med_on, med_off = statistics.median(rates["on"]), statistics.median(rates["off"])
    print(
        f"best: on {best_on:,.0f} msg/s, off {best_off:,.0f} msg/s; ratio {best_on / best_off:.3f}"
    )
    print(f"median: on {med_on:,.0f}, off {med_off:,.0f}; ratio {med_on / med_off:.3f}")


def bench_scrape(args: argparse.Namespace) -> None:
    topics = max(1, args.partitions // PARTITIONS_PER_TOPIC)
    with BrokerProcess(overrides={"num.partitions": "1"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        start = time.perf_counter()
        names = [f"scrape-{i}" for i in range(topics)]
        futures = admin.create_topics(
            [NewTopic(n, PARTITIONS_PER_TOPIC, 1) for n in names], request_timeout=600
        )
        for f in futures.values():
            f.result(600)
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
        times = []
        size = 0
        for _ in range(args.scrapes):
            t = time.perf_counter()
            body = urllib.request.urlopen(broker.http_url + "/metrics", timeout=60).read()
            times.append(time.perf_counter() - t)
            size = len(body)
        series = sum(1 for line in body.decode().splitlines() if not line.startswith("#"))
        print(
            f"/metrics: {size:,} bytes, {series:,} series; scrape s: "
            f"min {min(times):.3f} median {statistics.median(times):.3f} max {max(times):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--only", choices=("produce", "scrape"))
    args = parser.parse_args()
    if args.only in (None, "produce"):
        bench_produce(args)
    if args.only in (None, "scrape"):
        bench_scrape(args)


if __name__ == "__main__":
    main()
