"""Config for brokers with TLS and SASL listeners (tests, ``riverbed dev --secure``).

`jaas_plain(users, login)` is a PLAIN JAAS config (``user_<name>`` options, and the
node's own ``username``/``password`` when ``login`` is given); `jaas_scram(login)` a SCRAM
one. `secure_overrides` gives one node listeners of every protocol named in ``ports``
(SSL with the `riverbed.testing.certs` key stores, SASL with PLAIN and both SCRAMs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from riverbed.protocol.messages import Message
from riverbed.testing.certs import Pki, make_pki
from riverbed.testing.cluster import BrokerProcess, free_port

if TYPE_CHECKING:
    from confluent_kafka.admin import AclOperation, ResourceType  # type: ignore[attr-defined]

    from riverbed.server.client_login import ClientSecurity
    from riverbed.testing.quorum_cluster import QuorumCluster

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
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


def plaintext_and_ssl_listeners(proc: BrokerProcess, ssl_port: int) -> dict[str, str]:
    """``proc``'s listeners: its PLAINTEXT port, an SSL listener on ``ssl_port`` and its
    controller listener (mutual-TLS tests; TLS keys and trust come separately)."""
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port},"
        f"CONTROLLER://127.0.0.1:{proc.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{ssl_port}",
    }


def pkcs12_stores(pki: Pki) -> dict[str, str]:
    """The broker's key and trust stores from ``pki``'s PKCS12 files (mutual-TLS tests)."""
    from riverbed.testing.certs import PKI_PASSWORD

    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.server_p12),
        "ssl.keystore.password": PKI_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(pki.ca_p12),
        "ssl.truststore.password": PKI_PASSWORD,
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


class SecureBroker:
    """A started broker with a listener per protocol (`start_secure_broker`)."""

    def __init__(self, proc: BrokerProcess, pki: Pki, ports: dict[str, int]) -> None:
        self.proc, self.pki, self.ports = proc, pki, ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_config(self, login: tuple[str, str] | None = None) -> dict[str, str]:
        """librdkafka settings: the PLAINTEXT listener (User:ANONYMOUS) without a login,
        else SASL_PLAINTEXT with PLAIN as ``login`` (user, password)."""
        if login is None:
            return {"bootstrap.servers": self.bootstrap("PLAINTEXT")}
        return {
            "bootstrap.servers": self.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": login[0],
            "sasl.password": login[1],
        }

    def _admin_config(self) -> dict[str, str | int | float | bool]:
        return {**self.client_config()}

    def allow(
        self, rtype: ResourceType, name: str, user: str, op: AclOperation, prefixed: bool = False
    ) -> None:
        """An ALLOW ACL for ``User:<user>`` from any host (on the literal name, or every
        name with its prefix), created by the PLAINTEXT listener's super user."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AclBinding,
            AclPermissionType,
            AdminClient,
        )
        from confluent_kafka.admin import ResourcePatternType as P  # type: ignore[attr-defined]

        pattern = P.PREFIXED if prefixed else P.LITERAL
        admin = AdminClient(self._admin_config())  # held: a collected client fails its futures
        binding = AclBinding(rtype, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)

    def create_topics(self, names: list[str]) -> list[str]:
        """``names`` created (one partition each) by the PLAINTEXT listener's super user."""
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(self._admin_config())
        for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
            future.result(timeout=30)
        return names


#: Kafka's StandardAuthorizer with User:admin and the PLAINTEXT listener's principal as
#: super users (tests set up through them).
AUTHORIZER_OVERRIDES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
}


#: For a test broker whose consumers each join their group alone: the default 3 s
#: ``group.initial.rebalance.delay.ms`` only waits for members that never come. Kafka's
#: quickstart ``config/server.properties`` sets it to 0 for development and testing too.
NO_INITIAL_REBALANCE_DELAY = {"group.initial.rebalance.delay.ms": "0"}


def create_scram_users(bootstrap: str, users: Mapping[str, tuple[str, str]]) -> None:
    """Create SCRAM users (name -> (mechanism, password)) with confluent-kafka's admin
    client (AlterUserScramCredentials) and check DescribeUserScramCredentials lists them."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._scram import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")), 4096),
            pw.encode(),
        )
        for user, (mech, pw) in users.items()
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=30)
    futures = admin.describe_user_scram_credentials(list(users))
    assert isinstance(futures, dict)  # one future per named user
    described = {u: f.result(timeout=30) for u, f in futures.items()}
    iterations = {u: d.scram_credential_infos[0].iterations for u, d in described.items()}
    assert iterations == dict.fromkeys(users, 4096), iterations


def start_secure_broker(
    directory: Path,
    users: Mapping[str, str],
    scram_users: Mapping[str, tuple[str, str]],
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> SecureBroker:
    """A broker with PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners: PEM files on
    SSL, the key inline on SASL_SSL (per-listener keys, the inline ones flattened as a
    properties value is), PLAIN ``users``, SCRAM ``scram_users`` created through the admin API;
    ``env``: the process's environment on top of this one's (process properties)."""
    pki = make_pki(directory)
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    proc = BrokerProcess(port=ports["PLAINTEXT"], env=env)
    config = secure_overrides(pki, ports, proc.controller_port, users)
    # a listener has one key store (Kafka refuses a location next to an inline key)
    config["listener.name.ssl.ssl.keystore.location"] = config.pop("ssl.keystore.location")
    config["listener.name.sasl_ssl.ssl.keystore.key"] = " ".join(
        pki.server_key.read_text().splitlines()
    )
    config["listener.name.sasl_ssl.ssl.keystore.certificate.chain"] = " ".join(
        pki.server_crt.read_text().splitlines()
    )
    config["num.partitions"] = "1"
    proc.extra_overrides.update(config | dict(overrides or {}))
    try:
        proc.start()
        if scram_users:
            create_scram_users(f"127.0.0.1:{ports['PLAINTEXT']}", scram_users)
    except BaseException:
        proc.close()
        raise
    return SecureBroker(proc, pki, ports)


#: The login every node of a secure cluster uses for its own connections.
BROKER_LOGIN = ("broker", "broker-secret")


def secure_cluster_overrides(
    broker_port: int, controller_port: int, pki: Pki, broker_login: tuple[str, str] = BROKER_LOGIN
) -> dict[str, str]:
    """One node of a SASL_SSL cluster: clients and replica fetchers on SASL_SSL with
    SCRAM-SHA-512 (``sasl.mechanism.inter.broker.protocol``), the controller listener on
    SASL_SSL with PLAIN (SCRAM cannot secure the controllers: its credentials live in the
    log they replicate), TLS from ``pki``'s PEM files."""
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{broker_port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas_scram(broker_login),
        "listener.name.controller.plain.sasl.jaas.config": jaas_plain(
            {broker_login[0]: broker_login[1]}, broker_login
        ),
        **tls_overrides(pki),
    }


