"""Tiered storage benchmark: remote reads vs local reads, copy vs produce, local disk use.

Run: ``.venv/bin/python -m benchmarks.tiered_bench [--mib 48] [--stores file,s3]
[--segment-mib 4]``

For each object store (``file://`` and a real SeaweedFS S3 server on loopback) one broker
process runs with tiering on and two topics get the same ``--mib`` of records from a
confluent-kafka producer:

- ``local``: an ordinary topic (baseline: everything read from local segments);
- ``tiered``: ``remote.storage.enable=true``, ``--segment-mib`` segments (default 4),
  ``local.retention.bytes=0``
  (only the active segment stays local once the rest is copied).

Printed next to their baselines from the same run:

- copy throughput: bytes of the tiered topic copied to the remote tier per second,
  measured from the first produced byte until the remote tier holds every rolled segment
  (its manifests, listed through fsspec), as a ratio to the produce throughput of the
  same bytes (so <= 1; near 1 means copying keeps up with production);
- remote read throughput: a confluent-kafka consumer reading the tiered topic from offset
  0 (all of it but the active segment from the remote tier), as a ratio to the same
  consumer reading the local topic (goal >= 0.5);
- local disk use of the tiered topic after production (its ``.log`` files), next to the
  bytes produced;
- with ``--soak-s N`` (``--stores none`` to run only it): continuous production at
  ``--soak-mib-s`` into a tiered topic with ``local.retention.ms=60000`` for N seconds,
  local ``.log`` bytes sampled every second (bounded: about rate x 70 s + a segment).

Not a test: it never asserts on time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.cli.wire import WireClient
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import ListOffsetsRequest
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.seaweedfs import SeaweedS3
from riverbed.tiered.rsm import FsspecRemoteStorageManager

MIB = 1 << 20
VALUE_BYTES = 10_000  # large enough that the Python client loop is not the bottleneck
QUIET = {"log_level": 3}
EARLIEST_LOCAL = -4


def produce(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to produce ``count`` values of VALUE_BYTES (acks=all, lz4 off)."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 256 * 1024, **QUIET}
    )
    value = os.urandom(VALUE_BYTES)
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value, b"%d" % i)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, count: int) -> tuple[float, int]:
    """(seconds, bytes) to read ``count`` records from offset 0."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MIB,
            "max.partition.fetch.bytes": 4 * MIB,
            **QUIET,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = size = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 600
    while got < count and time.monotonic() < deadline:
        for msg in c.consume(1000, 0.5):
            if msg.error():
                continue
            got += 1
            size += len(msg.value() or b"")
    elapsed = time.perf_counter() - start
    c.close()
    if got < count:
        raise RuntimeError(f"read {got} of {count} records of {topic}")
    return elapsed, size


def local_start(bootstrap: str, topic: str) -> int:
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=0, timestamp=EARLIEST_LOCAL
                    )
                ],
            )
        ],
    )
    with WireClient(bootstrap) as c:
        return int(c.request(ApiKey.LIST_OFFSETS, req).topics[0].partitions[0].offset)


def _remote_end(rsm: FsspecRemoteStorageManager) -> int:
    """The offset after the last remote segment of partition tiered-0 (0: none)."""
    topic_dirs = rsm.fs.glob(f"{rsm.root}/tiered-*")
    if not topic_dirs:
        return 0
    topic_id = str(topic_dirs[0]).rsplit("/", 1)[-1][len("tiered-") :]
    segments = rsm.list_segments("tiered", 0, topic_id)
    return max((m.end_offset for m in segments), default=-1) + 1


def run_store(store: str, mib: int, segment_mib: int, workdir: Path) -> dict[str, Any]:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
        "remote.fetch.max.wait.ms": "5000",
        "num.partitions": "1",
    }
    s3 = None
    if store == "file":
        overrides["rsm.config.url"] = f"file://{workdir / 'remote'}"
    else:
        s3 = SeaweedS3(workdir / "weed").start()
        overrides.update(
            {
                "rsm.config.url": "s3://bench/tier",
                "rsm.config.s3.endpoint.url": s3.endpoint,
                "rsm.config.s3.access.key.id": "bench",
                "rsm.config.s3.secret.access.key": "bench",
            }
        )
    broker = BrokerProcess(data_dir=workdir / "data", overrides=overrides).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        tiered = {
            "remote.storage.enable": "true",
            "segment.bytes": str(segment_mib * MIB),
            "local.retention.bytes": "0",
            "retention.ms": "-1",
        }
        topics = [NewTopic("local", 1, 1), NewTopic("tiered", 1, 1, config=tiered)]
        for fut in admin.create_topics(topics).values():
            fut.result(30)
        count = mib * MIB // VALUE_BYTES
        produce_local_s = produce(broker.bootstrap, "local", count)
        start = time.perf_counter()
        produce_tiered_s = produce(broker.bootstrap, "tiered", count)
        part_dir = broker.data_dir / "tiered-0"
        rsm = FsspecRemoteStorageManager.from_props(
            {k: v for k, v in overrides.items() if k.startswith("rsm.config.")}
        )
        active = max(int(p.name[:20]) for p in part_dir.glob("*.log"))
        while _remote_end(rsm) < active:  # every rolled segment is in the remote tier
            if time.perf_counter() - start > 600:
                raise RuntimeError("copying did not finish in 10 minutes")
            time.sleep(0.02)
        copy_s = time.perf_counter() - start
        while len(list(part_dir.glob("*.log"))) > 1 or local_start(broker.bootstrap, "tiered") == 0:
            time.sleep(0.1)  # local retention follows the copy
        local_bytes = sum(p.stat().st_size for p in part_dir.glob("*.log"))
        read_local_s, nbytes = consume(broker.bootstrap, "local", count)
        read_remote_s, _ = consume(broker.bootstrap, "tiered", count)
        return {
            "store": store,
            "mib": nbytes / MIB,
            "produce_mib_s": nbytes / MIB / produce_tiered_s,
            "produce_local_mib_s": nbytes / MIB / produce_local_s,
            "copy_mib_s": nbytes / MIB / copy_s,
            "read_local_mib_s": nbytes / MIB / read_local_s,
            "read_remote_mib_s": nbytes / MIB / read_remote_s,
            "local_bytes": local_bytes,
        }
    finally:
        broker.close()
        if s3 is not None:
            s3.stop()


