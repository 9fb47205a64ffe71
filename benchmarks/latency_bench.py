"""acks=all latency at half of peak: replication factor 1 on one node vs 3 on three (issue 23).

In one run, for each cluster (``rf1-1node``: one node, replication factor 1;
``rf3-3nodes``: three local nodes, replication factor 3, ``min.insync.replicas`` 2), one
partition, the client workload of ``riverbed bench latency`` (confluent-kafka, acks=all,
batch.size 16384, linger.ms ``--linger-ms``, ``--size``-byte records):

- the peak: an unpaced run of ``--messages`` records;
- ``--trials`` runs of ``--paced-s`` seconds at half of that peak, each reporting
  send-to-ack p50/p95/p99/p99.9/max measured from each record's intended send time
  (`riverbed.cli.bench_latency`: a client or broker behind schedule counts) over a uniform
  random sample of one record in ``--sample-every`` (only those carry a Python delivery
  callback, so the client leaves the CPU to the nodes; the sample's size is printed), and
  per 1000 records the CPU time of the node processes and of the client, the wake-ups of
  the nodes' event-loop threads (voluntary context switches, /proc): figures a loaded
  machine disturbs far less than latency; and the time the nodes' and the client's threads
  waited for a CPU while runnable (schedstat run delay: queueing for a core, not work),
  and the share of the machine's cores the nodes and the client kept busy together.

RF1 then also runs ``--trials`` trials at RF3's half-peak rate (not with ``--rate``): the same
offered load, so the p50 ratio shows what replication adds; at each one's own half peak RF1
runs ~2.6x faster and its producer's 16 KiB batches fill ~2.6x sooner.

Printed: each trial, the median over trials per cluster, the goal ratios (RF3 p99 <= 10 ms;
RF3 p50 within 2x of RF1, at each one's half peak and at the same rate) and the load average before and after (``os.getloadavg``).

Run: ``.venv/bin/python -m benchmarks.latency_bench [--messages 100000] [--trials 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.replication_bench import wait_isr
from riverbed.cli.bench_latency import DEFAULT_SAMPLE_EVERY, LatencyRun, run_latency
from riverbed.cli.bench_runners import run_produce
from riverbed.testing.quorum_cluster import QuorumCluster

TOPIC = "bench"
PERCENTILES = ("p50", "p95", "p99", "p99.9", "max")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def node_cost(pids: list[int]) -> tuple[float, int]:
    """(CPU seconds of the node processes, voluntary context switches of their event-loop
    threads: how often a loop went to sleep and had to be woken) so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu, wakeups = 0.0, 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu += (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        with open(f"/proc/{pid}/task/{pid}/status") as f:
            for row in f:
                if row.startswith("voluntary_ctxt_switches:"):
                    wakeups += int(row.split()[1])
    return cpu, wakeups


def cpu_wait_s(pids: list[int]) -> float:
    """Seconds the threads of ``pids`` spent runnable but waiting for a CPU so far (the
    scheduler's run delay, /proc/PID/task/TID/schedstat): on a machine with more runnable
    processes than cores, latency that is queueing for a core, not work."""
    waited = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    waited += int(f.read().split()[1])
            except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
                continue
    return waited / 1e9


def line(
    name: str,
    run: LatencyRun,
    cost: tuple[float, int],
    client_cpu_s: float,
    waits: tuple[float, float],
    wall_s: float,
) -> str:
    lat = run.result.latency_ms
    peak = f"peak {run.peak:,.0f}/s, " if run.peak is not None else ""
    figures = " ".join(f"{p} {lat[p]:.1f}" for p in PERCENTILES)
    per_k = 1000 / max(1, run.result.records)
    return (
        f"{name}: {peak}at {run.rate:,.0f}/s (achieved {run.result.records_per_s:,.0f}/s, "
        f"errors {run.result.errors}): ms {figures} ({run.sampled:,} timed, 1 in "
        f"{run.sample_every}); per 1000 records the nodes used "
        f"{cost[0] * per_k * 1000:.1f} ms CPU, their loops woke {cost[1] * per_k:.0f} times, "
        f"the client {client_cpu_s * per_k * 1000:.1f} ms CPU; waited for a CPU: the nodes "
        f"{waits[0] * per_k * 1000:.1f} ms, the client {waits[1] * per_k * 1000:.1f} ms; "
        f"{busy_share(cost[0] + client_cpu_s, wall_s):.0%} of the machine's cores busy"
    )


def busy_share(cpu_s: float, wall_s: float, cores: int | None = None) -> float:
    """The share of the machine's cores that ``cpu_s`` of CPU over ``wall_s`` kept busy: on
    a machine that holds every node and the client, what the paced rate costs in all (at
    ~90% the run is queueing for a core, whatever each process does)."""
    cores = cores or os.cpu_count() or 1
    return cpu_s / (wall_s * cores) if wall_s > 0 else 0.0


def measure(
    base: Path, nodes: int, rf: int, args: argparse.Namespace, also_at: float | None = None
) -> tuple[list[LatencyRun], list[LatencyRun]]:
    """The cluster's trials at half of its peak (or ``--rate``) and, with ``also_at``, as
    many trials at that rate on the same cluster (RF1 at RF3's rate: the same load)."""
    overrides = {
        "default.replication.factor": str(rf),
        "min.insync.replicas": "2" if rf == 3 else "1",
    }
    name = f"rf{rf}-{nodes}node{'s' if nodes > 1 else ''}"
    runs: list[LatencyRun] = []
    with QuorumCluster(base / name, nodes, overrides=overrides) as c:
        c.start(timeout_s=60)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, rf)])[TOPIC].result(30)
        wait_isr(admin, rf)
        common = {"record_size": args.size, "linger_ms": args.linger_ms, "duration_s": args.paced_s}
        pids = [p for p in (c.nodes[i].pid for i in c.ids) if p is not None]
        peak = None
        if args.rate <= 0:
            peak = run_produce(
                c.bootstrap_servers, TOPIC, args.messages, args.size, linger_ms=args.linger_ms
            ).records_per_s
        rate = args.rate if peak is None else peak / 2
        plan = [(rate, peak)] * args.trials
        if also_at is not None:
            plan += [(also_at, None)] * args.trials
        for rate, peak_of_run in plan:
            me = [os.getpid()]
            before, client_before = node_cost(pids), time.process_time()
            waits_before = (cpu_wait_s(pids), cpu_wait_s(me))
            started = time.monotonic()
            run = run_latency(
                c.bootstrap_servers, TOPIC, rate=rate, sample_every=args.sample_every, **common
            )
            wall_s = time.monotonic() - started
            after, client_s = node_cost(pids), time.process_time() - client_before
            waits = (cpu_wait_s(pids) - waits_before[0], cpu_wait_s(me) - waits_before[1])
            run = LatencyRun(run.rate, peak_of_run, run.result, run.sampled, run.sample_every)
            runs.append(run)
            cost = (after[0] - before[0], after[1] - before[1])
            print(line(name, run, cost, client_s, waits, wall_s), flush=True)
    return runs[: args.trials], runs[args.trials :]


