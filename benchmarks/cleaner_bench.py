"""Log cleaner: throughput against reading the same segments, and peak memory vs keys.

Builds a compacted partition log (``--records`` records, keys drawn from ``--keys``
distinct keys, 100-byte values, 10 records a batch, 8 MiB segments) in a temp dir, then
in the same run, each in a fresh child process (so that peak RSS is its own):

- baseline: read every closed segment and decode every record (what the cleaner must
  do at least once);
- cleaner: one `PartitionLog.clean` pass (offset map, rewrite, swap) with a dedupe buffer
  of ``--dedupe-mb``.

Prints MB/s of each, their ratio, and each child's peak RSS: the cleaner's should stay
near the baseline's plus the dedupe buffer whatever ``--keys`` is.

    .venv/bin/python -m benchmarks.cleaner_bench --records 400000 --keys 200000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from riverbed.protocol.record_batch import iter_batches
from riverbed.protocol.records import SimpleRecord, build_batch, iter_records
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.cleaner import OffsetMap

SEGMENT_BYTES = 8 * 1024 * 1024
BATCH_RECORDS = 10
T0 = 1_700_000_000_000


def _config() -> LogConfig:
    return LogConfig(cleanup_policy=("compact",), segment_bytes=SEGMENT_BYTES)


def build(directory: Path, records: int, keys: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    log = PartitionLog(directory, "bench", 0, _config(), ManualClock(T0))
    value = b"x" * 100
    for start in range(0, records, BATCH_RECORDS):
        batch = [
            SimpleRecord(value=value, key=b"key-%d" % rng.randrange(keys), timestamp=T0)
            for _ in range(min(BATCH_RECORDS, records - start))
        ]
        log.append_as_leader(build_batch(batch, now_ms=T0), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    size = log.size_bytes
    log.close()
    return int(size)


def _child(mode: str, directory: Path, dedupe_bytes: int) -> dict[str, float]:
    log = PartitionLog(directory, "bench", 0, _config(), ManualClock(T0), clean_shutdown=True)
    log.update_high_watermark(log.log_end_offset)  # no checkpoint here: all is committed
    started = time.perf_counter()
    if mode == "read":
        total = 0
        for c in log.cleanable_segments(T0):
            data = log._read_segment(c.segment)
            assert data is not None
            total += len(data)
            for pos, h in iter_batches(data):
                for _r in iter_records(memoryview(data)[pos : pos + h.size], verify=False):
                    pass
    else:
        cleanable = log.cleanable_segments(T0)
        result = log.clean(0, OffsetMap(dedupe_bytes), T0, lambda _n: None)
        assert result is not None
        # one pass cleans the segments below the offset map's end (all of them when
        # the keys fit the dedupe buffer): its rate is over those bytes
        total = sum(c.size for c in cleanable if c.segment.base_offset < result.first_dirty)
    elapsed = time.perf_counter() - started
    log.close()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": elapsed, "bytes": total, "peak_mb": peak_kb / 1024}


def _run_child(mode: str, directory: Path, dedupe_bytes: int) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.cleaner_bench",
            "--child",
            mode,
            "--dir",
            str(directory),
            "--dedupe-mb",
            str(dedupe_bytes / 2**20),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(f"{mode} child failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cleaner_bench")
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--dedupe-mb", type=float, default=16.0)
    parser.add_argument("--child", choices=("read", "clean"))
    parser.add_argument("--dir")
    args = parser.parse_args(argv)
    dedupe = int(args.dedupe_mb * 2**20)
    if args.child:
        print(json.dumps(_child(args.child, Path(args.dir), dedupe)))
        return 0
    with tempfile.TemporaryDirectory(prefix="cleaner-bench-") as tmp:
        d = Path(tmp) / "bench-0"
        started = time.perf_counter()
        size = build(d, args.records, args.keys)
        print(
            f"built {args.records} records over {args.keys} keys: {size / 2**20:.1f} MiB "
            f"in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        read = _run_child("read", d, dedupe)
        clean = _run_child("clean", d, dedupe)
    mb = 2**20
    read_rate = read["bytes"] / mb / read["seconds"]
    clean_rate = clean["bytes"] / mb / clean["seconds"]
    print(f"read+decode: {read_rate:.1f} MB/s, peak RSS {read['peak_mb']:.0f} MB")
    print(
        f"clean (dedupe buffer {args.dedupe_mb:g} MiB): {clean_rate:.1f} MB/s "
        f"({clean_rate / read_rate:.2f}x) over the {clean['bytes'] / mb:.1f} MiB one pass "
        f"cleaned, peak RSS {clean['peak_mb']:.0f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
