"""Where a transaction's time goes beyond the idempotent path (issue 19), A/B in one run.

One riverbed node per run; a confluent-kafka idempotent producer sends ``--txns`` x
``--per-txn`` records, then a transactional producer sends the same records in
``--txns`` transactions (begin, produce, flush, commit). Printed per run:

- produce rates and their ratio (transactional / idempotent), as ``txn_bench`` does;
- the median of each cycle's client phases: ``produce`` (the ``produce()`` calls),
  ``flush`` (the records still in flight acknowledged) and ``commit``
  (``commit_transaction``: EndTxn, answered once its PrepareCommit is committed);
- the median round trip of AddPartitionsToTxn, EndTxn and Produce as librdkafka measures
  them (``debug=protocol``: each "Received ...Response (..., rtt N ms)" line; both
  producers log the same way);
- the broker's CPU (utime + stime of its process) per record of each producer and per
  transaction beyond the idempotent cost of its records.

With ``--baseline-src DIR`` (another checkout's ``src``, e.g. from ``git archive``) runs
alternate: baseline broker, this tree's broker, ``--pairs`` times; the clients are the
same. CPU figures are the ones a loaded machine disturbs least.

    .venv/bin/python -m benchmarks.txn_cycle --per-txn 10000 --txns 20 --pairs 3 \\
        --baseline-src /tmp/main-src/src
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.cluster import BrokerProcess

RECORD = b"x" * 100
TIMEOUT_S = 120.0
_RTT = re.compile(r"Received (\w+)Response \(v\d+, \d+ bytes, CorrId \d+, rtt ([\d.]+)ms\)")


class RttLog:
    """librdkafka's log lines (the ``logger`` of confluent-kafka): round trips per API."""

    def __init__(self) -> None:
        self.rtt_ms: dict[str, list[float]] = defaultdict(list)

    def log(self, level: int, fmt: str, *args: object) -> None:
        m = _RTT.search(str(args[-1]) if args else fmt)
        if m is not None:
            self.rtt_ms[m[1]].append(float(m[2]))


@dataclass
class Run:
    idem_rate: float = 0.0
    txn_rate: float = 0.0
    idem_cpu_s: float = 0.0
    txn_cpu_s: float = 0.0
    phases_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    rtt: RttLog = field(default_factory=RttLog)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _conf(bootstrap: str, rtt: RttLog, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "debug": "protocol", "logger": rtt, **extra}


def _idempotent(bootstrap: str, n: int) -> float:
    p = Producer(_conf(bootstrap, RttLog(), **{"enable.idempotence": True}))
    p.produce("idem", RECORD)  # warm-up: connections, metadata, producer id
    assert p.flush(TIMEOUT_S) == 0
    start = time.perf_counter()
    for i in range(n):
        p.produce("idem", RECORD)
        if i % 10_000 == 9_999:
            p.poll(0)
    assert p.flush(TIMEOUT_S) == 0
    return n / (time.perf_counter() - start)


def _transactional(bootstrap: str, run: Run, txns: int, per_txn: int) -> float:
    p = Producer(_conf(bootstrap, run.rtt, **{"transactional.id": "cycle"}))
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()  # warm-up: the partition's first add
    p.produce("txn", RECORD)
    p.commit_transaction(TIMEOUT_S)
    run.rtt.rtt_ms.clear()
    start = time.perf_counter()
    for _ in range(txns):
        t0 = time.perf_counter()
        p.begin_transaction()
        for i in range(per_txn):
            p.produce("txn", RECORD)
            if i % 10_000 == 9_999:
                p.poll(0)
        t1 = time.perf_counter()
        assert p.flush(TIMEOUT_S) == 0
        t2 = time.perf_counter()
        p.commit_transaction(TIMEOUT_S)
        t3 = time.perf_counter()
        for name, a, b in (("produce", t0, t1), ("flush", t1, t2), ("commit", t2, t3)):
            run.phases_ms[name].append((b - a) * 1000)
    return txns * per_txn / (time.perf_counter() - start)


def measure(txns: int, per_txn: int, src: str | None) -> Run:
    env = {"PYTHONPATH": src} if src else None
    run = Run()
    with BrokerProcess(overrides={"num.partitions": "1"}, env=env) as b:
        assert b.pid is not None
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("idem", "txn")]).values():
            f.result(30)
        # the coordinator's topic and the producer id: outside the clocks below
        _transactional(b.bootstrap, Run(), 1, 1)
        c0 = _cpu_s(b.pid)
        run.idem_rate = _idempotent(b.bootstrap, txns * per_txn)
        c1 = _cpu_s(b.pid)
        run.txn_rate = _transactional(b.bootstrap, run, txns, per_txn)
        c2 = _cpu_s(b.pid)
    run.idem_cpu_s, run.txn_cpu_s = c1 - c0, c2 - c1
    return run


def report(name: str, run: Run, txns: int, per_txn: int) -> str:
    med = statistics.median
    n = txns * per_txn
    phases = " ".join(f"{k} {med(v):.1f}" for k, v in run.phases_ms.items())
    rtts = " ".join(
        f"{api} {med(run.rtt.rtt_ms[api]):.2f}"
        for api in ("AddPartitionsToTxn", "EndTxn", "Produce")
        if run.rtt.rtt_ms[api]
    )
    extra_ms = (run.txn_cpu_s - run.idem_cpu_s) / txns * 1000
    return (
        f"{name}: txn {run.txn_rate:.0f} rec/s vs idempotent {run.idem_rate:.0f} rec/s: "
        f"ratio {run.txn_rate / run.idem_rate:.3f}\n"
        f"  cycle p50 ms: {phases}; rtt p50 ms: {rtts}\n"
        f"  broker CPU: idempotent {run.idem_cpu_s / n * 1e6:.2f} us/record, transactional "
        f"{run.txn_cpu_s / n * 1e6:.2f} us/record, {extra_ms:+.2f} ms per transaction"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-txn", type=int, default=10_000)
    parser.add_argument("--txns", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--baseline-src", help="a checkout's src directory to compare with")
    args = parser.parse_args()
    variants: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline_src:
        variants.insert(0, ("baseline", os.path.abspath(args.baseline_src)))
    for i in range(args.pairs):
        for name, src in variants:
            run = measure(args.txns, args.per_txn, src)
            load = os.getloadavg()[0]
            print(report(f"{name} (run {i + 1}, load {load:.1f})", run, args.txns, args.per_txn))


if __name__ == "__main__":
    main()
