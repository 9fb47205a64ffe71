"""The four real clients (confluent-kafka, kafka-python, aiokafka, kcat) configured from one
neutral description of a secured connection, for the security integration tests.

`ClientSecurity`-like dict keys: protocol, mechanism, username, password, cafile,
certfile, keyfile. `produce_consume(client, bootstrap, sec, topic, values)` produces the
values with that client, reads them back from the start and returns what it read.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Mapping

from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    Message,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")
TIMEOUT_S = 30


def librdkafka_config(bootstrap: str, sec: Mapping[str, str]) -> dict[str, str]:
    conf = {"bootstrap.servers": bootstrap, "security.protocol": sec["protocol"]}
    if "mechanism" in sec:
        conf |= {
            "sasl.mechanism": sec["mechanism"],
            "sasl.username": sec["username"],
            "sasl.password": sec["password"],
        }
    if "cafile" in sec:
        conf["ssl.ca.location"] = sec["cafile"]
    if "certfile" in sec:
        conf |= {"ssl.certificate.location": sec["certfile"], "ssl.key.location": sec["keyfile"]}
    return conf


def _python_kwargs(sec: Mapping[str, str]) -> dict[str, object]:
    kw: dict[str, object] = {"security_protocol": sec["protocol"]}
    if "mechanism" in sec:
        kw |= {
            "sasl_mechanism": sec["mechanism"],
            "sasl_plain_username": sec["username"],
            "sasl_plain_password": sec["password"],
        }
    return kw


def _confluent(
    bootstrap: str, sec: Mapping[str, str], topic: str, values: list[bytes]
) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    conf = librdkafka_config(bootstrap, sec)
    producer = Producer(conf)
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(TIMEOUT_S) == 0, "confluent-kafka could not deliver"
    consumer = Consumer(conf | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[bytes] = []
    try:
        for _ in range(TIMEOUT_S * 2):
            msg = consumer.poll(0.5)
            value = msg.value() if msg is not None and msg.error() is None else None
            if value is not None:
                out.append(value)
            if len(out) >= len(values):
                break
    finally:
        consumer.close()
    return out


def _kafka_python(
    bootstrap: str, sec: Mapping[str, str], topic: str, values: list[bytes]
) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    kw = _python_kwargs(sec)
    if "cafile" in sec:
        kw["ssl_cafile"] = sec["cafile"]
    if "certfile" in sec:
        kw |= {"ssl_certfile": sec["certfile"], "ssl_keyfile": sec["keyfile"]}
    producer = KafkaProducer(bootstrap_servers=bootstrap, **kw)
    for v in values:
        producer.send(topic, v).get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, consumer_timeout_ms=TIMEOUT_S * 1000, **kw
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    out: list[bytes] = []
    for msg in consumer:
        out.append(msg.value)
        if len(out) >= len(values):
            break
    consumer.close()
    return out


async def _aiokafka(
    bootstrap: str, sec: Mapping[str, str], topic: str, values: list[bytes]
) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    kw = _python_kwargs(sec)
    if "cafile" in sec:
        kw["ssl_context"] = create_ssl_context(
            cafile=sec["cafile"], certfile=sec.get("certfile"), keyfile=sec.get("keyfile")
        )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kw)
    await producer.start()
    try:
        for v in values:
            await producer.send_and_wait(topic, v)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kw)
    await consumer.start()
    out: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        async with asyncio.timeout(TIMEOUT_S):
            while len(out) < len(values):
                batch = await consumer.getmany(tp, timeout_ms=500)
                out.extend(m.value for m in batch.get(tp, []) if m.value is not None)
    finally:
        await consumer.stop()
    return out


def _kcat(bootstrap: str, sec: Mapping[str, str], topic: str, values: list[bytes]) -> list[bytes]:
    assert KCAT is not None, "kcat is not installed (make sysdeps installs it)"
    args = [KCAT, "-b", bootstrap]
    for key, value in librdkafka_config(bootstrap, sec).items():
        if key != "bootstrap.servers":
            args += ["-X", f"{key}={value}"]
    data = b"".join(v + b"\n" for v in values)
    subprocess.run([*args, "-P", "-t", topic], input=data, check=True, timeout=TIMEOUT_S)
    done = subprocess.run(
        [*args, "-C", "-t", topic, "-o", "beginning", "-e", "-c", str(len(values))],
        capture_output=True,
        check=True,
        timeout=TIMEOUT_S,
    )
    return done.stdout.splitlines()


def produce_consume(
    client: str, bootstrap: str, sec: Mapping[str, str], topic: str, values: list[bytes]
) -> list[bytes]:
    if client == "confluent-kafka":
        return _confluent(bootstrap, sec, topic, values)
    if client == "kafka-python":
        return _kafka_python(bootstrap, sec, topic, values)
    if client == "aiokafka":
        return asyncio.run(_aiokafka(bootstrap, sec, topic, values))
    return _kcat(bootstrap, sec, topic, values)


class Wire:
    """One raw Kafka-protocol connection to a listener (bad-input tests); ``source_ip``:
    the local address to connect from (another loopback address, e.g. 127.0.0.2, for ACL
    host tests), ``client_id``: the request headers' (client-id quotas)."""

    #: the default for a Wire made around a TLS socket (``Wire.__new__``, TLS tests) too
    client_id = "bad-input"

    def __init__(
        self, port: int, source_ip: str | None = None, client_id: str = "bad-input"
    ) -> None:
        import socket

        source = None if source_ip is None else (source_ip, 0)
        self.sock = socket.create_connection(("127.0.0.1", port), 10, source)
        self.corr = 0
        self.client_id = client_id

    def send(self, api: int, version: int, body: Message) -> RequestHeader:
        self.corr += 1
        header = RequestHeader(int(api), version, self.corr, self.client_id)
        self.sock.sendall(encode_request(header, body))
        return header

    def recv_frame(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(int.from_bytes(head, "big", signed=True))

    def call(self, api: int, version: int, body: Message) -> Message:
        header = self.send(api, version, body)
        return decode_response(header, self.recv_frame())

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def closed_by_broker(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def handshake(self, mechanism: str) -> SaslHandshakeResponse:
        reply = self.call(17, 1, SaslHandshakeRequest(mechanism=mechanism))
        assert isinstance(reply, SaslHandshakeResponse)
        return reply

    def authenticate(self, data: bytes) -> SaslAuthenticateResponse:
        reply = self.call(36, 2, SaslAuthenticateRequest(auth_bytes=data))
        assert isinstance(reply, SaslAuthenticateResponse)
        return reply

    def plain_login(self, user: str, password: str) -> None:
        """SaslHandshake v1 and SaslAuthenticate with PLAIN; asserts it succeeded."""
        from riverbed.security.plain import client_message

        assert self.handshake("PLAIN").error_code == 0
        reply = self.authenticate(client_message(user, password))
        assert reply.error_code == 0, reply.error_message

    def produce(self, topic: str, value_bytes: int) -> ProduceResponse:
        """Produce v9 (acks=1) of one record of ``value_bytes`` random bytes to partition 0."""
        import os
        import time

        from riverbed.protocol.records import SimpleRecord, build_batch

        batch = build_batch([SimpleRecord(os.urandom(value_bytes))], now_ms=int(time.time() * 1000))
        P = ProduceRequest
        partition = P.PartitionProduceData(index=0, records=batch)
        request = P(
            acks=1,
            timeout_ms=5000,
            topic_data=[P.TopicProduceData(name=topic, partition_data=[partition])],
        )
        reply = self.call(0, 9, request)
        assert isinstance(reply, ProduceResponse)
        return reply
