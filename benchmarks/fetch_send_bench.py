"""Fetch send path: file ranges written to a socket, pinned and checked vs loop.sendfile.

Run: ``.venv/bin/python -m benchmarks.fetch_send_bench [--mib 64] [--rounds 8]``

A ``SocketServer`` (toy codec, 127.0.0.1) answers each request with one spliced response
holding a file range of ``--mib`` MiB of a real ``PartitionLog`` (pinned at read time);
one client reads the responses as fast as it can. Measured on the default asyncio loop
and on uvloop, in the same run:

- riverbed: ``Connection._send_range`` as shipped (``os.sendfile`` from the range's own fd
  straight to the socket once the transport's buffer is empty, a 16 KiB copy to wait for a
  full socket, the truncation check around every chunk);
- baseline (asyncio only): the same response sent with ``loop.sendfile`` of the range's
  fd (asyncio's native zero-copy path, what the default loop used before ranges were
  pinned and checked).

Prints MB/s per path and the ratio riverbed/baseline. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.network import Connection, FileRange, FileRecords, SplicedResponse
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.testing.toy_wire import frame, run, start

T0 = 1_700_000_000_000
BATCH_BYTES = 1 << 20  # one record batch of ~1 MiB (max.message.bytes)


async def _loop_sendfile(self: Connection, rng: FileRange) -> None:
    """The baseline: asyncio's native loop.sendfile of the whole range."""
    await self.writer.drain()
    loop = asyncio.get_running_loop()
    with open(rng.fd, "rb", closefd=False) as f:
        await loop.sendfile(self.writer.transport, f, rng.position, rng.size, fallback=True)


def build_log(directory: Path, mib: int) -> PartitionLog:
    log = PartitionLog(
        directory / "t-0", "t", 0, LogConfig(segment_bytes=(mib + 2) << 20), ManualClock(T0)
    )
    value = b"x" * (BATCH_BYTES - 200)
    for _ in range(mib):
        log.append_as_leader(build_batch([SimpleRecord(value)], now_ms=T0), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    return log


async def _serve(log: PartitionLog, rounds: int) -> float:
    async def handler(ctx: Any, body: bytes) -> Any:
        result = log.read(0, 1 << 40)
        fr = FileRecords(list(result.ranges))
        return SplicedResponse(
            body=b"H" + struct.pack(">i", 16) + fr.token, files=[fr], compact=False
        )

    server, port = await start(handler)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    total = 0
    started = time.perf_counter()
    for i in range(rounds):
        writer.write(frame(i, b"fetch"))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        while size:
            chunk = await reader.read(min(size, 1 << 20))
            size -= len(chunk)
            total += len(chunk)
    elapsed = time.perf_counter() - started
    writer.close()
    await server.stop()
    return total / elapsed / 1e6


def measure(log: PartitionLog, loop_kind: str, rounds: int, baseline: bool) -> float:
    original = Connection._send_range
    if baseline:
        Connection._send_range = _loop_sendfile  # type: ignore[method-assign]
    try:
        run(loop_kind, _serve(log, 1))  # warm-up: page cache, imports
        return float(run(loop_kind, _serve(log, rounds)))
    finally:
        Connection._send_range = original  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=64, help="size of the fetched range")
    ap.add_argument("--rounds", type=int, default=8, help="responses per measurement")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = build_log(Path(tmp), args.mib)
        try:
            base = measure(log, "asyncio", args.rounds, baseline=True)
            ours = measure(log, "asyncio", args.rounds, baseline=False)
            uv = measure(log, "uvloop", args.rounds, baseline=False)
        finally:
            log.close()
    print(f"fetch send of a {args.mib} MiB range, {args.rounds} responses, 1 client")
    print(f"  baseline loop.sendfile (asyncio)       {base:9.1f} MB/s")
    print(f"  riverbed pinned + checked (asyncio)    {ours:9.1f} MB/s   ratio {ours / base:.2f}")
    print(f"  riverbed pinned + checked (uvloop)     {uv:9.1f} MB/s   ratio {uv / base:.2f}")


if __name__ == "__main__":
    main()
