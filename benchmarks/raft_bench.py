"""KRaft benchmarks: a KIP-630 snapshot of a 1,000,000-partition image, and the raft core's
commit throughput.

1. Snapshot (the seed's example: 1,000,000 partitions across 10 brokers). A
   ``riverbed.metadata`` ``MetadataImage`` is built by replaying RegisterBrokerRecords,
   TopicRecords and PartitionRecords (1,000 topics x 1,000 partitions, replication factor
   3). *Write* = ``iter_image_values`` (the encoded records, as the metadata state machine
   hands them to Raft) + ``raft.snapshot_format`` batches + ``FileSnapshotStore.write``
   (``.part``, fsync, rename). *Load* = read the file + ``read_snapshot`` (CRC-checked) +
   ``decode_record`` of each value as it is replayed into an empty image (as
   ``MetadataStateMachine.load_snapshot`` does); the loaded image must equal the written
   one. The baseline is reading the same file's bytes; the ratio is load / read. Then the
   Python heap a loaded image holds per partition (tracemalloc, ``--memory-partitions``).
2. Commit throughput of three in-process ``RaftNode`` voters wired back to back (instant
   delivery and fsync): records committed on every voter per second; baseline = building
   the same records into v2 batches with ``build_batch`` (the wire cost a real quorum also
   pays).

Run: ``.venv/bin/python -m benchmarks.raft_bench`` (``--partitions 100000`` for a quick run,
``--snapshot-only`` for the snapshot figures alone). The machine's load average is printed
at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import tempfile
import time
import tracemalloc
import uuid
from collections import deque

from riverbed.metadata.controller import Controller
from riverbed.metadata.image import MetadataImage, iter_image_values, replay_all
from riverbed.metadata.records import decode_record
from riverbed.protocol import fastpath
from riverbed.protocol.messages import (
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from riverbed.protocol.metadata_records import decode_metadata_record_generic
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.raft.actions import Action, CommitEntries, FlushLog, SendRequest, SendResponse
from riverbed.raft.config import RaftConfig
from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import SnapshotId
from riverbed.raft.node import RaftNode
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_files import FileSnapshotStore
from riverbed.raft.snapshot_format import iter_snapshot_chunks, read_snapshot
from riverbed.raft.snapshots import MemorySnapshotStore
from riverbed.server.raft_driver import RaftDriver

BROKERS = 10
#: records the generic engine decodes for the fast path's ratio (a sample: it is slow)
GENERIC_SAMPLE_RECORDS = 100_000


def build_image(partitions: int) -> MetadataImage:
    rng = random.Random(1)
    per_topic = min(1000, partitions)
    topics = partitions // per_topic
    records: list = [FeatureLevelRecord(name="metadata.version", feature_level=20)]
    for b in range(BROKERS):
        records.append(
            RegisterBrokerRecord(
                broker_id=b, incarnation_id=uuid.UUID(int=b + 1), broker_epoch=b, rack=None
            )
        )
    for t in range(topics):
        tid = uuid.UUID(int=rng.getrandbits(128))
        records.append(TopicRecord(name=f"topic-{t:05d}", topic_id=tid))
        for p in range(per_topic):
            first = (t * per_topic + p) % BROKERS
            replicas = [first, (first + 1) % BROKERS, (first + 2) % BROKERS]
            records.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=tid,
                    replicas=replicas,
                    isr=replicas,
                    leader=first,
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
    return replay_all(MetadataImage.EMPTY, records, offset=len(records) - 1)


def bench_snapshot(partitions: int) -> None:
    t0 = time.perf_counter()
    image = build_image(partitions)
    build_s = time.perf_counter() - t0
    n_parts = sum(len(t.partitions) for t in image.topics_by_id.values())
    print(f"image: {n_parts} partitions, {len(image.brokers)} brokers (built in {build_s:.1f} s)")
    print(
        f"C fast path (riverbed.protocol._fastpath): {'built' if fastpath.available() else 'NOT built'}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = FileSnapshotStore(os.path.join(tmp, "__cluster_metadata-0"))
        sid = SnapshotId(image.offset + 1, 1)
        wc0 = time.process_time()
        w0 = time.perf_counter()
        values = list(iter_image_values(image))
        t2 = time.perf_counter()
        data = b"".join(iter_snapshot_chunks(sid, values))
        t3 = time.perf_counter()
        store.write(sid, data)
        t4 = time.perf_counter()
        write_s, write_cpu_s = t4 - w0, time.process_time() - wc0
        size = store.size(sid)
        del data, values
        # baseline: the bytes of the same file
        t0 = time.perf_counter()
        raw = store.read_all(sid)
        read_s = time.perf_counter() - t0
        lc0 = time.process_time()
        t0 = time.perf_counter()
        contents = read_snapshot(store.read_all(sid))
        l1 = time.perf_counter()
        # as MetadataStateMachine.load_snapshot does: each record decoded as it is replayed
        loaded = replay_all(
            MetadataImage.EMPTY, (decode_record(v) for v in contents.records), offset=image.offset
        )
        l2 = time.perf_counter()
        load_s, load_cpu_s = l2 - t0, time.process_time() - lc0
        assert len(raw) == size
        assert loaded == image
        d0 = time.perf_counter()
        for v in contents.records:
            decode_record(v)
        decode_s = time.perf_counter() - d0
        # the reference: the generic engine on a sample, against the same sample here
        sample = contents.records[:GENERIC_SAMPLE_RECORDS]
        g0 = time.perf_counter()
        for v in sample:
            decode_metadata_record_generic(v)
        g1 = time.perf_counter()
        for v in sample:
            decode_record(v)
        g2 = time.perf_counter()
    print(f"snapshot size: {size} bytes ({size / n_parts:.1f} B/partition)")
    print(
        f"write snapshot: {write_s:.2f} s, {write_cpu_s:.2f} s CPU (iter_image_values "
        f"{t2 - w0:.2f}, record batches {t3 - t2:.2f}, .part + fsync + rename {t4 - t3:.2f})"
    )
    print(
        f"load snapshot:  {load_s:.2f} s, {load_cpu_s:.2f} s CPU = {load_s / read_s:.0f}x "
        f"reading the file's bytes ({read_s * 1000:.1f} ms) (read + CRC-checked batches "
        f"{l1 - t0:.2f}, decode_record + replay into the image {l2 - l1:.2f}; decode_record "
        f"alone {decode_s:.2f})"
    )
    print(
        f"decode of {len(sample)} records: generic engine {g1 - g0:.2f} s, fast path "
        f"{g2 - g1:.2f} s ({(g1 - g0) / (g2 - g1):.1f}x)"
    )


def image_memory(partitions: int) -> None:
    """Bytes the Python heap holds per partition of a loaded image (tracemalloc)."""
    values = list(iter_image_values(build_image(partitions)))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    image = replay_all(MetadataImage.EMPTY, (decode_record(v) for v in values), offset=1)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    n_parts = sum(len(t.partitions) for t in image.topics_by_id.values())
    print(
        f"metadata image memory: {held / n_parts:.0f} B/partition "
        f"({held / 1e6:.1f} MB for {n_parts} partitions, tracemalloc)"
    )


#: Brokers of the joined cluster's partitions: registered, fenced (shut down), so that no
#: process hosts 100,000 partition logs on this machine (see bench_join).
OFFLINE_BROKERS = range(100, 110)


def offline_cluster_image(partitions: int, per_topic: int = 1000) -> MetadataImage:
    """A cluster whose ``partitions`` (replication factor 3) live on OFFLINE_BROKERS, all
    shut down: fenced, each partition without a leader, its last replica in the ISR (the
    state Kafka's controller leaves when a partition's last ISR member is fenced)."""
    records: list = list(Controller.bootstrap_records())
    for b in OFFLINE_BROKERS:
        records.append(
            RegisterBrokerRecord(
                broker_id=b,
                incarnation_id=uuid.UUID(int=b + 1),
                broker_epoch=b,
                end_points=[
                    RegisterBrokerRecord.BrokerEndpoint(
                        name="PLAINTEXT", host="127.0.0.1", port=9, security_protocol=0
                    )
                ],
                fenced=True,
            )
        )
    n = len(OFFLINE_BROKERS)
    for t in range(max(1, partitions // per_topic)):
        tid = uuid.UUID(int=random.Random(t).getrandbits(128))
        records.append(TopicRecord(name=f"join-{t:05d}", topic_id=tid))
        for p in range(per_topic):
            first = (t * per_topic + p) % n
            replicas = [OFFLINE_BROKERS[(first + i) % n] for i in range(3)]
            records.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=tid,
                    replicas=replicas,
                    isr=replicas[:1],
                    leader=-1,
                    leader_epoch=1,
                    partition_epoch=1,
                )
            )
    return replay_all(MetadataImage.EMPTY, records, offset=len(records) - 1)


def bench_join(partitions: int) -> None:
    """A broker joining a cluster of ``partitions`` partitions, with real processes.

    The cluster: one combined node (the controller quorum) started on a metadata snapshot
    of ``offline_cluster_image`` written by riverbed's own snapshot writer (as its
    controller would have written it; 100,000 partition logs hosted on this 2-core machine
    would measure file creation, not metadata). Then a broker-only node starts on an
    empty data dir: it fetches the snapshot (FetchSnapshot), loads it, registers and is
    unfenced. Times from its start: its ready line, and *serving*: it alone answers
    confluent-kafka's Metadata request listing every partition, itself among the brokers.
    """
    from confluent_kafka.admin import AdminClient

    from riverbed.server.metadata_log import metadata_partition_dir
    from riverbed.testing.quorum_cluster import QuorumCluster

    image = offline_cluster_image(partitions)
    total = sum(len(t.partitions) for t in image.topics_by_id.values())
    with tempfile.TemporaryDirectory() as tmp, QuorumCluster(tmp, nodes=1) as cluster:
        cluster.format(1)
        sid = SnapshotId(image.offset + 1, 1)
        store = FileSnapshotStore(metadata_partition_dir(cluster.data_dir(1)))
        store.write(sid, b"".join(iter_snapshot_chunks(sid, iter_image_values(image))))
        t0 = time.perf_counter()
        cluster.start(timeout_s=600)
        start_s = time.perf_counter() - t0
        j0 = time.perf_counter()
        broker = cluster.add_broker(2, timeout_s=600)
        ready_s = time.perf_counter() - j0
        ready_cpu_s = _cpu_s(broker.pid)
        joined = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = 0
        while time.perf_counter() - j0 < 600:
            md = joined.list_topics(timeout=60)
            listed = sum(len(t.partitions) for t in md.topics.values())
            if listed >= total and 2 in md.brokers:
                break
            time.sleep(0.05)
        serve_s = time.perf_counter() - j0
        serve_cpu_s = _cpu_s(broker.pid)
    print(
        f"join: the controller node started on a {total}-partition snapshot in {start_s:.1f} s; "
        f"a broker joining it: ready line after {ready_s:.1f} s ({ready_cpu_s:.1f} s of its "
        f"CPU), serving (Metadata from it alone lists {listed} partitions and itself) after "
        f"{serve_s:.1f} s ({serve_cpu_s:.1f} s of its CPU: the time it would take on an idle "
        f"core; wall times stretch with the machine's load)"
    )


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_commit(records: int, batch: int) -> None:
    voters = frozenset({1, 2, 3})
    cfg = RaftConfig(voters=voters, append_linger_ms=0, fetch_bytes_max=1 << 20)
    nodes = {
        i: RaftNode(i, cfg, MemoryLog(), MemorySnapshotStore(), random.Random(i)) for i in voters
    }
    logs = {i: n.log for i, n in nodes.items()}
    committed = dict.fromkeys(voters, 0)
    inbox: deque[tuple[int, Action]] = deque()
    now = 0

    def run(node_id: int, actions: list[Action]) -> None:
        for a in actions:
            inbox.append((node_id, a))

    def pump() -> None:
        while inbox:
            src, a = inbox.popleft()
            if isinstance(a, SendRequest):
                run(a.dest, nodes[a.dest].handle_request(src, a.correlation_id, a.request, now))
            elif isinstance(a, SendResponse):
                run(a.dest, nodes[a.dest].handle_response(src, a.correlation_id, a.response, now))
            elif isinstance(a, FlushLog):
                logs[src].flush(a.end_offset)
                run(src, nodes[src].on_log_flushed(a.end_offset, now))
            elif isinstance(a, CommitEntries):
                committed[src] = a.entries[-1].offset + 1

    for i, n in nodes.items():
        run(i, n.start(now))
    pump()
    while not any(n.role is Role.LEADER for n in nodes.values()):
        now += 50
        for i, n in nodes.items():
            run(i, n.tick(now))
        pump()
    leader = next(n for n in nodes.values() if n.role is Role.LEADER)
    payloads = [f"set key-{i % 1000} value-{i}".encode() for i in range(records)]
    t0 = time.perf_counter()
    for start in range(0, records, batch):
        _, actions = leader.append(payloads[start : start + batch], now)
        run(leader.node_id, actions)
        pump()
    target = leader.log.end_offset
    while min(committed.values()) < target:
        now += 1
        for i, n in nodes.items():
            run(i, n.tick(now))
        pump()
    raft_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for start in range(0, records, batch):
        build_batch([SimpleRecord(v) for v in payloads[start : start + batch]])
    base_s = time.perf_counter() - t0
    print(
        f"raft commit, 3 in-process voters, {records} records in appends of {batch}: "
        f"{records / raft_s:,.0f} records/s committed on all voters; "
        f"{raft_s / base_s:.2f}x the time of build_batch over the same records "
        f"({records / base_s:,.0f} records/s)"
    )


QUORUM_CONFIG = dict(
    election_timeout_ms=500,
    fetch_timeout_ms=1000,
    request_timeout_ms=1000,
    append_linger_ms=0,
    fetch_max_wait_ms=200,
    snapshot_minimum_records=20000,
)


class _CountingMachine:
    def __init__(self) -> None:
        self.position = 0

    def apply(self, entries: tuple) -> None:  # type: ignore[type-arg]
        self.position = entries[-1].offset + 1

    def snapshot_records(self) -> list[bytes]:
        return []

    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        self.position = snapshot_id.end_offset


async def _commit_workload(driver: RaftDriver, records: int, concurrency: int) -> dict:
    """Sequential appends (latency) then ``concurrency`` writers (throughput)."""
    latencies = []
    for i in range(records):
        t0 = time.perf_counter()
        await driver.append([f"set key-{i % 1000} value-{i}".encode()])
        latencies.append(time.perf_counter() - t0)
    latencies.sort()

    async def writer(n: int) -> None:
        for i in range(n):
            await driver.append([f"set key-{i % 1000} value-{i}".encode()])

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(records // concurrency) for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "throughput": (records // concurrency) * concurrency / elapsed,
    }


async def _quorum_node(node_id: int, ports: list[int], directory: str, records: int) -> None:
    from riverbed.server.raft_transport import KafkaRaftTransport
    from riverbed.testing.raft_sim_helpers import raft_listener

    voters = {i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)}
    cfg = RaftConfig(voters=frozenset(voters), **QUORUM_CONFIG)  # type: ignore[arg-type]
    drivers: dict[int, RaftDriver] = {}
    errors: list[BaseException] = []
    server = await raft_listener(drivers, node_id, errors, port=voters[node_id][1])
    transport = KafkaRaftTransport(node_id, voters)
    driver = RaftDriver(node_id, cfg, directory, transport, _CountingMachine())
    drivers[node_id] = driver
    await driver.start()
    while True:  # the leader runs the workload and reports; the others just serve
        await asyncio.sleep(0.05)
        if driver.node.role is Role.LEADER and driver.node.high_watermark > 0:
            result = await _commit_workload(driver, records, 16)
            print("RESULT " + json.dumps(result), flush=True)
            break
    await asyncio.sleep(3600)  # the parent stops every node by PID
    server.close()


def bench_quorum(records: int) -> None:
    import socket
    import subprocess
    import sys

    ports = []
    holders = []
    for _ in range(3):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        holders.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in holders:
        sock.close()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.raft_bench",
                    "--quorum-node",
                    str(i + 1),
                    "--ports",
                    ",".join(map(str, ports)),
                    "--dir",
                    os.path.join(tmp, f"n{i + 1}"),
                    "--records",
                    str(records),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        try:
            result = None
            deadline = time.monotonic() + 300
            import selectors

            sel = selectors.DefaultSelector()
            for p in procs:
                assert p.stdout is not None
                sel.register(p.stdout, selectors.EVENT_READ)
            while result is None and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1):
                    line = key.fileobj.readline()  # type: ignore[union-attr]
                    if line.startswith("RESULT "):
                        result = json.loads(line[len("RESULT ") :])
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    single = asyncio.run(_single_voter(records))
    if result is None:
        print("quorum benchmark: no result within 300 s")
        return
    print(
        f"3-voter quorum, 3 processes over TCP loopback (Kafka framing), fsync per commit: "
        f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms per sequential "
        f"append; {result['throughput']:,.0f} records/s with 16 concurrent writers"
    )
    print(
        f"  baseline 1-voter driver (same code, no network): p50 {single['p50_ms']:.2f} ms, "
        f"p99 {single['p99_ms']:.2f} ms, {single['throughput']:,.0f} records/s -> "
        f"p99 ratio {result['p99_ms'] / single['p99_ms']:.1f}x, throughput ratio "
        f"{result['throughput'] / single['throughput']:.2f}x"
    )


async def _single_voter(records: int) -> dict:
    class NoPeers:
        async def send(self, dest: int, request: object) -> object:
            raise ConnectionError("single voter")

    cfg = RaftConfig(voters=frozenset({1}), **QUORUM_CONFIG)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp:
        driver = RaftDriver(1, cfg, tmp, NoPeers(), _CountingMachine())  # type: ignore[arg-type]
        await driver.start()
        while driver.node.role is not Role.LEADER or driver.node.high_watermark == 0:
            await asyncio.sleep(0.02)
        result = await _commit_workload(driver, records, 16)
        await driver.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--quorum-records", type=int, default=2000)
    ap.add_argument("--quorum-node", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--skip-snapshot", action="store_true")
    ap.add_argument("--snapshot-only", action="store_true", help="only the snapshot figures")
    ap.add_argument("--memory-partitions", type=int, default=100_000)
    ap.add_argument(
        "--join-partitions",
        type=int,
        default=0,
        help="also time a broker joining a cluster of this many partitions (processes)",
    )
    ap.add_argument(
        "--node-src",
        help="run the join benchmark's nodes from this source tree (a baseline checkout)",
    )
    args = ap.parse_args()
    if args.quorum_node:  # a child process of bench_quorum
        ports = [int(p) for p in args.ports.split(",")]
        asyncio.run(_quorum_node(args.quorum_node, ports, args.dir, args.records))
        return
    load1, load5, _ = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load1:.2f} (1 min) {load5:.2f} (5 min)")
    if not args.snapshot_only:
        bench_quorum(args.quorum_records)
        bench_commit(args.records, args.batch)
    if not args.skip_snapshot:
        bench_snapshot(args.partitions)
        image_memory(args.memory_partitions)
    if args.join_partitions:
        if args.node_src:  # the node processes inherit it
            os.environ["PYTHONPATH"] = args.node_src
        bench_join(args.join_partitions)
    load1, load5, _ = os.getloadavg()
    print(f"machine at the end: load average {load1:.2f} (1 min) {load5:.2f} (5 min)")


if __name__ == "__main__":
    main()
