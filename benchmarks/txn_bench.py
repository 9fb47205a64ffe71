"""Transactions (issue 19): transactional vs idempotent produce, EndTxn latency,
read_committed vs read_uncommitted consume.

One riverbed node; confluent-kafka clients in this process. Every figure has its baseline
measured in the same run against the same broker:

- produce: records per second of a transactional producer committing every N records
  (N = 1, 100, 10,000) against an idempotent producer (``enable.idempotence=true``)
  sending the same records; ratio = transactional / idempotent. Both producers have
  librdkafka's defaults (the transactional one adds only its ``transactional.id``, which
  implies idempotence): no setting favours either side;
- the broker's CPU per record of each side (its threads' /proc/<pid>/task/*/schedstat
  over each side's chunks, as `ab_brokers.run_ns`) and the difference per transaction:
  what a loaded machine disturbs least, and what a CPU-bound broker's throughput follows;
- EndTxn latency: ``commit_transaction`` wall time after a flush (EndTxn alone, answered
  once its PrepareCommit is committed), p50 / p99 per N;
- consume: records per second of a read_committed consumer against a read_uncommitted
  one reading the same range (the first ``--records`` records of the transactional topic
  of the last N), in fine alternated pairs without their start-up, with the broker's CPU
  per record of each (`benchmarks.txn_consume`, whose docstring says how). ``--only
  consume`` measures it alone on its own data: transactions of 1, 100 and 10,000 records,
  10% of them aborted (where markers are dense read_committed costs most).

Why the produce figure is taken in fine alternated pairs: this machine's vCPUs each run at
one of two speeds (~2x apart) for seconds at a time (`benchmarks.ab_brokers`), so a side
measured for seconds alone meets whichever speed its CPUs had (the idempotent baseline
alone read 350k-1.2M rec/s between runs; the ratio 0.53-1.53). Here both producers are
made and warmed up (connections, metadata, producer id, a first transaction) once, then
``--pairs`` pairs each send ``--records`` records per side: the idempotent chunk
(``produce`` x records, then ``flush``) and the transactional chunk (records / N
transactions: begin, produce x N, flush, commit), which side goes first alternating from
pair to pair. A pair takes a fraction of a second, so both sides of a pair meet the same
CPU speeds; the figure is the median of the pairs' ratios (their spread is printed). The
broker is pinned to `ab_brokers.BROKER_CPU` and the clients to the other CPUs (as
`ab_brokers` does), so each side's broker and client meet the same CPU as the other
side's. A chunk ends with a flush on both sides, so each pays one pipeline drain per
chunk; with the default 100,000 records (10 transactions of 10,000) that is ~2% of the
idempotent chunk, what the earlier back-to-back rounds of 100,000 had as well.

``--control`` is the A/A check of the method: the "transactional" side is a second
idempotent producer (its own topic) sent exactly as the idempotent side; its ratio should
be ~1.00, and its spread is the method's noise.

    .venv/bin/python -m benchmarks.txn_bench --records 100000 --pairs 15 --sizes 10000
    .venv/bin/python -m benchmarks.txn_bench --records 100000 --pairs 15 --sizes 10000 --control
    .venv/bin/python -m benchmarks.txn_bench --records 20000 --pairs 5
    .venv/bin/python -m benchmarks.txn_bench --only consume --pairs 15 [--control]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks import txn_consume
from benchmarks.ab_brokers import (
    check_cpus,
    cpu_since,
    pin,
    produce,
    producers_off_broker_cpu,
    run_ns,
)
from riverbed.testing.cluster import BrokerProcess

QUIET = {"log_level": 3}
RECORD = b"x" * 100
TXN_SIZES = (1, 100, 10_000)
#: Short transactions are slow by nature (one EndTxn each): a chunk holds at most this
#: many transactions (--records caps it too), so that 1 and 100 records per transaction
#: take seconds, not minutes, over all the pairs.
TXNS_PER_CHUNK_MAX = 200
TIMEOUT_S = 120.0
#: ``produce`` calls between polls (delivery reports served; as the earlier rounds did).
POLL_EVERY = 10_000

#: One side's chunk: (producer, topic, records, records per transaction or 0) -> commit ms.
Chunk = Callable[[Producer, str, int, int], list[float]]


def _idempotent_producer(bootstrap: str, topic: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
    p.produce(topic, RECORD)  # warm-up: connections, metadata, producer id
    assert p.flush(TIMEOUT_S) == 0
    return p


def _transactional_producer(bootstrap: str, topic: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **QUIET})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()  # warm-up: connections, metadata, the partition's first add
    p.produce(topic, RECORD)
    p.commit_transaction(TIMEOUT_S)
    return p


def _send(p: Producer, topic: str, n: int) -> None:
    for i in range(n):
        produce(p, topic, RECORD)
        if i % POLL_EVERY == POLL_EVERY - 1:
            p.poll(0)


def _idempotent_chunk(p: Producer, topic: str, n: int, per_txn: int) -> list[float]:
    _send(p, topic, n)
    assert p.flush(TIMEOUT_S) == 0
    return []


def _transactional_chunk(p: Producer, topic: str, n: int, per_txn: int) -> list[float]:
    """``n`` records in transactions of ``per_txn``; each ``commit_transaction``'s ms."""
    commits = []
    sent = 0
    while sent < n:
        p.begin_transaction()
        count = min(per_txn, n - sent)
        _send(p, topic, count)
        sent += count
        assert p.flush(TIMEOUT_S) == 0  # the clock below is EndTxn's alone
        t = time.perf_counter()
        p.commit_transaction(TIMEOUT_S)
        commits.append((time.perf_counter() - t) * 1000)
    return commits


