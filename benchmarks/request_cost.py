"""What one request costs a node: CPU per request of riverbed's request path against a bare
asyncio server answering the same frames, in the same run (issue 23).

A replication cycle is a handful of small requests between processes, and every hop pays
the node's fixed cost per request (read, decode, the handler task, dispatch, encode,
write) on top of the work the request asks for. This measures that fixed cost.

One client (this process, a plain blocking socket, TCP_NODELAY) sends ``--requests``
requests one at a time over one connection, each after the previous answer (ping-pong:
the replication cycle's shape, one request in flight), to:

- ``baseline``: a child process running an ``asyncio.Protocol`` on uvloop that cuts the
  frames and answers each with a fixed 12-byte response carrying the correlation id: the
  least a Python server on the same event loop can do per request (no decode, no task);
- ``network layer``: a child process running riverbed's `SocketServer` (its connection
  reader and writer, the per-request handler task, the in-flight bound and permits) with
  the toy codec of `riverbed.testing.toy_wire` and a handler that answers at once: the
  network layer alone, without the Kafka codec, dispatch, metrics or a handler's work;
- ``riverbed``: one riverbed node (combined broker and controller, metrics on, as
  ``riverbed dev``): ``metadata`` (Metadata v1, no topics: dispatch, a small handler),
  ``produce`` (Produce v9, acks=1, one 100-byte record to one partition: the request path
  plus an append).

All servers run at once and each of ``--rounds`` rounds sends ``--requests`` to every one
in turn, the baseline first. Printed per workload, medians over the rounds: the server's
CPU (user + system, from /proc) per request in microseconds, its wake-ups per request,
round trips per second, and the ratio riverbed / baseline CPU of each round (with the
baseline of the same round): the request path's cost in units of the least possible, a
figure a faster or slower machine changes far less than the microseconds.

Run: ``.venv/bin/python -m benchmarks.request_cost [--requests 10000] [--rounds 5]
[--override KEY=VALUE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.tls_produce_raw import TOPIC
from benchmarks.tls_produce_raw import produce_frame as tls_produce_frame
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, encode_request
from riverbed.protocol.messages import Message, MetadataRequest
from riverbed.testing.quorum_cluster import QuorumCluster

_INT32 = struct.Struct(">i")
BASELINE = "baseline (asyncio Protocol, uvloop)"
#: Byte offset of the correlation id in a request frame (size, api key, api version).
CORRELATION_AT = 8

#: The baseline server: cut frames, answer each with its correlation id (run as ``-c``).
BASELINE_SERVER = r"""
import asyncio, socket, struct, sys, uvloop
INT32 = struct.Struct(">i")
class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = bytearray()
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def data_received(self, data):
        buf = self.buf
        buf += data
        out = []
        while len(buf) >= 4:
            (size,) = INT32.unpack_from(buf)
            if len(buf) < 4 + size:
                break
            corr = bytes(buf[8:12])
            del buf[: 4 + size]
            out.append(b"\x00\x00\x00\x08" + corr + b"\x00\x00\x00\x00")
        if out:
            self.t.write(b"".join(out))
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
uvloop.run(main())
"""

#: The network layer alone: riverbed's SocketServer, the toy codec, an immediate answer.
NETWORK_LAYER_SERVER = r"""
import asyncio, sys, uvloop
from riverbed.testing.toy_wire import start
async def answer(ctx, body):
    return b"\x00\x00\x00\x00"
async def main():
    server, port = await start(answer)
    await server.start_serving()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
uvloop.run(main())
"""


@dataclass(frozen=True)
class Round:
    cpu_us: float  # server CPU per request
    wakeups: float  # server loop wake-ups per request
    per_s: float  # round trips per second


def proc_cost(pid: int) -> tuple[float, int]:
    """(CPU seconds, voluntary context switches of the main thread) of ``pid`` so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        switches = next(int(r.split()[1]) for r in f if r.startswith("voluntary_ctxt_switches:"))
    return cpu, switches


def request_frame(api_key: ApiKey, version: int, body: Message) -> bytearray:
    return bytearray(encode_request(RequestHeader(int(api_key), version, 0, "cost"), body))


def produce_frame() -> bytearray:
    """Produce v9, acks=1, one 100-byte record (the smallest batch tls_produce_raw builds)."""
    return bytearray(tls_produce_frame(batch_kib=0, record_bytes=100))


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    return bytes(buf)


