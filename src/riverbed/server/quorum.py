"""A node's seat in the KRaft metadata quorum: the Raft-backed metadata log, the controller
loop, the broker's lifecycle requests (registration, heartbeats, controlled shutdown) and
the controller listener's request handler; its metadata writes are
`riverbed.server.write_forwarding`'s.

Every node runs it (one metadata path): with ``controller.quorum.voters`` naming several
nodes it is a voter or an observer of that quorum; a single node without voters (``make
run``, ``riverbed server start``) is the one voter of its own quorum, as Kafka's combined
standalone mode, and elects itself at once. Pieces (all from other layers, wired by
`open_quorum_metadata`):

- ``RaftDriver`` over ``<metadata.log.dir>/__cluster_metadata-0`` with
  ``KafkaRaftTransport`` to the voters' controller endpoints; ``MetadataStateMachine``
  feeds committed records and snapshots into the node's ``MetadataService``, whose log is a
  ``RaftMetadataLog``.
- `BrokerSessions` (``riverbed.server.broker_sessions``): registrations, heartbeats, probes
  and fencing on the active controller; `ControllerChannel`
  (``riverbed.server.controller_channel``): one request to another voter's controller
  listener.
- The controller listener (``controller.listener.names``) serves Vote, BeginQuorumEpoch,
  EndQuorumEpoch, DescribeQuorum, FetchSnapshot and Fetch of ``__cluster_metadata``
  (``server.raft_transport.serve_raft_request``), ApiVersions, BrokerRegistration (62),
  BrokerHeartbeat (63), UnregisterBroker (64), and the metadata writes a follower forwards
  (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
  AllocateProducerIds, AlterPartitionReassignments, ElectLeaders) and AlterPartition (a
  partition leader's ISR change) — Kafka's controller APIs; ``CONTROLLER_API_VERSIONS`` is
  what it advertises, and anything else closes the connection. DescribeQuorum and
  UnregisterBroker also reach the broker listeners, which pass them on to the quorum
  leader / active controller.

The *active controller* is the Raft leader once its epoch has started (`is_active`); it
runs metadata operations locally (the first one also writes the bootstrap records, in the
controller loop), and any other node forwards them to it
(`riverbed.server.write_forwarding`: the retries, the apply wait, their bounds).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from riverbed.metadata.bootstrap_file import read_bootstrap_records
from riverbed.metadata.broker_liveness import LivenessConfig
from riverbed.metadata.control_common import REQUEST_ITEMS_MAX
from riverbed.metadata.controller import Controller, ControllerError
from riverbed.metadata.image import BrokerEndpoint, BrokerRegistration, MetadataImage
from riverbed.metadata.leader_balance import imbalanced_partitions
from riverbed.metadata.partition_control import ELECTION_PREFERRED
from riverbed.protocol.api_versions import (
    CONTROLLER_LISTENER,
    ApiKey,
    listener_api_versions,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    Message,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from riverbed.raft.config import RaftConfig
from riverbed.raft.messages import SnapshotId
from riverbed.raft.node import NotLeaderError
from riverbed.raft.roles import Role
from riverbed.security.api_operations import CLIENT_METADATA_WRITES
from riverbed.security.client_quotas import QuotaWindows
from riverbed.server.broker_sessions import BrokerSessions
from riverbed.server.client_login import PLAINTEXT_CLIENT
from riverbed.server.controller_channel import ControllerChannel, expect_response
from riverbed.server.fault_handler import FaultHandler
from riverbed.server.forwarding import (
    Origin,
)
from riverbed.server.listener_security import client_security
from riverbed.server.metadata_quorum import MetadataStateMachine, RaftMetadataLog
from riverbed.server.metadata_service import ImageListener, MetadataService
from riverbed.server.metadata_writes import FORWARD_TIMEOUT_S
from riverbed.server.mutation_quota import ControllerMutationQuotas
from riverbed.server.raft_driver import RaftDriver
from riverbed.server.raft_transport import (
    RAFT_API_KEYS,
    KafkaRaftTransport,
    is_raft_fetch,
    serve_raft_request,
)
from riverbed.server.supervise import supervise
from riverbed.server.write_forwarding import CONTROLLER_POLL_S, WriteForwarding
from riverbed.storage.clock import Clock

if TYPE_CHECKING:
    from riverbed.server.config import ServerConfig

log = logging.getLogger(__name__)

#: The metadata writes a follower forwards (`QuorumMetadata._run_locally` runs them): its
#: clients' (UnregisterBroker aside: `QuorumMetadata.unregister_broker`) and its own
#: (producer id blocks; a partition leader's ISR changes).
FORWARDED_APIS: frozenset[int] = (CLIENT_METADATA_WRITES - {ApiKey.UNREGISTER_BROKER}) | {
    ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.ALTER_PARTITION,
}

#: What the controller listener serves (`handle_controller_request`), and so advertises.
CONTROLLER_API_VERSIONS = listener_api_versions(
    CONTROLLER_LISTENER,
    {
        ApiKey.API_VERSIONS,
        ApiKey.FETCH,  # of __cluster_metadata only
        *RAFT_API_KEYS,
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.UNREGISTER_BROKER,
        ApiKey.ENVELOPE,
        # served by the SASL gate before authentication (a SASL controller listener
        # advertises them, or librdkafka takes SASL handshakes as unsupported)
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        *FORWARDED_APIS,
    },
)


class _LoggingStateMachine(MetadataStateMachine):
    """Says when a snapshot replaces the image (at start-up, or after a FetchSnapshot)."""

    def __init__(self, service: MetadataService) -> None:
        super().__init__(service)
        #: Snapshots loaded into the image (start-up, or downloaded with FetchSnapshot).
        self.snapshots_loaded = 0

    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        super().load_snapshot(snapshot_id, records)
        self.snapshots_loaded += 1
        log.info("loaded metadata snapshot %s (%d records)", snapshot_id.file_stem(), len(records))


def raft_config(config: ServerConfig, cluster_id: str) -> RaftConfig:
    """Kafka's ``controller.quorum.*`` / snapshot keys from the node's properties; without
    ``controller.quorum.voters`` the node is its own one voter."""
    props = {k: str(v) for k, v in config.originals.items()}
    props["controller.quorum.voters"] = config.controller_quorum_voters
    raft = RaftConfig.from_properties(props, voters=frozenset({config.node_id}))
    return dataclasses.replace(raft, cluster_id=cluster_id)


def open_quorum_metadata(
    config: ServerConfig,
    cluster_id: str,
    clock: Clock,
    fault_handler: FaultHandler,
    *,
    directory_id: str = "",
) -> QuorumMetadata:
    """Build the node's metadata quorum seat from its config (nothing runs until start)."""
    raft = raft_config(config, cluster_id)
    voters: dict[int, tuple[str, int]] = dict(config.quorum_voters)
    security = PLAINTEXT_CLIENT
    if config.controller_listener_names:
        security = client_security(
            config, config.controller_listener_names[0], "sasl.mechanism.controller.protocol"
        )
    transport = KafkaRaftTransport(
        config.node_id, voters, fault_handler=fault_handler, security=security
    )
    driver = RaftDriver(
        config.node_id,
        raft,
        config.metadata_log_dir,
        transport,
        fault_handler=fault_handler,
        directory_id=directory_id,
    )
    controller = Controller(config.controller_config())
    service = MetadataService(controller, RaftMetadataLog(driver), clock, cluster_id)
    service.extra_bootstrap = read_bootstrap_records(config.metadata_log_dir)
    machine = _LoggingStateMachine(service)
    driver.register(machine)
    return QuorumMetadata(config, raft, service, driver, transport, machine)


