"""Where an acks=all produce's time goes on three local nodes: the replication cycle (issue 23).

Runs a replication-factor-3 partition on three nodes (``min.insync.replicas`` 2) with
``RIVERBED_CYCLE_TRACE`` set (`riverbed.server.replication.cycle_trace`: each node stamps
the stages of the cycle), produces at ``--rate`` records/s for ``--paced-s`` seconds with
``riverbed bench latency``'s fixed-rate client (acks=all), then follows every appended
offset through both sides and prints, per stage, the median / p90 / p99 in ms over the
middle of the run:

- ``in->append``: the Produce request reached its handler -> appended on the leader;
- ``append->fetch_out``: -> the answer to the slower follower's fetch that carries it is
  ready (``parked``: how often that follower's fetch was already parked at the append, so
  this is a wake-up, not the rest of its previous cycle);
- ``fetch_out->f_recv``: -> the follower has read the response;
- ``f_recv->f_appended``: -> the follower appended it (and set its high watermark);
- ``f_appended->f_sent``: -> the follower's next fetch, from the new log end, sent;
- ``f_sent->fetch_in``: -> that fetch reached the leader's handler;
- ``fetch_in->hw``, ``hw->done``, ``done->out``: -> the high watermark covers the offset ->
  the delayed produce completed -> the Produce answer is ready;
- ``append->out``: the whole cycle on the leader; and per follower cycle (fetch to next
  fetch) its length and the records it carried.

Run: ``.venv/bin/python -m benchmarks.replication_cycle [--rate 77000] [--paced-s 5]``.
"""

from __future__ import annotations

import argparse
import bisect
import os
import resource
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.latency_bench import load, node_cost
from benchmarks.replication_bench import wait_isr
from riverbed.cli.bench import run_produce
from riverbed.cli.bench_latency import run_latency
from riverbed.server.replication.cycle_trace import CYCLE_TRACE_ENV
from riverbed.testing.quorum_cluster import QuorumCluster

TOPIC = "cycle"
#: The first and last part of the run left out (warm-up, the drain at the end).
EDGE_FRACTION = 0.1


