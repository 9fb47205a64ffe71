"""Throughput over SSL and SASL_SSL against PLAINTEXT on one broker (issue 20), as ratios
measured in the same run, and SCRAM connection set-up rate.

    python -m benchmarks.security_bench [--records 20000] [--size 1024] [--rounds 1]
        [--consume-passes 3]

One broker with a listener per protocol (`riverbed.testing.secure.start_secure_broker`);
for each listener confluent-kafka produces ``--records`` records of ``--size`` bytes
(acks=1) and ``--consume-passes`` consumers in turn read them back; prints MB/s, the
broker's CPU per MB (user + system, /proc/<pid>/stat) and their ratios to PLAINTEXT.
Only throughput is timed: a producer is timed once it has produced one record (topic
created, connected, TLS handshake and SASL login done), a consumer from its first record,
and every listener first produces and consumes up to ``WARMUP_RECORDS_MAX`` records
unreported. With ``--rounds`` N the listeners take turns N times (a new topic each time)
and the medians and their ratios are printed too (a shared machine's load moves single
rounds). Then opens SCRAM-SHA-512 connections (ApiVersions + handshake + login) one after
another for a few seconds and prints connections/s. Nothing passes or fails on absolute
time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from benchmarks.authorizer_throughput import _cpu_s as cpu_seconds
from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import Wire, librdkafka_config

SCRAM = {"bench": ("SCRAM-SHA-512", "bench-pw")}


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
    #: the broker's CPU (user + system) per MB over the timed part: less moved by other
    #: processes on a shared machine than MB/s
    broker_ms_per_mb: float


def _consume_once(conf: dict[str, str], topic: str, records: int, pid: int) -> tuple[float, float]:
    """(seconds, broker CPU seconds) for a new consumer to read the ``records`` of
    ``topic``, from its first record (connection set-up is measured apart)."""
    consumer = Consumer(conf | {"group.id": f"bench-{topic}", "fetch.max.bytes": "52428800"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    started = cpu_started = 0.0
    while got < records:
        # never more than what is left: consume() waits its whole timeout to fill a batch
        msgs = [m for m in consumer.consume(min(1000, records - got), 1.0) if m.error() is None]
        if msgs and not started:
            started, cpu_started = time.perf_counter(), cpu_seconds(pid)
        got += len(msgs)
    elapsed, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu_started
    consumer.close()
    return elapsed, cpu


def _consume(
    conf: dict[str, str], topic: str, records: int, size: int, pid: int, passes: int
) -> Phase:
    """``passes`` consumers in turn read the ``records`` of ``topic``: one pass of 30 MB
    took 60-100 ms, too short to be told apart from a loaded machine's scheduling."""
    timed = [_consume_once(conf, topic, records, pid) for _ in range(passes)]
    mb = passes * records * size / 1e6
    return Phase(mb / sum(s for s, _ in timed), 1000 * sum(c for _, c in timed) / mb)


def _throughput(
    conf: dict[str, str], topic: str, records: int, size: int, pid: int, passes: int
) -> tuple[Phase, Phase]:
    producer = connected_producer(conf, topic, size)
    cpu_started = cpu_seconds(pid)
    produce_s = timed_produce(producer, topic, records, size)
    mb = records * size / 1e6
    produce = Phase(mb / produce_s, 1000 * (cpu_seconds(pid) - cpu_started) / mb)
    return produce, _consume(conf, topic, records + 1, size, pid, passes)


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


def _cases(broker: SecureBroker) -> dict[str, dict[str, str]]:
    return {
        "PLAINTEXT": {"protocol": "PLAINTEXT"},
        "SSL": {"protocol": "SSL", "cafile": str(broker.pki.ca)},
        "SASL_SSL": {"protocol": "SASL_SSL", "cafile": str(broker.pki.ca),
                     "mechanism": "SCRAM-SHA-512", "username": "bench", "password": "bench-pw"},
    }  # fmt: skip


#: one listener's (produce, consume) in a round
Rates = tuple[Phase, Phase]


def _print_ratios(label: str, rates: dict[str, Rates]) -> None:
    base = rates["PLAINTEXT"]
    for name, phases in rates.items():
        cols = [
            f"{kind} {ph.mb_per_s:7.1f} MB/s (x{ph.mb_per_s / b.mb_per_s:.2f}) broker "
            f"{ph.broker_ms_per_mb:5.2f} ms/MB (x{ph.broker_ms_per_mb / b.broker_ms_per_mb:.2f})"
            for kind, ph, b in zip(("produce", "consume"), phases, base, strict=True)
        ]
        print(f"{label}{name:10s} " + "  ".join(cols), flush=True)


def _median(phases: list[Phase]) -> Phase:
    return Phase(
        statistics.median(p.mb_per_s for p in phases),
        statistics.median(p.broker_ms_per_mb for p in phases),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--consume-passes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_secure_broker(Path(tmp) / "pki", {"admin": "admin-secret"}, SCRAM)
        pid = broker.proc.pid
        assert pid is not None
        try:
            cases = _cases(broker)
            confs = {
                name: librdkafka_config(broker.bootstrap(sec["protocol"]), sec)
                for name, sec in cases.items()
            }
            warmup = min(args.records, WARMUP_RECORDS_MAX)
            for name, conf in confs.items():
                _throughput(conf, f"warmup-{name.lower()}", warmup, args.size, pid, 1)
            runs: dict[str, list[Rates]] = {name: [] for name in cases}
            for round_no in range(args.rounds):
                for name, conf in confs.items():
                    topic = f"bench-{name.lower()}-{round_no}"
                    runs[name].append(
                        _throughput(conf, topic, args.records, args.size, pid, args.consume_passes)
                    )
                label = f"round {round_no + 1} " if args.rounds > 1 else ""
                _print_ratios(label, {name: r[-1] for name, r in runs.items()})
            if args.rounds > 1:
                _print_ratios("median  ", {
                    name: (_median([p for p, _ in r]), _median([c for _, c in r]))
                    for name, r in runs.items()
                })  # fmt: skip
            rate = _scram_connections_per_s(broker.ports["SASL_PLAINTEXT"], 5.0)
            print(f"SCRAM-SHA-512 connection set-up: {rate:.0f} connections/s (4096 iterations)")
        finally:
            broker.proc.close()


if __name__ == "__main__":
    main()
