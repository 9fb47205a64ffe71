"""A nemesis run: process faults on a real 3-node cluster under an idempotent producer,
then the log checked against everything the producer was told (Jepsen's method).

Three riverbed nodes run as processes (combined broker and controller, replication
factor 3, ``min.insync.replicas`` 2, the short session and election timeouts of the
integration tests). One confluent-kafka producer (``enable.idempotence``, acks=all)
writes the values 0, 1, 2, ... at ``--rate`` records/s, value ``v`` to partition
``v % partitions``, and records each acknowledgement's offset; one consumer group member
(KIP-848 or classic, `riverbed.testing.nemesis_reader`) reads the topic and commits as it
goes. Meanwhile the seeded
schedule of `riverbed.testing.nemesis_schedule` kills, pauses and stops the partition
leader, the active controller or any node, one fault at a time. When the schedule is
done, everything is healed, the producer flushes, each partition is read back from its
start, the group member drains to the end, and `riverbed.testing.nemesis_checks` lists
every broken guarantee (loss, duplicates, order, foreign values, unresolved records, a
fatal producer error; records the group was given that the log does not hold, records it
never got, commits lost or behind).

Printed per fault: the node hit, and the longest wait between two acknowledgements from
the fault until the next one on any one partition (what an acks=all client felt); then the history's summary
and the verdict. The exit status is 1 when a run broke a guarantee, and its replay
command is printed: the same seed gives the same faults (not the same timing: these are
real processes).

Run: ``python -m riverbed.testing.nemesis [--seconds 60] [--runs 1] [--first-seed 0]``
(``make chaos``); not part of ``make test``, which runs one short fixed schedule
(tests/integration/test_nemesis.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.nemesis_checks import (
    Acked,
    GroupProtocol,
    GroupRead,
    History,
    summary,
    violations,
)
from riverbed.testing.nemesis_reader import GroupReader, committed
from riverbed.testing.nemesis_schedule import Fault, fault_schedule, pick_nodes
from riverbed.testing.quorum_cluster import QUICK_ELECTIONS, QuorumCluster

TOPIC = "nemesis"
#: The cluster's settings: the integration tests' quick fail-over (a 3 s session).
OVERRIDES = {
    **QUICK_ELECTIONS,
    "broker.session.timeout.ms": "3000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    # the group's offsets replicated as the data (QuorumCluster's default is 1, which
    # min.insync.replicas 2 would refuse every group write on)
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
    "unclean.leader.election.enable": "false",
}
#: Seconds a node may take to start again (recovery after a kill, then registration).
RESTART_TIMEOUT_S = 90.0
#: Seconds the producer may take to resolve what it holds once everything is healed.
FLUSH_TIMEOUT_S = 180.0
#: Seconds the read-back may take to reach every partition's end.
READ_TIMEOUT_S = 120.0
#: Seconds an admin lookup (who leads) may take in the middle of a fault.
LOOKUP_TIMEOUT_S = 5.0
#: Records the producer may hold unsent (librdkafka's queue; a fault's stall fills it).
QUEUE_MESSAGES_MAX = 1_000_000


@dataclass
class FaultRecord:
    fault: Fault
    nodes: list[int]
    injected_s: float
    healed_s: float = 0.0


@dataclass
class Writer:
    """The producer thread: values in order at ``rate``, each outcome in ``history``."""

    bootstrap: str
    rate: float
    history: History
    #: partition -> when each acknowledgement came (time.monotonic), in order
    ack_times: dict[int, list[float]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _delivered(self, value: int, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None:
                self.history.failed.add(value)
                return
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None  # an acknowledged record
            self.history.acked.append(Acked(value, partition, offset))
            self.ack_times.setdefault(partition, []).append(time.monotonic())

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.history.fatal = str(err)

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the run, not lost in the thread
            self.error = exc

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "queue.buffering.max.messages": QUEUE_MESSAGES_MAX,
                "error_cb": self._on_error,
            }
        )
        h = self.history
        start = time.monotonic()
        while not self.stop.is_set() and h.fatal is None:
            due = int((time.monotonic() - start) * self.rate) + 1
            while h.sent < due:
                value = h.sent
                try:
                    producer.produce(
                        TOPIC,
                        str(value).encode(),
                        partition=value % h.partitions,
                        on_delivery=partial(self._delivered, value),
                    )
                except BufferError:
                    break
                h.sent += 1
            producer.poll(0.005)
        left = producer.flush(FLUSH_TIMEOUT_S)
        if left:
            print(f"the producer still held {left} records after {FLUSH_TIMEOUT_S:.0f} s")


def _leaders(admin: AdminClient) -> tuple[int, int]:
    """(leader of partition 0 of the topic, active controller); -1 when unknown."""
    try:
        md = admin.list_topics(TOPIC, timeout=LOOKUP_TIMEOUT_S)
    except Exception:  # mid-fault: the lookup itself may fail
        return -1, -1
    topic = md.topics.get(TOPIC)
    leader = -1
    if topic is not None and 0 in topic.partitions:
        leader = topic.partitions[0].leader
    return leader, md.controller_id


def _inject(cluster: QuorumCluster, kind: str, nodes: list[int]) -> None:
    for node in nodes:
        proc = cluster.nodes[node]
        if kind == "kill":
            proc.kill()
        elif kind == "term":
            proc.stop()
        else:
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGSTOP)


def _heal(cluster: QuorumCluster, kind: str, nodes: list[int]) -> None:
    """Continue or start ``nodes`` again (starts side by side: two stopped voters each
    wait for the other to form a quorum)."""
    if kind == "pause":
        for node in nodes:
            pid = cluster.nodes[node].pid
            assert pid is not None
            os.kill(pid, signal.SIGCONT)
        return
    cluster.start_nodes(nodes, RESTART_TIMEOUT_S)  # (formatting a formatted node: no-op)


def _names(nodes: list[int]) -> str:
    return ("node " if len(nodes) == 1 else "nodes ") + " and ".join(map(str, nodes))


def apply_faults(
    cluster: QuorumCluster,
    admin: AdminClient,
    faults: list[Fault],
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> list[FaultRecord]:
    """Each fault in turn: quiet, inject, hold, heal (a restarted node is serving again
    before the next fault's quiet time starts)."""
    done: list[FaultRecord] = []
    for fault in faults:
        time.sleep(fault.quiet_s)
        leader, controller = _leaders(admin)
        nodes = pick_nodes(fault, list(cluster.ids), leader, controller)
        record = FaultRecord(fault, nodes, clock())
        say(f"{fault.kind} {_names(nodes)} ({fault.target}; held {fault.hold_s:.1f} s)")
        _inject(cluster, fault.kind, nodes)
        try:
            time.sleep(fault.hold_s)
        finally:
            _heal(cluster, fault.kind, nodes)
        record.healed_s = clock()
        done.append(record)
    return done


def longest_wait(ack_times: list[float], start: float, end: float) -> float:
    """The longest wait for an acknowledgement within [start, end]: from ``start`` (the
    fault) to the first one after it, between consecutive ones, and from the last one to
    ``end`` (the next fault). A wait that runs past ``end`` is cut there; the next
    fault's window counts the rest, from its own start (a gap's start is the last
    acknowledgement before it, so a gap the next fault causes begins just before that
    fault, and must not be charged to this one)."""
    last, longest = start, 0.0
    for t in ack_times:
        if t <= start:
            continue
        if t > end:
            break
        longest = max(longest, t - last)
        last = t
    return max(longest, end - last)


def read_back(bootstrap: str, partitions: int) -> dict[int, list[tuple[int, int]]]:
    """Every partition from its start to its end now: (offset, value) in read order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "nemesis-check",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    logs: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        position = dict.fromkeys(range(partitions), 0)
        while any(position[p] < ends[p] for p in logs) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                if msg.error() is not None:
                    continue
                p, offset, value = msg.partition(), msg.offset(), msg.value()
                assert p is not None and offset is not None and value is not None
                logs[p].append((offset, int(value)))
                position[p] = offset + 1
    finally:
        consumer.close()
    return logs


@contextlib.contextmanager
def _running(name: str, task: Writer | GroupReader) -> Iterator[threading.Thread]:
    """``task.run`` in a thread, stopped and joined on the way out."""
    thread = threading.Thread(target=task.run, name=name, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        task.stop.set()
        thread.join(FLUSH_TIMEOUT_S + 30)


def _read_by_group(
    reader: GroupReader, logs: dict[int, list[tuple[int, int]]], say: Callable[[str], None]
) -> GroupRead | None:
    """Drain the stopped group member to the log's end, then read what is committed; None
    when the member never returned from a client call (its consumer cannot be used from
    another thread, so its history goes unchecked)."""
    if reader.error is not None:
        raise reader.error
    if not reader.finished:
        say(
            "the group member is stuck in a client call (a synchronous commit that "
            "librdkafka never returns, confluent-kafka-python issue 1801): group not checked"
        )
        return None
    reader.drain({p: rows[-1][0] + 1 if rows else 0 for p, rows in logs.items()})
    read = reader.read
    read.committed = committed(reader.bootstrap, TOPIC, reader.group, len(logs))
    return read


def run(
    base: Path,
    faults: list[Fault],
    *,
    rate: float = 1000.0,
    partitions: int = 3,
    group: GroupProtocol | None = "consumer",
    say: Callable[[str], None] = print,
) -> tuple[History, list[str], list[FaultRecord]]:
    """One run of ``faults`` on a fresh cluster in ``base`` (with a consumer group member
    of ``group``'s protocol reading meanwhile; None: none): (history, violations, the
    faults as applied)."""
    history = History(partitions=partitions)
    with QuorumCluster(base, 3, overrides=OVERRIDES) as cluster:
        cluster.start(timeout_s=RESTART_TIMEOUT_S)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, partitions, 3)])[TOPIC].result(60)
        writer = Writer(cluster.bootstrap_servers, rate, history)
        reader = GroupReader(
            cluster.bootstrap_servers, TOPIC, "nemesis-group", GroupRead(group or "consumer")
        )
        started = time.monotonic()
        with contextlib.ExitStack() as threads:
            if group is not None:
                threads.enter_context(_running("nemesis-reader", reader))
            with _running("nemesis-writer", writer):
                applied = apply_faults(cluster, admin, faults, say)
                time.sleep(2.0)  # acknowledgements after the last heal
        if writer.error is not None:
            raise writer.error
        for i, rec in enumerate(applied):
            end = applied[i + 1].injected_s if i + 1 < len(applied) else time.monotonic()
            waits = [longest_wait(t, rec.injected_s, end) for t in writer.ack_times.values()]
            wait = max(waits, default=end - rec.injected_s)
            say(
                f"  t={rec.injected_s - started:6.1f}s {rec.fault.kind:5s} {_names(rec.nodes)} "
                f"({rec.fault.target}; back after {rec.healed_s - rec.injected_s:.1f} s): "
                f"longest wait for an acknowledgement {wait:.2f} s"
            )
        history.logs = read_back(cluster.bootstrap_servers, partitions)
        if group is not None:
            history.group = _read_by_group(reader, history.logs, say)
    return history, violations(history), applied


def _group_of(choice: str, seed: int) -> GroupProtocol | None:
    if choice == "alternate":
        return "consumer" if seed % 2 == 0 else "classic"
    if choice == "none":
        return None
    return "consumer" if choice == "consumer" else "classic"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="quiet + held time per run")
    ap.add_argument("--runs", type=int, default=1, help="runs, each on a fresh cluster")
    ap.add_argument("--first-seed", type=int, default=0, help="the seed of the first run")
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s produced")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument(
        "--group",
        choices=("consumer", "classic", "none", "alternate"),
        default="alternate",
        help="the consumer group member's protocol (alternate: KIP-848 on even seeds)",
    )
    args = ap.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0 or args.rate <= 0 or args.partitions < 1:
        ap.error("--runs, --seconds, --rate and --partitions must be positive")
    failed = 0
    for seed in range(args.first_seed, args.first_seed + args.runs):
        faults = fault_schedule(seed, args.seconds)
        group = _group_of(args.group, seed)
        print(f"seed {seed}: {len(faults)} faults, group protocol {group}", flush=True)
        with tempfile.TemporaryDirectory(prefix="riverbed-nemesis-") as tmp:
            history, broken, _ = run(
                Path(tmp),
                faults,
                rate=args.rate,
                partitions=args.partitions,
                group=group,
                say=lambda line: print(line, flush=True),
            )
        print(f"seed {seed}: {summary(history)}")
        for line in broken:
            print(f"seed {seed}: VIOLATION {line}")
        if broken:
            failed += 1
            print(
                f"replay: python -m riverbed.testing.nemesis --seconds {args.seconds:g} "
                f"--first-seed {seed} --rate {args.rate:g} --partitions {args.partitions} "
                f"--group {group or 'none'}",
                flush=True,
            )
    print(f"{args.runs - failed} of {args.runs} runs kept every guarantee")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
