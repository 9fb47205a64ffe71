"""The broker's own TLS produce ratio, with a client that writes full TLS records (issue 20).

    python -m benchmarks.tls_produce_raw [--mb 100] [--rounds 6] [--batch-kib 256]
        [--window 4] [--records-bytes 1024]

`security_bench` measures confluent-kafka producers; librdkafka writes a Produce request
over TLS as one TLS record per buffer segment (~1 KiB and ~31-byte records for 1 KiB
messages) and its own CPU then caps the SSL/PLAINTEXT ratio near 0.25 whatever the broker
costs. This benchmark asks the other question: what TLS costs the *broker* when the client
writes full 16 KiB records, as a client that hands OpenSSL (or Java's SSLEngine) a whole
request does. The client is a load generator, not a Kafka client: one Produce request
(v9, acks=1, no producer id, one partition, ``--batch-kib`` KiB of ``--records-bytes``-byte
records, encoded once by riverbed's codec) is written again and again on one connection,
``--window`` requests in flight, each response read and checked (error code NONE).

One broker with a listener per protocol (`riverbed.testing.secure.start_secure_broker`),
pinned to `ab_brokers.BROKER_CPU`, this process on the other CPUs. Each round sends
``--mb`` MB over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), the order rotating, and prints
MB/s, the broker's CPU per MB (its threads' schedstat) and the client's (this process). The
figures are the medians over rounds of each secure listener's MB/s and broker CPU per MB as
ratios to PLAINTEXT's in the same round: the broker-bound ratio is PLAINTEXT's broker ms/MB
over the listener's.

Nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.ab_brokers import check_cpus, cpu_since, pin, producers_off_broker_cpu, run_ns
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import ProduceRequest, ProduceResponse
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.security.scram import ScramClient, ScramMechanism
from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import Wire

_INT32 = struct.Struct(">i")
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
SCRAM_USER = {"bench": ("SCRAM-SHA-512", "bench-pw")}
TOPIC = "raw"
#: Produce v9: the last version before topic ids that every client library speaks.
PRODUCE_VERSION = 9
HEADER = RequestHeader(0, PRODUCE_VERSION, 1, "raw-tls-bench")
#: The log kept small: past ~1 GB of fresh page cache this machine's writes slowed the
#: broker ~4x (0.85 -> 3.2 ms/MB for every listener alike), which hid TLS's cost in the
#: ratios (x0.63 fast, x0.92 slow in one run).
BOUNDED_LOG = {
    "log.segment.bytes": str(64 << 20),
    "log.retention.bytes": str(128 << 20),
    "log.retention.check.interval.ms": "1000",
    "file.delete.delay.ms": "0",
}
#: Largest response frame read (a one-partition Produce response is ~60 bytes).
RESPONSE_BYTES_MAX = 1 << 20


def produce_frame(batch_kib: int, record_bytes: int) -> bytes:
    """One Produce request frame (length prefix included) of ~``batch_kib`` KiB."""
    value = b"x" * record_bytes
    count = max(1, batch_kib * 1024 // (record_bytes + 10))
    batch = build_batch([SimpleRecord(value, timestamp=1) for _ in range(count)])
    body = ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    return encode_request(HEADER, body)


class Connection:
    """A blocking connection that writes whole frames and reads length-prefixed answers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_answer(self) -> bytes:
        while True:
            if len(self._buffer) >= 4:
                (size,) = _INT32.unpack_from(self._buffer)
                if not 0 <= size <= RESPONSE_BYTES_MAX:
                    raise RuntimeError(f"response frame of {size} bytes")
                if len(self._buffer) >= 4 + size:
                    frame = bytes(self._buffer[4 : 4 + size])
                    del self._buffer[: 4 + size]
                    return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self._buffer += chunk


def _check_answer(frame: bytes) -> None:
    """The response is a Produce answer whose partition says NONE."""
    answer = decode_response(HEADER, frame)
    assert isinstance(answer, ProduceResponse)
    code = answer.responses[0].partition_responses[0].error_code
    if code:
        raise RuntimeError(f"the broker answered error code {code}")


def connect(broker: SecureBroker, listener: str) -> Connection:
    """A connection to ``listener``: TLS on SSL and SASL_SSL, logged in with SCRAM-SHA-512
    on SASL_SSL (`SCRAM_USER`)."""
    wire = Wire(broker.ports[listener])
    wire.sock.settimeout(None)
    wire.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if listener in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(cafile=str(broker.pki.ca))
        ctx.check_hostname = False
        wire.sock = ctx.wrap_socket(wire.sock)
    if listener == "SASL_SSL":
        user, (mechanism, password) = next(iter(SCRAM_USER.items()))
        wire.handshake(mechanism)
        client = ScramClient(ScramMechanism.SCRAM_SHA_512, user, password, "raw-tls-bench")
        first = wire.authenticate(client.first_message())
        final = wire.authenticate(client.final_message(first.auth_bytes))
        client.verify_server_final(final.auth_bytes)
    return Connection(wire.sock)


