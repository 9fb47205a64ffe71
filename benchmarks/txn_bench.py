"""Transactions (issue 19): transactional vs idempotent produce, EndTxn latency,
read_committed vs read_uncommitted consume.

One riverbed node; confluent-kafka clients in this process. Every figure has its baseline
measured in the same run against the same broker:

- produce: records per second of a transactional producer committing every N records
  (N = 1, 100, 10,000) against an idempotent producer (``enable.idempotence=true``)
  sending the same records with the same settings; ratio = transactional / idempotent;
- EndTxn latency: ``commit_transaction`` wall time after a flush (EndTxn alone, answered
  once its PrepareCommit is committed) of the N = 1 transactions, p50 / p99;
- consume: records per second of a read_committed consumer against a read_uncommitted
  one reading the same partition (the transactional topic of N = 10,000), alternated
  ``CONSUME_ROUNDS`` times, the best of each.

Each producer is warmed up (connections, metadata, producer id, a first transaction)
before its clock starts.

    .venv/bin/python -m benchmarks.txn_bench --records 20000
    .venv/bin/python -m benchmarks.txn_bench --records 200000 --rounds 5 --sizes 10000
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess

QUIET = {"log_level": 3}
RECORD = b"x" * 100
TXN_SIZES = (1, 100, 10_000)
#: Transactions of one record are slow by nature (one EndTxn each): this many at most.
SMALL_TXNS_MAX = 1_000
TIMEOUT_S = 120.0
#: Reads of the same partition per isolation level (alternated; the best counts).
CONSUME_ROUNDS = 2


def _idempotent(bootstrap: str, topic: str, n: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
    p.produce(topic, RECORD)  # warm-up: connections, metadata, producer id
    assert p.flush(TIMEOUT_S) == 0
    start = time.perf_counter()
    for i in range(n):
        p.produce(topic, RECORD)
        if i % 10_000 == 9_999:
            p.poll(0)
    assert p.flush(TIMEOUT_S) == 0
    return n / (time.perf_counter() - start)


def _transactional(
    bootstrap: str, topic: str, n: int, per_txn: int, tid: str
) -> tuple[float, list[float]]:
    """(records per second, commit_transaction ms of each transaction)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **QUIET})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()  # warm-up: connections, metadata, the partition's first add
    p.produce(topic, RECORD)
    p.commit_transaction(TIMEOUT_S)
    commits: list[float] = []
    start = time.perf_counter()
    sent = 0
    while sent < n:
        p.begin_transaction()
        for _ in range(min(per_txn, n - sent)):
            p.produce(topic, RECORD)
            sent += 1
            if sent % 10_000 == 0:
                p.poll(0)
        assert p.flush(TIMEOUT_S) == 0  # the clock below is EndTxn's alone
        t = time.perf_counter()
        p.commit_transaction(TIMEOUT_S)
        commits.append((time.perf_counter() - t) * 1000)
    return n / (time.perf_counter() - start), commits


def _consume(bootstrap: str, topic: str, n: int, isolation: str) -> float:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}",
         "isolation.level": isolation, "enable.auto.commit": False, **QUIET}
    )  # fmt: skip
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = start + TIMEOUT_S
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 0.5):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    assert got >= n, f"{isolation} read {got} of {n}"
    return n / elapsed


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def run(records: int, rounds: int = 1, sizes: tuple[int, ...] = TXN_SIZES) -> dict[str, Any]:
    """The figures (see the module's docstring); with ``rounds`` > 1 each produce figure
    is the median of that many alternated idempotent / transactional pairs, the ratio the
    median of the pairs' ratios."""
    out: dict[str, Any] = {}
    with BrokerProcess(overrides={"num.partitions": "1"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, **QUIET})
        topics = ["idem"] + [f"txn-{n}" for n in TXN_SIZES]
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            f.result(30)
        for per_txn in sizes:
            n = min(records, SMALL_TXNS_MAX) if per_txn == 1 else records
            bases, rates, ratios, commits = [], [], [], []
            for r in range(rounds):  # alternated: a loaded machine's noise hits both
                base = _idempotent(b.bootstrap, "idem", n)
                rate, ms = _transactional(b.bootstrap, f"txn-{per_txn}", n, per_txn,
                                          f"b{per_txn}-{r}")  # fmt: skip
                bases.append(base)
                rates.append(rate)
                ratios.append(rate / base)
                commits += ms
            med = statistics.median
            out[per_txn] = (med(rates), med(bases), med(ratios))
            if per_txn == 1:
                out["endtxn"] = (med(commits), _pct(commits, 0.99), len(commits))
        topic = f"txn-{sizes[-1]}"
        rates: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
        for _ in range(CONSUME_ROUNDS):  # alternated, best of each (page cache, warm-up)
            for isolation, seen in rates.items():
                seen.append(_consume(b.bootstrap, topic, records, isolation))
        committed, uncommitted = max(rates["read_committed"]), max(rates["read_uncommitted"])
        out["consume"] = (committed, uncommitted, committed / uncommitted)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternated idempotent/transactional pairs per size (median)",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, TXN_SIZES)),
        help="records per transaction, comma separated",
    )
    args = parser.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(","))
    r = run(args.records, args.rounds, sizes)
    for per_txn in sizes:
        rate, base, ratio = r[per_txn]
        print(f"produce, {per_txn:>6} records per transaction: {rate:10.0f} rec/s vs "
              f"idempotent {base:10.0f} rec/s: ratio {ratio:.3f}")  # fmt: skip
    if "endtxn" not in r:
        return
    p50, p99, count = r["endtxn"]
    print(f"EndTxn (commit_transaction) of {count} one-record transactions: "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")  # fmt: skip
    committed, uncommitted, ratio = r["consume"]
    print(f"consume: read_committed {committed:.0f} rec/s vs read_uncommitted "
          f"{uncommitted:.0f} rec/s: ratio {ratio:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