def median(runs: list[LatencyRun], p: str) -> float:
    return statistics.median(r.result.latency_ms[p] for r in runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000, help="records of the peak run")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--paced-s", type=float, default=5.0)
    ap.add_argument("--trials", type=int, default=3, help="paced runs per cluster")
    ap.add_argument(
        "--sample-every",
        type=int,
        default=DEFAULT_SAMPLE_EVERY,
        help="time one record in this many on average (a uniform random sample)",
    )
    ap.add_argument(
        "--rate",
        type=float,
        default=-1,
        help="a fixed rate for both (records/s) instead of half of each peak",
    )
    args = ap.parse_args(argv)
    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        rf3, _ = measure(Path(tmp), 3, 3, args)
        rf3_rate = rf3[0].rate
        same = rf3_rate if args.rate <= 0 else None  # with --rate both run at it already
        rf1, rf1_same = measure(Path(tmp), 1, 1, args, also_at=same)
    rows = [("rf1-1node", rf1), ("rf3-3nodes", rf3)]
    if rf1_same:
        rows.insert(1, (f"rf1-1node at {rf3_rate:,.0f}/s", rf1_same))
    for name, runs in rows:
        figures = " ".join(f"{p} {median(runs, p):.1f}" for p in PERCENTILES)
        print(f"{name} median of {len(runs)} trials: ms {figures}")
    p50_ratio = median(rf3, "p50") / median(rf1, "p50")
    print(f"goal: RF3 p99 {median(rf3, 'p99'):.1f} ms (<= 10); RF3/RF1 p50 {p50_ratio:.2f}x (<= 2)")
    if rf1_same:
        # the same offered load on both: what replication adds, without RF1's faster
        # batching at its own (~2.6x higher) half peak
        same_ratio = median(rf3, "p50") / median(rf1_same, "p50")
        print(f"  at the same rate ({rf3_rate:,.0f}/s): RF3/RF1 p50 {same_ratio:.2f}x (<= 2)")
    print(f"after: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
