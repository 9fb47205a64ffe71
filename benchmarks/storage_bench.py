"""Storage benchmark: append, read and timestamp lookup of a PartitionLog.

Run: ``.venv/bin/python -m benchmarks.storage_bench [--dir DIR] [--log-gib 1.0]``

Every figure is printed next to a baseline measured in the same run on the same bytes:

- append MB/s of 16 KiB and 1 MiB batches (``append_as_leader``: validate header + CRC,
  assign offsets/epoch in place, write, index), without and with an fsync after every
  append (``flush()``), as a ratio to a plain sequential ``os.write`` of the same bytes
  (with ``os.fsync`` after each write in the fsync rows);
- read MB/s of the whole log through ``read()`` (file ranges, 1 MiB per call) plus a
  ``pread`` of each range, as a ratio to a plain sequential read of the same file;
- ``offset_for_timestamp`` latency on a 1 GiB log of 16 KiB batches (time index bisect,
  offset index, header scan, one batch decoded), next to one 16 KiB ``pread``;
- partition lifecycle (``--only lifecycle`` runs just this): creating N empty partition
  logs through ``LogManager.get_or_create`` (with a topic id), closing them
  (``LogManager.shutdown``), and the same again with a first append of one small batch
  to each new log between the two (a new leader's first produce: a new leader epoch), per
  partition, next to creating and closing one plain empty file per partition in the same
  run;
- CreateTime bound check (``--only timestamps``): ``create_time_violation`` on a batch when
  ``message.timestamp.before.max.ms`` is finite (record timestamps decoded) and at its
  default (header only), next to a CRC-32C of the same batch.

Not a test: it never asserts on time. Files go to a temporary directory that is removed
at the end (``--dir`` picks where; it needs ~1.5 GiB free).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, LogManager, ManualClock, PartitionLog

T0 = 1_700_000_000_000
MIB = 1 << 20


def make_batch(batch_bytes: int, ts: int) -> bytearray:
    value_size = 1000
    n = max(1, batch_bytes // (value_size + 20))
    recs = [SimpleRecord(random.randbytes(value_size), timestamp=ts) for _ in range(n)]
    return bytearray(build_batch(recs))


def bench_plain_write(path: Path, data: bytes, count: int, fsync: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for _ in range(count):
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return elapsed


def bench_append(root: Path, data: bytearray, count: int, fsync: bool) -> float:
    clock = ManualClock(T0)
    log = PartitionLog(root / "append-0", "append", 0, LogConfig(), clock)
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(data, leader_epoch=1)
        if fsync:
            log.flush()
    elapsed = time.perf_counter() - start
    log.close(flush=False)
    shutil.rmtree(root / "append-0")
    return elapsed


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / MIB / seconds


def run_appends(root: Path, total_mib: int, fsync_total_mib: int) -> None:
    print("append throughput (MB/s), ratio = riverbed / plain sequential write")
    print(f"{'case':<28}{'riverbed':>10}{'plain':>10}{'ratio':>8}")
    for batch_bytes, label in [(16 * 1024, "16 KiB"), (MIB, "1 MiB")]:
        data = make_batch(batch_bytes, T0)
        for fsync in (False, True):
            budget = (fsync_total_mib if fsync else total_mib) * MIB
            count = max(4, budget // len(data))
            nbytes = count * len(data)
            best_rb, best_plain = float("inf"), float("inf")
            for _ in range(3):  # best of 3, alternating, to damp noise from other jobs
                best_plain = min(
                    best_plain, bench_plain_write(root / "plain.bin", bytes(data), count, fsync)
                )
                best_rb = min(best_rb, bench_append(root, data, count, fsync))
            rb, plain = mbps(nbytes, best_rb), mbps(nbytes, best_plain)
            case = f"{label} batches{', fsync each' if fsync else ''}"
            print(f"{case:<28}{rb:>10.1f}{plain:>10.1f}{rb / plain:>8.2f}")


def build_big_log(root: Path, gib: float) -> tuple[PartitionLog, int]:
    clock = ManualClock(T0)
    cfg = LogConfig(segment_bytes=256 * MIB)
    log = PartitionLog(root / "big-0", "big", 0, cfg, clock)
    data = make_batch(16 * 1024, T0)
    count = int(gib * 1024 * MIB) // len(data)
    start = time.perf_counter()
    for i in range(count):
        # CreateTime grows by 10 ms per batch; set in place without rebuilding the batch
        clock.set(T0 + 10 * i)
        log.append_as_leader(_with_timestamp(data, T0 + 10 * i), leader_epoch=1)
    log.update_high_watermark(log.log_end_offset)
    elapsed = time.perf_counter() - start
    print(
        f"\nbuilt a {log.size_bytes / MIB / 1024:.2f} GiB log ({count} batches of "
        f"{len(data)} B, {len(log.segments)} segments) in {elapsed:.1f} s"
    )
    return log, count


def _with_timestamp(data: bytearray, ts: int) -> bytearray:
    # firstTimestamp/maxTimestamp are covered by the CRC: rebuild cheaply via the codec's
    # LogAppendTime patch would change the type, so patch both fields and the CRC here.
    import struct

    from crc32c import crc32c

    struct.pack_into(">qq", data, 27, ts, ts)
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    return data


def run_reads(root: Path, log: PartitionLog) -> None:
    start = time.perf_counter()
    offset, total = log.log_start_offset, 0
    while offset < log.log_end_offset:
        res = log.read(offset, MIB)
        for r in res.ranges:
            with open(r.path, "rb") as f:
                total += len(os.pread(f.fileno(), r.size, r.position))
        offset = res.next_offset
    rb = time.perf_counter() - start
    start = time.perf_counter()
    plain_total = 0
    for seg in log.segments:
        with open(seg.log_path, "rb") as f:
            while chunk := f.read(MIB):
                plain_total += len(chunk)
    plain = time.perf_counter() - start
    assert total == plain_total, (total, plain_total)
    print("\nread throughput (MB/s), page cache warm, 1 MiB per read() call")
    print(f"{'riverbed read()+pread':<28}{mbps(total, rb):>10.1f}")
    print(f"{'plain sequential read':<28}{mbps(total, plain):>10.1f}")
    print(f"{'ratio':<28}{plain / rb:>10.2f}")


def run_timestamp_lookups(log: PartitionLog, count: int, lookups: int) -> None:
    rng = random.Random(7)
    targets = [T0 + rng.randrange(0, 10 * count) for _ in range(lookups)]
    lat = []
    for ts in targets:
        t = time.perf_counter()
        found = log.offset_for_timestamp(ts)
        lat.append(time.perf_counter() - t)
        assert found is not None and found.timestamp >= ts
    seg = log.segments[0]
    base = []
    with open(seg.log_path, "rb") as f:
        for _ in range(lookups):
            pos = rng.randrange(0, max(1, seg.size - 16384))
            t = time.perf_counter()
            os.pread(f.fileno(), 16384, pos)
            base.append(time.perf_counter() - t)
    lat.sort()
    base.sort()
    us = 1e6
    print(
        f"\noffset_for_timestamp on the {log.size_bytes / MIB / 1024:.2f} GiB log, {lookups} lookups"
    )
    print(
        f"  p50 {lat[len(lat) // 2] * us:.0f} µs  p99 {lat[int(len(lat) * 0.99)] * us:.0f} µs  "
        f"mean {statistics.fmean(lat) * us:.0f} µs"
    )
    print(
        f"  baseline one 16 KiB pread: p50 {base[len(base) // 2] * us:.1f} µs -> ratio "
        f"{lat[len(lat) // 2] / base[len(base) // 2]:.1f}x"
    )


def run_lifecycle(root: Path, partitions: int) -> None:
    """Create then close ``partitions`` empty partition logs; baseline: plain files."""
    base_dir = root / "plain-files"
    base_dir.mkdir()
    start = time.perf_counter()
    for p in range(partitions):
        fd = os.open(base_dir / f"f{p}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
    plain = time.perf_counter() - start
    clock = ManualClock(T0)
    manager = LogManager([root / "lifecycle"], clock)
    start = time.perf_counter()
    for p in range(partitions):
        manager.get_or_create("many", p, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    created = time.perf_counter() - start
    start = time.perf_counter()
    manager.shutdown()
    closed = time.perf_counter() - start
    small = bytes(make_batch(100, T0))
    manager = LogManager([root / "lifecycle-append"], clock)
    logs = [
        manager.get_or_create("many", p, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
        for p in range(partitions)
    ]
    start = time.perf_counter()
    for plog in logs:
        plog.append_as_leader(small, leader_epoch=1)
    appended = time.perf_counter() - start
    start = time.perf_counter()
    manager.shutdown()
    closed_full = time.perf_counter() - start
    ms = 1000 / partitions
    print(f"\npartition lifecycle, {partitions} partition logs (ms per partition)")
    print(f"  create (get_or_create)   {created * ms:8.3f}  total {created:.2f} s")
    print(f"  close empty (shutdown)   {closed * ms:8.3f}  total {closed:.2f} s")
    print(f"  first append (1 KiB)     {appended * ms:8.3f}  total {appended:.2f} s")
    print(f"  close after one append   {closed_full * ms:8.3f}  total {closed_full:.2f} s")
    print(
        f"  baseline create+close of one plain file {plain * ms:.3f} -> create ratio "
        f"{created / plain:.1f}x"
    )


def run_timestamp_checks() -> None:
    """Cost of the CreateTime bound check per batch, next to a CRC-32C of the batch."""
    from crc32c import crc32c

    from riverbed.protocol.compression import CompressionType
    from riverbed.protocol.records import parse_header
    from riverbed.storage.config import LONG_MAX
    from riverbed.storage.timestamp_bounds import create_time_violation

    print("\nCreateTime bound check per batch (µs), ratio = check / CRC-32C of the batch")
    cases = [
        ("16 KiB, 16 records", 16 * 1024, 1000, CompressionType.NONE),
        ("16 KiB, 160 records", 16 * 1024, 80, CompressionType.NONE),
        ("1 MiB lz4, 1000 records", MIB, 1000, CompressionType.LZ4),
    ]
    for label, batch_bytes, value_size, compression in cases:
        n = max(1, batch_bytes // (value_size + 20))
        recs = [
            SimpleRecord(random.randbytes(value_size // 2) * 2, timestamp=T0 + i % 7)
            for i in range(n)
        ]
        data = bytes(build_batch(recs, compression=compression))
        h = parse_header(data)
        reps = max(20, 2_000_000 // len(data))
        rows = []
        for before in (3_600_000, LONG_MAX):
            start = time.perf_counter()
            for _ in range(reps):
                create_time_violation(data, 0, h, T0, before, 3_600_000)
            rows.append((time.perf_counter() - start) / reps)
        start = time.perf_counter()
        for _ in range(reps):
            crc32c(data)
        crc = (time.perf_counter() - start) / reps
        print(
            f"  {label:<24} decoded {rows[0] * 1e6:8.1f} ({rows[0] / crc:5.2f}x)  "
            f"header only {rows[1] * 1e6:6.2f} ({rows[1] / crc:5.2f}x)  CRC {crc * 1e6:7.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to put the temporary files")
    parser.add_argument("--log-gib", type=float, default=1.0, help="size of the lookup log")
    parser.add_argument("--append-mib", type=int, default=256)
    parser.add_argument("--fsync-mib", type=int, default=32)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument("--only", choices=["lifecycle", "timestamps"], default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="riverbed-storage-bench-", dir=args.dir))
    try:
        if args.only in (None, "timestamps"):
            run_timestamp_checks()
        if args.only in (None, "lifecycle"):
            run_lifecycle(root, args.partitions)
        if args.only is not None:
            return
        run_appends(root, args.append_mib, args.fsync_mib)
        log, count = build_big_log(root, args.log_gib)
        run_reads(root, log)
        run_timestamp_lookups(log, count, args.lookups)
        log.close(flush=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
