"""The broker's request dispatch table: api key -> handler, and the state handlers share.

`Broker.handle` is the network layer's `RequestHandler`: it looks the api key up in
`HANDLERS` and awaits the handler with the broker, the request context and the decoded
body. A broker listener serves and advertises (ApiVersions) exactly
``BROKER_API_VERSIONS``: the handled APIs whose Kafka request spec lists the ``broker``
listener. Any other api key riverbed decodes (the Raft RPCs, BrokerRegistration, ...)
closes the connection, as Kafka does for an API a listener does not expose.

A handler that raises (a bug, or an unexpected error below it) does not cost the client
its connection: as in Kafka's ``KafkaApis.handleError``, the exception is logged and the
request is answered with the error response (`error_response`: UNKNOWN_SERVER_ERROR, or
the Kafka code a typed error carries, in every error field). A produce with acks=0 has
no response to carry the error, so that connection is closed, as Kafka does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from riverbed.metadata.recently_fenced import RecentlyFenced
from riverbed.protocol.api_versions import BROKER_LISTENER, ApiKey, listener_api_versions
from riverbed.protocol.headers import response_body_version
from riverbed.protocol.messages import (
    FetchResponse,
    Message,
    ProduceRequest,
)
from riverbed.security.client_quotas import QuotaWindows
from riverbed.server.broker import (
    acls,
    admin,
    client_quota_admin,
    cluster_info,
    consumer_groups,
    describe_topics,
    fetch,
    forwarded,
    groups,
    offsets,
    placeholders,
    produce,
    producers,
    request_throttle,
    scram_admin,
    transactions,
    txn_markers,
)
from riverbed.server.broker.authorization import (
    ALLOWED,
    Verdict,
    authorizer_config,
    broker_authorizer,
    denied_response,
    split,
    with_refused,
)
from riverbed.server.broker.auto_create import AutoTopicCreations
from riverbed.server.broker.error_response import error_code_of, error_response
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.broker.quota_enforcement import BrokerQuotas, timed
from riverbed.server.broker.txn_verification import TxnVerifier
from riverbed.server.broker.versioning import fit_to_version
from riverbed.server.clock import SystemClock
from riverbed.server.coordinator import GroupCoordinator
from riverbed.server.dynamic_listeners import DynamicListeners
from riverbed.server.network import CloseConnection, RequestContext, Response, SplicedResponse
from riverbed.server.purgatory import Purgatory
from riverbed.server.request_permits import park_current_request
from riverbed.server.txn_coordinator import TransactionCoordinatorShell
from riverbed.storage.clock import Clock

if TYPE_CHECKING:
    from riverbed.server.config import ServerConfig
    from riverbed.server.fault_handler import FaultHandler
    from riverbed.server.metrics.traffic import TrafficStats
    from riverbed.server.quorum import QuorumMetadata
    from riverbed.server.remote_log import RemoteLogManager

log = logging.getLogger(__name__)

#: APIs whose handlers build version-exact responses (hot path: no fitting walk).
_VERSION_EXACT = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})
#: A request handler: (broker, context, the decoded request of its api key) -> response.
#: The request parameter is each handler's own request class, hence the ``...``.
Handler = Callable[..., Awaitable["Response | None"]]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
    ApiKey.METADATA: cluster_info.handle_metadata,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.handle_offset_for_leader_epoch,
    ApiKey.API_VERSIONS: cluster_info.handle_api_versions,
    ApiKey.DESCRIBE_CLUSTER: cluster_info.handle_describe_cluster,
    ApiKey.CREATE_TOPICS: admin.handle_create_topics,
    ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: admin.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.handle_incremental_alter_configs,
    ApiKey.DELETE_RECORDS: offsets.handle_delete_records,
    ApiKey.DESCRIBE_LOG_DIRS: admin.handle_describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: admin.handle_alter_replica_log_dirs,
    ApiKey.INIT_PRODUCER_ID: producers.handle_init_producer_id,
    ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
    ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
    ApiKey.TXN_OFFSET_COMMIT: groups.handle_txn_offset_commit,
    ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.handle_consumer_group_describe,
    ApiKey.SASL_HANDSHAKE: placeholders.sasl_outside_the_gate,
    ApiKey.SASL_AUTHENTICATE: placeholders.sasl_outside_the_gate,
    ApiKey.DESCRIBE_PRODUCERS: producers.handle_describe_producers,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    ApiKey.ELECT_LEADERS: admin.handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.handle_list_partition_reassignments,
    ApiKey.DESCRIBE_QUORUM: forwarded.handle_describe_quorum,
    ApiKey.UNREGISTER_BROKER: forwarded.handle_unregister_broker,
    ApiKey.WRITE_TXN_MARKERS: txn_markers.handle_write_txn_markers,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_admin.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_admin.handle_alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quota_admin.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quota_admin.handle_alter_client_quotas,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: describe_topics.handle_describe_topic_partitions,
    ApiKey.UPDATE_FEATURES: admin.handle_update_features,
}

#: What a broker listener serves and advertises.
BROKER_API_VERSIONS = listener_api_versions(BROKER_LISTENER, HANDLERS)


class UnsupportedApi(CloseConnection):
    """A request for an API this listener does not serve; the connection is closed."""


def _quota_windows(config: ServerConfig) -> QuotaWindows:
    """The client quotas' sample windows (Kafka's quota.window.num / .size.seconds)."""
    return QuotaWindows(
        config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds") * 1000
    )


class Broker:
    """What request handlers share: config, metadata service, partitions, purgatory,
    the group and transaction coordinators."""

    def __init__(
        self,
        config: ServerConfig,
        metadata: QuorumMetadata,
        partitions: PartitionManager,
        fetch_purgatory: Purgatory,
        cluster_id: str,
        clock: Clock | None = None,
        fault_handler: FaultHandler | None = None,
    ) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.metadata = metadata
        self.partitions = partitions
        self.fetch_purgatory = fetch_purgatory
        self.cluster_id = cluster_id
        self.producer_ids = producers.BrokerProducerIds(
            self.node_id, metadata, fault_handler=fault_handler
        )
        self.api_versions = BROKER_API_VERSIONS
        #: `authorizer.class.name` set: requests are checked against the ACLs first
        authz_config = authorizer_config(config)
        self.authz = None if authz_config is None else broker_authorizer(authz_config, config)
        if not consumer_groups.consumer_protocol_enabled(config):
            off = consumer_groups.CONSUMER_PROTOCOL_APIS
            self.api_versions = {k: v for k, v in BROKER_API_VERSIONS.items() if k not in off}
        self.groups = GroupCoordinator(
            config, self.node_id, partitions, metadata, clock or SystemClock(), fault_handler
        )
        self.groups.start()
        self.groups.on_image(metadata.image)  # KIP-848 group configs, then each change
        metadata.add_listener(lambda old, new, delta: self.groups.on_image(new))
        self.transactions = TransactionCoordinatorShell(
            config,
            self.node_id,
            partitions,
            metadata,
            clock or SystemClock(),
            self.producer_ids,
            fault_handler,
            local_markers=lambda req: txn_markers.write_txn_markers(self, req),
        )
        self.transactions.start()
        #: told of every marker appended to __consumer_offsets: the group coordinator's
        #: pending transactional offsets commit or go
        self.txn_marker_listener: txn_markers.TxnMarkerListener | None = self.groups
        #: KIP-890: transactional produces verified with their coordinator
        self.txn_verifier = TxnVerifier(self)
        # the remote log manager (riverbed.server.remote_log) when tiering is enabled
        self.remote_log: RemoteLogManager | None = None
        #: listener key / trust stores replaced through AlterConfigs (set by the node)
        self.dynamic_listeners: DynamicListeners | None = None
        #: client quotas (produce / fetch byte rates, request time), per metadata image
        self.quotas = BrokerQuotas(_quota_windows(config))
        #: fenced brokers Metadata still lists for a moment (riverbed.metadata.recently_fenced)
        self.recently_fenced = RecentlyFenced(
            config.get_int("riverbed.metadata.fenced.broker.listing.grace.ms")
        )
        #: Metadata's topic auto-creations in flight, one per name
        self.auto_topic_creations = AutoTopicCreations(metadata.auto_create_topic)
        #: the wall clock of the shell's time-stamped views
        self.clock: Clock = clock or SystemClock()
        #: BrokerTopicMetrics the produce handler counts into (set by the node; None:
        #: riverbed.metrics.enable=false)
        self.topic_stats: TrafficStats | None = None
        metadata.add_listener(
            lambda old, new, delta: self.recently_fenced.observe(
                old.brokers, new.brokers, self.clock.now_ms()
            )
        )
        # Serving starts now: new partition logs are created off the event loop.
        partitions.create_logs_off_loop()

    def close(self) -> None:
        self.auto_topic_creations.close()
        self.groups.close()
        self.transactions.close()
        self.txn_verifier.close()

    async def handle(self, ctx: RequestContext, body: Message) -> Response | None:
        handler = HANDLERS.get(ctx.header.api_key)
        if handler is None or ctx.header.api_key not in BROKER_API_VERSIONS:
            raise UnsupportedApi(f"api key {ctx.header.api_key} is not served on this listener")
        throttle = ctx.throttle
        if throttle is None or not throttle.engaged:
            return await self._handle(handler, ctx, body)
        # A connection once throttled is served as Kafka serves every connection: one
        # request at a time, none while it is throttled (pipelined requests read ahead
        # would otherwise all be handled together when a throttle ends). Until its first
        # throttle a client within its quota keeps its pipelining: the first violation
        # may be overshot by the requests already read (inflight_requests_max). A
        # request that waits gives back its queued.max.requests permit, as a muted Kafka
        # channel holds no place in the request queue: one client over its quota must not
        # hold up the others.
        if throttle.muted():
            park_current_request()
        async with throttle.gate:
            await throttle.wait()
            return await self._handle(handler, ctx, body)

    async def _handle(
        self, handler: Handler, ctx: RequestContext, body: Message
    ) -> Response | None:
        version = response_body_version(ctx.header)
        authz = self.authz
        if authz is not None:
            # A producer's every request after its first: its connection was let WRITE
            # these topics under this image's ACLs, as this principal, so it is answered
            # from the connection's memory (one identity check of the image, then a set
            # lookup per topic); the rest, and anything not remembered, is `verdict`'s.
            # Inline or as a method call, the cost measured the same (RESULTS.md, stop 33).
            memo = ctx.decisions
            if (
                type(body) is ProduceRequest
                and memo is not None
                and memo.granted_under is self.metadata.image
                and memo.principal is ctx.principal
                and not body.transactional_id
            ):
                writable = memo.writable
                for topic in body.topic_data:
                    if topic.name not in writable:
                        break
                else:
                    return await self._run(handler, ctx, body, version)
            started_ns = time.perf_counter_ns()  # the authorization counts as handler time
            verdict = authz.verdict(self.metadata.image, ctx, body)
            if verdict is not ALLOWED:
                return await self._handle_refused(handler, ctx, body, version, verdict, started_ns)
            return await self._run(handler, ctx, body, version, time.perf_counter_ns() - started_ns)
        return await self._run(handler, ctx, body, version)

    async def _run(
        self, handler: Handler, ctx: RequestContext, body: Message, version: int, spent_ns: int = 0
    ) -> Response | None:
        """The handler's answer, its request time counted (``spent_ns``: the request's time
        before the handler, its authorization) as Kafka counts every answer's, errors too."""
        spent = [spent_ns] if request_throttle.counted(self, ctx, body) else None
        try:
            if spent is not None:
                response = await timed(handler(self, ctx, body), spent)
            else:
                response = await handler(self, ctx, body)
            if isinstance(response, Message) and ctx.header.api_key not in _VERSION_EXACT:
                fit_to_version(response, version)
        except CloseConnection:
            raise
        except Exception as exc:
            error = self._error_response(ctx, body, version, exc)
            if spent is not None and request_throttle.error_counted(ctx, error_code_of(exc)):
                request_throttle.throttle_error(self, ctx, error, spent[0])
            return error
        handler_ns = -1 if spent is None else spent[0]
        return request_throttle.throttle_answer(self, ctx, body, response, handler_ns)

    async def _handle_refused(
        self,
        handler: Handler,
        ctx: RequestContext,
        body: Message,
        version: int,
        v: Verdict,
        started_ns: int,
    ) -> Response | None:
        """A request refused whole, or in part: the allowed items served, the refused
        ones answered their error (Kafka's per-topic / per-group / per-resource answers).
        The refusal's time since ``started_ns`` (its authorization, its answer) counts
        against the request quota, as Kafka counts every answer's handler time."""
        api_key = ctx.header.api_key
        if isinstance(body, ProduceRequest) and body.acks == 0:
            code = v.whole or next(iter(v.refused.values()))
            raise CloseConnection(f"produce with acks=0 refused ({code.name})")
        if v.whole is not None:  # Kafka: sendErrorResponseMaybeThrottle
            denied = denied_response(api_key, body, version, v.whole)
            if request_throttle.counted(self, ctx, body, refused=True):
                handler_ns = time.perf_counter_ns() - started_ns
                request_throttle.throttle_error(self, ctx, denied, handler_ns)
            return denied
        allowed, refused = split(api_key, body, v)
        assert self.authz is not None  # a verdict was made
        refused = self.authz.named_refusals(self.metadata.image, ctx, api_key, refused)
        if allowed is None:  # every item refused: answered as the handler would have
            merged = fit_to_version(with_refused(api_key, None, refused, version), version)
            handler_ns = -1
            if request_throttle.counted(self, ctx, body, refused=True):
                handler_ns = time.perf_counter_ns() - started_ns
            return request_throttle.throttle_answer(self, ctx, body, merged, handler_ns)
        authz_ns = time.perf_counter_ns() - started_ns
        served = await self._run(handler, ctx, allowed, version, authz_ns)
        if isinstance(served, FetchResponse) and served.throttle_time_ms > 0:
            return served  # Kafka's throttled fetch answers no partition, refused or not
        if isinstance(served, SplicedResponse):  # a Fetch sending file ranges: same body
            with_refused(api_key, served.body, refused, version)
            return served
        if served is None:
            return None
        merged = with_refused(api_key, served, refused, version)
        return fit_to_version(merged, version)

    def _error_response(
        self, ctx: RequestContext, body: Message, version: int, exc: Exception
    ) -> Message:
        header = ctx.header
        code = error_code_of(exc)
        log.error(
            "error handling api_key=%s v%s (correlation id %s) from %s: answering %s",
            header.api_key,
            header.api_version,
            header.correlation_id,
            ctx.peer,
            code.name,
            exc_info=exc,
        )
        if isinstance(body, ProduceRequest) and body.acks == 0:
            raise CloseConnection(f"produce with acks=0 failed ({code.name})") from exc
        return error_response(header.api_key, body, version, code)