def send_mb(conn: Connection, frame: bytes, total_bytes: int, window: int) -> int:
    """Write ``frame`` until ``total_bytes`` went out, ``window`` in flight; the requests."""
    requests = max(window, total_bytes // len(frame))
    for _ in range(window):
        conn.send(frame)
    for _ in range(requests - window):
        _check_answer(conn.read_answer())
        conn.send(frame)
    for _ in range(window):
        _check_answer(conn.read_answer())
    return requests


@dataclass(frozen=True)
class Run:
    mb_per_s: float
    broker_ms_per_mb: float
    client_ms_per_mb: float


def timed(conn: Connection, frame: bytes, mb: int, window: int, pid: int | None) -> Run:
    ran, client = run_ns(pid), time.process_time()
    started = time.perf_counter()
    requests = send_mb(conn, frame, mb * 1_000_000, window)
    seconds = time.perf_counter() - started
    sent_mb = requests * len(frame) / 1e6
    return Run(
        sent_mb / seconds,
        1000 * cpu_since(pid, ran) / sent_mb,
        1000 * (time.process_time() - client) / sent_mb,
    )


def _line(name: str, run: Run, base: Run) -> str:
    return (
        f"{name:9s} {run.mb_per_s:7.1f} MB/s (x{run.mb_per_s / base.mb_per_s:.2f})"
        f"  broker {run.broker_ms_per_mb:5.2f} ms/MB (x{run.broker_ms_per_mb / base.broker_ms_per_mb:.2f})"
        f"  client {run.client_ms_per_mb:5.2f} ms/MB"
    )


@dataclass(frozen=True)
class RawSettings:
    """What each round sends (see the module docstring)."""

    mb: int = 100
    rounds: int = 6
    batch_kib: int = 256
    window: int = 4
    records_bytes: int = 1024


def raw_produce_rounds(broker: SecureBroker, settings: RawSettings) -> dict[str, list[Run]]:
    """The rounds against ``broker`` (started with `SCRAM_USER` and `BOUNDED_LOG`, already
    pinned), each printed; every listener's runs."""
    pid = broker.proc.pid
    frame = produce_frame(settings.batch_kib, settings.records_bytes)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(30)
    del admin  # its threads gone before the broker stops (no reconnect noise)
    conns = {name: connect(broker, name) for name in LISTENERS}
    for conn in conns.values():  # the topic created, every path warm
        send_mb(conn, frame, 20_000_000, settings.window)
    runs: dict[str, list[Run]] = {name: [] for name in LISTENERS}
    for round_no in range(settings.rounds):
        shift = round_no % len(LISTENERS)
        for name in LISTENERS[shift:] + LISTENERS[:shift]:
            runs[name].append(timed(conns[name], frame, settings.mb, settings.window, pid))
        base = runs["PLAINTEXT"][-1]
        for name in LISTENERS:
            print(f"raw round {round_no + 1} " + _line(name, runs[name][-1], base), flush=True)
    for conn in conns.values():
        conn.sock.close()
    return runs


def print_raw_summary(runs: dict[str, list[Run]], settings: RawSettings) -> None:
    """Each secure listener's medians of its per-round ratios to PLAINTEXT."""
    for name in LISTENERS[1:]:
        pairs = list(zip(runs[name], runs["PLAINTEXT"], strict=True))
        tput = statistics.median(s.mb_per_s / p.mb_per_s for s, p in pairs)
        cpu = statistics.median(p.broker_ms_per_mb / s.broker_ms_per_mb for s, p in pairs)
        print(
            f"{name} / PLAINTEXT with full TLS records ({settings.batch_kib} KiB requests of"
            f" {settings.records_bytes}-byte records): throughput x{tput:.2f}; broker-bound"
            f" (PLAINTEXT's broker CPU per MB over {name}'s) x{cpu:.2f}"
            f" (medians of {settings.rounds} rounds)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="MB per listener per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch-kib", type=int, default=256, help="the Produce request's size")
    parser.add_argument("--window", type=int, default=4, help="requests in flight")
    parser.add_argument("--records-bytes", type=int, default=1024)
    args = parser.parse_args()
    refused = check_cpus()
    if refused:
        parser.error(refused)
    producers_off_broker_cpu()
    settings = RawSettings(args.mb, args.rounds, args.batch_kib, args.window, args.records_bytes)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_secure_broker(
            Path(tmp) / "pki", {"admin": "admin-secret"}, SCRAM_USER, BOUNDED_LOG
        )
        try:
            pin(broker.proc.pid)
            runs = raw_produce_rounds(broker, settings)
        finally:
            broker.proc.close()
    print_raw_summary(runs, settings)
    print(f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}; broker pinned)")


if __name__ == "__main__":
    main()
