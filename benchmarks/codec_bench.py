"""Codec micro-benchmarks: record batch validation, record decode/encode, compression.

Run: ``.venv/bin/python -m benchmarks.codec_bench`` (or ``make bench``). Options:
``--quick`` (fewer repeats), ``--only SUBSTRING`` (sections whose name contains it).

Every row prints µs/op and a ratio against a baseline measured in the same run on the same
bytes, so that figures compare across machines; nothing here passes or fails on time.

Sections are plain functions in :data:`SECTIONS` returning :class:`Row` lists. The
message engine adds its sections there (see the marked slot): "decode a Produce request
carrying 1 MiB across 8 partitions" and "encode a Fetch response header for 100
partitions".
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cramjam
import lz4.frame
import zstandard
from crc32c import crc32c

from riverbed.protocol.compression import CompressionType, compress, decompress
from riverbed.protocol.records import (
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    valid_prefix,
)

PARTITIONS = 8
PRODUCE_BYTES = 1024 * 1024  # 1 MiB per produce request, spread over PARTITIONS


@dataclass(frozen=True)
class Row:
    name: str
    us_per_op: float
    baseline: str = ""
    baseline_us: float = 0.0

    @property
    def ratio(self) -> float | None:
        return self.us_per_op / self.baseline_us if self.baseline_us else None


@dataclass
class Timer:
    """Best-of-``repeats`` timing of ``number`` calls (the minimum filters scheduler noise)."""

    repeats: int = 7
    min_seconds: float = 0.05

    def us(self, fn: Callable[[], object]) -> float:
        number = self._calibrate(fn)
        return min(self._run(fn, number) for _ in range(self.repeats)) * 1e6

    def pair(self, fn: Callable[[], object], base: Callable[[], object]) -> tuple[float, float]:
        """(µs of ``fn``, µs of ``base``), their repeats interleaved so that both see the
        same machine load (this box is shared; a ratio of separate runs drifts)."""
        n_fn, n_base = self._calibrate(fn), self._calibrate(base)
        best_fn = best_base = float("inf")
        for _ in range(self.repeats * 2):
            best_base = min(best_base, self._run(base, n_base))
            best_fn = min(best_fn, self._run(fn, n_fn))
        return best_fn * 1e6, best_base * 1e6

    def _calibrate(self, fn: Callable[[], object]) -> int:
        number = 1
        while self._run(fn, number) * number < self.min_seconds:
            number *= 2
        return number

    @staticmethod
    def _run(fn: Callable[[], object], number: int) -> float:
        """Seconds per call over ``number`` calls."""
        t = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t) / number


def _payload(rng: random.Random, size: int) -> bytes:
    """Semi-compressible bytes, like JSON-ish event values (half random, half repeated)."""
    half = size // 2
    return rng.randbytes(half) + (b'{"event":"click","user":' * (size // 24 + 1))[: size - half]


def _partition_buffers(batch_bytes: int, compression: CompressionType) -> list[bytes]:
    """PARTITIONS buffers of ~PRODUCE_BYTES / PARTITIONS each, in batches of ~batch_bytes."""
    rng = random.Random(42)
    per_partition = PRODUCE_BYTES // PARTITIONS
    batches = max(1, per_partition // batch_bytes)
    record_bytes = 100 + 8 + 10  # value, key, record framing
    per_batch = max(1, per_partition // batches // record_bytes)
    out = []
    for _ in range(PARTITIONS):
        buf = bytearray()
        for _ in range(batches):
            recs = [SimpleRecord(_payload(rng, 100), key=b"key-%03d" % i) for i in range(per_batch)]
            buf += build_batch(recs, compression=compression, now_ms=1)
        out.append(bytes(buf))
    return out


# ---------------------------------------------------------------------------- sections


def section_batch_validation(timer: Timer) -> list[Row]:
    """Validate (header + CRC-32C) 1 MiB of batches over 8 partitions vs CRC-32C alone."""
    rows = []
    for label, batch_bytes in (
        ("1 batch/partition (128 KiB batches, as a producer sends)", PRODUCE_BYTES),
        ("16 KiB batches (batch.size default)", 16 * 1024),
        ("1 KiB batches (worst case: tiny batches)", 1024),
    ):
        parts = _partition_buffers(batch_bytes, CompressionType.NONE)
        batches = sum(1 for p in parts for _ in iter_batches(p))

        def crc_only(parts: list[bytes] = parts) -> None:
            for p in parts:
                crc32c(p)

        def validate(parts: list[bytes] = parts) -> None:
            for p in parts:
                for _ in iter_batches(p):
                    pass

        def recover(parts: list[bytes] = parts) -> None:
            for p in parts:
                valid_prefix(p)

        us, base = timer.pair(validate, crc_only)
        name = f"validate 1 MiB/8 partitions, {label}, {batches} batches"
        rows.append(Row(name, us, "CRC-32C over the same bytes", base))
        us, base = timer.pair(recover, crc_only)
        rows.append(Row(f"valid_prefix (recovery), same {batches} batches", us, "CRC-32C", base))
    return rows


def section_records(timer: Timer) -> list[Row]:
    """Per-record decode and encode of one 16 KiB-ish batch, vs kafka-python's own code."""
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    rng = random.Random(7)
    values = [_payload(rng, 100) for _ in range(150)]
    recs = [SimpleRecord(v, key=b"key-%d" % i, timestamp=1000 + i) for i, v in enumerate(values)]
    batch = build_batch(recs)

    def ours_decode() -> None:
        for _ in iter_records(batch):
            pass

    def theirs_decode() -> None:
        for _ in DefaultRecordBatch(batch):
            pass

    def ours_encode() -> None:
        build_batch(recs)

    def theirs_encode() -> None:
        b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
        for i, r in enumerate(recs):
            b.append(i, r.timestamp, r.key, r.value, [])
        b.build()

    n = len(recs)
    dec_us, dec_base = timer.pair(ours_decode, theirs_decode)
    enc_us, enc_base = timer.pair(ours_encode, theirs_encode)
    return [
        Row(
            f"iter_records, {n} records x 100 B",
            dec_us,
            "kafka-python DefaultRecordBatch iteration",
            dec_base,
        ),
        Row(
            f"build_batch, {n} records x 100 B",
            enc_us,
            "kafka-python DefaultRecordBatchBuilder",
            enc_base,
        ),
    ]


