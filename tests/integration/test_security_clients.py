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

import pytest

from riverbed.testing.secure import SecureBroker, start_secure_broker
from riverbed.testing.secure_clients import CLIENTS, produce_consume

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
SCRAM_USERS = {"scram256": ("SCRAM-SHA-256", "s256-pw"), "scram512": ("SCRAM-SHA-512", "s512-pw")}
_topics = itertools.count()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("pki"), USERS, SCRAM_USERS)
    try:
        yield broker
    finally:
        broker.proc.close()


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