@dataclass
class NodeTrace:
    """One node's events: name -> [(ns, values)] in time order."""

    events: dict[str, list[tuple[int, tuple[int, ...]]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    @classmethod
    def read(cls, path: Path) -> NodeTrace:
        trace = cls()
        for row in path.read_text().splitlines():
            ns, name, *values = row.split()
            trace.events[name].append((int(ns), tuple(int(v) for v in values)))
        return trace


def first_after(
    items: Sequence[tuple[int, tuple[int, ...]]], t: int, ok: object = None
) -> tuple[int, tuple[int, ...]] | None:
    """The first event at or after ``t`` (whose values satisfy ``ok``, a predicate)."""
    i = bisect.bisect_left(items, (t,))
    for item in items[i:]:
        if ok is None or ok(item[1]):  # type: ignore[operator]
            return item
    return None


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def analyse(leader: NodeTrace, followers: dict[int, NodeTrace]) -> dict[str, list[float]]:
    ev = leader.events
    appends = ev["append"]
    lo, hi = int(len(appends) * EDGE_FRACTION), int(len(appends) * (1 - EDGE_FRACTION))
    stages: dict[str, list[float]] = defaultdict(list)
    outs = {r: [e for e in ev["fetch_out"] if e[1][0] == r] for r in followers}
    ins = {r: [e for e in ev["fetch_in"] if e[1][0] == r] for r in followers}
    done_at = {v[0]: t for t, v in ev["produce_done"]}
    pairs = list(zip(ev["produce_in"], ev["produce_out"], strict=False))
    for n in range(lo, hi):
        t_append, (end,) = appends[n]
        path: dict[int, dict[str, int]] = {}
        for r, ft in followers.items():
            out = first_after(outs[r], t_append, lambda v, e=end: v[1] < e <= v[2])
            sent = first_after(ft.events["f_sent"], t_append, lambda v, e=end: v[0] >= e)
            fin = first_after(ins[r], t_append, lambda v, e=end: v[1] >= e)
            if out is None or sent is None or fin is None:
                break
            recv = first_after(ft.events["f_recv"], out[0])
            appended = first_after(ft.events["f_appended"], out[0])
            if recv is None or appended is None:
                break
            prev_in = [e for e in ins[r] if e[0] <= t_append][-1:]
            parked = bool(prev_in) and not any(prev_in[0][0] <= e[0] <= t_append for e in outs[r])
            path[r] = {
                "out": out[0],
                "recv": recv[0],
                "app": appended[0],
                "sent": sent[0],
                "in": fin[0],
                "parked": int(parked),
            }
        else:
            hw = first_after(ev["hw"], t_append, lambda v, e=end: v[0] >= e)
            if hw is None or end not in done_at or n >= len(pairs):
                continue
            slow = max(path.values(), key=lambda p: p["in"])
            t_in, t_out = pairs[n][0][0], pairs[n][1][0]
            steps = [
                ("in->append", t_in, t_append),
                ("append->fetch_out", t_append, slow["out"]),
                ("fetch_out->f_recv", slow["out"], slow["recv"]),
                ("f_recv->f_appended", slow["recv"], slow["app"]),
                ("f_appended->f_sent", slow["app"], slow["sent"]),
                ("f_sent->fetch_in", slow["sent"], slow["in"]),
                ("fetch_in->hw", slow["in"], hw[0]),
                ("hw->done", hw[0], done_at[end]),
                ("done->out", done_at[end], t_out),
                ("append->out", t_append, t_out),
            ]
            for name, a, b in steps:
                stages[name].append((b - a) / 1e6)
            stages["parked"].append(slow["parked"])
            kind = "parked" if slow["parked"] else "not parked"
            stages[f"append->fetch_out, {kind}"].append((slow["out"] - t_append) / 1e6)
    for ft in followers.values():
        sent = ft.events["f_sent"]
        lo_f, hi_f = int(len(sent) * EDGE_FRACTION), int(len(sent) * (1 - EDGE_FRACTION))
        for (t0, v0), (t1, v1) in zip(sent[lo_f:hi_f], sent[lo_f + 1 : hi_f + 1], strict=False):
            stages["follower cycle"].append((t1 - t0) / 1e6)
            stages["records per cycle"].append(v1[0] - v0[0])
    return stages


def report(stages: dict[str, list[float]]) -> None:
    cycles = len(stages["append->out"])
    parked = statistics.mean(stages["parked"]) if stages["parked"] else float("nan")
    print(f"{cycles} produces followed; slower follower's fetch parked at the append: {parked:.0%}")
    for name, values in stages.items():
        if name == "parked":
            continue
        unit = "" if name == "records per cycle" else " ms"
        print(
            f"  {name:30s} p50 {pct(values, 0.5):8.2f} p90 {pct(values, 0.9):8.2f} "
            f"p99 {pct(values, 0.99):8.2f}{unit}  (n={len(values)})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rate", type=float, default=77_000, help="records/s")
    ap.add_argument("--paced-s", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--warm-records", type=int, default=100_000, help="unpaced, first")
    args = ap.parse_args(argv)
    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "trace"
        os.environ[CYCLE_TRACE_ENV] = str(prefix)
        overrides = {"default.replication.factor": "3", "min.insync.replicas": "2"}
        with QuorumCluster(Path(tmp) / "rf3", 3, overrides=overrides) as c:
            c.start(timeout_s=60)
            del os.environ[CYCLE_TRACE_ENV]
            admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
            admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
            wait_isr(admin, 3, topic=TOPIC)
            pids = {i: p for i in c.ids if (p := c.nodes[i].pid) is not None}
            # as latency_bench's peak run: connections, codecs and segments warm first
            run_produce(c.bootstrap_servers, TOPIC, args.warm_records, args.size)
            before = {i: node_cost([p]) for i, p in pids.items()}
            client_before = resource.getrusage(resource.RUSAGE_SELF)
            run = run_latency(
                c.bootstrap_servers,
                TOPIC,
                rate=args.rate,
                duration_s=args.paced_s,
                record_size=args.size,
                linger_ms=args.linger_ms,
            )
            client_after = resource.getrusage(resource.RUSAGE_SELF)
            after = {i: node_cost([p]) for i, p in pids.items()}
        traces = {i: NodeTrace.read(Path(f"{prefix}.{pid}")) for i, pid in pids.items()}
    lat = run.result.latency_ms
    per_k = 1000 / max(1, run.result.records)
    leader = next(i for i, t in traces.items() if t.events["append"])
    cpu = {i: (after[i][0] - before[i][0]) * per_k * 1000 for i in pids}
    wakeups = sum(after[i][1] - before[i][1] for i in pids) * per_k
    client_cpu = sum(
        getattr(client_after, f) - getattr(client_before, f) for f in ("ru_utime", "ru_stime")
    )
    print(
        f"at {args.rate:,.0f}/s (achieved {run.result.records_per_s:,.0f}/s): client ms "
        f"p50 {lat['p50']:.1f} p99 {lat['p99']:.1f}; CPU ms per 1000 records: nodes "
        f"{sum(cpu.values()):.1f} (leader {cpu[leader]:.1f}, followers "
        + ", ".join(f"{cpu[i]:.1f}" for i in pids if i != leader)
        + f"), client {client_cpu * per_k * 1000:.1f}; node loop wake-ups per 1000 "
        f"{wakeups:.0f}"
    )
    report(analyse(traces[leader], {i: t for i, t in traces.items() if i != leader}))
    print(f"after: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
