"""What an idle cluster costs: CPU and event-loop wake-ups of each node with nothing to do.

Starts ``--nodes`` local nodes (a combined broker and controller each), creates a topic
with one partition per node and replication factor ``min(3, nodes)`` (so every node
leads a partition and follows others: replica fetchers, the controller's timers, raft
heartbeats), waits until every replica is in sync and ``--settle-s`` more, then reads
each node's CPU time and its event-loop thread's voluntary context switches (how often the
loop went to sleep and had to be woken) from /proc over ``--idle-s`` seconds.

Printed per node: CPU as a percentage of one core and wake-ups per second; then the
mean. A node's timers (the stall sampler, the controller's poll, raft's deadlines, the
fetchers' long polls) are most of it: on a laptop, or beside other work on a small
machine, that is what a cluster nobody uses costs.

Run: ``.venv/bin/python -m benchmarks.idle_cost [--nodes 3] [--idle-s 20]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.latency_bench import load, node_cost
from benchmarks.replication_bench import wait_isr
from riverbed.testing.quorum_cluster import QuorumCluster

TOPIC = "idle"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=20.0, help="seconds measured")
    ap.add_argument("--settle-s", type=float, default=5.0, help="seconds before measuring")
    args = ap.parse_args(argv)
    rf = min(3, args.nodes)
    print(f"before: {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {"default.replication.factor": str(rf)}
        with QuorumCluster(Path(tmp) / "idle", args.nodes, overrides=overrides) as c:
            c.start(timeout_s=60)
            admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
            admin.create_topics([NewTopic(TOPIC, args.nodes, rf)])[TOPIC].result(30)
            wait_isr(admin, rf, topic=TOPIC)
            time.sleep(args.settle_s)
            pids = {i: p for i in c.ids if (p := c.nodes[i].pid) is not None}
            before = {i: node_cost([p]) for i, p in pids.items()}
            started = time.monotonic()
            time.sleep(args.idle_s)
            after = {i: node_cost([p]) for i, p in pids.items()}
            elapsed = time.monotonic() - started
    cpu = {i: (after[i][0] - before[i][0]) / elapsed * 100 for i in pids}
    wakeups = {i: (after[i][1] - before[i][1]) / elapsed for i in pids}
    for i in pids:
        print(f"node {i}: CPU {cpu[i]:.2f}% of a core, {wakeups[i]:.0f} loop wake-ups/s")
    n = len(pids)
    print(
        f"mean over {n} idle nodes ({elapsed:.0f} s): CPU {sum(cpu.values()) / n:.2f}% of a "
        f"core, {sum(wakeups.values()) / n:.0f} loop wake-ups/s"
    )
    print(f"after: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
