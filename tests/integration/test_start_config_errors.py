"""A configuration the node can only judge while starting (listener security, the HTTP
listeners, tiered storage, the quorum) stops it with exit code 2 and an error naming the
key, as a value the config check refuses before the start does; a start that fails for
another reason (a listener's port taken) exits 1."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from riverbed.testing.certs import Pki, encrypted_keystore, make_pki

_PLAIN_LOGIN = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="pw" user_broker="pw";'
)
_SCRAM_LOGIN = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
    'password="pw";'
)

#: the PLAINTEXT listener on SASL_PLAINTEXT with PLAIN, this node logging in with PLAIN
_SASL_LISTENER = (
    "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "sasl.enabled.mechanisms=PLAIN",
    "sasl.mechanism.inter.broker.protocol=PLAIN",
)


def _start(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    base = [
        "node.id=1",
        "process.roles=broker,controller",
        "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "controller.listener.names=CONTROLLER",
        "controller.quorum.voters=1@127.0.0.1:1",
        f"log.dirs={tmp_path / 'data'}",
        "riverbed.http.listeners=",
    ]
    args = [a for o in (*base, *overrides) for a in ("--override", o)]
    return subprocess.run(
        [sys.executable, "-m", "riverbed.server.node", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (
            (
                "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                "sasl.mechanism.inter.broker.protocol=PLAIN",
            ),
            "listener.name.plaintext.plain.sasl.jaas.config",
        ),
        (
            (
                "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                f"listener.name.plaintext.plain.sasl.jaas.config={_PLAIN_LOGIN}",
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
                f"listener.name.plaintext.scram-sha-256.sasl.jaas.config={_SCRAM_LOGIN}",
            ),
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256 must be included in "
            "sasl.enabled.mechanisms",
        ),
        (
            (
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
                f"listener.name.controller.plain.sasl.jaas.config={_PLAIN_LOGIN}",
                "sasl.mechanism.controller.protocol=SCRAM-SHA-256",
            ),
            "listener.name.controller.scram-sha-256.sasl.jaas.config",
        ),
        # JAAS configs Kafka refuses to log in with
        (
            (*_SASL_LISTENER, f"listener.name.plaintext.plain.sasl.jaas.config={_SCRAM_LOGIN}"),
            "org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
        (
            (
                *_SASL_LISTENER,
                f"listener.name.plaintext.plain.sasl.jaas.config={_PLAIN_LOGIN} {_PLAIN_LOGIN}",
            ),
            "contains 2 login modules, should be 1 module",
        ),
        (
            (
                *_SASL_LISTENER,
                f"listener.name.plaintext.plain.sasl.jaas.config={_PLAIN_LOGIN}",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
                "listener.name.plaintext.scram-sha-256.sasl.jaas.config="
                + _SCRAM_LOGIN.replace('password="pw";', "password"),
            ),
            "listener.name.plaintext.scram-sha-256.sasl.jaas.config",
        ),
        # a validator riverbed does not have: was ignored (unsecured JWTs accepted)
        (
            (
                *_SASL_LISTENER,
                f"listener.name.plaintext.plain.sasl.jaas.config={_PLAIN_LOGIN}",
                "sasl.enabled.mechanisms=PLAIN,OAUTHBEARER",
                "listener.name.plaintext.oauthbearer.sasl.server.callback.handler.class="
                "com.example.MyValidator",
            ),
            "listener.name.plaintext.oauthbearer.sasl.server.callback.handler.class",
        ),
        (("authorizer.class.name=com.example.NoSuchAuthorizer",), "authorizer.class.name"),
        (
            (
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users=User:admin;alice",
            ),
            "super.users",
        ),
        (("riverbed.http.listeners=nonsense",), "riverbed.http.listeners"),
        # Kafka's listener cross-checks (KafkaConfig.validateValues)
        (("listeners=garbage",), "listeners"),
        (
            (
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,FOO:PLAINTEXT",
                "advertised.listeners=FOO://127.0.0.1:9092",
            ),
            "advertised.listeners listener names must be equal to or a subset",
        ),
        (("inter.broker.listener.name=NOPE",), "inter.broker.listener.name"),
        (("inter.broker.listener.name=CONTROLLER",), "inter.broker.listener.name=CONTROLLER"),
        (("security.inter.broker.protocol=SSL",), "security.inter.broker.protocol=SSL"),
        (
            (
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CTRL:PLAINTEXT",
                "controller.listener.names=CTRL",
            ),
            "controller.listener.names names CTRL",
        ),
        (
            ("connection.failed.authentication.delay.ms=700000",),
            "connection.failed.authentication.delay.ms=700000",
        ),
        (
            (
                "remote.log.storage.system.enable=true",
                "remote.log.storage.manager.class.name=com.example.Rsm",
            ),
            "remote.log.storage.manager.class.name",
        ),
    ],
)
def test_a_config_refused_at_start_exits_2_naming_the_key(
    tmp_path: Path, override: tuple[str, ...], named: str
) -> None:
    done = _start(tmp_path, *override)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_a_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _start(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0")
    assert done.returncode == 1, done.stderr
    assert "cannot listen" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The test CA's stores, plus a PEM key store whose key is encrypted (``keypw``), one
    whose key is not the certificate's, and a PKCS12 store."""
    pki = make_pki(tmp_path_factory.mktemp("pki"), {"alice": "users"})
    encrypted_keystore(pki, pki.directory / "encrypted.pem", "keypw")
    alice_key = pki.client("alice")[0].read_bytes()
    (pki.directory / "mismatch.pem").write_bytes(alice_key + pki.server_crt.read_bytes())
    return pki