def format_with_scram(
    proc: BrokerProcess,
    config_path: Path,
    cluster_id: str,
    users: Mapping[str, str],
    iterations: int = 4096,
) -> None:
    """``riverbed storage format --add-scram`` (SCRAM-SHA-512 users) with the node's own
    configuration written to ``config_path``; RuntimeError with its stderr on failure."""
    import subprocess
    import sys

    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text("".join(f"{k}={v}\n" for k, v in proc.overrides().items()))
    args = [sys.executable, "-m", "riverbed.cli.main", "storage", "format"]
    args += ["-c", str(config_path), "--cluster-id", cluster_id, "--ignore-formatted"]
    for name, password in users.items():
        spec = f"name={name},password={password},iterations={iterations}"
        args += ["--add-scram", f"SCRAM-SHA-512=[{spec}]"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"storage format failed: {done.stderr}")


def sasl_plain_request(
    address: str,
    user: str,
    password: str,
    body: Message,
    api_key: int | None = None,
    version: int | None = None,
    timeout_s: float = 30.0,
) -> Message:
    """One request on a SASL_PLAINTEXT listener at ``address`` (host:port), logged in as
    ``user`` with PLAIN through riverbed's own client login (`server.inter_broker`):
    the exact answer a principal gets, error codes per item included. ``api_key`` and
    ``version`` default to the body's api and the highest version riverbed speaks."""
    from riverbed.server.client_login import ClientSecurity

    security = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", user, password)
    return wire_request(address, body, security, api_key, version, timeout_s)


def wire_request(
    address: str,
    body: Message,
    security: ClientSecurity | None = None,
    api_key: int | None = None,
    version: int | None = None,
    timeout_s: float = 30.0,
) -> Message:
    """One request to ``address`` (host:port; PLAINTEXT unless ``security`` says
    otherwise) and its decoded answer, as `sasl_plain_request`."""
    import asyncio

    from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
    from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
    from riverbed.protocol.messages import message_spec
    from riverbed.server.client_login import PLAINTEXT_CLIENT
    from riverbed.server.inter_broker import connect

    host, port = address.rsplit(":", 1)
    key = message_spec(body).api_key if api_key is None else api_key
    assert key is not None
    top = SUPPORTED_VERSIONS[ApiKey(key)][1]
    header = RequestHeader(key, top if version is None else version, 7, "t")

    async def exchange() -> Message:
        login = await connect(host, int(port), security or PLAINTEXT_CLIENT, "t")
        reader, writer = login.reader, login.writer
        try:
            writer.write(encode_request(header, body))
            await writer.drain()
            size = int.from_bytes(await reader.readexactly(4), "big")
            return decode_response(header, await reader.readexactly(size))
        finally:
            writer.close()

    return asyncio.run(asyncio.wait_for(exchange(), timeout_s))


def secure_quorum(
    base: Path,
    users: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
    iterations: int = 4096,
) -> QuorumCluster:
    """A 3-node SASL_SSL cluster, not started: `secure_cluster_overrides` with a new PKI
    (``cluster.pki``) under ``base``, replication factor 3, min.insync.replicas 2, the
    SCRAM-SHA-512 ``users`` (and the brokers' login) formatted into every node as an
    operator's ``riverbed storage format --add-scram`` does; ``overrides`` on every node."""
    from riverbed.testing.quorum_cluster import QuorumCluster

    cluster = QuorumCluster(base / "nodes", 3)
    cluster.pki = make_pki(base / "pki")  # type: ignore[attr-defined]
    replication = {
        "default.replication.factor": "3",
        "offsets.topic.replication.factor": "3",
        "min.insync.replicas": "2",
    }
    logins = {BROKER_LOGIN[0]: BROKER_LOGIN[1], **users}
    for i in cluster.ids:
        node = cluster.nodes[i]
        node_overrides = secure_cluster_overrides(*cluster.ports[i], cluster.pki)  # type: ignore[attr-defined]
        node.extra_overrides.update(node_overrides | replication | dict(overrides or {}))
        config = cluster.node_dir(i) / "server.properties"
        format_with_scram(node, config, cluster.cluster_id, logins, iterations)
        assert (cluster.data_dir(i) / "bootstrap.records").exists()
    return cluster


@contextmanager
def running_secure_broker(
    directory: Path,
    users: Mapping[str, str],
    scram_users: Mapping[str, tuple[str, str]],
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[SecureBroker]:
    """`start_secure_broker` for a ``with`` block (a test module's fixture): the broker
    process is closed when the block ends, however it ends."""
    broker = start_secure_broker(directory, users, scram_users, overrides, env)
    try:
        yield broker
    finally:
        broker.proc.close()
