"""A node's seat in the KRaft metadata quorum: the Raft-backed metadata log, the controller
listener's request handler, and forwarding of metadata writes to the active controller.

Every node runs it (one metadata path): with ``controller.quorum.voters`` naming several
nodes it is a voter or an observer of that quorum; a single node without voters (``make
run``, ``riverbed server start``) is the one voter of its own quorum, as Kafka's combined
standalone mode, and elects itself at once. Pieces (all from other layers, wired by
`open_quorum_metadata`):

- ``RaftDriver`` over ``<metadata.log.dir>/__cluster_metadata-0`` with
  ``KafkaRaftTransport`` to the voters' controller endpoints; ``MetadataStateMachine``
  feeds committed records and snapshots into the node's ``MetadataService``, whose log is a
  ``RaftMetadataLog``.
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

The *active controller* is the Raft leader once its epoch has started: the high watermark
has passed the epoch's start offset (the LeaderChange record), so every record of earlier
epochs is committed and applied and the image it computes against is current. Only then
does it run a metadata operation locally (the first active leader also writes the bootstrap
records). Any other node forwards the operation's request to the leader's controller
endpoint (one short-lived connection per forwarded request; wire format: Kafka framing at
the highest version riverbed speaks; a client's CreateTopics, DeleteTopics and
CreatePartitions go at the client's version in an Envelope with its principal, for the
active controller's mutation quota: `riverbed.server.forwarding`) and then waits, bounded
by ``FORWARD_APPLY_WAIT_S``, until its own replica of the image shows the result, so a
client that created a topic through a follower sees it there next. A forward the
controller did not answer, or answered NOT_CONTROLLER, goes again to the next active
controller (Kafka's forwarding channel; `QuorumMetadata._write`), each attempt bounded by
``controller.socket.timeout.ms``; only when none answered by `FORWARD_RETRY_TIMEOUT_S` from
the first send does the operation fail with REQUEST_TIMED_OUT (Kafka's ForwardingManager:
``onTimeout`` answers ``getErrorResponse(new TimeoutException())``; clients retry it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from riverbed.metadata.bootstrap_file import read_bootstrap_records
from riverbed.metadata.broker_liveness import (
    PROBE_TIMEOUT_MS,
    BrokerLiveness,
    LivenessConfig,
    Probe,
)
from riverbed.metadata.control_common import REQUEST_ITEMS_MAX
from riverbed.metadata.controller import Controller, ControllerError
from riverbed.metadata.image import BrokerEndpoint, BrokerRegistration, MetadataImage
from riverbed.metadata.leader_balance import imbalanced_partitions
from riverbed.metadata.partition_control import ELECTION_PREFERRED
from riverbed.protocol.api_versions import (
    CONTROLLER_LISTENER,
    SUPPORTED_VERSIONS,
    ApiKey,
    listener_api_versions,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EnvelopeRequest,
    EnvelopeResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    Message,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from riverbed.raft.config import RaftConfig
from riverbed.raft.messages import SnapshotId
from riverbed.raft.node import NotLeaderError
from riverbed.raft.roles import Role
from riverbed.security.acl import StandardAcl
from riverbed.security.client_quotas import QuotaWindows
from riverbed.server.client_login import PLAINTEXT_CLIENT
from riverbed.server.fault_handler import FaultHandler
from riverbed.server.forwarding import (
    ENVELOPED_APIS,
    EnvelopeError,
    Origin,
    serve_envelope,
    unwrap_response,
    wrap_request,
)
from riverbed.server.inter_broker import connect
from riverbed.server.listener_security import client_security
from riverbed.server.metadata_quorum import MetadataStateMachine, RaftMetadataLog
from riverbed.server.metadata_service import ImageListener, MetadataService
from riverbed.server.metrics.traffic import error_codes
from riverbed.server.mutation_quota import ControllerMutationQuotas, Run, run_with_quota
from riverbed.server.raft_driver import RaftDriver, monotonic_ms
from riverbed.server.raft_transport import (
    RAFT_API_KEYS,
    KafkaRaftTransport,
    is_raft_fetch,
    serve_raft_request,
)
from riverbed.server.supervise import supervise, supervise_background
from riverbed.storage.clock import Clock

if TYPE_CHECKING:
    from riverbed.server.config import ServerConfig

log = logging.getLogger(__name__)

#: Seconds a forwarded request may take (connect + the leader's commit) in one attempt:
#: ``controller.socket.timeout.ms``'s default (the config sets it per node).
FORWARD_TIMEOUT_S = 30.0
#: Seconds a metadata write is sent again (to each next active controller) before it fails
#: with REQUEST_TIMED_OUT: Kafka's forwarding channel's ``retryTimeoutMs`` (60000, fixed in
#: BrokerServer; not a config in Kafka either).
FORWARD_RETRY_TIMEOUT_S = 60.0
#: Largest response frame accepted from the active controller.
FORWARD_RESPONSE_BYTES_MAX = 16 * 1024 * 1024
#: Seconds a follower waits for its replica to show a forwarded operation's result.
FORWARD_APPLY_WAIT_S = 10.0
#: Seconds an operation on a just-elected leader waits for its epoch to start.
ACTIVATION_WAIT_S = 5.0
#: How often the controller loop looks at the Raft role (bootstrap on activation).
CONTROLLER_POLL_S = 0.05
_SIZE = struct.Struct(">i")
ResponseT = TypeVar("ResponseT", bound=Message)


def _not_controller(response: Message) -> bool:
    """Did the controller refuse ``response``'s request as not (or no longer) active?
    (Kafka's channel looks for NOT_CONTROLLER in the response's ``errorCounts``.)"""
    return ErrorCode.NOT_CONTROLLER.name in error_codes(response)


def _forward_timed_out(api_key: int) -> ControllerError:
    """A metadata write no active controller answered within `FORWARD_RETRY_TIMEOUT_S`:
    REQUEST_TIMED_OUT (retriable), as Kafka's ForwardingManager answers one its channel
    timed out (not NOT_CONTROLLER: this node does not know the write was not done)."""
    return ControllerError(
        ErrorCode.REQUEST_TIMED_OUT,
        f"no active controller answered api_key={api_key} within {FORWARD_RETRY_TIMEOUT_S} s",
    )


def _expect(response: Message, response_type: type[ResponseT]) -> ResponseT:
    """``response`` as the type its request promises (a mismatch is a bug: it halts)."""
    if not isinstance(response, response_type):
        raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
    return response


#: The metadata writes a follower forwards (`QuorumMetadata._run_locally` runs them).
FORWARDED_APIS: frozenset[int] = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ALLOCATE_PRODUCER_IDS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.UPDATE_FEATURES,
        # sent by partition leaders (ISR changes; replication), served on controller listeners
        ApiKey.ALTER_PARTITION,
    }
)

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


class QuorumMetadata:
    """The node's MetadataService on the Raft quorum, with forwarding to the leader: the
    read side (``image``, ``add_listener``, ``describe_configs``) is the service's; metadata
    writes go through `_write`."""

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
        self.voters: dict[int, tuple[str, int]] = dict(config.quorum_voters)
        self.raft = raft
        self.transport = transport
        self.driver = driver
        self.machine = machine
        self.heartbeat_interval_s = config.get_int("broker.heartbeat.interval.ms") / 1000
        #: one forwarding attempt's bound (Kafka's NodeToControllerChannelManager: the
        #: request timeout is min(controller.socket.timeout.ms, retryTimeoutMs))
        self.forward_attempt_s = config.get_int("controller.socket.timeout.ms") / 1000
        #: Sessions and the early fence (riverbed.metadata.broker_liveness; in memory only,
        #: as in Kafka: a new active controller starts every session afresh).
        self.liveness = BrokerLiveness(
            LivenessConfig(
                session_timeout_ms=config.get_int("broker.session.timeout.ms"),
                early_fence=bool(config.get("riverbed.broker.early.fence.enable")),
            )
        )
        #: (leader id, monotonic ms) of the last contact with the quorum leader we followed
        self._leader_contact: tuple[int, int] = (-1, 0)
        self._probes: set[asyncio.Task[None]] = set()
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
    def image(self) -> MetadataImage:
        return self.service.image

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
                leader, contact_ms = self._leader_contact
                self.liveness.activate(monotonic_ms(), {leader: contact_ms} if leader >= 0 else {})
            self._track_liveness(active)
            if not active:
                continue
            try:
                if self._bootstrapped_epoch != epoch:
                    if await self.service.bootstrap_if_needed():
                        log.info("node %d wrote the bootstrap metadata records", self.node_id)
                    self._bootstrapped_epoch = epoch
                await self._fence_expired()
                if self._rebalance and time.monotonic() >= self._next_rebalance:
                    self._next_rebalance = time.monotonic() + self._rebalance_every_s
                    await self._balance_leaders()
            except (NotLeaderError, TimeoutError, ControllerError):
                continue  # leadership moved, or the operation was refused: next round
            # anything else escapes to the supervisor: crash-only

    def _track_liveness(self, active: bool) -> None:
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

    async def _fence_expired(self) -> None:
        """Fence every unfenced broker whose session (``broker.session.timeout.ms``) expired,
        or whose process is gone (`BrokerLiveness.to_fence`): its partitions lose it as
        leader, so clients stop being sent to a dead node. This node's own broker
        heartbeats too (locally, `heartbeat_loop`): a restarted node must not keep its
        previous incarnation's session alive."""
        brokers = self.service.image.brokers
        unfenced = [b for b, reg in sorted(brokers.items()) if not reg.fenced]
        for broker_id, why in self.liveness.to_fence(unfenced, monotonic_ms()):
            log.warning("fencing broker %d: %s", broker_id, why)
            await self.service.fence_broker(broker_id)
            log.info("fenced broker %d", broker_id)

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
                response = await self._serve_heartbeat(request)
            else:
                leader = self.driver.node.leader_id
                if leader in (-1, self.node_id):
                    return False  # no active controller to ask yet
                answer = await self.forward(leader, ApiKey.BROKER_HEARTBEAT, request)
                response = _expect(answer, BrokerHeartbeatResponse)
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
        answer = await self.forward(leader, ApiKey.BROKER_HEARTBEAT, request)
        response = _expect(answer, BrokerHeartbeatResponse)
        return response.error_code == 0 and bool(response.should_shut_down)

    async def _wait_active_or_leader(self, deadline: float | None = None) -> int:
        """-1 when this node is the active controller, else the leader to forward to;
        NotLeaderError when there is neither by ``deadline`` (monotonic; default
        `ACTIVATION_WAIT_S` from now)."""
        if deadline is None:
            deadline = time.monotonic() + ACTIVATION_WAIT_S
        while True:
            if self.is_active():
                return -1
            leader = self.driver.node.leader_id
            if leader >= 0 and leader != self.node_id:
                return leader
            if time.monotonic() >= deadline:
                raise NotLeaderError(leader, self.driver.node.epoch)
            await asyncio.sleep(CONTROLLER_POLL_S)

    # --- metadata writes -------------------------------------------------------------------
    async def _write(
        self,
        api_key: int,
        request: Message,
        response_type: type[ResponseT],
        settled: Callable[[ResponseT], bool] | None = None,
        origin: Origin | None = None,
    ) -> ResponseT:
        """Run locally on the active controller, else forward; ``settled(response)`` says
        when this node's replica shows a forwarded result; ``origin``: the client the
        write acts for (its mutation quota; forwarded in an Envelope).

        As Kafka's broker-to-controller channel (``NodeToControllerRequestThread``): a
        request the controller did not answer (connection refused, reset or closed
        mid-request, timed out) or answered NOT_CONTROLLER goes again, to whichever
        controller is active next, until `FORWARD_RETRY_TIMEOUT_S` from the first send,
        then fails with REQUEST_TIMED_OUT (`_forward_timed_out`), as Kafka's
        ForwardingManager answers a request its channel timed out. One
        that the old controller applied before it died gets the natural answer from the
        new one (CreateTopics TOPIC_ALREADY_EXISTS, DeleteTopics UNKNOWN_TOPIC_OR_PARTITION,
        CreatePartitions INVALID_PARTITIONS, ElectLeaders ELECTION_NOT_NEEDED, DeleteAcls
        no matching binding; the config, quota, SCRAM upsert, CreateAcls and feature writes
        set a state and apply again unchanged; AllocateProducerIds takes a fresh block):
        never a success for something not done, and no NOT_CONTROLLER to clients that do
        not retry it (librdkafka's DeleteTopics hands it back)."""
        deadline = time.monotonic() + FORWARD_RETRY_TIMEOUT_S
        while True:
            try:
                # waits out an election (the whole deadline, not `ACTIVATION_WAIT_S`): a
                # loaded quorum can take longer than that to elect after its leader died
                leader = await self._wait_active_or_leader(deadline)
            except NotLeaderError:
                raise _forward_timed_out(api_key) from None
            try:
                if leader < 0:
                    # NotLeaderError here: leadership moved while the operation committed
                    return _expect(await self._run_for(request, origin), response_type)
                attempt_s = min(self.forward_attempt_s, deadline - time.monotonic())
                attempt_s = max(attempt_s, CONTROLLER_POLL_S)
                answer = await self.forward(leader, api_key, request, attempt_s, origin)
                response = _expect(answer, response_type)
                if not _not_controller(response):
                    break
            except NotLeaderError as exc:  # not answered, or the controller resigned mid-way
                log.debug("write api_key=%s via %d: %r; sending again", api_key, leader, exc)
            if time.monotonic() >= deadline:
                raise _forward_timed_out(api_key)
            await asyncio.sleep(CONTROLLER_POLL_S)  # Kafka's reconnect back-off (50 ms)
        if settled is not None:
            await self._wait_until(lambda: settled(response))
        return response

    async def _wait_until(self, settled: Callable[[], bool]) -> None:
        deadline = time.monotonic() + FORWARD_APPLY_WAIT_S
        while True:
            # cleared before the check: an image published after it wakes the wait below
            self._image_changed.clear()
            if settled() or time.monotonic() >= deadline:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._image_changed.wait(), 0.2)

    async def create_topics(
        self, request: CreateTopicsRequest, origin: Origin | None = None
    ) -> CreateTopicsResponse:
        def settled(response: CreateTopicsResponse) -> bool:
            image = self.service.image
            created = [t.name for t in response.topics if t.error_code == 0]
            return all(image.topic(n) is not None for n in created)

        return await self._write(
            ApiKey.CREATE_TOPICS,
            request,
            CreateTopicsResponse,
            None if request.validate_only else settled,
            origin,
        )

    async def auto_create_topic(
        self, name: str, origin: Origin | None = None
    ) -> CreateTopicsResponse:
        """Create ``name`` with the defaults (Metadata's auto-creation) for ``origin``, the
        client whose Metadata asked: under its mutation quota, as Kafka's KRaft broker
        forwards the creation in an Envelope with that client's principal and client id
        at the controller's latest CreateTopics version (strict: a topic over the quota is
        refused THROTTLING_QUOTA_EXCEEDED, and the client, not muted, asks again); a
        forwarded one returns once this replica shows the topic, or after
        `FORWARD_APPLY_WAIT_S`."""
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=-1, replication_factor=-1
                )
            ],
            timeout_ms=int(FORWARD_TIMEOUT_S * 1000),
        )
        if self.is_active():
            return _expect(
                await self._run_for(
                    request, origin, lambda _: self.service.auto_create_topic(name)
                ),
                CreateTopicsResponse,
            )
        response = await self.create_topics(request, origin)
        if any(t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS for t in response.topics):
            # another node's Metadata created it a moment ago: this replica may not have
            # applied it yet, and its Metadata answer must wait for it as for one it made
            await self._wait_until(lambda: self.service.image.topic(name) is not None)
        return response

    async def delete_topics(
        self, request: DeleteTopicsRequest, origin: Origin | None = None
    ) -> DeleteTopicsResponse:
        def settled(response: DeleteTopicsResponse) -> bool:
            image = self.service.image
            deleted = [r.name for r in response.responses if r.error_code == 0 and r.name]
            return all(image.topic(n) is None for n in deleted)

        if origin is None and request.topic_names and not request.topics:
            # forwarded at v6+, where the names moved from TopicNames to Topics[].Name (a
            # client's request goes at the client's version)
            request = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in request.topic_names],
                topic_names=[],
                timeout_ms=request.timeout_ms,
            )
        R = DeleteTopicsResponse
        return await self._write(ApiKey.DELETE_TOPICS, request, R, settled, origin)

    async def create_partitions(
        self, request: CreatePartitionsRequest, origin: Origin | None = None
    ) -> CreatePartitionsResponse:
        R = CreatePartitionsResponse
        if request.validate_only:
            return await self._write(ApiKey.CREATE_PARTITIONS, request, R, None, origin)
        counts = {t.name: t.count for t in request.topics}

        def settled(response: CreatePartitionsResponse) -> bool:
            image = self.service.image
            for result in response.results:
                topic = image.topic(result.name) if result.error_code == 0 else None
                if result.error_code == 0 and (
                    topic is None or len(topic.partitions) < counts.get(result.name, 0)
                ):
                    return False
            return True

        return await self._write(ApiKey.CREATE_PARTITIONS, request, R, settled, origin)

    async def alter_configs(self, request: AlterConfigsRequest) -> AlterConfigsResponse:
        return await self._write(ApiKey.ALTER_CONFIGS, request, AlterConfigsResponse)

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        R = IncrementalAlterConfigsResponse
        return await self._write(ApiKey.INCREMENTAL_ALTER_CONFIGS, request, R)

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        """Through the controller's reassignment logic; a forwarded answer returns once this
        node's image shows every accepted target (or cancellation)."""
        targets = {
            (t.name, p.partition_index): p.replicas for t in request.topics for p in t.partitions
        }

        def settled(response: AlterPartitionReassignmentsResponse) -> bool:
            image = self.service.image
            for t in response.responses:
                topic = image.topic(t.name)
                for p in t.partitions:
                    part = topic.partitions.get(p.partition_index) if topic else None
                    target = targets.get((t.name, p.partition_index))
                    if p.error_code != 0 or part is None:
                        continue
                    if target is None:
                        if part.adding_replicas or part.removing_replicas:
                            return False
                    elif tuple(part.replicas[: len(target)]) != tuple(target):
                        return False
            return True

        R = AlterPartitionReassignmentsResponse
        return await self._write(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request, R, settled)

    async def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        """A block of producer ids for this broker (AllocateProducerIds, forwarded)."""
        R = AllocateProducerIdsResponse
        return await self._write(ApiKey.ALLOCATE_PRODUCER_IDS, request, R)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        """ElectLeaders on the active controller; a forwarded one returns once this node's
        image shows every election it reports as done (a new leader epoch)."""
        image = self.service.image
        epochs = {
            (topic.name, index): part.leader_epoch
            for topic in image.topics_by_id.values()
            for index, part in topic.partitions.items()
        }

        def settled(response: ElectLeadersResponse) -> bool:
            now = self.service.image
            for result in response.replica_election_results:
                for p in result.partition_result:
                    part = now.partition(result.topic, p.partition_id)
                    before = epochs.get((result.topic, p.partition_id), -1)
                    if p.error_code == 0 and (part is None or part.leader_epoch <= before):
                        return False
            return True

        return await self._write(ApiKey.ELECT_LEADERS, request, ElectLeadersResponse, settled)

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        """SCRAM credentials changed on the active controller; a forwarded change returns
        once this node's image shows it (a client authenticates here next)."""
        from riverbed.metadata.scram_control import upsertion_record

        def settled(response: AlterUserScramCredentialsResponse) -> bool:
            ok = {r.user for r in response.results if r.error_code == 0}
            creds = self.service.image.scram_credentials
            for item in request.upsertions:
                rec = upsertion_record(item)
                have = creds.get((item.name, item.mechanism))
                if item.name in ok and (have is None or have.stored_key != rec.stored_key):
                    return False
            return all(
                (d.name, d.mechanism) not in creds for d in request.deletions if d.name in ok
            )

        R = AlterUserScramCredentialsResponse
        return await self._write(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request, R, settled)

    async def alter_client_quotas(
        self, request: AlterClientQuotasRequest
    ) -> AlterClientQuotasResponse:
        """Quotas changed on the active controller; a forwarded change returns once this
        node's image shows every accepted entry (the next request here is measured by it)."""
        R = AlterClientQuotasResponse
        if request.validate_only:
            return await self._write(ApiKey.ALTER_CLIENT_QUOTAS, request, R)

        def settled(response: AlterClientQuotasResponse) -> bool:
            quotas = self.service.image.client_quotas
            for entry, result in zip(request.entries, response.entries, strict=False):
                if result.error_code != 0:
                    continue
                entity = tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity))
                have = quotas.get(entity, {})
                for op in entry.ops:
                    if have.get(op.key) != (None if op.remove else op.value):
                        return False
            return True

        return await self._write(ApiKey.ALTER_CLIENT_QUOTAS, request, R, settled)

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsResponse:
        """New ACLs on the active controller; a forwarded request returns once this node's
        image holds every ACL created (the next request here is authorized with them)."""
        from riverbed.metadata.acl_control import acl_of_creation

        def settled(response: CreateAclsResponse) -> bool:
            have = set(self.service.image.acls.values())
            return all(
                acl_of_creation(c) in have
                for c, r in zip(request.creations, response.results, strict=False)
                if r.error_code == 0
            )

        return await self._write(ApiKey.CREATE_ACLS, request, CreateAclsResponse, settled)

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsResponse:
        """ACLs deleted on the active controller; a forwarded request returns once this
        node's image no longer holds the ACLs the filters matched."""

        def settled(response: DeleteAclsResponse) -> bool:
            have = set(self.service.image.acls.values())
            return not any(
                _matched_acl(m) in have for r in response.filter_results for m in r.matching_acls
            )

        return await self._write(ApiKey.DELETE_ACLS, request, DeleteAclsResponse, settled)

    async def update_features(self, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
        """Finalized feature levels on the active controller; a forwarded answer returns
        once this node's image has the levels it accepted."""
        wanted = {u.feature: u.max_version_level for u in request.feature_updates}

        def settled(response: UpdateFeaturesResponse) -> bool:
            if response.error_code or request.validate_only:
                return True
            have = self.service.image.features
            return all(have.get(f, 0) == level for f, level in wanted.items())

        R = UpdateFeaturesResponse
        return await self._write(ApiKey.UPDATE_FEATURES, request, R, settled)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """A partition leader's ISR change (Kafka's AlterPartition), on the active
        controller; the caller learns the outcome from the response (its epochs)."""
        return await self._write(ApiKey.ALTER_PARTITION, request, AlterPartitionResponse)

    async def _run_for(
        self, request: Message, origin: Origin | None, run: Run | None = None
    ) -> Message:
        """``run`` (`_run_locally` by default), under the mutation quota of ``origin``
        (Kafka's ControllerApis: the active controller enforces it, for every broker's
        clients at once)."""
        run = run if run is not None else self._run_locally
        image = self.service.image
        quota = None
        if origin is not None:
            who = (origin.principal.name, origin.client_id, origin.api_version)
            quota = self.mutation_quotas.quota_for(image, request, *who)
        if quota is None:
            return await run(request)
        assert isinstance(
            request, CreateTopicsRequest | DeleteTopicsRequest | CreatePartitionsRequest
        )
        return await run_with_quota(
            quota, image, request, run, self._default_partitions, monotonic_ms
        )

    async def _run_locally(self, request: Message) -> Message:
        """One of `FORWARDED_APIS` on this node, the active controller."""
        s = self.service
        match request:
            case CreateTopicsRequest():
                return await s.create_topics(request)
            case DeleteTopicsRequest():
                return await s.delete_topics(request)
            case CreatePartitionsRequest():
                return await s.create_partitions(request)
            case AlterConfigsRequest():
                return await s.alter_configs(request)
            case IncrementalAlterConfigsRequest():
                return await s.incremental_alter_configs(request)
            case AllocateProducerIdsRequest():
                return await s.allocate_producer_ids(request)
            case AlterPartitionReassignmentsRequest():
                return await s.alter_partition_reassignments(request)
            case ElectLeadersRequest():
                return await s.elect_leaders(request)
            case AlterPartitionRequest():
                return await s.alter_partition(request)
            case AlterUserScramCredentialsRequest():
                return await s.alter_user_scram_credentials(request)
            case AlterClientQuotasRequest():
                return await s.alter_client_quotas(request)
            case CreateAclsRequest():
                return await s.create_acls(request)
            case DeleteAclsRequest():
                return await s.delete_acls(request)
            case UpdateFeaturesRequest():
                return await s.update_features(request)
        raise TypeError(f"{type(request).__name__} is not a forwarded metadata write")

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
            return await self._register_locally(
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
        answer = await self.forward(leader, ApiKey.BROKER_REGISTRATION, request)
        response = _expect(answer, BrokerRegistrationResponse)
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
                return await self.forward(leader, ApiKey.DESCRIBE_QUORUM, request)
        return await serve_raft_request(self.driver, ApiKey.DESCRIBE_QUORUM, request)

    async def unregister_broker(self, request: UnregisterBrokerRequest) -> UnregisterBrokerResponse:
        """UnregisterBroker on the active controller (forwarded there from elsewhere)."""
        leader = await self._wait_active_or_leader()
        if leader >= 0:
            answer = await self.forward(leader, ApiKey.UNREGISTER_BROKER, request)
            return _expect(answer, UnregisterBrokerResponse)
        try:
            await self.service.unregister_broker(request.broker_id)
        except ControllerError as err:
            return UnregisterBrokerResponse(error_code=int(err.code), error_message=err.message)
        log.info("unregistered broker %d", request.broker_id)
        return UnregisterBrokerResponse(error_code=0)

    # --- the controller channel (client side) ----------------------------------------------
    async def forward(
        self,
        leader: int,
        api_key: int,
        request: Message,
        timeout_s: float | None = None,
        origin: Origin | None = None,
    ) -> Message:
        """Send ``request`` to ``leader``'s controller listener; its decoded response.
        NotLeaderError when it is not answered within ``timeout_s`` (refused, reset, closed
        or silent: the caller retries, or its client does). A client's CreateTopics /
        DeleteTopics / CreatePartitions (``origin`` given) goes in an Envelope
        (`riverbed.server.forwarding`); an envelope the controller refused is
        UNKNOWN_SERVER_ERROR to the client, as Kafka's ForwardingManager answers.
        ``timeout_s`` defaults to ``controller.socket.timeout.ms``."""
        if timeout_s is None:
            timeout_s = self.forward_attempt_s
        if origin is None or api_key not in ENVELOPED_APIS:
            return await self._exchange(leader, api_key, request, timeout_s)
        envelope = wrap_request(api_key, request, origin)
        answer = await self._exchange(leader, ApiKey.ENVELOPE, envelope, timeout_s)
        try:
            return unwrap_response(api_key, origin, _expect(answer, EnvelopeResponse))
        except EnvelopeError as exc:
            log.warning("forwarded api_key=%s: %s", api_key, exc)
            raise ControllerError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from None

    async def _exchange(
        self, leader: int, api_key: int, request: Message, timeout_s: float
    ) -> Message:
        host, port = self.voters[leader]
        version = SUPPORTED_VERSIONS[ApiKey(api_key)][1]
        header = RequestHeader(api_key, version, 1, f"riverbed-forward-{self.node_id}")

        async def exchange() -> Message:
            reader, writer = await connect(
                host, port, self.transport.security, header.client_id or ""
            )
            try:
                writer.write(encode_request(header, request))
                await writer.drain()
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 4 <= size <= FORWARD_RESPONSE_BYTES_MAX:
                    raise ConnectionError(f"controller response frame of {size} bytes")
                return decode_response(header, await reader.readexactly(size))
            finally:
                writer.close()

        try:
            return await asyncio.wait_for(exchange(), timeout_s)
        except (OSError, asyncio.IncompleteReadError) as exc:  # TimeoutError is an OSError
            raise NotLeaderError(leader, self.driver.node.epoch) from exc

    # --- the controller listener (server side) ---------------------------------------------
    async def handle_controller_request(
        self, api_key: int, body: Message, origin: Origin | None = None
    ) -> Message | None:
        """Answer one request that arrived on a controller listener from ``origin``: a
        CreateTopics, DeleteTopics or CreatePartitions sent there directly (an admin
        client bootstrapped from the controllers, a broker's own creation of an internal
        topic) counts against the mutation quota of its sender, as Kafka's ControllerApis
        applies ``newQuotaFor(request)`` to whatever principal sent it."""
        if api_key == ApiKey.DESCRIBE_QUORUM:
            return await self.describe_quorum(body)
        if api_key in RAFT_API_KEYS or is_raft_fetch(api_key, body):
            return await serve_raft_request(self.driver, api_key, body)
        if isinstance(body, BrokerRegistrationRequest):
            return await self._serve_registration(body)
        if isinstance(body, BrokerHeartbeatRequest):
            return await self._serve_heartbeat(body)
        if isinstance(body, EnvelopeRequest):
            return await serve_envelope(body, self._serve_enveloped)
        if isinstance(body, UnregisterBrokerRequest):
            if not self.is_active():
                return UnregisterBrokerResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
            return await self.unregister_broker(body)
        if api_key in FORWARDED_APIS:
            if not self.is_active():
                raise NotLeaderError(self.driver.node.leader_id, self.driver.node.epoch)
            return await self._run_for(body, origin)
        return None

    async def _serve_enveloped(self, body: Message, origin: Origin) -> Message:
        if not self.is_active():
            raise NotLeaderError(self.driver.node.leader_id, self.driver.node.epoch)
        return await self._run_for(body, origin)

    async def _serve_heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
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

    async def _serve_registration(
        self, req: BrokerRegistrationRequest
    ) -> BrokerRegistrationResponse:
        if not self.is_active():
            return BrokerRegistrationResponse(
                error_code=int(ErrorCode.NOT_CONTROLLER), broker_epoch=-1
            )
        if req.cluster_id and req.cluster_id != self.raft.cluster_id:
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
            reg = await self._register_locally(
                req.broker_id, endpoints, req.rack or None, req.incarnation_id,
                req.previous_broker_epoch,
            )  # fmt: skip
        except ControllerError as err:
            return BrokerRegistrationResponse(error_code=int(err.code), broker_epoch=-1)
        return BrokerRegistrationResponse(error_code=0, broker_epoch=reg.broker_epoch)

    def _session_live(self, broker_id: int) -> bool:
        """Is the registered incarnation's session live (unfenced, heard from within
        ``broker.session.timeout.ms``)?"""
        reg = self.service.image.brokers.get(broker_id)
        if reg is None or reg.fenced:
            return False
        return self.liveness.session_live(broker_id, monotonic_ms())

    async def _register_locally(
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
        reg = await self.service.register_broker(
            broker_id,
            endpoints,
            rack,
            incarnation_id,
            session_live=not own and self._session_live(broker_id),
            previous_broker_epoch=previous_broker_epoch,
        )
        self.liveness.registered(broker_id, reg.broker_epoch, monotonic_ms())  # a new session
        log.info(
            "registered broker %d (epoch %d, previous epoch %d%s)",
            broker_id,
            reg.broker_epoch,
            previous_broker_epoch,
            "" if previous_broker_epoch >= 0 else ": unclean shutdown",
        )
        return reg


def _matched_acl(m: DeleteAclsResponse.DeleteAclsMatchingAcl) -> StandardAcl:
    return StandardAcl(
        m.resource_type,
        m.resource_name,
        m.pattern_type,
        m.principal,
        m.host,
        m.operation,
        m.permission_type,
    )
