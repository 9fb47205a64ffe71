"""`riverbed dev --nodes 3 [--dir DIR] [--base-port P]`: a local KRaft cluster for development.

Starts N combined nodes (``process.roles=broker,controller``) on 127.0.0.1 as child
processes (`riverbed.testing.quorum_cluster.QuorumCluster`): node i listens on
``PLAINTEXT://127.0.0.1:P+2(i-1)`` and ``CONTROLLER://127.0.0.1:P+2(i-1)+1``, keeps its data
in ``DIR/node-i/data`` (formatted with one cluster id on first start; a second run reuses
it) and its log in ``DIR/node-i/broker-i.log``. Prints the bootstrap servers and the
controller quorum, then waits; Ctrl-C or SIGTERM stops every node by PID (SIGTERM, clean
shutdown). A node that exits on its own is reported and the others are stopped too;
with ``--keep-running`` the others stay up (kill a node and watch the fail-over), and
riverbed dev ends when every node has exited.

``--secure`` (issue 20): every listener is SASL_SSL (`riverbed.testing.secure`): TLS with
certificates generated under ``DIR/pki``, SCRAM-SHA-512 between brokers and for clients,
PLAIN between controllers; the users ``admin`` and ``broker`` are created with ``storage
format --add-scram`` on first start (passwords in ``DIR/passwords``), and the client config
to use is written to ``DIR/client.properties`` and printed.

Topics are replicated by default: ``default.replication.factor`` = min(3, N) and, from 3
nodes on, ``min.insync.replicas=2`` (acks=all survives the loss of any one node); the
internal ``__consumer_offsets`` and ``__transaction_state`` topics likewise
(``offsets.topic.replication.factor``, ``transaction.state.log.replication.factor`` /
``.min.isr``), so consumer groups survive the loss of their coordinator. As in Kafka's
quickstart ``server.properties``, ``group.initial.rebalance.delay.ms`` is 0: a new group's
first consumer is not held 3 s for members that may still come.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riverbed.cli.common import CliError, run_guarded, verb_parser

if TYPE_CHECKING:
    from riverbed.testing.quorum_cluster import QuorumCluster

DEFAULT_DIR = "riverbed-dev"
DEFAULT_BASE_PORT = 19092
#: Seconds between checks that every node is still running.
WATCH_INTERVAL_S = 0.5

EPILOG = """\
examples:
  riverbed dev --nodes 3
  riverbed dev --nodes 3 --dir /tmp/rb-dev --base-port 29092
  riverbed quorum describe --bootstrap-controller 127.0.0.1:19093
