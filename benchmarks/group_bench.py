"""Consumer groups: rebalance time of 10 consumers and OffsetCommit throughput.

One riverbed node (``group.initial.rebalance.delay.ms=0``, so the figure is the
coordinator and the clients, not the configured wait); confluent-kafka clients in this
process. Each figure has a baseline measured in the same run against the same broker:

- rebalance: 10 consumers subscribe to a 10-partition topic at once; the time until every
  one holds exactly one partition, against the time one consumer alone takes to get all
  of them (one join + sync round); the same with ``group.protocol=consumer`` (KIP-848,
  ``group.consumer.heartbeat.interval.ms=100``);
- disruption of a join: a tenth consumer joins nine settled ones; the partition-seconds
  during which some partition had no owner (sampled every few ms) until the split is even
  again, for the classic protocol with its default eager assignor (everyone gives up
  everything), the classic protocol with cooperative-sticky, and KIP-848;
- OffsetCommit: synchronous commits (``commit(asynchronous=False)``, one partition) per
  second, against synchronous acks=all produces (``produce`` + ``flush``) per second:
  both are one durable append to a partition and one response.

    .venv/bin/python -m benchmarks.group_bench --rounds 3 --commits 2000
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess

CONSUMERS = 10
#: Seconds a rebalance may take before the round fails.
REBALANCE_TIMEOUT_S = 120.0
QUIET = {"log_level": 3}


def _consumer(bootstrap: str, group: str, protocol: str = "classic") -> Consumer:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, **QUIET}
    if protocol in ("classic", "cooperative"):
        conf.update({"heartbeat.interval.ms": 100, "session.timeout.ms": 10000})
        if protocol == "cooperative":
            conf["partition.assignment.strategy"] = "cooperative-sticky"
    else:  # KIP-848: timings are the broker's (group.consumer.*)
        conf["group.protocol"] = "consumer"
    return Consumer(conf)


def _even(consumers: list[Consumer], partitions: int) -> bool:
    sizes = [len(c.assignment()) for c in consumers]
    return sum(sizes) == partitions and max(sizes) - min(sizes) <= 1 and min(sizes) > 0


def _join_gap(bootstrap: str, topic: str, group: str, protocol: str) -> tuple[float, float]:
    """A tenth consumer joins nine settled ones: (seconds until the split is even again,
    partition-seconds without an owner meanwhile); consumers closed."""
    consumers = [_consumer(bootstrap, group, protocol) for _ in range(CONSUMERS - 1)]
    for c in consumers:
        c.subscribe([topic])
    try:
        deadline = time.perf_counter() + REBALANCE_TIMEOUT_S
        while not _even(consumers, CONSUMERS):
            if time.perf_counter() > deadline:
                raise RuntimeError("the nine never settled")
            for c in consumers:
                c.poll(0.01)
        newcomer = _consumer(bootstrap, group, protocol)
        consumers.append(newcomer)
        started = last = time.perf_counter()
        newcomer.subscribe([topic])
        unowned = 0.0
        while time.perf_counter() - started < REBALANCE_TIMEOUT_S:
            for c in consumers:
                c.poll(0)
            time.sleep(0.001)
            now = time.perf_counter()
            owned = {tp.partition for c in consumers for tp in c.assignment()}
            unowned += (CONSUMERS - len(owned)) * (now - last)
            last = now
            if _even(consumers, CONSUMERS):
                return now - started, unowned
        raise RuntimeError(f"no even split after {REBALANCE_TIMEOUT_S} s")
    finally:
        for c in consumers:
            c.close()


def _settle(
    bootstrap: str, topic: str, group: str, n: int, partitions: int, protocol: str = "classic"
) -> float:
    """Seconds from n subscribes until the partitions are split evenly; consumers closed."""
    consumers = [_consumer(bootstrap, group, protocol) for _ in range(n)]
    started = time.perf_counter()
    for c in consumers:
        c.subscribe([topic])
    try:
        while time.perf_counter() - started < REBALANCE_TIMEOUT_S:
            for c in consumers:
                c.poll(0.01)
            sizes = [len(c.assignment()) for c in consumers]
            if sum(sizes) == partitions and max(sizes) - min(sizes) <= 1 and min(sizes) > 0:
                return time.perf_counter() - started
        raise RuntimeError(f"no even split after {REBALANCE_TIMEOUT_S} s: {sizes}")
    finally:
        for c in consumers:
            c.close()


def _commit_rate(bootstrap: str, topic: str, group: str, commits: int) -> float:
    c = _consumer(bootstrap, group)
    try:
        started = time.perf_counter()
        for i in range(commits):
            c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        return commits / (time.perf_counter() - started)
    finally:
        c.close()


def _produce_rate(bootstrap: str, topic: str, produces: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **QUIET})
    p.produce(topic, b"warm-up", partition=0)
    p.flush(10)
    started = time.perf_counter()
    for i in range(produces):
        p.produce(topic, f"{i}".encode(), partition=0)
        p.flush(10)
    return produces / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="group_bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=2000)
    args = parser.parse_args(argv)
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "10",
        "group.consumer.heartbeat.interval.ms": "100",
    }
    with BrokerProcess(overrides=overrides) as broker:
        b = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": b, **QUIET})
        admin.create_topics([NewTopic("bench-ten", CONSUMERS, 1)])["bench-ten"].result(30)
        admin.create_topics([NewTopic("bench-one", 1, 1)])["bench-one"].result(30)
        rows: list[dict[str, Any]] = []
        for r in range(args.rounds):
            one = _settle(b, "bench-ten", f"solo-{r}", 1, CONSUMERS)
            ten = _settle(b, "bench-ten", f"ten-{r}", CONSUMERS, CONSUMERS)
            new = _settle(b, "bench-ten", f"new-{r}", CONSUMERS, CONSUMERS, "consumer")
            gaps = {
                p: _join_gap(b, "bench-ten", f"join-{p}-{r}", p)
                for p in ("classic", "cooperative", "consumer")
            }
            commit = _commit_rate(b, "bench-one", f"commit-{r}", args.commits)
            produce = _produce_rate(b, "bench-one", args.commits)
            row = {"one": one, "ten": ten, "new": new, "commit": commit, "produce": produce}
            for p, (took, gap) in gaps.items():
                row[f"join_{p}"], row[f"gap_{p}"] = took, gap
            rows.append(row)
            print(
                "  a tenth joins nine: "
                + ", ".join(
                    f"{p} {took * 1000:.0f} ms, {gap * 1000:.0f} partition-ms unowned"
                    for p, (took, gap) in gaps.items()
                ),
                flush=True,
            )
            print(
                f"round {r}: 1 consumer {one * 1000:.0f} ms, {CONSUMERS} consumers "
                f"{ten * 1000:.0f} ms (consumer protocol {new * 1000:.0f} ms); commits {commit:.0f}/s, acks=all produces "
                f"{produce:.0f}/s",
                flush=True,
            )
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    print(
        f"median: rebalance of {CONSUMERS} consumers {med['ten'] * 1000:.0f} ms vs one "
        f"consumer's join {med['one'] * 1000:.0f} ms ({med['ten'] / med['one']:.2f}x), "
        f"with group.protocol=consumer {med['new'] * 1000:.0f} ms "
        f"({med['new'] / med['one']:.2f}x); "
        f"OffsetCommit {med['commit']:.0f}/s vs acks=all produce {med['produce']:.0f}/s "
        f"({med['commit'] / med['produce']:.2f}x)"
    )
    print(
        "median, a tenth consumer joins nine: "
        + ", ".join(
            f"{p} {med[f'join_{p}'] * 1000:.0f} ms until even, "
            f"{med[f'gap_{p}'] * 1000:.0f} partition-ms unowned"
            for p in ("classic", "cooperative", "consumer")
        )
        + f" (KIP-848 vs classic eager: {med['gap_consumer'] / med['gap_classic']:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
