"""Real Kafka clients against a capture listener that speaks riverbed's message engine.

A plain TCP listener on 127.0.0.1:0 answers ApiVersions, Metadata (itself as leader of the
asked topic), InitProducerId and Produce just enough for kafka-python, aiokafka and
confluent-kafka (librdkafka) to produce; every request is decoded with
``riverbed.protocol.headers.decode_request`` and the test checks what each client sent:
its client id, the topic, and the keys/values inside the record batches, per compression.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import socketserver
import struct
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiokafka
import confluent_kafka
import kafka
import pytest

from riverbed.protocol import headers as h
from riverbed.protocol.api_versions import (
    BROKER_LISTENER,
    SUPPORTED_VERSIONS,
    ApiKey,
    api_versions_response,
    listener_api_versions,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    InitProducerIdResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from riverbed.protocol.records import CompressionType, iter_batches, iter_records

pytestmark = pytest.mark.integration

FRAME_BYTES_MAX = 16 << 20
#: What the capture server advertises: a broker listener's APIs.
BROKER_VERSIONS = listener_api_versions(BROKER_LISTENER, SUPPORTED_VERSIONS)
CLIENT_TIMEOUT_S = 20
RECORDS = [(b"k1", b"hello"), (b"k2", b"world" * 50)]
LIBRDKAFKA_LINGER_MS = 1000


@dataclass
class Capture:
    port: int = 0
    requests: list[tuple[h.RequestHeader, Message]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, client_id: str, api_key: int) -> list[Message]:
        with self.lock:
            return [
                b for hd, b in self.requests if hd.client_id == client_id and hd.api_key == api_key
            ]


def _answer(cap: Capture, header: h.RequestHeader, body: Message) -> Message | None:
    if header.api_key == ApiKey.API_VERSIONS:
        if h.response_body_version(header) != header.api_version:
            return api_versions_response(ErrorCode.UNSUPPORTED_VERSION, versions=BROKER_VERSIONS)
        return api_versions_response(versions=BROKER_VERSIONS)
    if header.api_key == ApiKey.METADATA:
        assert isinstance(body, MetadataRequest)
        names = [t.name for t in body.topics or [] if t.name]
        return MetadataResponse(
            brokers=[
                MetadataResponse.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=cap.port)
            ],
            cluster_id="capture",
            controller_id=0,
            topics=[
                MetadataResponse.MetadataResponseTopic(
                    name=name,
                    partitions=[
                        MetadataResponse.MetadataResponsePartition(
                            partition_index=0,
                            leader_id=0,
                            leader_epoch=0,
                            replica_nodes=[0],
                            isr_nodes=[0],
                        )
                    ],
                )
                for name in names
            ],
        )
    if header.api_key == ApiKey.INIT_PRODUCER_ID:
        return InitProducerIdResponse(producer_id=1000, producer_epoch=0)
    if header.api_key == ApiKey.PRODUCE:
        assert isinstance(body, ProduceRequest)
        if body.acks == 0:
            return None
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        ProduceResponse.PartitionProduceResponse(index=p.index, base_offset=0)
                        for p in t.partition_data
                    ],
                )
                for t in body.topic_data
            ]
        )
    raise AssertionError(f"capture listener got an unexpected request {header}")


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


@pytest.fixture
def capture() -> Iterator[Capture]:
    cap = Capture()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            while True:
                size_bytes = _read_exact(sock, 4)
                if size_bytes is None:
                    return
                (size,) = struct.unpack(">i", size_bytes)
                assert 0 < size <= FRAME_BYTES_MAX
                frame = _read_exact(sock, size)
                if frame is None:
                    return
                header, body = h.decode_request(frame)
                with cap.lock:
                    cap.requests.append((header, body))
                answer = _answer(cap, header, body)
                if answer is not None:
                    sock.sendall(h.encode_response(header, answer))

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server(("127.0.0.1", 0), Handler)
    cap.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield cap
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _check_produce(cap: Capture, client_id: str, topic: str, codec: str) -> None:
    api_versions = cap.of(client_id, ApiKey.API_VERSIONS)
    assert api_versions, f"{client_id} sent no ApiVersions"
    metadata = cap.of(client_id, ApiKey.METADATA)
    assert any(
        topic in [t.name for t in m.topics or []]
        for m in metadata
        if isinstance(m, MetadataRequest)
    ), f"{client_id} never asked metadata for {topic}"
    got: list[tuple[bytes | None, bytes | None]] = []
    codecs = set()
    for req in cap.of(client_id, ApiKey.PRODUCE):
        assert isinstance(req, ProduceRequest)
        for t in req.topic_data:
            assert t.name == topic
            for p in t.partition_data:
                assert p.index == 0 and p.records is not None
                for pos, batch in iter_batches(p.records):
                    codecs.add(batch.compression)
                    chunk = p.records[pos : pos + batch.size]
                    got += [(r.key, r.value) for r in iter_records(chunk)]
    assert got == RECORDS
    assert codecs == {CompressionType[codec.upper()]}


CODECS = ["gzip", "snappy", "lz4", "zstd"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka(capture: Capture, codec: str) -> None:
    client_id = f"rdkafka-{codec}"
    topic = f"capture-rdkafka-{codec}"
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{capture.port}",
            "client.id": client_id,
            "compression.type": codec,
            # librdkafka sends a batch uncompressed when compression does not shrink it
            # (a lone 7-byte record); a long linger keeps both records in one batch even
            # on a loaded machine, so the codec under test is what goes on the wire.
            "linger.ms": LIBRDKAFKA_LINGER_MS,
            "acks": 1,
            "enable.idempotence": False,
            "socket.timeout.ms": CLIENT_TIMEOUT_S * 1000,
        }
    )
    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    _check_produce(capture, client_id, topic, codec)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", [c for c in CODECS if c != "snappy"])
def test_kafka_python(capture: Capture, codec: str) -> None:
    # kafka-python needs python-snappy for snappy, which riverbed does not install
    client_id = f"kafka-python-{codec}"
    topic = f"capture-kafka-python-{codec}"
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{capture.port}",
        client_id=client_id,
        compression_type=codec,
        linger_ms=50,
        acks=1,
        request_timeout_ms=CLIENT_TIMEOUT_S * 1000,
    )
    try:
        futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in RECORDS]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        for f in futures:
            assert f.get(timeout=CLIENT_TIMEOUT_S).offset >= 0
    finally:
        producer.close(timeout=5)
    _check_produce(capture, client_id, topic, codec)
    # kafka-python 3 asks ApiVersions v4 first; riverbed serves v4 (Kafka 4.1's range), so
    # the client never falls back to a lower version (before, the v0 UNSUPPORTED_VERSION
    # answer made it retry at v3)
    with capture.lock:
        asked = [hd.api_version for hd, _ in capture.requests if hd.api_key == ApiKey.API_VERSIONS]
    assert asked and set(asked) == {4}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka(capture: Capture, codec: str) -> None:
    client_id = f"aiokafka-{codec}"
    topic = f"capture-aiokafka-{codec}"

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{capture.port}",
            client_id=client_id,
            compression_type=codec,
            linger_ms=50,
            acks=1,
            request_timeout_ms=CLIENT_TIMEOUT_S * 1000,
        )
        await producer.start()
        try:
            futures = [await producer.send(topic, key=k, value=v, partition=0) for k, v in RECORDS]
            for f in futures:
                assert (await f).offset >= 0
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), CLIENT_TIMEOUT_S))
    _check_produce(capture, client_id, topic, codec)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat(capture: Capture, codec: str) -> None:
    # Debian's kcat links librdkafka 2.0, which enables features (message format v2,
    # compression) only when the advertised ranges contain specific old versions
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is missing: apt-get install kcat (make sysdeps)"
    client_id = f"kcat-{codec}"
    topic = f"capture-kcat-{codec}"
    lines = b"".join(k + b":" + v + b"\n" for k, v in RECORDS)
    subprocess.run(
        [kcat, "-P", "-b", f"127.0.0.1:{capture.port}", "-t", topic, "-p", "0", "-z", codec,
         "-K", ":", "-X", f"client.id={client_id}", "-X", f"linger.ms={LIBRDKAFKA_LINGER_MS}"],
        input=lines,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
        capture_output=True,
    )  # fmt: skip
    _check_produce(capture, client_id, topic, codec)
