"""The broker under abuse: oversized messages, garbage bytes, restarts and SIGKILL.

- a batch above the topic's ``max.message.bytes`` is refused with MESSAGE_TOO_LARGE and
  nothing else is affected (smaller messages to the same topic still land);
- garbage bytes or an absurd frame size on one connection close only that connection
  (with a log line naming the peer); other clients keep producing and consuming;
- a clean restart (SIGTERM: exit code 0) and a SIGKILL both keep every record that was
  acknowledged with acks=all, and offsets continue where they were.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess, BrokerStartError

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}


def create(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for fut in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        fut.result(15)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> list[Any]:
    results: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, **QUIET})
    for v in values:
        p.produce(
            topic, value=v, partition=partition, on_delivery=lambda e, m: results.append((e, m))
        )
    p.flush(20)
    return results


def consume_values(bootstrap: str, topic: str, expected: int, partition: int = 0) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **QUIET}
    )
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        return got
    finally:
        c.close()


def test_oversized_message_rejected_others_unaffected(
    broker: BrokerProcess, topic_name: str
) -> None:
    create(broker.bootstrap, topic_name, config={"max.message.bytes": "10000"})
    # One produce call each: a batch is accepted or refused as a whole.
    results = []
    for value in (b"small-1", b"x" * 20000, b"small-2"):
        results += produce(broker.bootstrap, topic_name, [value])
    errors = [e for e, _ in results if e is not None]
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    ok = sorted(m.value() for e, m in results if e is None)
    assert ok == [b"small-1", b"small-2"]
    assert sorted(consume_values(broker.bootstrap, topic_name, 2)) == [b"small-1", b"small-2"]


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x7f\xff\xff\xff" + b"A" * 64,  # a size far above socket.request.max.bytes
        b"\xff\xff\xff\xf0",  # a negative size
        struct.pack(">i", 12) + b"\x00\x63\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00",  # api 99
        struct.pack(">i", 40) + bytes(range(40)),  # well framed, undecodable
    ],
    ids=["huge-size", "negative-size", "unknown-api", "random-body"],
)
def test_garbage_closes_only_that_connection(
    broker: BrokerProcess, topic_name: str, garbage: bytes
) -> None:
    create(broker.bootstrap, topic_name)
    # A healthy client is connected before and stays connected during the abuse.
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", **QUIET})
    errors: list[Any] = []
    p.produce(topic_name, value=b"before", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)

    logged_before = len(broker.log_text())  # not the tail: other lines may follow
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(garbage)
        s.settimeout(10)
        assert s.recv(1024) == b""  # the broker closed this connection, without a reply

    p.produce(topic_name, value=b"after", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors == [None, None]
    assert consume_values(broker.bootstrap, topic_name, 2) == [b"before", b"after"]
    assert "closing connection from 127.0.0.1:" in broker.log_text()[logged_before:]


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_restart_keeps_acknowledged_data(
    broker: BrokerProcess, topic_name: str, kill: bool
) -> None:
    create(broker.bootstrap, topic_name, partitions=2)
    values = [b"r%05d" % i for i in range(2000)]
    results = produce(broker.bootstrap, topic_name, values, partition=1)
    assert all(e is None for e, _ in results)

    if kill:
        broker.kill()
        assert broker.proc is not None and broker.proc.returncode == -9
    else:
        assert broker.stop() == 0  # clean shutdown exits 0
    broker.start()

    assert consume_values(broker.bootstrap, topic_name, len(values), partition=1) == values
    # Offsets continue after the restart.
    [(err, msg)] = produce(broker.bootstrap, topic_name, [b"after-restart"], partition=1)
    assert err is None and msg.offset() == len(values)


def test_port_in_use_is_a_clear_start_error(broker: BrokerProcess) -> None:
    second = BrokerProcess(port=broker.port)
    try:
        with pytest.raises(BrokerStartError, match=r"exited with code 1") as err:
            second.start(timeout_s=20)
        assert f"cannot listen on PLAINTEXT://127.0.0.1:{broker.port}" in str(err.value)
    finally:
        second.close()


def test_broker_stops_when_its_launcher_dies(tmp_path: Any) -> None:
    import signal
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from riverbed.testing.cluster import BrokerProcess\n"
        "b = BrokerProcess(data_dir=sys.argv[1]).start()\n"
        "print(b.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "data")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None
        broker_pid = int(launcher.stdout.readline())
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 20
        alive = True
        while alive and time.monotonic() < deadline:
            try:
                with open(f"/proc/{broker_pid}/status") as f:
                    alive = "\nState:\tZ" not in f.read()  # a zombie has exited
            except FileNotFoundError:
                alive = False
            time.sleep(0.1)
        assert not alive, "the orphaned broker kept running"
    finally:
        launcher.kill()