def ping_pong(sock: socket.socket, frame: bytearray, requests: int, pid: int) -> Round:
    """``requests`` round trips of ``frame`` (its correlation id numbered), one in flight."""
    before, started = proc_cost(pid), time.perf_counter()
    for i in range(requests):
        struct.pack_into(">i", frame, CORRELATION_AT, i)
        sock.sendall(frame)
        (size,) = _INT32.unpack(_read(sock, 4))
        answer = _read(sock, size)
        if _INT32.unpack_from(answer)[0] != i:
            raise AssertionError(f"answer to {i} carries another correlation id")
    elapsed, after = time.perf_counter() - started, proc_cost(pid)
    return Round(
        (after[0] - before[0]) / requests * 1e6,
        (after[1] - before[1]) / requests,
        requests / elapsed,
    )


def connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


@dataclass
class Target:
    """A server under test: its connection, the request it is sent, its process."""

    name: str
    sock: socket.socket
    frame: bytearray
    pid: int


@contextlib.contextmanager
def child_server(script: str) -> Iterator[tuple[socket.socket, int]]:
    """``script`` run in a child process (it prints its port, and ends when its stdin
    closes): a connection to it and its pid."""
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        try:
            with connect("127.0.0.1", port) as sock:
                yield sock, server.pid
        finally:
            server.stdin.close()


@contextlib.contextmanager
def riverbed_node(args: argparse.Namespace) -> Iterator[tuple[socket.socket, int]]:
    """One riverbed node with topic `TOPIC`: a connection to it and its pid."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    overrides = dict(o.split("=", 1) for o in args.override)
    with (
        tempfile.TemporaryDirectory() as tmp,
        QuorumCluster(Path(tmp) / "cost", 1, overrides=overrides) as c,
    ):
        c.start(timeout_s=60)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        pid = c.nodes[c.ids[0]].pid
        assert pid is not None
        host, port = c.bootstrap_servers.split(",")[0].rsplit(":", 1)
        with connect(host, int(port)) as sock:
            yield sock, pid


def measure(targets: list[Target], args: argparse.Namespace) -> dict[str, list[Round]]:
    """``--rounds`` rounds, each running every target in turn (the baseline first), so that
    each figure has a baseline measured seconds apart: these machines change speed
    between runs (the baseline alone varied 57-120 us per request between runs)."""
    for t in targets:  # warm: codecs, caches, the node's first answers
        ping_pong(t.sock, t.frame, min(2000, args.requests), t.pid)
    runs: dict[str, list[Round]] = {t.name: [] for t in targets}
    for _ in range(args.rounds):
        for t in targets:
            runs[t.name].append(ping_pong(t.sock, t.frame, args.requests, t.pid))
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--requests", type=int, default=10_000, help="round trips per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="node config"
    )
    args = ap.parse_args(argv)
    print(f"before: load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    metadata = request_frame(ApiKey.METADATA, 1, MetadataRequest(topics=[]))
    with (
        child_server(BASELINE_SERVER) as (base_sock, base_pid),
        child_server(NETWORK_LAYER_SERVER) as (net_sock, net_pid),
        riverbed_node(args) as (node_sock, node_pid),
    ):
        runs = measure(
            [
                Target(BASELINE, base_sock, metadata, base_pid),
                Target("network layer (toy codec)", net_sock, metadata, net_pid),
                Target("metadata", node_sock, metadata, node_pid),
                Target("produce", node_sock, produce_frame(), node_pid),
            ],
            args,
        )
    base = runs.pop(BASELINE)
    print(
        f"{BASELINE}: {statistics.median(r.cpu_us for r in base):.1f} us CPU per request"
        f" (rounds {', '.join(f'{r.cpu_us:.0f}' for r in base)}),"
        f" {statistics.median(r.per_s for r in base):,.0f} round trips/s"
    )
    for name, rs in runs.items():
        ratios = [r.cpu_us / b.cpu_us for r, b in zip(rs, base, strict=True)]
        print(
            f"riverbed {name}: {statistics.median(r.cpu_us for r in rs):.1f} us CPU per"
            f" request, {statistics.median(ratios):.2f}x the baseline (rounds "
            f"{', '.join(f'{x:.2f}' for x in ratios)}), "
            f"{statistics.median(r.wakeups for r in rs):.2f} wake-ups, "
            f"{statistics.median(r.per_s for r in rs):,.0f} round trips/s"
        )
    print(f"after: load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