class QuorumMetadata(WriteForwarding):
    """The node's MetadataService on the Raft quorum, with forwarding to the leader: the
    read side (``image``, ``add_listener``, ``describe_configs``) is the service's; metadata
    writes go through `WriteForwarding._write`."""

    def __init__(
        self,
        config: ServerConfig,
        raft: RaftConfig,
        service: MetadataService,
        driver: RaftDriver,
        transport: KafkaRaftTransport,
        machine: _LoggingStateMachine,
    ) -> None:
        self.node_id: int = config.node_id
        self.service = service
        #: the service's current image (`MetadataService.mirror_image_to`: an attribute
        #: set at each publish; requests read it several times each)
        self.image: MetadataImage = service.image
        service.mirror_image_to(self)
        self.voters: dict[int, tuple[str, int]] = dict(config.quorum_voters)
        self.raft = raft
        self.transport = transport
        self.driver = driver
        self.machine = machine
        self.heartbeat_interval_s = config.get_int("broker.heartbeat.interval.ms") / 1000
        session_ms = config.get_int("broker.session.timeout.ms")
        self.channel = ControllerChannel(
            self.node_id,
            self.voters,
            transport.security,
            config.get_int("controller.socket.timeout.ms") / 1000,
            lambda: self.driver.node.epoch,
        )
        #: One attempt of a registration, heartbeat or controlled shutdown: Kafka's broker
        #: lifecycle channel retries within ``broker.session.timeout.ms`` / 2 (KAFKA-14392),
        #: so a heartbeat sent to a controller that stopped answering (SIGSTOPped, cut off)
        #: gives up in time for the next one to reach the new controller before the
        #: session expires (with the channel's 30 s, the session rested on the broker's
        #: metadata fetches alone, `BrokerSessions.track`).
        self.lifecycle_attempt_s = min(self.channel.attempt_s, session_ms / 2 / 1000)
        #: Sessions and the early fence (riverbed.server.broker_sessions)
        liveness = LivenessConfig(
            session_timeout_ms=session_ms,
            early_fence=bool(config.get("riverbed.broker.early.fence.enable")),
        )
        self.sessions = BrokerSessions(
            self.node_id, raft.cluster_id, liveness, service, driver, self.is_active
        )
        self._active_epoch = -1
        self._image_changed = asyncio.Event()
        service.add_listener(lambda old, new, delta: self._image_changed.set())
        self._loop_task: asyncio.Task[None] | None = None
        self._bootstrapped_epoch = -1
        # preferred-leader balancing (riverbed.metadata.leader_balance)
        self._rebalance = bool(config.get("auto.leader.rebalance.enable"))
        self._rebalance_every_s = config.get_int("leader.imbalance.check.interval.seconds")
        self._imbalance_pct = config.get_int("leader.imbalance.per.broker.percentage")
        self._next_rebalance = time.monotonic() + self._rebalance_every_s
        #: KIP-599's buckets, used while this node is the active controller (every
        #: broker's clients count against them: forwarded writes carry their client)
        self.mutation_quotas = ControllerMutationQuotas(
            QuotaWindows(
                config.get_int("controller.quota.window.num"),
                config.get_int("controller.quota.window.size.seconds") * 1000,
            )
        )
        self._default_partitions = config.get_int("num.partitions")

    # --- the read side (the service's) ----------------------------------------------------
    @property
    def snapshots_loaded(self) -> int:
        return self.machine.snapshots_loaded

    def add_listener(self, listener: ImageListener) -> None:
        self.service.add_listener(listener)

    def describe_configs(self, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        return self.service.describe_configs(request)

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        return self.service.list_partition_reassignments(request)

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.driver.start()
        await self.service.start(bootstrap=False)
        self._loop_task = supervise(
            "controller loop", self._controller_loop(), self.driver.fault_handler
        )

    async def wait_caught_up(self, stop: asyncio.Event) -> bool:
        """Wait until this replica has applied everything the quorum had committed when it
        learned the high watermark (Kafka's broker waits for this before serving); False
        when ``stop`` is set first."""
        last_log = time.monotonic()
        while not stop.is_set():
            if self.caught_up():
                return True
            if time.monotonic() - last_log > 5:
                last_log = time.monotonic()
                log.info("waiting for the metadata quorum: %s", self.driver.node.describe())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CONTROLLER_POLL_S)
        return False

    def caught_up(self) -> bool:
        """A leader is known and this replica has applied everything it knows committed."""
        node = self.driver.node
        return bool(
            node.leader_id >= 0
            and node.high_watermark > 0
            and self.driver.applied_offset >= node.high_watermark
            and self.service.image.metadata_version
        )

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        await self.driver.close(graceful=True)
        await self.transport.close()

    # --- who is the controller -------------------------------------------------------------
    def leader_id(self) -> int:
        return self.driver.node.leader_id

    def active_controller_id(self) -> int:
        """The node clients should send controller requests to (Metadata's controller_id)."""
        leader = self.driver.node.leader_id
        return leader if leader >= 0 else self.node_id

    def is_active(self) -> bool:
        node = self.driver.node
        ls = node.leader_state
        return (
            node.role is Role.LEADER
            and ls is not None
            and (node.high_watermark > ls.epoch_start_offset)
        )

    async def _controller_loop(self) -> None:
        while True:
            await asyncio.sleep(CONTROLLER_POLL_S)
            epoch = self.driver.node.epoch
            active = self.is_active()
            if active and self._active_epoch != epoch:
                self._active_epoch = epoch
                self.sessions.activate()
            self.sessions.track(active)
            if not active:
                continue
            try:
                if self._bootstrapped_epoch != epoch:
                    if await self.service.bootstrap_if_needed():
                        log.info("node %d wrote the bootstrap metadata records", self.node_id)
                    self._bootstrapped_epoch = epoch
                await self.sessions.fence_expired()
                if self._rebalance and time.monotonic() >= self._next_rebalance:
                    self._next_rebalance = time.monotonic() + self._rebalance_every_s
                    await self._balance_leaders()
            except (NotLeaderError, TimeoutError, ControllerError):
                continue  # leadership moved, or the operation was refused: next round
            # anything else escapes to the supervisor: crash-only

    async def _balance_leaders(self) -> None:
        """Elect preferred replicas back where a broker leads too few of its own."""
        wanted = imbalanced_partitions(self.service.image, self._imbalance_pct)
        for start in range(0, len(wanted), REQUEST_ITEMS_MAX):
            by_topic: dict[str, list[int]] = {}
            for name, index in wanted[start : start + REQUEST_ITEMS_MAX]:
                by_topic.setdefault(name, []).append(index)
            EL = ElectLeadersRequest
            request = EL(
                election_type=ELECTION_PREFERRED,
                topic_partitions=[
                    EL.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items()
                ],
                timeout_ms=int(FORWARD_TIMEOUT_S * 1000),
            )
            await self.service.elect_leaders(request)
            log.info("preferred-leader balancing: elected %d partition(s) back", len(wanted))

    async def heartbeat_loop(
        self, broker_id: int, stop: asyncio.Event, want_fence: Callable[[], bool]
    ) -> None:
        """The broker side: a BrokerHeartbeat to the active controller every
        ``broker.heartbeat.interval.ms`` (served locally when this node is it), with
        WantFence while ``want_fence()`` (the broker has not applied its partitions yet)."""
        while not stop.is_set():
            await self.heartbeat(broker_id, want_fence())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.heartbeat_interval_s)

    async def heartbeat(self, broker_id: int, want_fence: bool) -> bool:
        """One BrokerHeartbeat; True when the controller answered that the broker is
        unfenced (False on any failure: the next one retries)."""
        reg = self.service.image.brokers.get(broker_id)
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=reg.broker_epoch if reg is not None else -1,
            current_metadata_offset=self.service.image.offset,
            want_fence=want_fence,
        )
        try:
            if self.is_active():
                response = await self.sessions.serve_heartbeat(request)
            else:
                leader = self.driver.node.leader_id
                if leader in (-1, self.node_id):
                    return False  # no active controller to ask yet
                answer = await self.channel.forward(
                    leader, ApiKey.BROKER_HEARTBEAT, request, self.lifecycle_attempt_s
                )
                response = expect_response(answer, BrokerHeartbeatResponse)
        except (NotLeaderError, TimeoutError, ControllerError) as exc:
            log.debug("heartbeat of broker %d failed: %r", broker_id, exc)
            return False
        return response.error_code == 0 and not response.is_fenced

    async def controlled_shutdown(self, broker_id: int) -> bool:
        """One controlled-shutdown round (a BrokerHeartbeat with WantShutDown, handled
        locally on the active controller): True once ``broker_id`` leads nothing."""
        reg = self.service.image.brokers.get(broker_id)
        epoch = reg.broker_epoch if reg is not None else -1
        leader = await self._wait_active_or_leader()
        if leader < 0:
            return await self.service.controlled_shutdown(broker_id, epoch) == 0
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=self.service.image.offset,
            want_shut_down=True,
        )
        answer = await self.channel.forward(
            leader, ApiKey.BROKER_HEARTBEAT, request, self.lifecycle_attempt_s
        )
        response = expect_response(answer, BrokerHeartbeatResponse)
        return response.error_code == 0 and bool(response.should_shut_down)

    async def register_broker(
        self,
        broker_id: int,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None = None,
        incarnation_id: uuid.UUID | None = None,
        previous_broker_epoch: int = -1,
    ) -> BrokerRegistration | None:
        """Register with the active controller (locally when this node is it);
        ControllerError (DUPLICATE_BROKER_REGISTRATION, ...) when refused: retry."""
        inc = incarnation_id or uuid.uuid4()
        leader = await self._wait_active_or_leader()
        if leader < 0:
            return await self.sessions.register_locally(
                broker_id, endpoints, rack, inc, previous_broker_epoch, own=True
            )
        request = BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=self.raft.cluster_id,
            incarnation_id=inc,
            listeners=[
                BrokerRegistrationRequest.Listener(
                    name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for e in endpoints
            ],
            rack=rack,
            previous_broker_epoch=previous_broker_epoch,
        )
        answer = await self.channel.forward(
            leader, ApiKey.BROKER_REGISTRATION, request, self.lifecycle_attempt_s
        )
        response = expect_response(answer, BrokerRegistrationResponse)
        if response.error_code == ErrorCode.NOT_CONTROLLER:
            raise NotLeaderError(leader, self.driver.node.epoch)
        if response.error_code != 0:
            code = ErrorCode(response.error_code)
            raise ControllerError(code, f"broker registration refused: {code.name}")

        def registered() -> bool:
            reg = self.service.image.brokers.get(broker_id)
            return reg is not None and reg.incarnation_id == inc

        await self._wait_until(registered)
        return self.service.image.brokers.get(broker_id)

    async def describe_quorum(self, request: Message) -> Message:
        """DescribeQuorum, answered by the Raft leader: any other node passes it on, so it
        works against every controller endpoint and, forwarded, every broker endpoint."""
        leader = self.driver.node.leader_id
        if self.driver.node.role is not Role.LEADER and leader not in (-1, self.node_id):
            with contextlib.suppress(NotLeaderError, TimeoutError):
                return await self.channel.forward(leader, ApiKey.DESCRIBE_QUORUM, request)
        return await serve_raft_request(self.driver, ApiKey.DESCRIBE_QUORUM, request)

    async def unregister_broker(
        self, request: UnregisterBrokerRequest, origin: Origin | None = None
    ) -> UnregisterBrokerResponse:
        """UnregisterBroker on the active controller (forwarded there from elsewhere, in an
        Envelope for ``origin``, the client that asked)."""
        leader = await self._wait_active_or_leader()
        if leader >= 0:
            answer = await self.channel.forward(
                leader, ApiKey.UNREGISTER_BROKER, request, origin=origin
            )
            return expect_response(answer, UnregisterBrokerResponse)
        try:
            await self.service.unregister_broker(request.broker_id)
        except ControllerError as err:
            return UnregisterBrokerResponse(error_code=int(err.code), error_message=err.message)
        log.info("unregistered broker %d", request.broker_id)
        return UnregisterBrokerResponse(error_code=0)

    # --- the controller listener (server side) ---------------------------------------------
    async def handle_controller_request(
        self, api_key: int, body: Message, origin: Origin | None = None
    ) -> Message | None:
        """Answer one request that arrived on a controller listener for ``origin`` (its
        sender, or the client of a broker's Envelope it came in), already authorized: a
        CreateTopics, DeleteTopics or CreatePartitions counts against the mutation quota
        of that principal, as Kafka's ControllerApis applies ``newQuotaFor(request)`` to
        whatever principal the request acts for."""
        if api_key == ApiKey.DESCRIBE_QUORUM:
            return await self.describe_quorum(body)
        if api_key in RAFT_API_KEYS or is_raft_fetch(api_key, body):
            return await serve_raft_request(self.driver, api_key, body)
        if isinstance(body, BrokerRegistrationRequest):
            return await self.sessions.serve_registration(body)
        if isinstance(body, BrokerHeartbeatRequest):
            return await self.sessions.serve_heartbeat(body)
        if isinstance(body, UnregisterBrokerRequest):
            if not self.is_active():
                return UnregisterBrokerResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
            return await self.unregister_broker(body)
        if api_key in FORWARDED_APIS:
            if not self.is_active():
                raise NotLeaderError(self.driver.node.leader_id, self.driver.node.epoch)
            return await self._run_for(body, origin)
        return None
