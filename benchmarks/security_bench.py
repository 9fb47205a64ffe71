"""Throughput over SSL and SASL_SSL against PLAINTEXT on one broker (issue 20), as ratios
measured in the same run, and SCRAM connection set-up rate.

    python -m benchmarks.security_bench [--records 20000] [--size 1024] [--rounds 1]
        [--slices 3] [--consume-passes 3] [--control] [--unpinned] [--raw-rounds 6]
        [--raw-mb 100]

One broker with a listener per protocol (`riverbed.testing.secure.start_secure_broker`).
Produce: one confluent-kafka producer per listener (acks=1), connected once (TLS handshake
and SASL login done, topics created); each round sends ``--records`` records of
``--size`` bytes per listener in ``--slices`` slices, the listeners taking turns slice by
slice (who goes first rotating), each slice timed to its flush with the broker's CPU over
it (its threads' schedstat, as `benchmarks.ab_brokers.run_ns`). A slice takes a fraction
of a second, so the listeners of one turn meet the same CPU speeds (this machine's vCPUs
run at one of two speeds ~2x apart for seconds at a time, see `benchmarks.ab_brokers`):
the figure is the median of the per-turn ratios to PLAINTEXT (their spread is printed).
Back-to-back rounds of whole listeners read 0.32-0.56 for SSL on one tree. The broker is
pinned to `ab_brokers.BROKER_CPU` and the clients to the other CPUs, the same for every
listener (``--unpinned``: anywhere). Consume: after each round's produce, per listener
(order rotating) ``--consume-passes`` consumers in turn read that round's records, timed
from their first record. Prints MB/s, the broker's CPU per MB and their ratios to
PLAINTEXT, per round and as medians, and for produce the clients' CPU per MB (this
process: Python and librdkafka's threads, on their own CPU): a producer whose CPU per MB
is 1000 / its MB/s is bound by its own CPU, not the broker's; the summary prints, per
secure listener, the most its producer could send with a broker that cost nothing (1000 /
its CPU per MB) as a ratio to PLAINTEXT: the ceiling of the produce ratio.

``--control`` is the A/A check of the method: the secure listeners are replaced by a second
PLAINTEXT connection (its own producer, consumer and topic) measured exactly as the
others; its ratios should be ~1.00, and their spread is the method's noise.

Then (not with ``--control``; ``--raw-rounds 0`` skips it) the broker's own produce ratio
with a client that writes full TLS records (`benchmarks.tls_produce_raw`: a pre-encoded
256 KiB Produce request written again and again per listener, ``--raw-rounds`` rounds of
``--raw-mb`` MB): librdkafka's producer above writes a TLS record per buffer segment and
saturates its own CPU near x0.25 of PLAINTEXT whatever the broker costs; this part says
what TLS costs the broker. The broker's log is kept small (`tls_produce_raw.BOUNDED_LOG`).

Then (not with ``--control``) opens SCRAM-SHA-512 connections (ApiVersions + handshake +
login) one after another for a few seconds and prints connections/s. Nothing passes or
fails on absolute time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from benchmarks.ab_brokers import check_cpus, cpu_since, pin, producers_off_broker_cpu, run_ns
from benchmarks.tls_produce_raw import (
    BOUNDED_LOG,
    SCRAM_USER,
    RawSettings,
    print_raw_summary,
    raw_produce_rounds,
)
from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import Wire, librdkafka_config

SCRAM = SCRAM_USER


#: Records each listener produces and consumes once before the first round, unreported:
#: the broker's first requests of a kind (codec compilation, first segments) and the
#: page cache are warm for every listener alike (round 1 of PLAINTEXT was the cold one).
WARMUP_RECORDS_MAX = 10_000


def connected_producer(conf: dict[str, str], topic: str, size: int) -> Producer:
    """A producer that has produced (and flushed) one ``size``-byte record to ``topic``:
    the topic is created and the connections, TLS handshakes and SASL logins are made, so
    a timed part that follows measures throughput only (set-up is measured apart)."""
    producer = Producer(conf | {"acks": "1", "linger.ms": "5", "batch.size": "262144"})
    timed_produce(producer, topic, 1, size)
    return producer


def timed_produce(producer: Producer, topic: str, records: int, size: int) -> float:
    """Seconds to produce ``records`` of ``size`` bytes and flush them (acks=1)."""
    value = b"x" * size
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError(f"records to {topic} still unacknowledged after 120 s")
    return time.perf_counter() - started


def produce_seconds(conf: dict[str, str], topic: str, records: int, size: int) -> float:
    """Seconds for confluent-kafka to produce ``records`` of ``size`` bytes (acks=1) once
    connected (`connected_producer`: ``topic`` gets one record more)."""
    return timed_produce(connected_producer(conf, topic, size), topic, records, size)


@dataclass(frozen=True)
class Phase:
    """One listener's produce or consume in one round."""

    mb_per_s: float
    #: the broker's CPU per MB over the timed part: less moved by other processes on a
    #: shared machine than MB/s
    broker_ms_per_mb: float
    #: this process's CPU (the clients: librdkafka's threads and Python) per MB
    client_ms_per_mb: float = 0.0