def _pairs(
    b: BrokerProcess, per_txn: int, n: int, pairs: int, control: bool
) -> tuple[list[float], list[float], list[float], list[float]]:
    """(idempotent rec/s per pair, the other side's rec/s per pair, commit ms, the
    broker's CPU per record of each side: [idempotent us, other us])."""
    bootstrap = b.bootstrap
    base_topic, other_topic = "idem", ("idem-b" if control else f"txn-{per_txn}")
    base = _idempotent_producer(bootstrap, base_topic)
    other: Producer
    other_chunk: Chunk
    if control:
        other, other_chunk = _idempotent_producer(bootstrap, other_topic), _idempotent_chunk
    else:
        other = _transactional_producer(bootstrap, other_topic, f"b{per_txn}")
        other_chunk = _transactional_chunk
    sides: list[tuple[Producer, str, Chunk]] = [
        (base, base_topic, _idempotent_chunk),
        (other, other_topic, other_chunk),
    ]
    rates: list[list[float]] = [[], []]
    cpu_s = [0.0, 0.0]
    commits: list[float] = []
    for pair in range(pairs):
        for side in (0, 1) if pair % 2 == 0 else (1, 0):  # which goes first alternates
            p, topic, chunk = sides[side]
            ran, start = run_ns(b.pid), time.perf_counter()
            ms = chunk(p, topic, n, per_txn)
            rates[side].append(n / (time.perf_counter() - start))
            cpu_s[side] += cpu_since(b.pid, ran)
            commits += ms
    return rates[0], rates[1], commits, [s * 1e6 / (n * pairs) for s in cpu_s]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def run(
    records: int,
    pairs: int = 5,
    sizes: tuple[int, ...] = TXN_SIZES,
    control: bool = False,
    pinned: bool = True,
) -> dict[Any, Any]:
    """The figures (see the module's docstring): per size (rates' medians, pair ratios,
    commit ms), and "consume" (`txn_consume.ConsumeFigures`)."""
    out: dict[Any, Any] = {}
    with BrokerProcess(overrides={"num.partitions": "1"}) as b:
        if pinned:
            pin(b.pid)
        admin = AdminClient({"bootstrap.servers": b.bootstrap, **QUIET})
        topics = ["idem", "idem-b"] + [f"txn-{n}" for n in TXN_SIZES]
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            f.result(30)
        for per_txn in sizes:
            n = min(records, per_txn * TXNS_PER_CHUNK_MAX)
            bases, others, commits, cpu_us = _pairs(b, per_txn, n, pairs, control)
            ratios = [o / i for i, o in zip(bases, others, strict=True)]
            out[per_txn] = (bases, others, ratios, commits, cpu_us)
        # the A/A control wrote no transactions: both consumers read its second side
        topic = "idem-b" if control else f"txn-{sizes[-1]}"
        out["consume"] = txn_consume.measure(b, topic, records, pairs, control)
    return out


