"""Producer-id ledger benchmark (issue 14): memory and speed of ledger + cache vs a dict.

Run: ``.venv/bin/python -m benchmarks.producer_ledger_bench [--ids 10000000] [--reads 20000]
[--only state|produce]``

- ``state``: ``--ids`` distinct producer ids, each written once through the producer
  state's store (a ``ProducerEntry`` with one batch, as after a producer's first batch),
  then ``--reads`` reads of random known ids and ``--reads`` reads of unknown ids. Two
  child processes in the same run: the ledger (``PidLedger`` + ``LedgerStore``, the
  broker's configuration: ``producer.id.cache.max.entries``, 1 % false positives, the
  active file flushed when full) and the baseline, a plain dict of the same entries
  (``DictStore``, Kafka's in-memory map). Printed: resident memory growth (VmRSS after -
  before, and the peak), update and read throughput, ratios ledger / dict, and the
  false-positive rate the ledger's filters achieved on the unknown ids.
- ``produce``: one broker process; confluent-kafka produces ``--messages`` 100-byte
  messages (``batch.size`` ``--batch-bytes``, 16 KiB as the Java client's default, so the
  per-batch producer-state work shows) with ``enable.idempotence`` true and false,
  alternated, best of ``--rounds`` each; the ratio of the throughputs.

- ``producers``: ``--producers`` distinct producer ids against one broker process (each
  an InitProducerId and one idempotent batch, pipelined 1000 at a time): the broker's
  resident memory before and after (the issue asks for one million; the default is
  100,000 to keep the run short, ``--producers 1000000`` takes ~10x longer).

Not a test: it never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T0 = 1_700_000_000_000


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def child(kind: str, ids: int, reads: int, cache: int, file_bytes: int) -> dict[str, Any]:
    from riverbed.producer.cache import LedgerStore
    from riverbed.producer.ledger import LedgerConfig, PidLedger
    from riverbed.producer.state import BatchMetadata, DictStore, ProducerEntry

    rng = random.Random(42)
    known = [rng.randrange(ids) for _ in range(reads)]
    unknown = [ids + rng.randrange(1 << 40) for _ in range(reads)]
    tmp = tempfile.mkdtemp(prefix="ledger-bench-")
    ledger = None
    before = _status_kib("VmRSS")
    store: Any
    if kind == "ledger":
        ledger = PidLedger(Path(tmp), LedgerConfig(fpp=0.01, file_bytes=file_bytes))
        ledger.open()
        store = LedgerStore(ledger, cache, lambda: T0, 86_400_000)
    else:
        store = DictStore()
    start = time.perf_counter()
    for pid in range(ids):
        store.put(ProducerEntry(pid, 0, [BatchMetadata(0, 0, pid, pid, T0)], last_timestamp=T0))
        if ledger is not None and pid & 4095 == 0 and ledger.flush_due(T0, T0):
            ledger.flush(pid + 1)  # the manager's full-filter flush
    update_s = time.perf_counter() - start
    after_updates = _status_kib("VmRSS")
    start = time.perf_counter()
    for pid in known:
        assert store.get(pid) is not None
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    for pid in unknown:
        assert store.get(pid) is None
    absent_s = time.perf_counter() - start
    out: dict[str, Any] = {
        "kind": kind,
        "ids": ids,
        "rss_growth_mib": (after_updates - before) / 1024,
        "rss_peak_mib": _status_kib("VmHWM") / 1024,
        "rss_baseline_mib": before / 1024,
        "updates_per_s": ids / update_s,
        "reads_per_s": reads / read_s,
        "absent_reads_per_s": reads / absent_s,
    }
    if ledger is not None:
        s = ledger.stats()
        out["files"] = s.sealed_files
        out["filter_mib"] = s.filter_bytes / 2**20
        out["false_positive_rate"] = s.false_positive_checks / max(s.filter_checks, 1)
        out["disk_mib"] = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
        ledger.close()
    for p in Path(tmp).iterdir():
        p.unlink()
    os.rmdir(tmp)
    return out


def run_child(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "benchmarks.producer_ledger_bench", "--child", kind,
        "--ids", str(args.ids), "--reads", str(args.reads), "--cache", str(args.cache),
        "--file-bytes", str(args.file_bytes),
    ]  # fmt: skip
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def bench_state(args: argparse.Namespace) -> None:
    led = run_child("ledger", args)
    base = run_child("dict", args)
    print(f"producer state of {args.ids:,} ids (cache {args.cache:,}, ledger file "
          f"{args.file_bytes / 2**20:.0f} MiB, fpp 1 %):")  # fmt: skip
    for key, label in (
        ("rss_growth_mib", "resident memory growth, MiB"),
        ("rss_peak_mib", "peak resident memory (process), MiB"),
        ("updates_per_s", "updates/s"),
        ("reads_per_s", "reads/s of known ids (random)"),
        ("absent_reads_per_s", "reads/s of unknown ids"),
    ):
        ratio = led[key] / base[key] if base[key] else float("nan")
        print(f"  {label:40s} ledger {led[key]:14,.1f}   dict {base[key]:14,.1f}   "
              f"ratio {ratio:.3f}x")  # fmt: skip
    print(f"  ledger: {led['files']} sealed files, {led['filter_mib']:.1f} MiB of filters, "
          f"{led['disk_mib']:.0f} MiB on disk, false-positive rate on unknown ids "
          f"{led['false_positive_rate'] * 100:.3f} % (configured 1 %)")  # fmt: skip


def bench_produce(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from riverbed.testing.cluster import BrokerProcess

    value = b"v" * 100
    with BrokerProcess(overrides={"num.partitions": "1"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        names = [f"bench-{r}" for r in range(args.rounds * 2)]
        for fut in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
            fut.result(30)
        best: dict[bool, float] = {True: 0.0, False: 0.0}
        errors: list[Any] = []
        delivered = [0]

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered[0] += 1

        for r in range(args.rounds * 2):
            idem = r % 2 == 0
            p = Producer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "enable.idempotence": idem,
                    "acks": "all",
                    "linger.ms": 5,
                    "batch.size": args.batch_bytes,
                    **({"max.in.flight": args.inflight} if args.inflight else {}),
                    "log_level": 3,
                }
            )
            topic = names[r]
            p.produce(topic, value=value, on_delivery=on_delivery)  # metadata, producer id
            p.flush(30)
            delivered[0] = 0
            start = time.perf_counter()
            for _ in range(args.messages):
                while True:
                    try:
                        p.produce(topic, value=value, on_delivery=on_delivery)
                        break
                    except BufferError:
                        p.poll(0.01)
            assert p.flush(120) == 0
            rate = args.messages / (time.perf_counter() - start)
            if errors or delivered[0] != args.messages:
                raise SystemExit(f"delivery failed: {delivered[0]} delivered, {errors[:3]}")
            best[idem] = max(best[idem], rate)
    print(f"produce {args.messages:,} x 100 B, acks=all, batch.size {args.batch_bytes}, "
          f"max.in.flight {args.inflight or 'default'}, confluent-kafka, "
          f"best of {args.rounds}:")  # fmt: skip
    print(f"  idempotence on  {best[True]:12,.0f} msg/s")
    print(f"  idempotence off {best[False]:12,.0f} msg/s")
    print(f"  ratio on/off    {best[True] / best[False]:.3f}x")


def bench_producers(args: argparse.Namespace) -> None:
    """``--producers`` distinct producer ids against one broker, each InitProducerId + one
    batch, pipelined; the broker's resident memory before and after."""
    from riverbed.testing.cluster import BrokerProcess
    from riverbed.testing.many_producers import Pipe, create_topic, many_producers, rss_mib

    with BrokerProcess() as broker:
        assert broker.pid is not None
        pipe = Pipe(broker.port)
        create_topic(pipe, "pids")
        time.sleep(1.0)
        before = rss_mib(broker.pid)
        start = time.perf_counter()
        many_producers(pipe, "pids", args.producers)
        elapsed = time.perf_counter() - start
        after = rss_mib(broker.pid)
        pipe.close()
    print(f"{args.producers:,} producer ids (InitProducerId + one batch each) against one "
          f"broker in {elapsed:.0f} s:")  # fmt: skip
    print(
        f"  broker resident memory {before:.1f} MiB -> {after:.1f} MiB "
        f"(+{after - before:.1f} MiB, {(after - before) * 2**20 / args.producers:.0f} B/id)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=int, default=10_000_000)
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--cache", type=int, default=10_000)
    ap.add_argument("--file-bytes", type=int, default=4 << 20)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-bytes", type=int, default=16384, help="producer batch.size")
    ap.add_argument(
        "--inflight", type=int, default=0, help="max.in.flight for both (default: the client's)"
    )
    ap.add_argument("--producers", type=int, default=100_000)
    ap.add_argument("--only", choices=["state", "produce", "producers"])
    ap.add_argument("--child", choices=["ledger", "dict"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = child(args.child, args.ids, args.reads, args.cache, args.file_bytes)
        print(json.dumps(res))
        return
    if args.only in (None, "state"):
        bench_state(args)
    if args.only in (None, "produce"):
        bench_produce(args)
    if args.only in (None, "producers"):
        bench_producers(args)


if __name__ == "__main__":
    main()
