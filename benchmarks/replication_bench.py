"""Replication cost and fail-over time on real riverbed nodes (issue 12).

In one run, with the same client workload (confluent-kafka, acks=all, ``--messages``
records of ``--size`` bytes, linger.ms=5, one partition):

- throughput with replication factor 3 on a 3-node ``QuorumCluster`` (min.insync.replicas
  2) against the baseline, replication factor 1 on a one-node cluster: the ratio (goal
  >= 0.5);
- produce latency p50/p99 at half of each one's peak throughput (paced for ``--paced-s``;
  from each record's intended send time, `riverbed bench latency`'s fixed-rate producer);
- leader fail-over time: SIGKILL of the partition leader to the first acknowledged acks=all
  produce, with ``broker.session.timeout.ms`` at its default (9000) and at 2000; median and
  max over ``--trials`` trials each (the killed node restarts and rejoins the ISR between
  trials), and each trial's timeline (``benchmarks.failover_timeline``: fencing, election,
  metadata on the brokers, become-leader, the client's view);
- follower catch-up rate vs the leader's own append rate: a follower is SIGSTOPped while
  ``--catchup-messages`` records are produced (acks=1; the leader's append rate), then
  SIGCONTed; the rate at which its log reaches the leader's size.

Run: ``.venv/bin/python -m benchmarks.replication_bench [--messages 30000] [--trials 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.failover_timeline import STEPS, ClientLog, Timeline, read_nodes
from riverbed.cli.bench_latency import run_latency
from riverbed.cli.quorum import describe_quorum
from riverbed.testing.quorum_cluster import QuorumCluster

TOPIC = "bench"
#: librdkafka's default batch.size, which `producer` leaves as it is.
LIBRDKAFKA_BATCH_BYTES = 1_000_000


def wait_isr(admin: AdminClient, size: int, timeout_s: float = 60, topic: str = TOPIC) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            part = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
            if part.leader >= 0 and len(part.isrs) == size:
                return int(part.leader)
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"ISR of {size} never reached")


def producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **extra})


def throughput(bootstrap: str, messages: int, size: int) -> float:
    p = producer(bootstrap)
    value = b"x" * size
    done = [0]

    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        done[0] += 1

    for _ in range(1000):  # warm-up: connections, metadata
        p.produce(TOPIC, value, callback=cb)
    p.flush(60)
    done[0] = 0
    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                p.produce(TOPIC, value, callback=cb)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    took = time.perf_counter() - start
    assert done[0] == messages
    return messages / took


def paced_latency(bootstrap: str, rate: float, seconds: float, size: int) -> tuple[float, float]:
    """(p50, p99) ms of acks=all at ``rate`` records/s for ``seconds``: `riverbed bench
    latency`'s fixed-rate producer (latency from each record's intended send time, no
    per-record closure), with this script's producer settings (librdkafka's default
    batch.size, linger.ms 5)."""
    run = run_latency(
        bootstrap,
        TOPIC,
        rate=rate,
        duration_s=seconds,
        record_size=size,
        batch_size=LIBRDKAFKA_BATCH_BYTES,
        linger_ms=5,
    )
    lat = run.result.latency_ms
    return lat["p50"], lat["p99"]


def failover_overrides(session_ms: int) -> dict[str, str]:
    overrides = {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "controller.quorum.election.timeout.ms": "1000",
        "controller.quorum.fetch.timeout.ms": "2000",
    }
    if session_ms:
        overrides["broker.session.timeout.ms"] = str(session_ms)
        # a lease renewed only as often as it lasts lapses on any delay: live brokers were
        # fenced and unfenced every few seconds at 2000/2000 (their leaderships moved to the
        # controller's own broker, the only one heartbeating without a network hop). Kafka's
        # defaults renew 4.5 times per session (2000 of 9000); a quarter of it here.
        overrides["broker.heartbeat.interval.ms"] = str(min(2000, session_ms // 4))
    return overrides


def controller_led_topic(cluster: QuorumCluster, admin: AdminClient, n: int) -> tuple[str, int]:
    """A new topic ``bench-c<n>`` whose one partition the active controller leads (its
    broker first in the assignment); (topic, leader) once its ISR is whole."""
    brokers = cluster.ids
    deadline = time.monotonic() + 60
    while len(admin.describe_cluster().result(15).nodes) < len(brokers):
        assert time.monotonic() < deadline, "a broker never registered again"
        time.sleep(0.2)
    # DescribeQuorum's leader (Metadata's controller id is whichever node answers: any
    # node takes controller requests and forwards them)
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    controller = asyncio.run(describe_quorum(host, int(port))).leader_id
    assert controller in brokers, f"no quorum leader ({controller})"
    topic = f"{TOPIC}-c{n}"
    replicas = [controller] + [b for b in brokers if b != controller]
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(30)
    return topic, wait_isr(admin, len(brokers), topic=topic)


def failover(
    base: Path, session_ms: int, trials: int, kill_controller: bool = False
) -> list[Timeline]:
    """``trials`` SIGKILLs of the partition leader (with ``kill_controller``, of a new
    topic's leader that is the active controller too); each trial's timeline (`Timeline`:
    ``acked`` is the fail-over time)."""
    timelines: list[Timeline] = []
    client_log = ClientLog(TOPIC)
    logger = logging.getLogger(f"{__name__}.rdkafka")
    logger.addHandler(client_log)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    with QuorumCluster(base, 3, overrides=failover_overrides(session_ms)) as c:
        c.start(timeout_s=60)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
        for n in range(trials):
            topic = TOPIC
            if kill_controller:
                topic, leader = controller_led_topic(c, admin, n)
            else:
                leader = wait_isr(admin, 3)
            p = producer(
                c.bootstrap_servers,
                **{
                    "message.timeout.ms": 120000,
                    "debug": "broker,topic,msg,metadata",
                    "logger": logger,
                },
            )
            p.produce(topic, b"warm")
            p.flush(30)
            client_log.topic = topic
            client_log.reset(leader)
            killed_at = time.time()
            c.kill(leader)
            acked: list[float] = []

            def on_delivery(err: Any, msg: Any, acked: list[float] = acked) -> None:
                if err is None:
                    acked.append(time.time())

            p.produce(topic, b"after", callback=on_delivery)
            while not acked and time.time() - killed_at < 120:
                p.poll(0.005)
            assert acked, "no acknowledged produce within 120 s of the kill"
            timeline = Timeline(leader)
            timeline.mark("acked", acked[0] - killed_at)
            client_log.into(timeline)
            logs = [c.nodes[i].log_path for i in c.ids if i != leader]
            read_nodes(timeline, logs, topic, killed_at, acked[0] + 0.01)
            timelines.append(timeline)
            print(f"  trial {len(timelines)} (killed node {leader}): {timeline.row()}", flush=True)
            p.flush(10)
            c.nodes[leader].start(60)
    return timelines


def log_bytes(cluster: QuorumCluster, node: int) -> int:
    return sum(f.stat().st_size for f in (cluster.data_dir(node) / f"{TOPIC}-0").glob("*.log"))


def catchup(base: Path, messages: int, size: int) -> tuple[float, float]:
    """(leader append MB/s, follower catch-up MB/s)."""
    with QuorumCluster(base, 3, overrides={"default.replication.factor": "3"}) as c:
        c.start(timeout_s=60)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
        leader = wait_isr(admin, 3)
        follower = next(i for i in c.ids if i != leader)
        pid = c.nodes[follower].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            p = producer(c.bootstrap_servers, acks="1")
            value = b"z" * size
            start = time.perf_counter()
            for _ in range(messages):
                while True:
                    try:
                        p.produce(TOPIC, value)
                        break
                    except BufferError:
                        p.poll(0.01)
            p.flush(120)
            append_s = time.perf_counter() - start
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.perf_counter()
        target = log_bytes(c, leader)
        while log_bytes(c, follower) < target and time.perf_counter() - resumed < 300:
            time.sleep(0.05)
        catch_s = time.perf_counter() - resumed
        mb = target / 1e6
        return mb / append_s, mb / catch_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=30000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--paced-s", type=float, default=5.0)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--catchup-messages", type=int, default=200_000)
    ap.add_argument("--failover-only", action="store_true", help="only the fail-over trials")
    ap.add_argument(
        "--kill-controller",
        action="store_true",
        help="fail-over trials kill a leader that is the active controller too",
    )
    ap.add_argument(
        "--session-ms",
        type=int,
        action="append",
        help="broker.session.timeout.ms of the fail-over trials (0: default); "
        "repeatable; default: 0 and 2000",
    )
    args = ap.parse_args(argv)
    sessions = args.session_ms or [0, 2000]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if args.failover_only:
            failovers(base, sessions, args.trials, args.kill_controller)
            return 0
        rows = {}
        for name, nodes, rf in (("rf1-1node", 1, 1), ("rf3-3nodes", 3, 3)):
            overrides = {
                "default.replication.factor": str(rf),
                "min.insync.replicas": "2" if rf == 3 else "1",
            }
            with QuorumCluster(base / name, nodes, overrides=overrides) as c:
                c.start(timeout_s=60)
                admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
                admin.create_topics([NewTopic(TOPIC, 1, rf)])[TOPIC].result(30)
                wait_isr(admin, rf)
                peak = throughput(c.bootstrap_servers, args.messages, args.size)
                p50, p99 = paced_latency(c.bootstrap_servers, peak / 2, args.paced_s, args.size)
                rows[name] = (peak, p50, p99)
                print(
                    f"{name}: {peak:,.0f} msg/s; at {peak / 2:,.0f} msg/s p50 {p50:.1f} ms p99 {p99:.1f} ms",
                    flush=True,
                )
        ratio = rows["rf3-3nodes"][0] / rows["rf1-1node"][0]
        print(f"acks=all throughput ratio RF3/3 nodes vs RF1/1 node: {ratio:.2f} (goal >= 0.5)")
        append_rate, catch_rate = catchup(base / "catchup", args.catchup_messages, args.size)
        print(
            f"follower catch-up {catch_rate:.1f} MB/s vs leader append {append_rate:.1f} MB/s: "
            f"ratio {catch_rate / append_rate:.2f}",
            flush=True,
        )
        failovers(base, sessions, args.trials, args.kill_controller)
    return 0


def failovers(base: Path, sessions: list[int], trials: int, kill_controller: bool = False) -> None:
    for session_ms in sessions:
        label = str(session_ms) if session_ms else "default 9000"
        if kill_controller:
            label += ", the leader is the active controller"
        print(f"fail-over trials, broker.session.timeout.ms {label} (s after the kill):")
        timelines = failover(base / f"failover-{session_ms}", session_ms, trials, kill_controller)
        times = [t.steps["acked"] for t in timelines]
        print(
            f"fail-over (broker.session.timeout.ms {label}): median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s over {len(times)} trials; all: "
            + " ".join(f"{t:.2f}" for t in times),
            flush=True,
        )
        for step in STEPS:
            seen = [t.steps[step] for t in timelines if step in t.steps]
            if seen:
                print(
                    f"  {step}: median {statistics.median(seen):.2f} s, max {max(seen):.2f} s "
                    f"({len(seen)} of {len(timelines)} trials)",
                    flush=True,
                )


if __name__ == "__main__":
    raise SystemExit(main())
