"""Issue 20: every client over SSL, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
and SASL_SSL against one real broker with a listener of each protocol.

The broker's key stores vary by listener: PEM files (``ssl.keystore.location``) on SSL,
inline PEM (``listener.name.sasl_ssl.ssl.keystore.key`` / ``...certificate.chain``, a
per-listener override) on SASL_SSL. PLAIN users come from the listeners' JAAS configs; the
SCRAM users are created through AlterUserScramCredentials (confluent-kafka's admin client
on the PLAINTEXT listener) and must be described back. Each client produces records with
a unique topic and must read exactly them back over the secured connection (fetches over
TLS go through the TLS stream: a sendfile on the raw socket would corrupt it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.testing.certs import Pki, make_pki
from riverbed.testing.cluster import BrokerProcess, free_port
from riverbed.testing.secure import secure_overrides
from riverbed.testing.secure_clients import CLIENTS, produce_consume

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
SCRAM_USERS = {"scram256": ("SCRAM-SHA-256", "s256-pw"), "scram512": ("SCRAM-SHA-512", "s512-pw")}
_topics = itertools.count()


class SecureBroker:
    def __init__(self, proc: BrokerProcess, pki: Pki, ports: dict[str, int]) -> None:
        self.proc, self.pki, self.ports = proc, pki, ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def _create_scram_users(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")), 4096),
            pw.encode(),
        )
        for user, (mech, pw) in SCRAM_USERS.items()
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=30)
    futures = admin.describe_user_scram_credentials(list(SCRAM_USERS))
    described = {u: f.result(timeout=30) for u, f in futures.items()}
    assert {u: d.scram_credential_infos[0].iterations for u, d in described.items()} == {
        "scram256": 4096,
        "scram512": 4096,
    }


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    proc = BrokerProcess(port=ports["PLAINTEXT"])
    overrides = secure_overrides(pki, ports, proc.controller_port, USERS)
    # SASL_SSL: the key store inline, as a per-listener override (properties values keep
    # no newlines: the PEM text arrives flattened)
    key = " ".join(Path(pki.server_key).read_text().splitlines())
    chain = " ".join(Path(pki.server_crt).read_text().splitlines())
    overrides["listener.name.sasl_ssl.ssl.keystore.key"] = key
    overrides["listener.name.sasl_ssl.ssl.keystore.certificate.chain"] = chain
    overrides["num.partitions"] = "1"
    proc.extra_overrides.update(overrides)
    proc.start()
    try:
        _create_scram_users(f"127.0.0.1:{ports['PLAINTEXT']}")
        yield SecureBroker(proc, pki, ports)
    finally:
        proc.close()


CASES = {
    "SSL": {"protocol": "SSL"},
    "SASL_PLAINTEXT-PLAIN": {"protocol": "SASL_PLAINTEXT", "mechanism": "PLAIN", "username": "alice", "password": "alice-pw"},
    "SASL_PLAINTEXT-SCRAM-SHA-256": {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-256", "username": "scram256", "password": "s256-pw"},
    "SASL_PLAINTEXT-SCRAM-SHA-512": {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512", "username": "scram512", "password": "s512-pw"},
    "SASL_SSL-SCRAM-SHA-512": {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": "scram512", "password": "s512-pw"},
    "SASL_SSL-PLAIN": {"protocol": "SASL_SSL", "mechanism": "PLAIN", "username": "alice", "password": "alice-pw"},
}  # fmt: skip


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", list(CASES))
def test_client_over_secured_listener(secure: SecureBroker, case: str, client: str) -> None:
    sec = dict(CASES[case])
    if "SSL" in sec["protocol"]:
        sec["cafile"] = str(secure.pki.ca)
    topic = f"sec-{client}-{case}-{next(_topics)}".lower()
    # 64 KiB values: fetch responses carry real file ranges, several TLS records each
    values = [f"{client} {case} {i} ".encode() * 2000 for i in range(3)]
    got = produce_consume(client, secure.bootstrap(sec["protocol"]), sec, topic, values)
    assert got == values
