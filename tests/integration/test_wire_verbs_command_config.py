"""Issue 20, "Command line": a verb on riverbed's own wire client (`riverbed.cli.wire`) run
against a TLS or SASL listener without ``--command-config`` fails with a one-line error
that says to give it (as ``riverbed quorum describe`` does), and succeeds with it. Real
CLI processes against one broker with SSL, SASL_PLAINTEXT and SASL_SSL listeners:
``features describe`` (WireClient itself) and ``quotas describe`` (the shared
``wire_request``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.cli.wire import COMMAND_CONFIG_HINT
from riverbed.testing.secure import SecureBroker, running_secure_broker

USERS = {"admin": "admin-secret"}
VERBS = [["features", "describe"], ["quotas", "describe", "--entity-type", "users"]]
LISTENERS = ["SSL", "SASL_PLAINTEXT", "SASL_SSL"]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(tmp_path_factory.mktemp("wire-cc"), USERS, {}) as broker:
        yield broker


def _run(
    secure: SecureBroker, verb: list[str], listener: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "riverbed.cli.main", *verb]
    cmd += ["--bootstrap-server", secure.bootstrap(listener), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _properties(secure: SecureBroker, listener: str, path: Path) -> Path:
    """Kafka client properties for ``listener``: its protocol, the CA for TLS, the admin
    login for SASL."""
    lines = [f"security.protocol={listener}"]
    if "SSL" in listener:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={secure.pki.ca}"]
    if listener.startswith("SASL_"):
        lines += [
            "sasl.mechanism=PLAIN",
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="admin" password="admin-secret";',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("listener", LISTENERS)
@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v[:2]))
def test_a_plaintext_verb_on_a_secured_listener_is_told_to_give_command_config(
    secure: SecureBroker, verb: list[str], listener: str
) -> None:
    done = _run(secure, verb, listener)
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    print(lines[0])  # what the user reads (-s shows it)
    assert "--command-config" in lines[0] and lines[0].endswith(COMMAND_CONFIG_HINT)


@pytest.mark.parametrize("listener", LISTENERS)
@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v[:2]))
def test_with_the_command_config_the_verb_answers(
    secure: SecureBroker, verb: list[str], listener: str, tmp_path: Path
) -> None:
    props = _properties(secure, listener, tmp_path / "client.properties")
    done = _run(secure, verb, listener, "--command-config", str(props), "--json")
    assert done.returncode == 0, done.stderr
    assert "--command-config" not in done.stderr