def _tls_listener(keystore: dict[str, str]) -> tuple[str, ...]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        **keystore,
    }
    return tuple(f"{k}={v}" for k, v in settings.items())


@pytest.mark.parametrize(
    ("keystore", "named"),
    [
        # a PKCS12 file where a PEM one is expected (was a UnicodeDecodeError traceback)
        ({"ssl.keystore.location": "{dir}/server.p12"}, "ssl.keystore.type=PKCS12"),
        # an encrypted key without its password (was "[Errno 22] Invalid argument", exit 1)
        ({"ssl.keystore.location": "{dir}/encrypted.pem"}, "set ssl.key.password"),
        (
            {"ssl.keystore.location": "{dir}/encrypted.pem", "ssl.key.password": "wrong"},
            "ssl.key.password cannot decrypt the private key",
        ),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": "{dir}/server.p12",
                "ssl.keystore.password": "wrong",
            },
            "ssl.keystore.password",
        ),
        (
            {"ssl.keystore.location": "{dir}/mismatch.pem"},
            "the private key does not match the certificate",
        ),
    ],
)
def test_a_key_store_that_cannot_be_used_exits_2_naming_the_key(
    tmp_path: Path, pki: Pki, keystore: dict[str, str], named: str
) -> None:
    located = {k: v.format(dir=pki.directory) for k, v in keystore.items()}
    done = _start(tmp_path, *_tls_listener(located))
    assert done.returncode == 2, done.stderr
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        # one name OpenSSL does not know beside one it knows: Kafka's SSLEngine refuses
        # the list ("Unsupported CipherSuite"); the known name alone was enough before
        (
            {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NO_SUCH_SUITE"},
            "TLS_NO_SUCH_SUITE",
        ),
        # Kafka's SSLContext.getInstance("TLSv9") fails: the broker does not start
        ({"ssl.protocol": "TLSv9"}, "ssl.protocol"),
        # Kafka's KeyManagerFactory recovers the PKCS12 key with ssl.key.password
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": "{dir}/server.p12",
                "ssl.keystore.password": "test-store-password",
                "ssl.key.password": "another-password",
            },
            "ssl.key.password",
        ),
    ],
)
def test_a_tls_setting_kafka_refuses_exits_2_naming_it(
    tmp_path: Path, pki: Pki, settings: dict[str, str], named: str
) -> None:
    located = {"ssl.keystore.location": str(pki.server_pem)}
    located |= {k: v.format(dir=pki.directory) for k, v in settings.items()}
    done = _start(tmp_path, *_tls_listener(located))
    assert done.returncode == 2, done.stderr
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
