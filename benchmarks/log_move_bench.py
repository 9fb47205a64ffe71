"""Log-dir move benchmark: AlterReplicaLogDirs (``LogManager.alter_log_dir``) of one partition.

Run: ``.venv/bin/python -m benchmarks.log_move_bench [--dir DIR] [--log-mib 256]``

Figures, each next to a baseline measured in the same run on the same bytes:

- the move's MB/s (future log created, batches copied and CRC-checked in 8 MiB pool
  steps, fsynced, swapped) as a ratio to copying the partition dir with
  ``shutil.copytree`` plus an fsync of every copied file;
- appends during the move: a thread appends one 1 KiB batch every millisecond while the
  partition moves; the slowest append (the swap holds the log's lock for the last copy,
  the closes and the renames) next to the slowest append of the same loop without a move.

Not a test: it never asserts on time. Files go to a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, LogManager, ManualClock

T0 = 1_700_000_000_000
MIB = 1 << 20
BATCH_BYTES = 16 * 1024


def batch(size: int) -> bytes:
    value = 1000
    return build_batch(
        [SimpleRecord(random.randbytes(value), timestamp=T0) for _ in range(max(1, size // 1020))]
    )


def fill(m: LogManager, log_mib: int) -> None:
    plog = m.get_or_create("bench", 0, LogConfig(segment_bytes=64 * MIB))
    data = batch(BATCH_BYTES)
    for _ in range(log_mib * MIB // len(data)):
        plog.append_as_leader(bytearray(data), leader_epoch=0)
    plog.flush()


def copytree_synced(src: Path, dst: Path) -> float:
    start = time.perf_counter()
    shutil.copytree(src, dst)
    for f in dst.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def appends_while(m: LogManager, action: threading.Event, stop: threading.Event) -> list[float]:
    """Append a small batch every ms until ``stop``; the latencies (s)."""
    small = batch(1024)
    out: list[float] = []
    while not stop.is_set():
        plog = m.get("bench", 0)
        assert plog is not None
        t = time.perf_counter()
        # the one append that raced the swap hits the closed log (retriable for a client)
        with contextlib.suppress(Exception):
            plog.append_as_leader(bytearray(small), leader_epoch=0)
        out.append(time.perf_counter() - t)
        action.set()
        time.sleep(0.001)
    return out


def run(base: Path, log_mib: int) -> None:
    d1, d2 = base / "d1", base / "d2"
    m = LogManager([d1, d2], ManualClock(T0))
    fill(m, log_mib)
    src = m.log_dir_of("bench", 0)
    assert src is not None
    dst = d2 if src == d1.resolve() else d1
    size = m.get("bench", 0).size_bytes  # type: ignore[union-attr]
    baseline_s = copytree_synced(src / "bench-0", base / "copy")
    shutil.rmtree(base / "copy")

    # appends without a move, then the same loop during the move
    for moving in (False, True):
        stop, started = threading.Event(), threading.Event()
        lat: list[float] = []

        def appender(
            lat: list[float] = lat, started: threading.Event = started, stop: threading.Event = stop
        ) -> None:
            lat.extend(appends_while(m, started, stop))

        t = threading.Thread(target=appender)
        t.start()
        started.wait()
        t0 = time.perf_counter()
        if moving:
            m.alter_log_dir("bench", 0, str(dst))
            while m.log_dir_of("bench", 0) != dst.resolve():
                time.sleep(0.005)
        else:
            time.sleep(2)
        elapsed = time.perf_counter() - t0
        stop.set()
        t.join()
        worst = max(lat) * 1000
        if moving:
            move_s = elapsed
            print(f"slowest append during the move: {worst:.1f} ms ({len(lat)} appends)")
        else:
            print(f"slowest append without a move:  {worst:.1f} ms ({len(lat)} appends)")
    mbps, base_mbps = size / MIB / move_s, size / MIB / baseline_s
    print(
        f"move of {size / MIB:.0f} MiB: {move_s:.2f} s, {mbps:.0f} MB/s; copytree + fsync "
        f"{baseline_s:.2f} s, {base_mbps:.0f} MB/s; ratio (move time / copytree time) "
        f"{move_s / baseline_s:.2f}x"
    )
    m.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--log-mib", type=int, default=256)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="riverbed-move-", dir=args.dir))
    try:
        run(base, args.log_mib)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
