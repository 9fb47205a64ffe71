"""`riverbed dev --secure` (issue 20): a SASL_SSL cluster with generated certificates and
an admin user; the client config it prints works with a real client, and the brokers
refuse a client that does not log in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riverbed.testing.cluster import free_base_port

pytestmark = pytest.mark.timeout(240)


def test_dev_secure(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    base = free_base_port()
    out_path = tmp_path / "dev.out"
    directory = tmp_path / "cluster"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "riverbed.cli.main", "dev", "--secure", "--nodes", "3",
             "--dir", str(directory), "--base-port", str(base)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        text = ""
        while "Ctrl-C stops every node." not in text:
            assert proc.poll() is None, f"riverbed dev --secure exited early:\n{text}"
            assert time.monotonic() < deadline, f"riverbed dev --secure not ready:\n{text}"
            time.sleep(0.5)
            text = out_path.read_text()
        assert f"SASL_SSL://127.0.0.1:{base}" in text
        client_properties = (directory / "client.properties").read_text()
        assert client_properties in text  # printed as written: what a user copies
        props = dict(
            line.split("=", 1)
            for line in client_properties.splitlines()
            if "=" in line and not line.startswith("#")
        )
        assert props["security.protocol"] == "SASL_SSL"
        password = re.search(r'password="([^"]+)"', props["sasl.jaas.config"])
        assert password is not None
        conf = {
            "bootstrap.servers": f"127.0.0.1:{base}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": props["sasl.mechanism"],
            "sasl.username": "admin",
            "sasl.password": password[1],
            "ssl.ca.location": props["ssl.truststore.location"],
        }
        producer = Producer(conf | {"acks": "all"})
        producer.produce("dev-secure", b"hello")
        assert producer.flush(60) == 0
        consumer = Consumer(conf | {"group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["dev-secure"])
        got = None
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg.value()
                break
        consumer.close()
        assert got == b"hello"
        # without a login the brokers answer nothing
        errors: list[object] = []
        bad = AdminClient(conf | {"sasl.password": "wrong", "error_cb": errors.append})
        with pytest.raises(KafkaException):
            bad.list_topics(timeout=2)  # refused at login: no metadata comes
        for _ in range(20):
            if errors:
                break
            bad.poll(0.5)  # error callbacks are served by poll
        assert errors and "invalid credentials with SASL mechanism SCRAM-SHA-512" in str(errors[0])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
