"""Throughput over SSL and SASL_SSL against PLAINTEXT on one broker (issue 20), as ratios
measured in the same run, and SCRAM connection set-up rate.

    python -m benchmarks.security_bench [--records 20000] [--size 1024] [--rounds 1]

One broker with a listener per protocol (`riverbed.testing.secure.start_secure_broker`);
for each listener confluent-kafka produces ``--records`` records of ``--size`` bytes
(acks=1) and a consumer reads them back; prints MB/s and the ratio to PLAINTEXT. With
``--rounds`` N the listeners take turns N times (a new topic each time) and the medians
and their ratios are printed too (a shared machine's load moves single rounds). Then
opens SCRAM-SHA-512 connections (ApiVersions + handshake + login) one after another for a
few seconds and prints connections/s. Nothing passes or fails on absolute time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import Wire, librdkafka_config

SCRAM = {"bench": ("SCRAM-SHA-512", "bench-pw")}


def produce_seconds(conf: dict[str, str], topic: str, records: int, size: int) -> float:
    """Seconds for confluent-kafka to produce ``records`` of ``size`` bytes (acks=1)."""
    from confluent_kafka import Producer

    value = b"x" * size
    producer = Producer(conf | {"acks": "1", "linger.ms": "5", "batch.size": "262144"})
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


def _throughput(conf: dict[str, str], topic: str, records: int, size: int) -> tuple[float, float]:
    from confluent_kafka import Consumer

    produce_s = produce_seconds(conf, topic, records, size)
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = Consumer(conf | {"group.id": f"bench-{topic}", "fetch.max.bytes": "52428800"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    started = 0.0  # from the first record: connection set-up is measured apart
    while got < records:
        msgs = [m for m in consumer.consume(1000, 1.0) if m.error() is None]
        if msgs and not started:
            started = time.perf_counter()
        got += len(msgs)
    consume_s = time.perf_counter() - started
    consumer.close()
    mb = records * size / 1e6
    return mb / produce_s, mb / consume_s


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


def _print_ratios(label: str, rates: dict[str, tuple[float, float]]) -> None:
    base = rates["PLAINTEXT"]
    for name, (produce, consume) in rates.items():
        print(
            f"{label}{name:10s} produce {produce:7.1f} MB/s (x{produce / base[0]:.2f})  "
            f"consume {consume:7.1f} MB/s (x{consume / base[1]:.2f})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_secure_broker(Path(tmp) / "pki", {"admin": "admin-secret"}, SCRAM)
        try:
            cases = _cases(broker)
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
            for round_no in range(args.rounds):
                for name, sec in cases.items():
                    conf = librdkafka_config(broker.bootstrap(sec["protocol"]), sec)
                    topic = f"bench-{name.lower()}-{round_no}"
                    runs[name].append(_throughput(conf, topic, args.records, args.size))
                label = f"round {round_no + 1} " if args.rounds > 1 else ""
                _print_ratios(label, {name: r[-1] for name, r in runs.items()})
            if args.rounds > 1:
                _print_ratios("median  ", {
                    name: (statistics.median(p for p, _ in r), statistics.median(c for _, c in r))
                    for name, r in runs.items()
                })  # fmt: skip
            rate = _scram_connections_per_s(broker.ports["SASL_PLAINTEXT"], 5.0)
            print(f"SCRAM-SHA-512 connection set-up: {rate:.0f} connections/s (4096 iterations)")
        finally:
            broker.proc.close()


if __name__ == "__main__":
    main()
