"""One riverbed node process: config -> storage -> metadata -> broker -> listeners.

Start-up order (each step needs the previous one):

1. storage format: ``meta.properties`` in every log dir (written on first start when
   ``riverbed.storage.auto.format`` is on; otherwise ``riverbed storage format`` must
   have run) gives the cluster id;
2. the metadata quorum (`riverbed.server.quorum`; one path for every node: a single node
   without ``controller.quorum.voters`` is the one voter of its own quorum, as Kafka's
   combined mode): the controller listeners bind and serve first, and the node waits
   until its replica has applied everything committed (the first active controller
   writes the bootstrap records; a node without a log downloads a snapshot from the
   leader);
3. the LogManager opens (and recovers) every partition log under ``log.dirs`` with each
   topic's config from the image; the partition manager opens logs of partitions the
   image has, deletes logs of topics it no longer has, and follows every new image;
4. the listeners bind (port 0 binds a free port) and this node registers itself with
   the advertised endpoints (on a quorum: with the active controller, retrying), then
   starts accepting; then ONE ready line is printed:
   ``riverbed node <id> ready: PLAINTEXT://127.0.0.1:9092 ...``.

The listeners' wiring (security, socket server, binding, request routing, advertised
endpoints) is `riverbed.server.node_listeners`; registration, unfencing and the controlled
shutdown are `riverbed.server.broker_lifecycle`, both mixed into `Node`.

Shutdown (SIGTERM, SIGINT or `Node.stop`): stop accepting, finish in-flight requests
(bounded wait), wake parked fetches, flush and close every log (clean-shutdown markers),
close the metadata log. Second signal: exit at once.

Crash-only: an unexpected exception in the metadata quorum (a Raft driver loop, a
state-machine apply on any replica, a snapshot load) goes to the node's fault handler
(`riverbed.server.fault_handler`): one FATAL line naming the cause, then exit 1 with no
clean shutdown; the start-up path is the recovery path. A request handler's error is
answered UNKNOWN_SERVER_ERROR instead, as Kafka does.

Flush policy (Kafka's): data is written to the segment files before a produce is
acknowledged, so a SIGKILL of the process loses nothing acknowledged (the OS page cache
keeps it); fsync happens per ``log.flush.interval.messages`` / ``log.flush.interval.ms``
(scheduler every ``log.flush.scheduler.interval.ms``), when segments roll, and at clean
shutdown. Metadata records are fsynced before they are applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable

from riverbed.server.broker.authorization import (
    authorizer_config,
    broker_authorizer,
)
from riverbed.server.broker.dispatch import Broker
from riverbed.server.broker.partitions import PartitionManager, log_config_for
from riverbed.server.broker_lifecycle import BrokerLifecycle, NodeConfigError, NodeStartError
from riverbed.server.clock import SystemClock
from riverbed.server.config import ServerConfig
from riverbed.server.connection_quotas import raise_open_files_limit
from riverbed.server.controller_apis import ControllerApis
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.heap import freeze_startup_heap
from riverbed.server.http_listener import (
    HttpExtension,
    HttpListener,
    HttpListenerError,
    parse_http_listeners,
)
from riverbed.server.jwks_https import HttpsJwks
from riverbed.server.logging_config import configure_logging
from riverbed.server.metrics.registry import NodeMetrics
from riverbed.server.network import SocketServer
from riverbed.server.node_listeners import NodeListeners
from riverbed.server.purgatory import Purgatory
from riverbed.server.quorum import QuorumMetadata, open_quorum_metadata
from riverbed.server.remote_log import RemoteLogManager, RemoteLogSettings
from riverbed.server.replication.manager import (
    ReplicaManager,
    open_state_change_log,
    state_change_log,
)
from riverbed.server.supervise import supervise
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import StorageError
from riverbed.storage.log_manager import LogManager
from riverbed.tiered.rsm import FsspecRemoteStorageManager

log = logging.getLogger(__name__)

#: How often the node runs the log manager's time-driven work (flush, retention) at most.
HOUSEKEEPING_INTERVAL_MS = 1000
#: Environment variable naming a parent pid: the node stops cleanly when that process is
#: gone (set by riverbed.testing.cluster so a killed test run leaves no brokers behind).
EXIT_WITH_PARENT_ENV = "RIVERBED_EXIT_WITH_PARENT"


def _move_rate(cfg: ServerConfig) -> int | None:
    """replica.alter.log.dirs.io.max.bytes.per.second; None when unlimited (the default)."""
    rate = cfg.get_int("replica.alter.log.dirs.io.max.bytes.per.second")
    return None if rate >= 2**63 - 1 else rate


def _now_ms() -> int:
    return int(time.time() * 1000)


class Node(NodeListeners, BrokerLifecycle):
    """A combined broker+controller node (``process.roles=broker,controller``)."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        fault_handler: FaultHandler | None = None,
        http_extension: HttpExtension | None = None,
    ) -> None:
        self.config = config
        #: More routes for the HTTP listener (the web console), from the layer above.
        self.http_extension = http_extension
        #: Where unexpected faults go (tests inject a RecordingFaultHandler).
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(
            config.node_id
        )
        self.bound_listeners: dict[str, tuple[str, int]] = {}
        self._stopped = asyncio.Event()
        #: Set to ask `run_node` for a clean shutdown (signals, a vanished parent).
        self.stop_requested = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self.server: SocketServer | None = None
        # built by start, in this order (each needs the ones before)
        self.quorum: QuorumMetadata | None = None
        self.log_manager: LogManager | None = None
        #: This process's incarnation id (BrokerRegistration's IncarnationId).
        self._incarnation = uuid.uuid4()
        self.partitions: PartitionManager | None = None
        self.purgatory = Purgatory(fault_handler=self.fault_handler)
        self.broker: Broker | None = None
        #: `authorizer.class.name` set: controller listener requests are checked first
        self._controller_apis = ControllerApis(lambda: self.quorum)
        self.replicas: ReplicaManager | None = None
        self.remote_log: RemoteLogManager | None = None
        #: Prometheus metrics (one registry per node) and /metrics + /health (node_http)
        self.metrics = NodeMetrics(
            config.node_id,
            is_controller="controller" in config.process_roles,
            topic_name=self._topic_name,
        )
        self.http: HttpListener | None = None
        self.serving = False  # the Kafka listeners are bound and serving

    async def start(self) -> None:
        from riverbed.metadata.storage_format import ensure_formatted

        cfg = self.config
        # first: a test run that dies while this node starts must not leave it behind
        fh = self.fault_handler
        self._tasks.append(supervise("parent watch", self._watch_parent(), fh))
        raise_open_files_limit()  # one fd per connection: 1024 would cap max.connections
        await self._start_http()  # first: /health/ready answers 503 while the node starts
        idle = self.metrics.watch_loop(cfg.get_int("metrics.sample.window.ms"))
        self._tasks.append(supervise("event loop idle sampler", idle, fh))
        stalls = self.metrics.watch_stalls()  # where the latency tail goes (issue 23)
        self._tasks.append(supervise("event loop stall sampler", stalls, fh))
        self.cluster_id = ensure_formatted(
            list(cfg.log_dirs), cfg.metadata_log_dir, cfg.node_id, auto_format=cfg.auto_format
        )
        clock = SystemClock()
        if cfg.get("controller.quorum.bootstrap.servers") and not cfg.quorum_voters:
            # a dynamic quorum (KIP-853: voters discovered through the bootstrap servers,
            # AddRaftVoter) is not implemented; a static voter set is
            raise NodeConfigError(
                "controller.quorum.bootstrap.servers without controller.quorum.voters "
                "(a dynamic KRaft quorum) is not supported: list the voters in "
                "controller.quorum.voters (id@host:port,...)"
            )
        self._security = self._listener_security()
        self.server = self._socket_server()
        authz_config = authorizer_config(cfg)
        if authz_config is not None:
            self._controller_apis.authorizer = broker_authorizer(authz_config, cfg)
        quorum = await self._start_quorum(clock)
        dynamic_listeners = self._dynamic_listeners(quorum)
        remote_settings, rsm = _remote_log_setup(cfg)
        partitions = self._open_partitions(quorum, clock, remote_settings.enabled)
        await self._listen(controller=False)
        await self._join(quorum, partitions)
        self.broker = Broker(
            cfg, quorum, partitions, self.purgatory, self.cluster_id, clock, self.fault_handler
        )
        self.broker.dynamic_listeners = dynamic_listeners
        if cfg.get("riverbed.metrics.enable"):  # the produce handler's topic counters
            self.broker.topic_stats = self.metrics.traffic
        self._limit_connection_rates(self.broker)
        if rsm is not None:
            self._start_remote_log(remote_settings, rsm, quorum, partitions)
        await self._serve(quorum)
        addrs = " ".join(f"{name}://{h}:{p}" for name, (h, p) in self.bound_listeners.items())
        print(f"riverbed node {cfg.node_id} ready: {addrs}", flush=True)
        log.info("node %d started (cluster id %s): %s", cfg.node_id, self.cluster_id, addrs)
        bootstrap = ",".join(f"{h}:{p}" for _n, h, p, _s in self.advertised_endpoints())
        log.info("clients connect with --bootstrap-server %s (bootstrap.servers)", bootstrap)

    async def _start_quorum(self, clock: SystemClock) -> QuorumMetadata:
        """The quorum: the controller listener serves Raft RPCs at once (the other voters
        need them to elect a leader), then this replica catches up with the committed
        metadata before any partition log is opened or deleted (their configs come from
        the image)."""
        from riverbed.metadata.storage_format import read_meta_properties

        cfg = self.config
        meta = read_meta_properties(cfg.metadata_log_dir)
        quorum = open_quorum_metadata(
            cfg,
            self.cluster_id,
            clock,
            self.fault_handler,
            directory_id=(meta.directory_id or "") if meta is not None else "",
        )
        self.quorum = quorum
        quorum.add_listener(self.metrics.on_image)
        await self._listen(controller=True)
        await quorum.start()
        if not await quorum.wait_caught_up(self.stop_requested):
            raise NodeStartError("stopped before the metadata quorum was reached")
        return quorum

    def _open_partitions(
        self, quorum: QuorumMetadata, clock: SystemClock, remote_log_enabled: bool
    ) -> PartitionManager:
        """The log manager, the hosted partitions and their partition cores."""
        from riverbed.storage.log_cleaner import CleanerConfig

        cfg = self.config
        fh = self.fault_handler
        static = cfg.static_config()

        def config_for(topic: str) -> LogConfig:
            return log_config_for(quorum.image, topic, cfg.node_id, static)

        # a failed disk halts the node when no log dir is left (or the metadata one)
        self.log_manager = LogManager(
            list(cfg.log_dirs),
            clock,
            config_for=config_for,
            halt=ProcessTerminatingFaultHandler(cfg.node_id).handle_fault,
            metadata_log_dir=cfg.metadata_log_dir,
            cleaner_config=CleanerConfig.from_broker(cfg.get),
            remote_log_enabled=remote_log_enabled,
            move_bytes_per_s=_move_rate(cfg),
            recovery_threads_per_dir=cfg.get_int("num.recovery.threads.per.data.dir"),
            recovery_point_checkpoint_interval_ms=cfg.get_int(
                "log.flush.offset.checkpoint.interval.ms"
            ),
            log_start_checkpoint_interval_ms=cfg.get_int(
                "log.flush.start.offset.checkpoint.interval.ms"
            ),
            high_watermark_checkpoint_interval_ms=cfg.get_int(
                "replica.high.watermark.checkpoint.interval.ms"
            ),
        )
        partitions = PartitionManager(
            self.log_manager, cfg.node_id, static, self.purgatory, fault_handler=fh
        )
        self.partitions = partitions
        # every hosted partition gets a partition core (leader/follower, ISR, HW)
        self.replicas = ReplicaManager(
            cfg.node_id,
            static,
            partitions,
            self.purgatory,
            clock.now_ms,
            quorum.alter_partition,
            lambda: quorum.image,
            cfg.inter_broker_listener_name,
            fault_handler=fh,
            client_security=self._inter_broker_security,
        )
        partitions.replicas = self.replicas
        self._state_change_log = open_state_change_log(cfg.log_dirs[0])
        self._watch_metrics(quorum, partitions)
        return partitions

    def _start_remote_log(
        self,
        settings: RemoteLogSettings,
        rsm: FsspecRemoteStorageManager,
        quorum: QuorumMetadata,
        partitions: PartitionManager,
    ) -> None:
        """Tiered storage (KIP-405): follows the hosted partitions and their leaders."""
        remote_log = RemoteLogManager(
            settings, rsm, self.config.node_id, fault_handler=self.fault_handler
        )
        self.remote_log = remote_log
        assert self.broker is not None
        self.broker.remote_log = remote_log
        remote_log.start(lambda: partitions.partitions, lambda: quorum.image)
        quorum.add_listener(lambda old, new, delta: remote_log.wake())

    async def _join(self, quorum: QuorumMetadata, partitions: PartitionManager) -> None:
        """Kafka's broker lifecycle: register (fenced), then act on partition state, then
        be unfenced once caught up. Until the registration is accepted the image may still
        name this node's previous incarnation as a leader or ISR member; this incarnation
        must not act on that (its log may be shorter). The partitions are applied before
        the `Broker` exists: it switches log creation off the loop, and the logs found on
        disk must be hosted before `delete_orphans` looks for ones the image dropped."""
        await self._register(quorum)
        partitions.apply_image(quorum.image)
        partitions.delete_orphans()
        quorum.add_listener(lambda old, new, delta: partitions.apply_image(new, delta))

    async def _serve(self, quorum: QuorumMetadata) -> None:
        """Once unfenced: serve clients, run the replica manager, housekeeping, heartbeats."""
        fh = self.fault_handler
        assert self.server is not None and self.replicas is not None
        await self._wait_unfenced(quorum)
        await self.server.start_serving()
        self.serving = True
        self.replicas.start()
        self._tasks.append(supervise("log housekeeping", self._housekeeping(), fh))
        for security in self._security.values():
            signed = security.oauthbearer_signed
            if signed is not None and isinstance(signed.keys, HttpsJwks):
                refresh = signed.keys.run(self.stop_requested)
                self._tasks.append(supervise(f"JWKS refresh of {security.name}", refresh, fh))
        heartbeats = quorum.heartbeat_loop(self.config.node_id, self.stop_requested, lambda: False)
        self._tasks.append(supervise("broker heartbeats", heartbeats, fh))

    async def _watch_parent(self) -> None:
        """Ask for a clean stop once the parent named by EXIT_WITH_PARENT_ENV is gone."""
        parent = os.environ.get(EXIT_WITH_PARENT_ENV)
        while parent is not None:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_MS / 1000)
            if os.getppid() != int(parent):
                log.warning("parent process %s is gone: shutting down", parent)
                self.stop_requested.set()
                return

    async def _housekeeping(self) -> None:
        log_manager = self.log_manager
        assert log_manager is not None
        retention_every = self.config.get_int("log.retention.check.interval.ms")
        next_retention = _now_ms() + retention_every
        expiry_every = self.config.get_int("producer.id.expiration.check.interval.ms")
        next_expiry = _now_ms() + expiry_every
        while not self._stopping:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_MS / 1000)
            now = _now_ms()
            try:
                log_manager.flush_due(now)
                if now >= next_retention:
                    next_retention = now + retention_every
                    log_manager.schedule_retention(now)  # in its pool
                if self.partitions is not None:
                    self.partitions.flush_producer_ledgers()  # timer / full filter
                if now >= next_expiry and self.partitions is not None:
                    next_expiry = now + expiry_every
                    self.partitions.remove_expired_producers()  # on each log's clock
            except StorageError as exc:
                # a failed disk: its log dir went offline (the node halted if it was the
                # last one); the other dirs' housekeeping goes on. Anything else is a fault.
                log.warning("log housekeeping: %s", exc)

    async def stop(self) -> None:
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        log.info("node %d shutting down", self.config.node_id)
        await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        self.purgatory.close()
        if self.broker is not None:
            self.broker.close()
        if self.server is not None:
            await self.server.stop()
        if self.replicas is not None:
            await self.replicas.close()  # no fetcher writes once the logs close
            state_change_log.removeHandler(self._state_change_log)
            self._state_change_log.close()
        if self.quorum is not None:
            # first: no metadata change may reach the partitions once their logs close; a
            # leader resigns (EndQuorumEpoch) on the way out
            await self.quorum.close()
        if self.remote_log is not None:
            await self.remote_log.close()  # running uploads end before the logs close
        if self.partitions is not None:
            await self.partitions.stop_log_work()  # creations in workers end first
        if self.log_manager is not None:
            self.log_manager.shutdown(self._clean_shutdown_epoch())
        if self.partitions is not None:
            # after the logs closed (a close waits for its ledger flush): joins the ledger
            # flush threads, which would otherwise outlive the node
            self.partitions.close()
        if self.http is not None:
            await self.http.stop()
        self._stopped.set()
        log.info("node %d stopped", self.config.node_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # --- metrics and health (riverbed.server.http_listener, riverbed.server.metrics) -------
    async def _start_http(self) -> None:
        try:
            endpoints = parse_http_listeners(list(self.config.http_listeners))
        except HttpListenerError as exc:
            raise NodeConfigError(str(exc)) from None
        if not endpoints:
            return
        self.http = HttpListener(self.metrics.render, self._readiness(), self.http_extension)
        try:
            bound = await self.http.start(endpoints)
        except OSError as exc:
            await self.http.stop()
            raise NodeStartError(
                f"cannot listen on {', '.join(map(str, endpoints))} (riverbed.http.listeners): "
                f"{exc.strerror or exc}"
            ) from None
        log.info("metrics and health on %s", " ".join(map(str, bound)))

    def _readiness(self) -> dict[str, Callable[[], bool]]:
        """/health/ready's checks: metadata caught up, log dirs online, listeners serving."""

        def metadata() -> bool:
            # caught up once at start (the node waited for it), and a leader is known now
            return self.serving and self.quorum is not None and self.quorum.leader_id() >= 0

        def log_dirs() -> bool:
            return self.log_manager is not None and not self.log_manager.offline_dirs()

        return {"metadata": metadata, "log_dirs": log_dirs, "listeners": lambda: self.serving}

    def _watch_metrics(self, quorum: QuorumMetadata, partitions: PartitionManager) -> None:
        driver = quorum.driver
        self.metrics.watch(
            quorum=quorum,
            raft=lambda: driver.node,
            raft_log_end=lambda: driver.log.end_offset,
            raft_commit=lambda: driver.commit_latency,
            hosted=partitions,
            lag=lambda: self.replicas,
            log_dirs=lambda: self.log_manager,
            cleaner=lambda: self.log_manager.cleaner if self.log_manager is not None else None,
            groups=lambda: self.broker.groups if self.broker is not None else None,
            remote=lambda: self.remote_log.stats if self.remote_log is not None else None,
        )
        self.metrics.watch_transactions(
            partitions,
            lambda: self.broker.transactions.core if self.broker is not None else None,
            lambda: self.config.get_int("transaction.max.timeout.ms"),
            lambda: int(time.time() * 1000),
        )

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.quorum.image.topic_by_id(topic_id) if self.quorum is not None else None
        return topic.name if topic is not None else None


def _remote_log_setup(
    cfg: ServerConfig,
) -> tuple[RemoteLogSettings, FsspecRemoteStorageManager | None]:
    """Tiered storage's broker configs, validated at start; the remote storage manager
    when ``remote.log.storage.system.enable`` (else None)."""
    try:
        settings = RemoteLogSettings.from_config(cfg)
    except ValueError as exc:
        raise NodeConfigError(str(exc)) from None
    if not settings.enabled:
        return settings, None
    name = str(cfg.get("remote.log.storage.manager.class.name"))
    default = f"{FsspecRemoteStorageManager.__module__}.{FsspecRemoteStorageManager.__name__}"
    if name != default:
        raise NodeConfigError(
            f"remote.log.storage.manager.class.name={name}: riverbed ships {default} only"
        )
    prefix = str(cfg.get("remote.log.storage.manager.impl.prefix"))
    props = {
        "rsm.config." + k[len(prefix) :]: v
        for k, v in cfg.originals.items()
        if k.startswith(prefix)
    }
    try:
        return settings, FsspecRemoteStorageManager.from_props(props)
    except ValueError as exc:
        raise NodeConfigError(f"tiered storage: {exc}") from None


async def run_node(config: ServerConfig, http_extension: HttpExtension | None = None) -> None:
    """Start a node, stop it cleanly on SIGTERM/SIGINT, return once it has stopped."""
    # the process-terminating fault handler is Node's default: a fault ends this process
    node = Node(config, http_extension=http_extension)
    loop = asyncio.get_running_loop()
    stop_requested = node.stop_requested
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            log.warning("second signal: exiting without a clean shutdown")
            sys.exit(1)
        stop_requested.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal)
    try:
        await node.start()
        # The process's own node only: a test process starting nodes in it would pin its
        # other objects (and their later cycles) in the permanent generation for ever.
        frozen = freeze_startup_heap()  # full collections no longer walk the start-up heap
        log.info("froze %d start-up objects out of the garbage collector's way", frozen)
        await stop_requested.wait()
    finally:
        await node.stop()


def run(config: ServerConfig, http_extension: HttpExtension | None = None) -> int:
    """Run a node in this process until it is told to stop (``riverbed server start``);
    ``http_extension`` adds routes to its HTTP listener (the web console)."""
    configure_logging(config.node_id, config.logger_levels, config.log_json)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        try:
            runner.run(run_node(config, http_extension))
        except NodeStartError as exc:
            log.error("%s", exc)
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2 if isinstance(exc, NodeConfigError) else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m riverbed.server.node [--config FILE] [--override k=v ...]``."""
    import argparse

    from riverbed.cli.common import load_server_config

    parser = argparse.ArgumentParser(prog="python -m riverbed.server.node")
    parser.add_argument("--config", default=None)
    parser.add_argument("--override", action="append", default=[])
    # a refused config: one error line and exit 2, as `riverbed server start`
    config = load_server_config(parser.parse_args(argv))
    return 2 if config is None else run(config)


if __name__ == "__main__":
    sys.exit(main())