def soak(seconds: int, rate_mib_s: float, workdir: Path) -> dict[str, float]:
    """Continuous production for ``seconds`` into a tiered topic with a 1-minute local
    retention (file:// tier): local ``.log`` bytes sampled every second."""
    overrides = {
        "remote.log.storage.system.enable": "true",
        "rsm.config.url": f"file://{workdir / 'remote'}",
        "remote.log.manager.task.interval.ms": "1000",
        "log.retention.check.interval.ms": "1000",
        "num.partitions": "1",
    }
    broker = BrokerProcess(data_dir=workdir / "data", overrides=overrides).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(4 * MIB),
            "segment.ms": "10000",
            "local.retention.ms": "60000",
            "retention.ms": "-1",
            "file.delete.delay.ms": "0",
        }
        for fut in admin.create_topics([NewTopic("soak", 1, 1, config=configs)]).values():
            fut.result(30)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, **QUIET})
        value = os.urandom(VALUE_BYTES)
        per_tick = max(1, int(rate_mib_s * MIB / VALUE_BYTES / 10))
        part_dir = broker.data_dir / "soak-0"
        start = time.monotonic()
        produced = 0
        samples: list[tuple[float, int]] = []
        next_sample = start
        while (now := time.monotonic()) - start < seconds:
            for _ in range(per_tick):
                p.produce("soak", value)
            produced += per_tick * VALUE_BYTES
            p.poll(0)
            if now >= next_sample:
                local = sum(f.stat().st_size for f in part_dir.glob("*.log"))
                samples.append((now - start, local))
                next_sample += 1.0
            time.sleep(max(0.0, start + (produced / (rate_mib_s * MIB)) - time.monotonic()))
        p.flush(60)
        late = [b for t, b in samples if t >= 90]
        return {
            "produced_mib": produced / MIB,
            "rate_mib_s": produced / MIB / seconds,
            "max_local_mib": max(b for _, b in samples) / MIB,
            "max_local_after_90s_mib": (max(late) if late else 0) / MIB,
            "final_local_mib": samples[-1][1] / MIB,
        }
    finally:
        broker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tiered_bench")
    parser.add_argument("--mib", type=int, default=48, help="MiB produced per topic")
    parser.add_argument("--stores", default="file,s3")
    parser.add_argument(
        "--segment-mib", type=int, default=4, help="segment.bytes of the tiered topic"
    )
    parser.add_argument("--soak-s", type=int, default=0, help="also run the disk-use soak (s)")
    parser.add_argument("--soak-mib-s", type=float, default=1.0, help="soak production rate")
    args = parser.parse_args(argv)
    if args.stores != "none" and args.mib <= args.segment_mib:
        # no segment would roll, so none would be copied: the wait for the copy never ended
        parser.error(f"--mib ({args.mib}) must be more than --segment-mib ({args.segment_mib})")
    if args.soak_s:
        with tempfile.TemporaryDirectory(prefix="riverbed-tiered-soak-") as tmp:
            r = soak(args.soak_s, args.soak_mib_s, Path(tmp))
        bound = r["rate_mib_s"] * (60 + 10 + 2) + 4  # retention + roll + checks, one segment
        print(
            f"\n== soak: {r['produced_mib']:.0f} MiB over {args.soak_s} s at {r['rate_mib_s']:.2f} "
            f"MiB/s, local.retention.ms=60000, segment.ms=10000"
        )
        print(
            f"local .log bytes: max {r['max_local_mib']:.1f} MiB, max after 90 s "
            f"{r['max_local_after_90s_mib']:.1f} MiB, at the end {r['final_local_mib']:.1f} MiB "
            f"(expected bound ~{bound:.0f} MiB: rate x (60 s retention + 10 s roll + checks) "
            f"+ one segment)"
        )
    if args.stores == "none":
        return 0
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="riverbed-tiered-bench-") as tmp:
            r = run_store(store, args.mib, args.segment_mib, Path(tmp))
        print(f"\n== {store}: {r['mib']:.0f} MiB of {VALUE_BYTES}-byte records")
        print(
            f"copy to remote  {r['copy_mib_s']:7.1f} MiB/s  ratio {r['copy_mib_s'] / r['produce_mib_s']:.2f}"
            f" vs produce {r['produce_mib_s']:.1f} MiB/s (same bytes, same run)"
        )
        print(
            f"read remote     {r['read_remote_mib_s']:7.1f} MiB/s  ratio "
            f"{r['read_remote_mib_s'] / r['read_local_mib_s']:.2f} vs local read "
            f"{r['read_local_mib_s']:.1f} MiB/s"
        )
        print(
            f"local disk      {r['local_bytes'] / MIB:7.1f} MiB of .log files after producing "
            f"{r['mib']:.0f} MiB (local.retention.bytes=0)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
