"""The copy job of issue 19 (Kafka's transactions system test, in Python): a transactional
consume-transform-produce copier (`riverbed.testing.txn_copier`, its own process) copies an
input topic to an output topic on 3 real nodes while a feeder keeps writing the input,
and brokers and the copier are SIGKILLed (and started again) over and over.

`run_copy_job` then checks what Kafka's test checks, and more:

- the output holds every input record exactly once, in the input's order, per partition
  (the output record's key is the input record's value);
- the group's committed offsets reached the end of the input;
- a read_committed consumer that polled the output all along saw the same sequence, and
  its history with the copier's transactions is clean to `riverbed.testing.txn_history`
  (no aborted, pre-committed or unwritten read, no duplicate, no lost write, no cycle).

``python -m riverbed.testing.txn_copy --rounds 40 --seconds 240`` is the soak (3 nodes of
its own under a temporary directory); the integration test runs a short job.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QUICK_ELECTIONS, QuorumCluster
from riverbed.testing.txn_copier import STUCK_S, VALUES_PER_INCARNATION
from riverbed.testing.txn_history import Outcome, Report, Send, Txn, check
from riverbed.testing.txn_history_clients import QUIET, Reader

#: The 3 nodes: everything replicated 3 ways with min.isr 2 (one node may be down), quick
#: elections and broker sessions of 4 s (a killed leader's partitions move soon).
OVERRIDES = {
    **QUICK_ELECTIONS,
    "broker.session.timeout.ms": "4000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
}
SOURCE, SINK, GROUP, TXN_ID = "copy-in", "copy-out", "copier", "copier-tid"
PARTITIONS = 3
#: Input records the feeder writes per second (spread over the partitions).
FEED_PER_S = 150
#: Seconds the copier gets, after the faults and the feed stop, to copy what is left:
#: room for a copier stuck in a client call to be ended by its watchdog
#: (`riverbed.testing.txn_copier.STUCK_S`), started again and catch up.
DRAIN_S = 90.0 + STUCK_S


@dataclass
class Outcomes:
    node_kills: int = 0
    copier_kills: int = 0
    copier_exits: int = 0  # the copier gave up by itself (a fatal error) and was restarted
    records: int = 0
    #: seconds the fault schedule slept between its kills (the feeder wrote all along)
    schedule_s: float = 0.0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    report: Report = field(default_factory=Report)
    problems: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"{self.records} records copied over a {self.schedule_s:.1f} s fault schedule;"
            f" {self.node_kills} node kills, {self.copier_kills}"
            f" copier kills, {self.copier_exits} copier exits; transactions: {self.committed}"
            f" committed, {self.aborted} aborted, {self.unknown} unknown; history: "
            f"{self.report}; problems: {self.problems or 'none'}"
        )


class CopierProcess:
    """The copier child, started again (a new incarnation) whenever it dies."""

    def __init__(self, bootstrap: str, workdir: Path, mode: str = "exactly-once") -> None:
        self.bootstrap, self.mode = bootstrap, mode
        self.history_path = workdir / "copier-history.jsonl"
        self.log_path = workdir / "copier.log"
        self.incarnation = 0
        self.exits = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self.incarnation += 1
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "riverbed.testing.txn_copier", self.bootstrap, SOURCE,
                 SINK, TXN_ID, GROUP, str(self.incarnation), str(self.history_path), self.mode],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )  # fmt: skip

    def kill(self) -> None:
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.start()

    def restart_if_exited(self) -> None:
        with self._lock:
            if self.proc is not None and self.proc.poll() is not None:
                self.exits += 1
                self.start()

    def stop(self) -> None:
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def feed(bootstrap: str, stop: threading.Event) -> int:
    """Write input records (idempotent, acks=all) until `stop`; how many were written."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
    n = 0
    while not stop.wait(0.1):
        for _ in range(FEED_PER_S // 10):
            producer.produce(SOURCE, f"in-{n}".encode(), partition=n % PARTITIONS)
            n += 1
        producer.poll(0)
    if producer.flush(scaled_s(120)) != 0:
        raise AssertionError("the feeder could not deliver its records")
    return n


def read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[str, int | str]]]:
    """Every read_committed record of `topic` from offset 0 to its end: per partition,
    (key, value) in offset order (an input record's key is "" and its value its text)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
         "enable.auto.commit": False, "enable.partition.eof": True,
         "isolation.level": "read_committed", **QUIET}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[str, int | str]]] = {p: [] for p in range(PARTITIONS)}
    ended: set[int] = set()
    deadline = time.monotonic() + scaled_s(60)
    try:
        while len(ended) < PARTITIONS:
            assert time.monotonic() < deadline, f"no end of {topic} (ended: {ended})"
            for msg in consumer.consume(500, 0.5):
                part = msg.partition()
                assert part is not None
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ended.add(part)
                    continue
                key = (msg.key() or b"").decode()
                text = (msg.value() or b"").decode()
                got[part].append((key, int(text) if key else text))
    finally:
        consumer.close()
    return got


def copied_to_the_end(bootstrap: str) -> bool:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, **QUIET})
    try:
        parts = [TopicPartition(SOURCE, p) for p in range(PARTITIONS)]
        committed = consumer.committed(parts, timeout=10)
        return all(
            tp.offset == consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in committed
        )
    except Exception:  # a node still on its way back: asked again
        return False
    finally:
        consumer.close()


def copier_history(path: Path) -> list[Txn]:
    """The copier's transactions (see `riverbed.testing.txn_copier`): OK, FAIL, or INFO
    (a begin line with no end line)."""
    begun: dict[int, Begin] = {}
    ended: dict[int, End] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "begin" in entry:
            begun[int(entry["begin"])] = Begin(
                int(entry["commit"]), [(int(p), int(v)) for p, v in entry["sends"]]
            )
        else:
            offsets = {int(v): int(o) for v, o in entry["offsets"].items()}
            ended[int(entry["end"])] = End(int(entry["at"]), Outcome(entry["outcome"]), offsets)
    txns = []
    for invoke_at, begin in sorted(begun.items()):
        end = ended.get(invoke_at, End(begin.commit_at, Outcome.INFO, {}))
        sends = tuple(Send(p, v, end.offsets.get(v)) for p, v in begin.sends)
        process = f"copier-{sends[0].value // VALUES_PER_INCARNATION}"
        txns.append(Txn(process, end.outcome, sends, (), invoke_at, begin.commit_at, end.at))
    return txns


@dataclass(frozen=True)
class Begin:
    commit_at: int
    sends: list[tuple[int, int]]  # (partition, value)


@dataclass(frozen=True)
class End:
    at: int
    outcome: Outcome
    offsets: dict[int, int]  # value -> offset (delivered)


def inject_faults(
    cluster: QuorumCluster, copier: CopierProcess, rounds: int, seconds: float, seed: int,
    out: Outcomes,
) -> None:  # fmt: skip
    """`rounds` kills over about `seconds`: the copier in even rounds, a random node in odd
    ones (SIGKILL, then started again on its data while the next rounds go on; one node
    down at a time: the next node kill waits for it)."""
    rng = random.Random(seed)
    interval = seconds / max(rounds, 1)
    restarting: threading.Thread | None = None
    for r in range(rounds):
        pause_s = interval * rng.uniform(0.5, 1.5)
        time.sleep(pause_s)
        out.schedule_s += pause_s
        if r % 2 == 0:
            copier.kill()
            out.copier_kills += 1
            continue
        if restarting is not None:
            restarting.join()
        node = rng.choice(cluster.ids)
        cluster.kill(node)
        out.node_kills += 1
        restarting = threading.Thread(target=restart, args=(cluster, node, out))
        restarting.start()
    if restarting is not None:
        restarting.join()


def restart(cluster: QuorumCluster, node: int, out: Outcomes) -> None:
    try:
        cluster.nodes[node].start(60)
    except Exception as exc:  # reported with the outcomes: the job goes on with 2 nodes
        out.problems.append(f"node {node} did not start again: {exc}")


def supervise(copier: CopierProcess, stop: threading.Event) -> None:
    while not stop.wait(0.2):
        copier.restart_if_exited()


def run_copy_job(
    cluster: QuorumCluster, workdir: Path, *, rounds: int, seconds: float, seed: int,
    mode: str = "exactly-once",
) -> Outcomes:  # fmt: skip
    """The copy job on a started 3-node `cluster` (see the module's docstring); `mode`
    ``at-least-once`` runs the broken copier (see `riverbed.testing.txn_copier`)."""
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics(
        [NewTopic(t, PARTITIONS, 3) for t in (SOURCE, SINK)]
    ).values():
        future.result(30)
    out = Outcomes()
    copier = CopierProcess(bootstrap, workdir, mode)
    reader = Reader(bootstrap, SINK, PARTITIONS, "rc")
    stop_feed, stop_supervisor, done = threading.Event(), threading.Event(), threading.Event()
    fed: list[int] = []
    feeder = threading.Thread(target=lambda: fed.append(feed(bootstrap, stop_feed)))
    reader_deadline = time.monotonic() + seconds + 2 * scaled_s(DRAIN_S)
    reading = threading.Thread(target=reader.run, args=(done, reader_deadline))
    supervisor = threading.Thread(target=supervise, args=(copier, stop_supervisor))
    copier.start()
    for t in (feeder, reading, supervisor):
        t.start()
    try:
        inject_faults(cluster, copier, rounds, seconds, seed, out)
        stop_feed.set()
        feeder.join()
        deadline = time.monotonic() + scaled_s(DRAIN_S)
        while not copied_to_the_end(bootstrap):
            if time.monotonic() > deadline:
                out.problems.append("the copier did not reach the end of the input")
                break
            time.sleep(0.5)
    finally:
        stop_feed.set()
        stop_supervisor.set()
        supervisor.join()
        copier.stop()
        out.copier_exits = copier.exits
    outputs = read_all(bootstrap, SINK)
    reader.want = {v for records in outputs.values() for _, v in records if isinstance(v, int)}
    done.set()
    reading.join()
    judge(
        out, fed, read_all(bootstrap, SOURCE), outputs, reader, copier_history(copier.history_path)
    )
    return out


def judge(
    out: Outcomes,
    fed: list[int],
    inputs: dict[int, list[tuple[str, int | str]]],
    outputs: dict[int, list[tuple[str, int | str]]],
    reader: Reader,
    copier_txns: list[Txn],
) -> None:
    """Exactly once, in order, per partition; the reader saw the same; a clean history."""
    out.records = sum(len(r) for r in outputs.values())
    if fed != [sum(len(r) for r in inputs.values())]:
        out.problems.append(f"fed {fed} records, the input holds {sum(map(len, inputs.values()))}")
    read: dict[int, list[int]] = defaultdict(list)
    for txn in reader.history:
        for poll in txn.polls:
            read[poll.partition].extend(v for _, v in poll.records)
    for p in range(PARTITIONS):
        want = [str(v) for _, v in inputs[p]]
        got = [k for k, _ in outputs[p]]
        if got != want:
            i = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                     min(len(got), len(want)))  # fmt: skip
            out.problems.append(
                f"p{p}: output keys differ from the input at {i} of {len(got)}/{len(want)}: "
                f"{got[i : i + 3]} vs {want[i : i + 3]}"
            )
        if read[p] != [v for _, v in outputs[p]]:
            out.problems.append(f"p{p}: the concurrent read_committed consumer read otherwise")
    out.committed = sum(t.outcome is Outcome.OK for t in copier_txns)
    out.aborted = sum(t.outcome is Outcome.FAIL for t in copier_txns)
    out.unknown = sum(t.outcome is Outcome.INFO for t in copier_txns)
    out.report = check([*copier_txns, *reader.history])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="kills (copier, node in turn)")
    parser.add_argument("--seconds", type=float, default=240.0, help="about how long they take")
    parser.add_argument("--seed", type=int, default=19, help="the kills' timing and victims")
    parser.add_argument("--at-least-once", action="store_true",
                        help="run the broken copier (offsets outside the transaction): must fail")  # fmt: skip
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="riverbed-copy-"))
    cluster = QuorumCluster(workdir / "cluster", 3, overrides=OVERRIDES)
    try:
        cluster.start(timeout_s=60)
        started = time.monotonic()
        out = run_copy_job(cluster, workdir, rounds=args.rounds, seconds=args.seconds,
                           seed=args.seed,
                           mode="at-least-once" if args.at_least_once else "exactly-once")  # fmt: skip
    finally:
        cluster.stop()
    print(f"copy job (seed {args.seed}, {time.monotonic() - started:.0f} s): {out}")
    if out.problems or not out.report.clean:
        # kept for a look: copier.log, copier-history.jsonl, cluster/node-*/broker-*.log
        print(f"its logs and data are in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
