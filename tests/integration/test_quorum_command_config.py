"""Issue 20, "Command line": ``--command-config`` (and ``-X``) on every verb, here
``riverbed quorum describe`` (a real CLI process), which reaches a SASL_SSL listener only
with the client properties: with them it answers the quorum's status; without them, or with
a wrong password, it fails with a one-line error naming the cause, exit code 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.testing.secure import SecureBroker, running_secure_broker

USERS = {"admin": "admin-secret"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(tmp_path_factory.mktemp("quorum-cc"), USERS, {}) as broker:
        yield broker


def _properties(secure: SecureBroker, path: Path, password: str) -> Path:
    """Kafka client properties for the SASL_SSL listener (as `riverbed dev --secure` writes)."""
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secure.pki.ca}\n"
    )
    return path


def _describe(secure: SecureBroker, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "riverbed.cli.main", "quorum", "describe"]
    cmd += ["--bootstrap-server", secure.bootstrap("SASL_SSL"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_status_with_the_command_config(secure: SecureBroker, tmp_path: Path) -> None:
    props = _properties(secure, tmp_path / "client.properties", "admin-secret")
    done = _describe(secure, "--status", "--command-config", str(props), "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert list(status) == ["status"]  # --status: no replication table
    assert status["status"]["leader_id"] == 1
    assert status["status"]["current_voters"] == [1]
    text = _describe(secure, "--status", "--command-config", str(props))
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("LeaderId: 1  LeaderEpoch: ")
    assert "NodeId" not in text.stdout


def test_the_same_settings_as_x_options(secure: SecureBroker) -> None:
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
        "ssl.ca.location": str(secure.pki.ca),
    }
    x_options = [arg for k, v in settings.items() for arg in ("-X", f"{k}={v}")]
    done = _describe(secure, "--replication", *x_options, "--json")
    assert done.returncode == 0, done.stderr
    replication = json.loads(done.stdout)["replication"]
    assert [(r["node_id"], r["role"]) for r in replication] == [(1, "Leader")]


def test_without_the_command_config_a_clear_error(secure: SecureBroker) -> None:
    done = _describe(secure, "--status")
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: cannot reach broker {secure.bootstrap('SASL_SSL')}")
    assert "--command-config" in done.stderr  # what to do about it


def test_a_wrong_password_is_an_authentication_error(secure: SecureBroker, tmp_path: Path) -> None:
    props = _properties(secure, tmp_path / "wrong.properties", "not-the-password")
    done = _describe(secure, "--status", "--command-config", str(props))
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    assert "SASL_AUTHENTICATION_FAILED" in done.stderr or "authentication failed" in done.stderr