"""


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "dev", "run a local N-node KRaft cluster (Ctrl-C stops it)")
    parser.epilog = EPILOG
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    parser.add_argument(
        "--dir", default=DEFAULT_DIR, help=f"folder for every node's data (default {DEFAULT_DIR})"
    )
    parser.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help=f"first port; node i uses P+2(i-1) and P+2(i-1)+1 (default {DEFAULT_BASE_PORT})",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="SASL_SSL everywhere: generated certificates (DIR/pki), SCRAM-SHA-512 users "
        "admin and broker from storage format --add-scram; prints the client config",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="keep the other nodes up when one exits (kill a node to watch the fail-over)",
    )
    parser.set_defaults(func=run_guarded(dev_cmd))


def dev_overrides(nodes: int) -> dict[str, str]:
    """Replication defaults of a dev cluster of ``nodes`` nodes (see the docstring)."""
    rf = max(1, min(3, nodes))
    min_isr = "2" if rf >= 3 else "1"
    return {
        "default.replication.factor": str(rf),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": min_isr,
        # the Spark sink's exactly-once writes (KIP-939), the default of streaming writes
        "transaction.two.phase.commit.enable": "true",
        # Kafka's quickstart server.properties: a new group's first rebalance is not held
        # 3 s for members that may still come ("a better out-of-the-box experience for
        # development and testing"; production keeps the 3 s default)
        "group.initial.rebalance.delay.ms": "0",
    }


def dev_cmd(args: argparse.Namespace) -> int:
    from riverbed.testing.cluster import BrokerStartError
    from riverbed.testing.quorum_cluster import QuorumCluster

    try:
        cluster = QuorumCluster(
            Path(args.dir),
            args.nodes,
            base_port=args.base_port,
            overrides=dev_overrides(args.nodes),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    meta = Path(args.dir) / "node-1" / "data" / "meta.properties"
    if meta.exists():  # a second run keeps the cluster id the data was formatted with
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                cluster.cluster_id = line.split("=", 1)[1].strip()
    client_config = _secure(cluster, Path(args.dir)) if args.secure else None
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"starting {args.nodes} nodes in {Path(args.dir).resolve()} ...", flush=True)
        try:
            cluster.start()
        except BrokerStartError as exc:
            raise CliError(f"a node did not start: {exc}") from None
        print(f"cluster id:          {cluster.cluster_id}")
        print(f"bootstrap servers:   {cluster.bootstrap_servers}")
        print(f"controller quorum:   {cluster.voters}")
        listener = "SASL_SSL" if client_config is not None else "PLAINTEXT"
        for i in cluster.ids:
            node = cluster.nodes[i]
            print(
                f"  node {i}: pid {node.pid}  {listener}://127.0.0.1:{cluster.ports[i][0]}  "
                f"CONTROLLER://{cluster.controller(i)}  metrics {node.http_url}/metrics  "
                f"log {node.log_path}"
            )
        if client_config is not None:
            print(f"client config (Kafka properties): {client_config}")
            print(client_config.read_text(), end="")
            print("Ctrl-C stops every node.", flush=True)
        else:
            print(
                f"try: riverbed quorum describe --bootstrap-controller {cluster.controller(1)}\n"
                "Ctrl-C stops every node.",
                flush=True,
            )
        if not _watch(cluster, stop, keep_running=args.keep_running):
            return 1
        print("stopping ...", flush=True)
        return 0
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(cluster: QuorumCluster, stop: threading.Event, *, keep_running: bool) -> bool:
    """Wait for ``stop``; False when a node exited on its own (without ``keep_running``)
    or every node has (with it). Each exit is reported once."""
    reported: set[int] = set()
    while not stop.wait(WATCH_INTERVAL_S):
        dead = {
            i: n.proc.returncode
            for i, n in cluster.nodes.items()
            if n.proc and n.proc.poll() is not None
        }
        if not keep_running and dead:
            print(f"node(s) {sorted(dead)} exited; stopping the others", flush=True)
            return False
        for i in sorted(dead.keys() - reported):
            print(f"node {i} exited (code {dead[i]}); the others keep running", flush=True)
        reported |= dead.keys()
        if len(reported) == len(cluster.nodes):
            print("every node has exited", flush=True)
            return False
    return True


def _secure(cluster: QuorumCluster, directory: Path) -> Path:
    """Make the cluster SASL_SSL (riverbed.testing.secure): certificates under
    DIR/pki, passwords kept in DIR/passwords (the users are created once, when the nodes
    are formatted with --add-scram), the client config in DIR/client.properties."""
    import secrets

    from riverbed.testing.certs import make_pki
    from riverbed.testing.secure import format_with_scram, secure_cluster_overrides

    pki = make_pki(directory / "pki")
    passwords_file = directory / "passwords"
    if passwords_file.exists():
        passwords = dict(
            line.split("=", 1) for line in passwords_file.read_text().splitlines() if "=" in line
        )
    else:
        passwords = {"admin": secrets.token_urlsafe(12), "broker": secrets.token_urlsafe(12)}
        directory.mkdir(parents=True, exist_ok=True)
        passwords_file.write_text("".join(f"{k}={v}\n" for k, v in passwords.items()))
        passwords_file.chmod(0o600)
    for i in cluster.ids:
        node = cluster.nodes[i]
        login = ("broker", passwords["broker"])
        node.extra_overrides.update(secure_cluster_overrides(*cluster.ports[i], pki, login))
        if not (cluster.data_dir(i) / "meta.properties").exists():
            try:
                format_with_scram(
                    node, cluster.node_dir(i) / "server.properties", cluster.cluster_id, passwords
                )
            except RuntimeError as exc:
                raise CliError(str(exc)) from None
    client = directory / "client.properties"
    client.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{passwords["admin"]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca.resolve()}\n"
        f"# librdkafka / kcat: -X sasl.username=admin -X sasl.password={passwords['admin']} "
        f"-X ssl.ca.location={pki.ca.resolve()}\n"
    )
    return client
