"""Issue 20: mutual TLS with principal mapping against a real broker.

The SSL listener requires a client certificate (``ssl.client.auth=required``), loads
PKCS12 key and trust stores, and maps DNs with ``ssl.principal.mapping.rules`` that only
accept ``OU=eng``: alice (``CN=alice,OU=eng,O=riverbed``) is served by confluent-kafka,
kafka-python, aiokafka and kcat; mallory (``OU=ops``: no rule applies, so no principal) and a
client without a certificate are refused, and alice is still served afterwards.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from riverbed.testing.certs import Pki, make_pki
from riverbed.testing.cluster import BrokerProcess, free_port
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.secure import (
    NO_INITIAL_REBALANCE_DELAY,
    pkcs12_stores,
    plaintext_and_ssl_listeners,
)
from riverbed.testing.secure_clients import KCAT, produce_consume

RULES = "RULE:^CN=([a-z]+),OU=eng,O=riverbed$/$1/L"


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Pki, int]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"), {"alice": "eng", "mallory": "ops"})
    ssl_port = free_port()
    proc = BrokerProcess()
    proc.extra_overrides.update(
        plaintext_and_ssl_listeners(proc, ssl_port)
        | pkcs12_stores(pki)
        | {
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.principal.mapping.rules": RULES,
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
            "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_AES_256_GCM_SHA384",
            "num.partitions": "1",
        }
        | NO_INITIAL_REBALANCE_DELAY
    )
    proc.start()
    try:
        load_group_coordinators(proc.bootstrap)
        yield proc, pki, ssl_port
    finally:
        proc.close()


def _sec(pki: Pki, client: str | None) -> dict[str, str]:
    sec = {"protocol": "SSL", "cafile": str(pki.ca)}
    if client is not None:
        key, crt = pki.client(client)
        sec |= {"certfile": str(crt), "keyfile": str(key)}
    return sec


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka", "kcat"])
def test_mapped_certificate_is_served(mtls: tuple[BrokerProcess, Pki, int], client: str) -> None:
    _, pki, port = mtls
    values = [f"mtls {client} {i}".encode() for i in range(3)]
    topic = f"mtls-{client}"
    got = produce_consume(client, f"127.0.0.1:{port}", _sec(pki, "alice"), topic, values)
    assert got == values


@pytest.mark.parametrize("who", ["mallory", None])
def test_unmapped_or_missing_certificate_is_refused(
    mtls: tuple[BrokerProcess, Pki, int], who: str | None
) -> None:
    proc, pki, port = mtls
    assert KCAT is not None
    # the refusal comes at the first connection; -m bounds the wait for metadata
    args = [KCAT, "-b", f"127.0.0.1:{port}", "-L", "-m", "2"]
    for key, value in {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        **(
            {
                "ssl.certificate.location": str(pki.client(who)[1]),
                "ssl.key.location": str(pki.client(who)[0]),
            }
            if who
            else {}
        ),
    }.items():
        args += ["-X", f"{key}={value}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    # refused by the broker (it ended the TLS connection), not timed out
    assert "Failed to acquire metadata: Local: Broker transport failure" in done.stderr
    assert "ssl://127.0.0.1" in done.stderr and "Receive failed" in done.stderr, done.stderr
    if who == "mallory":
        assert "No rules apply to CN=mallory,OU=ops,O=riverbed" in proc.log_tail()
    values = [b"alice still served"]
    got = produce_consume(
        "confluent-kafka", f"127.0.0.1:{port}", _sec(pki, "alice"), f"mtls-after-{who}", values
    )
    assert got == values