def run_consume(pairs: int, control: bool = False, pinned: bool = True) -> dict[Any, Any]:
    """``--only consume``: the dedicated data (`txn_consume.CONSUME_DATA`, written with
    the broker on every CPU), then each topic's pairs with the broker pinned."""
    out: dict[Any, Any] = {}
    with BrokerProcess(overrides={"num.partitions": "1"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, **QUIET})
        topics = {f"rc-{n}": (n, txns) for n, txns in txn_consume.CONSUME_DATA}
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            f.result(30)
        written = {t: txn_consume.write_topic(b.bootstrap, t, *spec) for t, spec in topics.items()}
        if pinned:
            pin(b.pid)
            producers_off_broker_cpu()  # the consumers' librdkafka threads inherit it
        for t, count in written.items():
            out[topics[t][0]] = txn_consume.measure(b, t, count, pairs, control)
    return out


def _report(r: dict[Any, Any], sizes: tuple[int, ...], control: bool) -> None:
    med = statistics.median
    other = "idempotent B (A/A control)" if control else "transactional"
    for per_txn in sizes:
        bases, others, ratios, commits, (base_us, other_us) = r[per_txn]
        print(f"produce, {per_txn:>6} records per transaction: {other} {med(others):10.0f}"
              f" rec/s vs idempotent {med(bases):10.0f} rec/s: ratio {med(ratios):.3f}"
              f" (median of {len(ratios)} pairs; min {min(ratios):.3f},"
              f" max {max(ratios):.3f})")  # fmt: skip
        print("  pair ratios: " + " ".join(f"{x:.3f}" for x in ratios))
        print(
            "  pairs, k rec/s (idempotent/other): "
            + " ".join(f"{i / 1e3:.0f}/{o / 1e3:.0f}" for i, o in zip(bases, others, strict=True))
        )
        extra_ms = (other_us - base_us) * per_txn / 1e3
        print(f"  broker CPU per record: idempotent {base_us:.3f} us, {other} {other_us:.3f}"
              f" us (ratio {other_us / base_us:.3f}; {extra_ms:+.2f} ms per {per_txn} records)")  # fmt: skip
        if commits:
            print(f"  EndTxn (commit_transaction) of {len(commits)} transactions: "
                  f"p50 {_pct(commits, 0.5):.1f} ms, p99 {_pct(commits, 0.99):.1f} ms")  # fmt: skip
    if "consume" in r:
        txn_consume.report("", r["consume"], control)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="per side per pair")
    parser.add_argument(
        "--pairs",
        "--rounds",
        type=int,
        default=15,
        help="alternated idempotent/transactional pairs per size (median of their ratios)",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, TXN_SIZES)),
        help="records per transaction, comma separated",
    )
    parser.add_argument(
        "--control", action="store_true", help="A/A: both sides idempotent (expect ~1.00)"
    )
    parser.add_argument("--unpinned", action="store_true", help="broker and clients on any CPU")
    parser.add_argument(
        "--only", choices=("consume",), help="consume: read_committed vs read_uncommitted alone"
    )
    args = parser.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(","))
    pinned = not args.unpinned
    if pinned:
        refused = check_cpus()
        if refused:
            parser.error(f"{refused}; --unpinned runs anywhere")
        if args.only is None:  # (--only consume: after its writes, on every CPU)
            producers_off_broker_cpu()  # before any client: librdkafka's threads inherit it
    load = os.getloadavg()[0]
    if args.only == "consume":
        consumed = run_consume(args.pairs, args.control, pinned)
        print(
            f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}; {'pinned' if pinned else 'unpinned'})"
        )
        for per_txn, figures in consumed.items():
            label = (
                f", {per_txn:>6} records per transaction, {100 // txn_consume.ABORT_EVERY}% aborted"
            )
            txn_consume.report(label, figures, args.control)
        return
    r = run(args.records, args.pairs, sizes, args.control, pinned)
    print(f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}; {'pinned' if pinned else 'unpinned'})")
    _report(r, sizes, args.control)


if __name__ == "__main__":
    main()
