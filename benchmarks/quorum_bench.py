"""Metadata commit throughput and latency through real riverbed nodes on a 3-voter quorum.

Each CreateTopics is one metadata commit (TopicRecord + PartitionRecords, replicated by
Raft to a majority and fsync'd before the answer). Workloads, each over one TCP connection
speaking Kafka's protocol (CreateTopics v7, one request at a time):

- *sequential*: ``--topics`` requests of one topic with one partition -> commits/s and the
  p50/p99 latency of one commit;
- *batched*: requests of ``--batch`` topics each -> topics (commits of 2 records) per s.

Targets: the active controller of a 3-node ``QuorumCluster`` (real processes), a follower of
the same cluster (the request is forwarded to the controller over the controller listener and
answered once the follower's replica shows the topic), and the baseline measured in the same
run: one node with the local one-voter metadata log (fsync per append, no network hop).

Run: ``.venv/bin/python -m benchmarks.quorum_bench [--topics 300] [--batch 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import CreateTopicsRequest
from riverbed.raft.messages import DescribeQuorumRequest
from riverbed.server.raft_transport import KafkaRaftTransport
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.quorum_cluster import QuorumCluster

CT = CreateTopicsRequest


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.corr = 0

    def create(self, names: list[str]) -> None:
        self.corr += 1
        header = RequestHeader(19, 7, self.corr, "quorum-bench")
        req = CT(
            topics=[
                CT.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in names
            ],
            timeout_ms=30000,
        )
        self.sock.sendall(encode_request(header, req))
        size = struct.unpack(">i", self._read(4))[0]
        reply: Any = decode_response(header, self._read(size))
        bad = [(t.name, t.error_code) for t in reply.topics if t.error_code != 0]
        assert not bad, f"CreateTopics failed: {bad[:3]}"

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def run_workloads(port: int, prefix: str, topics: int, batch: int) -> dict[str, float]:
    client = Client(port)
    client.create([f"{prefix}-warmup"])
    latencies = []
    start = time.perf_counter()
    for i in range(topics):
        t0 = time.perf_counter()
        client.create([f"{prefix}-s{i}"])
        latencies.append((time.perf_counter() - t0) * 1000)
    seq_s = time.perf_counter() - start
    start = time.perf_counter()
    for b in range(topics // batch):
        client.create([f"{prefix}-b{b}-{j}" for j in range(batch)])
    batch_s = time.perf_counter() - start
    client.close()
    latencies.sort()
    return {
        "commits_per_s": topics / seq_s,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "batched_topics_per_s": (topics // batch) * batch / batch_s,
    }


def leader_id(cluster: QuorumCluster) -> int:
    host, port = cluster.controller(1).split(":")

    async def go() -> int:
        transport = KafkaRaftTransport(-1, {0: (host, int(port))})
        try:
            reply: Any = await asyncio.wait_for(transport.send(0, DescribeQuorumRequest()), 5)
            return int(reply.leader_id)
        finally:
            await transport.close()

    return asyncio.run(go())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.topics < args.batch:
        # the batched workload sends --topics // --batch requests: none would divide by 0
        parser.error(f"--topics ({args.topics}) must be at least --batch ({args.batch}) >= 1")
    with tempfile.TemporaryDirectory(prefix="quorum-bench-") as tmp:
        single = BrokerProcess(data_dir=Path(tmp) / "single" / "data")
        single.start()
        try:
            base = run_workloads(single.port, "single", args.topics, args.batch)
        finally:
            single.stop()
        cluster = QuorumCluster(Path(tmp) / "quorum", 3)
        try:
            cluster.start(timeout_s=60)
            leader = leader_id(cluster)
            follower = next(i for i in cluster.ids if i != leader)
            on_leader = run_workloads(cluster.ports[leader][0], "lead", args.topics, args.batch)
            on_follower = run_workloads(cluster.ports[follower][0], "foll", args.topics, args.batch)
        finally:
            cluster.stop()
    rows = [
        ("1 node, local metadata log (baseline)", base),
        ("3-voter quorum, to the active controller", on_leader),
        ("3-voter quorum, to a follower (forwarded)", on_follower),
    ]
    print(f"{args.topics} sequential CreateTopics of 1 topic; then batches of {args.batch}")
    for name, r in rows:
        print(
            f"{name:45s} {r['commits_per_s']:8.1f} commits/s  p50 {r['p50_ms']:6.2f} ms  "
            f"p99 {r['p99_ms']:6.2f} ms  batched {r['batched_topics_per_s']:8.1f} topics/s"
        )
    for name, r in rows[1:]:
        print(
            f"ratio {name}: commits/s {r['commits_per_s'] / base['commits_per_s']:.2f}x, "
            f"p99 {r['p99_ms'] / base['p99_ms']:.2f}x, batched "
            f"{r['batched_topics_per_s'] / base['batched_topics_per_s']:.2f}x of the baseline"
        )


if __name__ == "__main__":
    main()
