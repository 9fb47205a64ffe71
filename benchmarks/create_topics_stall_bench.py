"""How long one large CreateTopics stalls a node's event loop (issue 23, metadata scale).

One combined broker+controller process (`riverbed.testing.cluster.BrokerProcess`); an
ApiVersions probe on its own connection every ``PROBE_INTERVAL_S`` (10 ms) while one
CreateTopics of ``--topics`` x ``--partitions`` (replication factor 1) is answered and its
logs are created. Printed, per round:

- when the CreateTopics was answered (it answers once every log exists);
- the probe's p50 / p99 / max round trip (a stalled loop answers late);
- the node's own loop-stall metrics over the window (``riverbed_event_loop_stalls_total``,
  stalls > 5 ms, and ``riverbed_event_loop_stall_seconds_max``);
- the node's CPU seconds for the creation, and then over ``--idle-s`` seconds of idling
  with the partitions in place (timers and housekeeping that walk every partition show
  up here, growing with the partitions);
- the load average (``os.getloadavg``): compare rounds run at similar load.

Run: ``.venv/bin/python -m benchmarks.create_topics_stall_bench [--topics 100]
[--partitions 100] [--rounds 1]``. A/B: run it with ``PYTHONPATH`` naming each tree,
alternated.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import struct
import tempfile
import threading
import time
import urllib.request

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.cluster import BrokerProcess

#: Time between two probes (after the previous answer).
PROBE_INTERVAL_S = 0.01
#: Longest wait for the CreateTopics answer.
CREATE_TIMEOUT_S = 900.0
STALL_METRICS = ("riverbed_event_loop_stalls_total", "riverbed_event_loop_stall_seconds_max")


def loop_metrics(http_url: str) -> dict[str, float]:
    """The node's loop-stall metrics from its /metrics page."""
    with urllib.request.urlopen(http_url + "/metrics", timeout=60) as page:
        text = page.read().decode()
    out = {}
    for name in STALL_METRICS:
        m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else float("nan")
    return out


def cpu_s(pid: int) -> float:
    """utime + stime of a process so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api_versions_frame(correlation_id: int) -> bytes:
    client = b"probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def probe(port: int, stop: threading.Event, latencies: list[float]) -> None:
    """ApiVersions v0 round trips, one at a time, until ``stop``."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        correlation_id = 0
        while not stop.is_set():
            correlation_id += 1
            started = time.perf_counter()
            s.sendall(api_versions_frame(correlation_id))
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            s.recv(size, socket.MSG_WAITALL)
            latencies.append(time.perf_counter() - started)
            time.sleep(PROBE_INTERVAL_S)


def percentile_ms(sorted_s: list[float], q: float) -> float:
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * q))] * 1000


def one_round(topics: int, partitions: int, idle_s: float) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        node = BrokerProcess(
            data_dir=os.path.join(tmp, "data"), overrides={"num.partitions": "1"}
        ).start(timeout_s=120)
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})
            time.sleep(3)  # start-up settles
            before, cpu0 = loop_metrics(node.http_url), cpu_s(node.pid)
            stop, latencies = threading.Event(), []
            prober = threading.Thread(target=probe, args=(node.port, stop, latencies))
            prober.start()
            time.sleep(0.5)
            first = len(latencies)
            started = time.perf_counter()
            new = [NewTopic(f"m{i:04d}", partitions, 1) for i in range(topics)]
            futures = admin.create_topics(
                new, operation_timeout=CREATE_TIMEOUT_S, request_timeout=CREATE_TIMEOUT_S
            )
            for future in futures.values():
                future.result(CREATE_TIMEOUT_S)
            answered = time.perf_counter() - started
            stop.set()
            prober.join()
            cpu1, after = cpu_s(node.pid), loop_metrics(node.http_url)
            time.sleep(idle_s)
            idle_cpu = cpu_s(node.pid) - cpu1
        finally:
            node.close()
    w = sorted(latencies[first:])
    stalls = after[STALL_METRICS[0]] - before[STALL_METRICS[0]]
    one, five, _ = os.getloadavg()
    return (
        f"{topics}x{partitions}: answered after {answered:.1f} s; CPU {cpu1 - cpu0:.1f} s; "
        f"probes {len(w)}: p50 {percentile_ms(w, 0.5):.1f} ms p99 {percentile_ms(w, 0.99):.1f} "
        f"ms max {w[-1] * 1000:.0f} ms; loop stalls > 5 ms {stalls:.0f}, longest "
        f"{after[STALL_METRICS[1]] * 1000:.0f} ms; idle CPU {idle_cpu / idle_s * 100:.1f}% "
        f"over {idle_s:.0f} s; load {one:.2f} {five:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle-s", type=float, default=10.0)
    args = parser.parse_args()
    for _ in range(args.rounds):
        print(one_round(args.topics, args.partitions, args.idle_s), flush=True)


if __name__ == "__main__":
    main()