def section_compression(timer: Timer) -> list[Row]:
    """Bounded decompress and compress of 1 MiB of records vs the codec library called bare."""
    data = b"".join(_partition_buffers(16 * 1024, CompressionType.NONE))
    raw_snappy = bytes(cramjam.snappy.compress_raw(data))
    # (baseline label, input for the baseline, bare library call)
    bare: dict[CompressionType, tuple[str, bytes | None, Callable[[bytes], object]]] = {
        CompressionType.GZIP: (
            "zlib.decompress, unbounded",
            None,
            lambda z: zlib.decompress(z, 31),
        ),
        CompressionType.SNAPPY: (
            "cramjam raw snappy, unframed",
            raw_snappy,
            lambda z: cramjam.snappy.decompress_raw(z),
        ),
        CompressionType.LZ4: ("lz4.frame.decompress, unbounded", None, lz4.frame.decompress),
        CompressionType.ZSTD: (
            "ZstdDecompressor.decompress, unbounded",
            None,
            lambda z: zstandard.ZstdDecompressor().decompress(z),
        ),
    }
    rows = []
    for codec, (label, bare_input, fn) in bare.items():
        z = compress(codec, data)
        zb = z if bare_input is None else bare_input
        us, base = timer.pair(
            lambda z=z, codec=codec: decompress(codec, z), lambda zb=zb, fn=fn: fn(zb)
        )
        name = (
            f"decompress {codec.name} 1 MiB (ratio {len(data) / len(z):.1f}x), bounded by default"
        )
        rows.append(Row(name, us, label, base))
        us, base = timer.pair(lambda codec=codec: compress(codec, data), lambda: crc32c(data))
        rows.append(Row(f"compress {codec.name} 1 MiB", us, "CRC-32C over the same bytes", base))
    return rows


# Message engine sections live in benchmarks/codec_messages_bench.py (imported lazily: that
# module imports Row/Timer from here).
def section_produce_request_decode(timer: Timer) -> list[Row]:
    """Decode a Produce request carrying 1 MiB of batches across 8 partitions."""
    from benchmarks import codec_messages_bench

    return codec_messages_bench.section_produce_request_decode(timer)


def section_fetch_response_header(timer: Timer) -> list[Row]:
    """Encode a Fetch response header (partition metadata, no record bytes) for 100 partitions."""
    from benchmarks import codec_messages_bench

    return codec_messages_bench.section_fetch_response_header(timer)


SECTIONS: list[Callable[[Timer], list[Row]]] = [
    section_batch_validation,
    section_records,
    section_compression,
    section_produce_request_decode,
    section_fetch_response_header,
]


def run_sections(
    sections: Sequence[Callable[[Timer], list[Row]]], timer: Timer, only: str = ""
) -> None:
    """Run the sections whose name contains ``only`` and print a line per row."""
    for section in sections:
        if only not in section.__name__:
            continue
        print(f"\n## {section.__name__}: {(section.__doc__ or '').strip()}")
        for row in section(timer):
            line = f"  {row.name:<72} {row.us_per_op:>10.1f} us/op"
            if row.ratio is not None:
                line += f"   {row.ratio:5.2f}x  vs {row.baseline} ({row.baseline_us:.1f} us)"
            print(line)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--only", default="", help="run sections whose name contains this")
    args = ap.parse_args(argv)
    timer = Timer(repeats=3, min_seconds=0.02) if args.quick else Timer()
    print(
        f"riverbed codec_bench: {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs"
    )
    run_sections(SECTIONS, timer, args.only)


if __name__ == "__main__":
    main()
