"""Config for brokers with TLS and SASL listeners (tests, ``riverbed dev --secure``).

`jaas_plain(users, login)` is a PLAIN JAAS config (``user_<name>`` options, and the
node's own ``username``/``password`` when ``login`` is given); `jaas_scram(login)` a SCRAM
one. `secure_overrides` gives one node listeners of every protocol named in ``ports``
(SSL with the `riverbed.testing.certs` key stores, SASL with PLAIN and both SCRAMs).
"""

from __future__ import annotations

from collections.abc import Mapping

from riverbed.testing.certs import Pki

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas_plain(users: Mapping[str, str], login: tuple[str, str] | None = None) -> str:
    options = [f"user_{name}={_quote(pw)}" for name, pw in users.items()]
    if login is not None:
        options = [f"username={_quote(login[0])}", f"password={_quote(login[1])}", *options]
    return f"{_PLAIN_MODULE} required {' '.join(options)};"


def jaas_scram(login: tuple[str, str]) -> str:
    return f"{_SCRAM_MODULE} required username={_quote(login[0])} password={_quote(login[1])};"


def tls_overrides(pki: Pki, prefix: str = "") -> dict[str, str]:
    """A PEM key store and trust store (file locations), optionally per listener."""
    return {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(pki.server_pem),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(pki.ca),
    }


def secure_overrides(
    pki: Pki,
    ports: Mapping[str, int],
    controller_port: int,
    users: Mapping[str, str],
    *,
    node_id: int = 1,
) -> dict[str, str]:
    """One combined node whose listeners are ``ports`` (protocol name -> port, the
    listener named after its protocol) plus a PLAINTEXT controller listener; PLAIN users
    ``users`` on every SASL listener; inter-broker traffic on the first listener."""
    listeners = [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
    out = {
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
        "advertised.listeners": ",".join(listeners),
        "listener.security.protocol.map": ",".join(
            [f"{name}:{name}" for name in ports] + ["CONTROLLER:PLAINTEXT"]
        ),
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller_port}",
        "inter.broker.listener.name": next(iter(ports)),
        "sasl.enabled.mechanisms": MECHANISMS,
        "connection.failed.authentication.delay.ms": "100",
        **tls_overrides(pki),
    }
    admin = next(iter(users.items()))
    for name in ports:
        if name.startswith("SASL_"):
            prefix = f"listener.name.{name.lower()}."
            out[prefix + "plain.sasl.jaas.config"] = jaas_plain(users, admin)
            for mech in ("scram-sha-256", "scram-sha-512"):
                out[f"{prefix}{mech}.sasl.jaas.config"] = jaas_scram(admin)
    return out