def _consume_once(
    conf: dict[str, str], topic: str, records: int, pid: int | None
) -> tuple[float, float]:
    """(seconds, broker CPU seconds) for a new consumer to read the ``records`` of
    ``topic``, from its first record (connection set-up is measured apart)."""
    consumer = Consumer(conf | {"group.id": f"bench-{topic}", "fetch.max.bytes": "52428800"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    started = 0.0
    ran: dict[str, int] = {}
    while got < records:
        # never more than what is left: consume() waits its whole timeout to fill a batch
        msgs = [m for m in consumer.consume(min(1000, records - got), 1.0) if m.error() is None]
        if msgs and not started:
            started, ran = time.perf_counter(), run_ns(pid)
        got += len(msgs)
    elapsed, cpu = time.perf_counter() - started, cpu_since(pid, ran)
    consumer.close()
    return elapsed, cpu


def _consume(
    conf: dict[str, str], topic: str, records: int, size: int, pid: int | None, passes: int
) -> Phase:
    """``passes`` consumers in turn read the ``records`` of ``topic``: one pass of 30 MB
    took 60-100 ms, too short to be told apart from a loaded machine's scheduling."""
    timed = [_consume_once(conf, topic, records, pid) for _ in range(passes)]
    mb = passes * records * size / 1e6
    return Phase(mb / sum(s for s, _ in timed), 1000 * sum(c for _, c in timed) / mb)


def _produce_turns(
    producers: dict[str, Producer],
    topic: str,
    records: int,
    size: int,
    pid: int | None,
    turn_no: int,
) -> dict[str, Phase]:
    """One slice per listener, the listeners taking turns (who goes first rotating with
    ``turn_no``): each one's MB/s and broker CPU per MB over its slice."""
    names = list(producers)
    shift = turn_no % len(names)
    out = {}
    mb = records * size / 1e6
    for name in names[shift:] + names[:shift]:
        ran, client = run_ns(pid), time.process_time()
        seconds = timed_produce(producers[name], f"{topic}-{name.lower()}", records, size)
        client_ms = 1000 * (time.process_time() - client) / mb
        out[name] = Phase(mb / seconds, 1000 * cpu_since(pid, ran) / mb, client_ms)
    return out


def _scram_connections_per_s(port: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        wire = Wire(port)
        wire.handshake("SCRAM-SHA-512")
        client = ScramClient(ScramMechanism.SCRAM_SHA_512, "bench", "bench-pw", f"n{done}")
        first = wire.authenticate(client.first_message())
        client.verify_server_final(
            wire.authenticate(client.final_message(first.auth_bytes)).auth_bytes
        )
        wire.sock.close()
        done += 1
    return done / (time.perf_counter() - started)


def _cases(broker: SecureBroker, control: bool) -> dict[str, dict[str, str]]:
    if control:  # A/A: a second PLAINTEXT connection in the secure listeners' place
        return {"PLAINTEXT": {"protocol": "PLAINTEXT"}, "PLAINTEXT-B": {"protocol": "PLAINTEXT"}}
    return {
        "PLAINTEXT": {"protocol": "PLAINTEXT"},
        "SSL": {"protocol": "SSL", "cafile": str(broker.pki.ca)},
        "SASL_SSL": {"protocol": "SASL_SSL", "cafile": str(broker.pki.ca),
                     "mechanism": "SCRAM-SHA-512", "username": "bench", "password": "bench-pw"},
    }  # fmt: skip


def _print_phases(label: str, kind: str, phases: dict[str, Phase]) -> None:
    base = phases["PLAINTEXT"]
    for name, ph in phases.items():
        print(
            f"{label}{name:11s} {kind} {ph.mb_per_s:7.1f} MB/s (x{ph.mb_per_s / base.mb_per_s:.2f})"
            f" broker {ph.broker_ms_per_mb:5.2f} ms/MB"
            f" (x{ph.broker_ms_per_mb / base.broker_ms_per_mb:.2f})"
            + (f" clients {ph.client_ms_per_mb:5.2f} ms/MB" if ph.client_ms_per_mb else ""),
            flush=True,
        )


def _median(phases: list[Phase]) -> Phase:
    return Phase(
        statistics.median(p.mb_per_s for p in phases),
        statistics.median(p.broker_ms_per_mb for p in phases),
        statistics.median(p.client_ms_per_mb for p in phases),
    )


def _print_summary(turns: list[dict[str, Phase]], consumes: list[dict[str, Phase]]) -> None:
    """Medians over the run, and the median of the per-turn produce ratios (the figure)."""
    names = list(turns[0])
    _print_phases("median ", "produce", {n: _median([t[n] for t in turns]) for n in names})
    _print_phases("median ", "consume", {n: _median([c[n] for c in consumes]) for n in names})
    for name in names[1:]:
        ratios = sorted(t[name].mb_per_s / t["PLAINTEXT"].mb_per_s for t in turns)
        cpu = sorted(t[name].broker_ms_per_mb / t["PLAINTEXT"].broker_ms_per_mb for t in turns)
        print(
            f"{name} produce / PLAINTEXT: median of {len(ratios)} turn ratios"
            f" {statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f});"
            f" broker CPU per MB x{statistics.median(cpu):.2f}"
            f" (min {cpu[0]:.2f}, max {cpu[-1]:.2f})"
        )
        print("  turn ratios: " + " ".join(f"{x:.2f}" for x in ratios))
        _print_client_ceiling(name, [t[name] for t in turns], [t["PLAINTEXT"] for t in turns])


def _print_client_ceiling(name: str, phases: list[Phase], plaintext: list[Phase]) -> None:
    """The most ``name`` could produce if the broker cost nothing: the producer (its own
    CPU, pinned apart) is saturated at 1000 / its CPU ms per MB. As a ratio to what
    PLAINTEXT achieved, the ceiling no broker change can lift."""
    client = statistics.median(p.client_ms_per_mb for p in phases)
    if not client:
        return
    base = statistics.median(p.mb_per_s for p in plaintext)
    ceiling = 1000 / client
    busy = statistics.median(p.mb_per_s * p.client_ms_per_mb / 1000 for p in phases)
    print(
        f"  {name} producer alone: {client:.2f} ms CPU per MB (busy {busy:.0%} of its"
        f" CPU over the slices): at most {ceiling:.0f} MB/s even with a free broker,"
        f" x{ceiling / base:.2f} of PLAINTEXT's {base:.0f} MB/s"
    )


def _run(broker: SecureBroker, args: argparse.Namespace) -> None:
    pid = broker.proc.pid
    if not args.unpinned:
        pin(pid)
    confs = {
        name: librdkafka_config(broker.bootstrap(sec["protocol"]), sec)
        for name, sec in _cases(broker, args.control).items()
    }
    slice_records = max(1, args.records // args.slices)
    records = slice_records * args.slices  # per listener per round
    warmup = min(records, WARMUP_RECORDS_MAX)
    for name, conf in confs.items():  # every listener's first requests, unreported
        producer = connected_producer(conf, f"warmup-{name.lower()}", args.size)
        timed_produce(producer, f"warmup-{name.lower()}", warmup, args.size)
        _consume(conf, f"warmup-{name.lower()}", warmup + 1, args.size, pid, 1)
    turns: list[dict[str, Phase]] = []
    consumes: list[dict[str, Phase]] = []
    for round_no in range(args.rounds):
        topic = f"bench-{round_no}"
        producers = {  # connected, its topic created: the slices time throughput only
            name: connected_producer(conf, f"{topic}-{name.lower()}", args.size)
            for name, conf in confs.items()
        }
        for _ in range(args.slices):
            turns.append(
                _produce_turns(producers, topic, slice_records, args.size, pid, len(turns))
            )
        label = f"round {round_no + 1} "
        _print_phases(label, "produce", {n: _median([t[n] for t in turns[-args.slices :]])
                                         for n in confs})  # fmt: skip
        shift = round_no % len(confs)
        order = list(confs)[shift:] + list(confs)[:shift]
        consumed = {
            name: _consume(confs[name], f"{topic}-{name.lower()}", records + 1, args.size, pid,
                           args.consume_passes)
            for name in order
        }  # fmt: skip
        consumes.append({name: consumed[name] for name in confs})
        _print_phases(label, "consume", consumes[-1])
    _print_summary(turns, consumes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000, help="per listener per round")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--slices", type=int, default=3, help="alternated produce turns per round")
    parser.add_argument("--consume-passes", type=int, default=3)
    parser.add_argument(
        "--control", action="store_true", help="A/A: PLAINTEXT vs PLAINTEXT (expect ~1.00)"
    )
    parser.add_argument("--unpinned", action="store_true", help="broker and clients on any CPU")
    parser.add_argument(
        "--raw-rounds",
        type=int,
        default=6,
        help="rounds of the full-TLS-record produce (benchmarks.tls_produce_raw); 0: none",
    )
    parser.add_argument("--raw-mb", type=int, default=100, help="MB per listener per raw round")
    args = parser.parse_args()
    if not args.unpinned:
        refused = check_cpus()
        if refused:
            parser.error(f"{refused}; --unpinned runs anywhere")
        producers_off_broker_cpu()  # before any client: librdkafka's threads inherit it
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_secure_broker(
            Path(tmp) / "pki", {"admin": "admin-secret"}, SCRAM, BOUNDED_LOG
        )
        try:
            _run(broker, args)
            if not args.control and args.raw_rounds:
                raw = RawSettings(mb=args.raw_mb, rounds=args.raw_rounds)
                print_raw_summary(raw_produce_rounds(broker, raw), raw)
            if not args.control:
                rate = _scram_connections_per_s(broker.ports["SASL_PLAINTEXT"], 5.0)
                print(f"SCRAM-SHA-512 connection set-up: {rate:.0f} connections/s"
                      " (4096 iterations)")  # fmt: skip
        finally:
            broker.proc.close()
    print(f"(load {load:.1f} -> {os.getloadavg()[0]:.1f};"
          f" {'unpinned' if args.unpinned else 'pinned'})")  # fmt: skip


if __name__ == "__main__":
    main()
