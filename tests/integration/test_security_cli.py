"""Issue 20, command line: ``riverbed users scram`` (confluent-kafka's admin client) and
``riverbed quotas`` (riverbed's own wire client) against a SASL_SSL listener, both given
the same Kafka client properties file (``--command-config``: sasl.jaas.config and a PEM
trust store, as kafka-configs takes it). A SCRAM user set by the CLI logs in; deleted, it
no longer does; a wrong password in the file fails the wire client with the broker's
refusal."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from riverbed.cli.main import main
from riverbed.cli.wire import WireClient, WireError
from riverbed.server.client_login import ClientSecurity
from riverbed.server.tls import client_context
from riverbed.testing.cluster import scaled_s
from riverbed.testing.secure import SecureBroker, start_secure_broker

USERS = {"admin": "admin-secret"}
SCRAM_USERS = {"dave": ("SCRAM-SHA-512", "dave-pw")}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("cli"), USERS, SCRAM_USERS)
    try:
        yield broker
    finally:
        broker.proc.close()


def _props(secure: SecureBroker, path: Path, password: str = "admin-secret") -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.pki.ca}\n"
    )
    return path


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def cli(secure: SecureBroker, props: Path, *args: str) -> Done:
    """The CLI's entry point in this process (an interpreter per call costs seconds on a
    loaded machine); its output captured."""
    argv = [*args, "-b", secure.bootstrap("SASL_SSL"), "--command-config", str(props), "--json"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return Done(code, out.getvalue(), err.getvalue())


def ssl_lookup(secure: SecureBroker) -> Callable[[str], object]:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure.pki.ca)}
    return props.get


def _logs_in(secure: SecureBroker, user: str, password: str) -> bool:
    """confluent-kafka logs in as ``user`` and lists the topics."""
    admin = AdminClient(
        {
            "bootstrap.servers": secure.bootstrap("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(secure.pki.ca),
        }
    )
    try:
        admin.list_topics(timeout=scaled_s(10))
    except KafkaException:
        return False
    return True


def test_users_scram_set_describe_delete(secure: SecureBroker, tmp_path: Path) -> None:
    props = _props(secure, tmp_path / "admin.properties")
    done = cli(
        secure,
        props,
        "users",
        "scram",
        "set",
        "erin",
        "--password",
        "erin-pw",
        "--mechanism",
        "SCRAM-SHA-256",
        "--iterations",
        "8192",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["error"] is None
    done = cli(secure, props, "users", "scram", "describe", "erin")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {
            "user": "erin",
            "error": None,
            "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}],
        }
    ]
    assert _logs_in(secure, "erin", "erin-pw")
    done = cli(secure, props, "users", "scram", "delete", "erin", "--mechanism", "SCRAM-SHA-256")
    assert done.returncode == 0, done.stderr
    # riverbed's own client: the refusal comes at once (librdkafka would retry until its
    # timeout)
    security = ClientSecurity(
        "SASL_SSL", client_context(ssl_lookup(secure)), "SCRAM-SHA-256", "erin", "erin-pw"
    )
    with pytest.raises(WireError, match="SASL authentication failed"):
        WireClient(secure.bootstrap("SASL_SSL"), security=security)
    done = cli(secure, props, "users", "scram", "describe", "erin")
    assert "RESOURCE_NOT_FOUND" in json.loads(done.stdout)[0]["error"]


def test_quotas_over_sasl_ssl_with_kafka_client_properties(
    secure: SecureBroker, tmp_path: Path
) -> None:
    props = _props(secure, tmp_path / "admin.properties")
    done = cli(
        secure,
        props,
        "quotas",
        "alter",
        "--user-defaults",
        "--add-config",
        "consumer_byte_rate=2048000,request_percentage=50",
    )
    assert done.returncode == 0, done.stderr
    done = cli(secure, props, "quotas", "describe", "--entity-type", "users")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {
            "entity": {"user": None},
            "quotas": {"consumer_byte_rate": 2048000, "request_percentage": 50},
        }
    ]
    bad = _props(secure, tmp_path / "bad.properties", password="wrong")
    done = cli(secure, bad, "quotas", "describe")
    assert done.returncode == 1
    assert "SASL authentication failed" in done.stderr
