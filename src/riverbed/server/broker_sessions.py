"""The controller's side of broker sessions: registrations, heartbeats, probes and fencing
(Kafka's BrokerHeartbeatManager and ClusterControlManager, the I/O around them).

The decisions are `riverbed.metadata.broker_liveness.BrokerLiveness`'s (sans-I/O, in
memory only, as in Kafka: a new active controller starts every session afresh); this
shell feeds it what the node hears (heartbeats served, metadata fetches from the quorum's
replicas, TCP probes of registered endpoints) and writes what it decides (fence records)
through the node's `MetadataService`. Registrations (BrokerRegistration, 62) and
heartbeats (BrokerHeartbeat, 63) are served only by the active controller: anything else
answers NOT_CONTROLLER and the broker asks again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence

from riverbed.metadata.broker_liveness import (
    PROBE_TIMEOUT_MS,
    BrokerLiveness,
    LivenessConfig,
    Probe,
)
from riverbed.metadata.controller import ControllerError
from riverbed.metadata.image import BrokerEndpoint, BrokerRegistration
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from riverbed.raft.roles import Role
from riverbed.server.metadata_service import MetadataService
from riverbed.server.raft_driver import RaftDriver, monotonic_ms
from riverbed.server.supervise import supervise_background

log = logging.getLogger(__name__)


class BrokerSessions:
    """Broker sessions as node ``node_id`` sees them, acted on while ``is_active()``."""

    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        config: LivenessConfig,
        service: MetadataService,
        driver: RaftDriver,
        is_active: Callable[[], bool],
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.service = service
        self.driver = driver
        self.is_active = is_active
        self.liveness = BrokerLiveness(config)
        #: (leader id, monotonic ms) of the last contact with the quorum leader we followed
        self._leader_contact: tuple[int, int] = (-1, 0)
        self._probes: set[asyncio.Task[None]] = set()

    def activate(self) -> None:
        """This node became the active controller: every session starts afresh, except that
        the previous leader was heard from when this node last heard from it."""
        leader, contact_ms = self._leader_contact
        self.liveness.activate(monotonic_ms(), {leader: contact_ms} if leader >= 0 else {})

    def track(self, active: bool) -> None:
        """What this node hears from the brokers, and the probes of their endpoints (on every
        voter: a standby confirms endpoints so that it can fence early once active)."""
        node = self.driver.node
        now = monotonic_ms()
        brokers = self.service.image.brokers
        self.liveness.observe({b: reg.broker_epoch for b, reg in brokers.items()}, now)
        if active and node.leader_state is not None:
            for replica_id, progress in node.leader_state.replicas.items():
                if progress.last_fetch_ms >= 0:  # its metadata fetch arrived then
                    self.liveness.heard(replica_id, progress.last_fetch_ms)
        elif node.role is Role.FOLLOWER and node.leader_id >= 0:
            self._leader_contact = (node.leader_id, node.last_leader_contact_ms)
        if not node.is_voter:
            return
        others = [b for b, reg in sorted(brokers.items()) if not reg.fenced and b != self.node_id]
        for broker_id, epoch in self.liveness.to_probe(others, now, active=active):
            supervise_background(
                f"probe of broker {broker_id}",
                self._probe(broker_id, epoch),
                self.driver.fault_handler,
                self._probes,
            )

    async def _probe(self, broker_id: int, epoch: int) -> None:
        """One TCP connection to the broker's first registered endpoint: refused (its host
        says nothing listens there), accepted, or no answer."""
        reg = self.service.image.brokers.get(broker_id)
        outcome = Probe.NO_ANSWER
        if reg is not None and reg.broker_epoch == epoch and reg.endpoints:
            endpoint = reg.endpoints[0]
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(endpoint.host or "localhost", endpoint.port),
                    PROBE_TIMEOUT_MS / 1000,
                )
                writer.close()
                outcome = Probe.ACCEPTED
            except ConnectionRefusedError:
                outcome = Probe.REFUSED
            except (OSError, TimeoutError):
                pass
        self.liveness.probed(broker_id, epoch, outcome)

    async def fence_expired(self) -> None:
        """Fence every unfenced broker whose session (``broker.session.timeout.ms``) expired,
        or whose process is gone (`BrokerLiveness.to_fence`): its partitions lose it as
        leader, so clients stop being sent to a dead node. This node's own broker
        heartbeats too (locally, `QuorumMetadata.heartbeat_loop`): a restarted node must not
        keep its previous incarnation's session alive."""
        brokers = self.service.image.brokers
        unfenced = [b for b, reg in sorted(brokers.items()) if not reg.fenced]
        for broker_id, why in self.liveness.to_fence(unfenced, monotonic_ms()):
            log.warning("fencing broker %d: %s", broker_id, why)
            await self.service.fence_broker(broker_id)
            log.info("fenced broker %d", broker_id)

    async def serve_heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        if not self.is_active():
            return BrokerHeartbeatResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
        reg = self.service.image.brokers.get(req.broker_id)
        if reg is None or reg.broker_epoch != req.broker_epoch:
            # registered again since (or never): that incarnation must register anew
            return BrokerHeartbeatResponse(error_code=int(ErrorCode.STALE_BROKER_EPOCH))
        self.liveness.heartbeat(req.broker_id, req.broker_epoch, monotonic_ms())
        if req.want_shut_down:
            # controlled shutdown (KRaft): leaderships move away; it may stop at 0
            remaining = await self.service.controlled_shutdown(req.broker_id, req.broker_epoch)
            return BrokerHeartbeatResponse(
                error_code=0,
                is_caught_up=True,
                is_fenced=reg.fenced,
                should_shut_down=not remaining,
            )
        if reg.fenced and not req.want_fence:
            reg = await self.service.unfence_broker(
                req.broker_id, req.broker_epoch, req.current_metadata_offset
            )
            if not reg.fenced:
                log.info("unfenced broker %d (heartbeat)", req.broker_id)
        # Kafka: caught up once the broker has applied its own registration record
        caught_up = req.current_metadata_offset >= reg.registered_offset
        return BrokerHeartbeatResponse(
            error_code=0, is_caught_up=caught_up, is_fenced=reg.fenced, should_shut_down=False
        )

    async def serve_registration(
        self, req: BrokerRegistrationRequest
    ) -> BrokerRegistrationResponse:
        if not self.is_active():
            return BrokerRegistrationResponse(
                error_code=int(ErrorCode.NOT_CONTROLLER), broker_epoch=-1
            )
        if req.cluster_id and req.cluster_id != self.cluster_id:
            return BrokerRegistrationResponse(
                error_code=int(ErrorCode.INCONSISTENT_CLUSTER_ID), broker_epoch=-1
            )
        endpoints = [
            BrokerEndpoint(
                name=lst.name, host=lst.host, port=lst.port, security_protocol=lst.security_protocol
            )
            for lst in req.listeners
        ]
        try:
            reg = await self.register_locally(
                req.broker_id, endpoints, req.rack or None, req.incarnation_id,
                req.previous_broker_epoch,
            )  # fmt: skip
        except ControllerError as err:
            return BrokerRegistrationResponse(error_code=int(err.code), broker_epoch=-1)
        return BrokerRegistrationResponse(error_code=0, broker_epoch=reg.broker_epoch)

    def session_live(self, broker_id: int) -> bool:
        """Is the registered incarnation's session live (unfenced, heard from within
        ``broker.session.timeout.ms``)?"""
        reg = self.service.image.brokers.get(broker_id)
        if reg is None or reg.fenced:
            return False
        return self.liveness.session_live(broker_id, monotonic_ms())

    async def register_locally(
        self,
        broker_id: int,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None,
        incarnation_id: uuid.UUID,
        previous_broker_epoch: int,
        *,
        own: bool = False,
    ) -> BrokerRegistration:
        """On the active controller (ControllerError DUPLICATE_BROKER_REGISTRATION while
        another incarnation's session lives). ``own``: this node registers its own broker;
        the node is the one process of its id, so a previous incarnation is gone and its
        session is not waited for (the registration fences it in its own batch)."""
        # no PreviousBrokerEpoch from a broker never registered is no unclean shutdown
        known = broker_id in self.service.image.brokers
        reg = await self.service.register_broker(
            broker_id,
            endpoints,
            rack,
            incarnation_id,
            session_live=not own and self.session_live(broker_id),
            previous_broker_epoch=previous_broker_epoch,
        )
        self.liveness.registered(broker_id, reg.broker_epoch, monotonic_ms())  # a new session
        log.info(
            "registered broker %d (epoch %d, previous epoch %d%s)",
            broker_id,
            reg.broker_epoch,
            previous_broker_epoch,
            registration_note(previous_broker_epoch, known),
        )
        return reg


def registration_note(previous_broker_epoch: int, known: bool) -> str:
    """How the registration log line explains a broker's PreviousBrokerEpoch: -1 from a
    broker the image knew means it did not shut down cleanly; from one it did not, that
    this is its first registration."""
    if previous_broker_epoch >= 0:
        return ""
    return ": unclean shutdown" if known else ": first registration"
