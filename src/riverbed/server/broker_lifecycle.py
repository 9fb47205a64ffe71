"""The broker half of a node's lifecycle with the active controller: registration,
unfencing and the controlled shutdown (a mixin of `riverbed.server.node.Node`).

Kafka's BrokerLifecycleManager: a broker registers (BrokerRegistrationRequest with its
incarnation id and, KIP-966, the epoch of its last clean shutdown or -1 after a crash),
heartbeats until the controller unfences it (it has applied the metadata up to its
registration), and before it stops asks the controller to move its leaderships away
(ControlledShutdown) so clients move on at once instead of waiting out
``broker.session.timeout.ms``. Each step retries with a jittered exponential back-off while
no controller takes it (none elected yet, or the previous incarnation's session still
lives); a stop request ends the retries.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from typing import TYPE_CHECKING

from riverbed.server.backoff import ExponentialBackoff, Retrier

if TYPE_CHECKING:
    from riverbed.server.config import ServerConfig
    from riverbed.server.quorum import QuorumMetadata
    from riverbed.server.replication.manager import ReplicaManager
    from riverbed.storage.log_manager import LogManager

log = logging.getLogger("riverbed.server.node")

#: Back-off between broker registration (and unfencing heartbeat) attempts while the quorum
#: has no active controller or the old incarnation's session lives: from the first to the
#: most, doubling with jitter (Kafka's broker lifecycle manager backs off the same way).
REGISTRATION_RETRY_BACKOFF_MS = 100
REGISTRATION_RETRY_BACKOFF_MAX_MS = 1000
REGISTRATION_BACKOFF = ExponentialBackoff(
    REGISTRATION_RETRY_BACKOFF_MS, REGISTRATION_RETRY_BACKOFF_MAX_MS
)
#: Upper bound on the controlled shutdown (leaderships moved away) before a stop goes on.
CONTROLLED_SHUTDOWN_S = 10.0
CONTROLLED_SHUTDOWN_BACKOFF = ExponentialBackoff(100, 1000)


class NodeStartError(RuntimeError):
    """The node cannot start (e.g. a listener's port is taken); the message says why."""


class NodeConfigError(NodeStartError):
    """The node cannot start with its configuration (found while starting: listener
    security, the HTTP listeners, tiered storage, the quorum); the message names the key.
    The process exits 2, as for a value the config check refuses before the start."""


class BrokerLifecycle:
    if TYPE_CHECKING:  # provided by Node
        config: ServerConfig
        stop_requested: asyncio.Event
        quorum: QuorumMetadata | None
        log_manager: LogManager | None
        replicas: ReplicaManager | None
        _incarnation: uuid.UUID

        def advertised_endpoints(self) -> list[tuple[str, str, int, str]]: ...

    async def _register(self, quorum: QuorumMetadata) -> None:
        from riverbed.metadata.image import BrokerEndpoint

        endpoints = tuple(
            BrokerEndpoint(name=name, host=host, port=port, security_protocol=0)
            for name, host, port, _proto in self.advertised_endpoints()
        )
        rack = self.config.broker_rack or None
        incarnation = self._incarnation
        from riverbed.metadata.controller import ControllerError
        from riverbed.raft.node import NotLeaderError

        # PreviousBrokerEpoch (KIP-966): the epoch in the clean-shutdown markers, -1 after
        # a crash, so the controller knows whether this log may have lost its tail.
        assert self.log_manager is not None
        previous_epoch = int(self.log_manager.previous_broker_epoch)
        # The active controller may be changing (or not elected yet), or this broker's
        # previous incarnation may still hold a live session (DUPLICATE_BROKER_REGISTRATION
        # until it expires): retry until it takes the registration, as Kafka's broker
        # lifecycle manager does.
        retrier = Retrier(REGISTRATION_BACKOFF, random.Random())
        while not self.stop_requested.is_set():
            try:
                await quorum.register_broker(
                    self.config.node_id, endpoints, rack, incarnation, previous_epoch
                )
                return
            except (NotLeaderError, TimeoutError, ConnectionError, ControllerError) as exc:
                delay_ms = retrier.failed()
                log.info("broker registration not accepted yet (%r): retry in %d ms", exc, delay_ms)
                await asyncio.sleep(delay_ms / 1000)
        raise NodeStartError("stopped before this broker was registered")

    async def _wait_unfenced(self, quorum: QuorumMetadata) -> None:
        """Heartbeat (without WantFence: the partitions are applied) until the controller
        unfences this broker, i.e. it has applied the metadata up to its registration
        (Kafka's broker waits for this before it serves)."""
        node_id = self.config.node_id
        retrier = Retrier(REGISTRATION_BACKOFF, random.Random())
        while not self.stop_requested.is_set():
            if await quorum.heartbeat(node_id, want_fence=False):
                return
            await asyncio.sleep(retrier.failed() / 1000)
        raise NodeStartError("stopped before this broker was unfenced")

    def _clean_shutdown_epoch(self) -> int:
        """The broker epoch for the clean-shutdown marker: this incarnation's registration
        (-1 when it never registered)."""
        if self.quorum is None:
            return -1
        reg = self.quorum.image.brokers.get(self.config.node_id)
        if reg is None or reg.incarnation_id != self._incarnation:
            # not registered by this process: the previous incarnation's epoch would
            # vouch for a log this process never proved whole (it may have crashed)
            return -1
        return reg.broker_epoch

    async def _controlled_shutdown(self) -> None:
        """Before stopping, hand every leadership another in-sync replica can take to it
        (``controlled.shutdown.enable``), so clients move on at once instead of waiting
        for broker.session.timeout.ms; bounded by CONTROLLED_SHUTDOWN_S.

        Kafka's broker waits for the controller's answer (BrokerServer.shutdown, up to
        5 minutes). When the controller quorum is gone (the last nodes of a cluster
        stopping) that answer cannot come: once no controller has answered for
        controller.quorum.fetch.timeout.ms + election.timeout.ms (the time a live quorum
        takes to notice a lost leader and elect another), the wait is skipped."""
        replicas, quorum = self.replicas, self.quorum
        if replicas is None or quorum is None or not self.config.get("controlled.shutdown.enable"):
            return
        silence_max_s = (
            self.config.get_int("controller.quorum.fetch.timeout.ms")
            + self.config.get_int("controller.quorum.election.timeout.ms")
        ) / 1000
        deadline = time.monotonic() + CONTROLLED_SHUTDOWN_S
        answered = time.monotonic()  # when a controller last answered
        retrier = Retrier(CONTROLLED_SHUTDOWN_BACKOFF, random.Random())
        while replicas.leads_with_followers() and time.monotonic() < deadline:
            if time.monotonic() - answered >= silence_max_s:
                log.warning(
                    "controlled shutdown skipped: no controller answered for %.1f s "
                    "(the controller quorum is gone); stopping as leader of some partitions",
                    silence_max_s,
                )
                return
            try:
                done = await asyncio.wait_for(
                    quorum.controlled_shutdown(self.config.node_id),
                    max(0.1, min(deadline, answered + silence_max_s) - time.monotonic()),
                )
                answered = time.monotonic()
            except Exception as exc:  # no controller reachable: retried until silence_max_s
                log.info("controlled shutdown not accepted (%r)", exc)
                done = False
            if not done or replicas.leads_with_followers():
                await asyncio.sleep(retrier.failed() / 1000)
        if replicas.leads_with_followers():
            log.warning("controlled shutdown incomplete: stopping as leader of some partitions")
        else:
            log.info("controlled shutdown complete: no partition leadership left here")
