"""`riverbed dev --nodes 3 [--dir DIR] [--base-port P]`: a local KRaft cluster for development.

Starts N combined nodes (``process.roles=broker,controller``) on 127.0.0.1 as child
processes (`riverbed.testing.quorum_cluster.QuorumCluster`): node i listens on
``PLAINTEXT://127.0.0.1:P+2(i-1)`` and ``CONTROLLER://127.0.0.1:P+2(i-1)+1``, keeps its data
in ``DIR/node-i/data`` (formatted with one cluster id on first start; a second run reuses
it) and its log in ``DIR/node-i/broker-i.log``. Prints the bootstrap servers and the
controller quorum, then waits; Ctrl-C or SIGTERM stops every node by PID (SIGTERM, clean
shutdown). A node that exits on its own is reported and the others are stopped too.

Topics are replicated by default: ``default.replication.factor`` = min(3, N) and, from 3
nodes on, ``min.insync.replicas=2`` (acks=all survives the loss of any one node); the
internal ``__consumer_offsets`` and ``__transaction_state`` topics likewise
(``offsets.topic.replication.factor``, ``transaction.state.log.replication.factor`` /
``.min.isr``), so consumer groups survive the loss of their coordinator.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

from riverbed.cli.common import CliError, run_guarded, verb_parser

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
        for i in cluster.ids:
            node = cluster.nodes[i]
            print(
                f"  node {i}: pid {node.pid}  PLAINTEXT://127.0.0.1:{cluster.ports[i][0]}  "
                f"CONTROLLER://{cluster.controller(i)}  metrics {node.http_url}/metrics  "
                f"log {node.log_path}"
            )
        print(
            f"try: riverbed quorum describe --bootstrap-controller {cluster.controller(1)}\n"
            "Ctrl-C stops every node.",
            flush=True,
        )
        while not stop.wait(WATCH_INTERVAL_S):
            dead = [i for i, n in cluster.nodes.items() if n.proc and n.proc.poll() is not None]
            if dead:
                print(f"node(s) {dead} exited; stopping the others", flush=True)
                return 1
        print("stopping ...", flush=True)
        return 0
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
