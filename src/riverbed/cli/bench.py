"""`riverbed bench produce|consume|e2e|latency`: the command line (arguments, the progress
bar, the report) of the throughput and latency runs, like kafka-*-perf-test.

- produce, consume, e2e: `riverbed.cli.bench_runners` (what each measures, and how
  `--processes` client processes split the records).
- latency: send-to-ack at a fixed rate (``--rate``, or half of the peak it measures
  first), from each record's intended send time (`riverbed.cli.bench_latency`).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from riverbed.cli.bench_runners import BenchResult, progress_to, run_consume, run_e2e, run_produce
from riverbed.cli.common import (
    CliError,
    add_acks,
    add_batching,
    add_bootstrap,
    add_json,
    print_json,
    progress_bar,
    run_guarded,
    verb_parser,
)


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "bench", "measure produce/consume throughput and latency")
    sub = parser.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    for name, text in (
        ("produce", "producer throughput and delivery latency"),
        ("consume", "consumer throughput (reads from the beginning)"),
        ("e2e", "end-to-end latency: produce -> consume"),
    ):
        p = verb_parser(sub, name, text)
        add_bootstrap(p)
        add_json(p)
        p.add_argument("--topic", default="riverbed-bench", help="the topic (created when missing)")
        p.add_argument(
            "--num-records", type=int, default=100_000, help="records to produce or consume"
        )
        p.add_argument("--timeout-s", type=float, default=10.0, help="give up after this idle time")
        if name != "consume":
            p.add_argument("--record-size", type=int, default=100, help="value bytes")
            add_acks(p)
            p.add_argument("--partitions", type=int, default=1, help="when creating the topic")
        if name == "produce":
            p.add_argument(
                "--batch-size", type=int, default=16384, help="producer batch.size bytes"
            )
            add_batching(p)
            p.add_argument("--throughput", type=float, default=-1, help="records/s cap, -1 = none")
        if name != "e2e":
            p.add_argument("--processes", type=int, default=1, help="client processes")
        p.set_defaults(func=run_guarded(bench_cmd), bench_kind=name)
    _register_latency(sub)


def _register_latency(sub: Any) -> None:
    p = verb_parser(sub, "latency", "send-to-ack latency at a fixed rate (default: half of peak)")
    add_bootstrap(p)
    add_json(p)
    p.add_argument("--topic", default="riverbed-bench", help="the topic (created when missing)")
    p.add_argument(
        "--rate", type=float, default=-1, help="records/s; -1: --rate-fraction of the peak"
    )
    p.add_argument(
        "--rate-fraction", type=float, default=0.5, help="of the peak found first (no --rate)"
    )
    p.add_argument(
        "--peak-records", type=int, default=100_000, help="records of the unpaced peak run"
    )
    p.add_argument("--duration-s", type=float, default=5.0, help="seconds at the fixed rate")
    p.add_argument("--record-size", type=int, default=100, help="value bytes")
    p.add_argument(
        "--sample-every",
        type=int,
        default=10,
        help="time one record in this many on average (a uniform random sample)",
    )
    add_acks(p)
    p.add_argument("--partitions", type=int, default=1, help="when creating the topic")
    p.add_argument("--batch-size", type=int, default=16384, help="producer batch.size bytes")
    add_batching(p)
    p.set_defaults(func=run_guarded(latency_cmd))


def latency_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli import bench_latency
    from riverbed.cli.common import client_config

    extra = client_config(args)
    bootstrap = extra.pop("bootstrap.servers")
    if args.duration_s <= 0 or args.peak_records <= 0 or args.sample_every <= 0:
        raise CliError("--duration-s, --peak-records and --sample-every must be positive")
    if args.rate <= 0 and not 0 < args.rate_fraction <= 1:
        raise CliError("--rate-fraction must be in (0, 1]")
    run = bench_latency.run_latency(
        bootstrap,
        args.topic,
        rate=args.rate,
        rate_fraction=args.rate_fraction,
        peak_records=args.peak_records,
        duration_s=args.duration_s,
        record_size=args.record_size,
        acks=args.acks,
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        compression=args.compression,
        partitions=args.partitions,
        extra=extra,
        sample_every=args.sample_every,
    )
    bench_latency.report(run, args.json)
    return 1 if run.result.errors else 0


def bench_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli.common import client_config

    extra = client_config(args)
    bootstrap = extra.pop("bootstrap.servers")
    if args.num_records <= 0:
        raise CliError("--num-records must be positive")
    if getattr(args, "processes", 1) < 1:
        raise CliError("--processes must be at least 1")
    if getattr(args, "record_size", 8) < 1:
        raise CliError("--record-size must be at least 1")
    kind = args.bench_kind
    with _progress_bar(args, kind):
        result = _run_kind(args, kind, bootstrap, extra)
    report(result, args.json)
    return 1 if result.errors else 0


@contextlib.contextmanager
def _progress_bar(args: argparse.Namespace, kind: str) -> Iterator[None]:
    """A transient progress bar on a terminal's stderr (all process counts)."""
    with (
        progress_bar(args.json, f"bench {kind}", args.num_records) as advance,
        progress_to(advance),
    ):
        yield


def _run_kind(
    args: argparse.Namespace, kind: str, bootstrap: str, extra: dict[str, Any]
) -> BenchResult:
    if kind == "produce":
        result = run_produce(
            bootstrap,
            args.topic,
            args.num_records,
            args.record_size,
            acks=args.acks,
            batch_size=args.batch_size,
            linger_ms=args.linger_ms,
            compression=args.compression,
            partitions=args.partitions,
            processes=args.processes,
            throughput=args.throughput,
            extra=extra,
        )
    elif kind == "consume":
        result = run_consume(
            bootstrap,
            args.topic,
            args.num_records,
            processes=args.processes,
            timeout_s=args.timeout_s,
            extra=extra,
        )
    else:
        result = run_e2e(
            bootstrap,
            args.topic,
            args.num_records,
            args.record_size,
            acks=args.acks,
            partitions=args.partitions,
            timeout_s=args.timeout_s,
            extra=extra,
        )
    return result


def report(result: BenchResult, as_json: bool) -> None:
    if as_json:
        print_json(result.as_dict())
        return
    lat = result.latency_ms
    line = (
        f"{result.records} records {result.kind}, {result.records_per_s:.1f} records/sec "
        f"({result.mb_per_s:.2f} MB/sec) in {result.seconds:.2f} s"
    )
    if lat:
        line += (
            f", {lat['avg']:.2f} ms avg latency, {lat['max']:.2f} ms max latency, "
            f"{lat['p50']:.0f} ms 50th, {lat['p95']:.0f} ms 95th, {lat['p99']:.0f} ms 99th, "
            f"{lat['p99.9']:.0f} ms 99.9th."
        )
    print(line)
    if result.errors:
        print(f"errors: {result.errors}")
