"""N combined riverbed nodes forming one KRaft quorum, as child processes on 127.0.0.1.

Layout under ``base_dir`` (one folder per node, formatted with one shared cluster id
before the first start, as ``riverbed storage format`` does)::

    base_dir/node-1/data/            log.dirs and metadata.log.dir of node 1
    base_dir/node-1/broker-1.log     its stdout + stderr
    base_dir/node-2/...

Node ``i`` (1-based) listens on ``PLAINTEXT://127.0.0.1:<broker port>`` and
``CONTROLLER://127.0.0.1:<controller port>``; with ``base_port`` P the ports are P+2(i-1)
and P+2(i-1)+1, otherwise free ports. ``controller.quorum.voters`` names every node.
Each node is a `riverbed.testing.cluster.BrokerProcess` (started and stopped by PID;
SIGKILL with ``kill``).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

from riverbed.metadata.storage_format import format_storage, random_uuid
from riverbed.testing.cluster import START_TIMEOUT_S, BrokerProcess, free_port

#: Most nodes one cluster runs (each is a Python process).
NODES_MAX = 9
#: Quick elections and broker heartbeats for fault tests: a killed voter's role moves
#: within about a second (Kafka's defaults take several).
QUICK_ELECTIONS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "500",
}


class QuorumCluster:
    def __init__(
        self,
        base_dir: str | Path,
        nodes: int = 3,
        *,
        base_port: int | None = None,
        overrides: Mapping[str, str] | None = None,
        cluster_id: str | None = None,
    ) -> None:
        if not 1 <= nodes <= NODES_MAX:
            raise ValueError(f"nodes must be between 1 and {NODES_MAX}, not {nodes}")
        if base_port is not None and not 0 < base_port <= 65535 - 2 * nodes:
            raise ValueError(f"base port {base_port} leaves no room for {nodes} nodes")
        self.base_dir = Path(base_dir)
        self.overrides = dict(overrides or {})
        self.cluster_id = cluster_id or random_uuid()
        self.ids = list(range(1, nodes + 1))
        ports: dict[int, tuple[int, int]] = {}
        for i in self.ids:
            if base_port is None:
                ports[i] = (free_port(), free_port())
            else:
                ports[i] = (base_port + 2 * (i - 1), base_port + 2 * (i - 1) + 1)
        self.ports = ports
        self.voters = ",".join(f"{i}@127.0.0.1:{ports[i][1]}" for i in self.ids)
        self.nodes: dict[int, BrokerProcess] = {}
        for i in self.ids:
            broker_port, controller_port = ports[i]
            node_overrides = {
                "listeners": (
                    f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}"
                ),
                "controller.quorum.voters": self.voters,
                # placement across brokers: each partition on one broker (rf 1)
                "default.replication.factor": "1",
                "offsets.topic.replication.factor": "1",
            }
            node_overrides.update(overrides or {})
            proc = BrokerProcess(
                data_dir=self.data_dir(i), overrides=node_overrides, port=broker_port, node_id=i
            )
            proc.controller_port = controller_port
            self.nodes[i] = proc

    def node_dir(self, node_id: int) -> Path:
        return self.base_dir / f"node-{node_id}"

    def data_dir(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "data"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[i][0]}" for i in self.ids)

    def controller(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id][1]}"

    def format(self, node_id: int) -> None:
        """Write meta.properties (shared cluster id) unless the node's dir has one."""
        data = self.data_dir(node_id)
        data.mkdir(parents=True, exist_ok=True)
        format_storage([str(data)], str(data), node_id, self.cluster_id, ignore_formatted=True)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> QuorumCluster:
        """Start every node (in parallel: each waits for the quorum before it is ready)."""
        self.start_nodes(self.ids, timeout_s)
        return self

    def start_nodes(self, ids: list[int], timeout_s: float = START_TIMEOUT_S) -> None:
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                self.format(i)
                self.nodes[i].start(timeout_s)
            except BaseException as exc:  # reported below, after every thread is done
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def add_broker(self, node_id: int, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start a broker-only node (``process.roles=broker``, a Raft observer that never
        votes) in ``base_dir/node-<id>``; it joins the cluster like the combined nodes."""
        proc = self._broker_only(node_id)
        proc.start(timeout_s)
        return proc

    def add_brokers(self, node_ids: list[int], timeout_s: float = START_TIMEOUT_S) -> None:
        """`add_broker` for each of ``node_ids``, started side by side (a start is mostly
        a process waiting for its registration)."""
        for node_id in node_ids:  # the ports are picked here, in one thread
            self._broker_only(node_id)
        self.start_nodes(node_ids, timeout_s)

    def _broker_only(self, node_id: int) -> BrokerProcess:
        """A broker-only node's process, formatted, not started."""
        assert node_id not in self.nodes, f"node {node_id} exists"
        port = free_port()
        proc = BrokerProcess(
            data_dir=self.data_dir(node_id),
            port=port,
            node_id=node_id,
            overrides={
                "process.roles": "broker",
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "controller.quorum.voters": self.voters,
                **self.overrides,
            },
        )
        self.nodes[node_id] = proc
        self.ports[node_id] = (port, 0)
        self.format(node_id)
        return proc

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def wipe(self, node_id: int) -> None:
        """Remove the node's data dir (it must be stopped)."""
        proc = self.nodes[node_id].proc
        assert proc is None or proc.poll() is not None, "stop the node before wiping it"
        shutil.rmtree(self.data_dir(node_id), ignore_errors=True)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def __enter__(self) -> QuorumCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
