"""A node's Kafka listeners (a mixin of `riverbed.server.node.Node`): each listener's
security, the socket server and its connection quotas, binding, routing a request to the
controller or the broker, and the endpoints the node advertises.

Every listener in ``listeners`` gets its TLS / SASL settings (a bad key stops the start
with its name); SCRAM logins are checked against the credentials in the node's metadata
image. One `SocketServer` serves all listeners; the controller listeners have connection
quotas of their own (Kafka's KRaft controllers have a socket server of their own) and no
connection-creation-rate quota, and they bind and serve first (the other voters need them
to elect a leader); the other listeners bind before the broker registers and serve only
once it is unfenced, so the first Metadata answer already lists this broker. A listener's
key and trust stores replaced through AlterConfigs take effect on the bound listener
(`riverbed.server.dynamic_listeners`). Advertised endpoints fill port 0 and a wildcard
host from the bound address.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from riverbed.security.scram import ScramCredential, ScramMechanism
from riverbed.server.broker.authorization import authorizer_config
from riverbed.server.broker_lifecycle import NodeConfigError, NodeStartError
from riverbed.server.connection_quotas import ConnectionQuotas
from riverbed.server.dynamic_listeners import DynamicListeners
from riverbed.server.listener_security import (
    ListenerSecurity,
    client_security,
    listener_security,
)
from riverbed.server.network import RequestContext, RequestHandler, Response, SocketServer

if TYPE_CHECKING:
    from riverbed.protocol.messages import Message
    from riverbed.server.broker.dispatch import Broker
    from riverbed.server.config import ServerConfig
    from riverbed.server.controller_apis import ControllerApis
    from riverbed.server.fault_handler import FaultHandler
    from riverbed.server.metrics.registry import NodeMetrics
    from riverbed.server.purgatory import Purgatory
    from riverbed.server.quorum import QuorumMetadata

#: Requests read ahead per connection before the node stops reading it (back-pressure).
INFLIGHT_REQUESTS_PER_CONNECTION_MAX = 16


class NodeListeners:
    if TYPE_CHECKING:  # provided by Node
        config: ServerConfig
        fault_handler: FaultHandler
        metrics: NodeMetrics
        purgatory: Purgatory
        server: SocketServer | None
        quorum: QuorumMetadata | None
        broker: Broker | None
        bound_listeners: dict[str, tuple[str, int]]
        _controller_apis: ControllerApis
        _security: dict[str, ListenerSecurity]

    def _listener_security(self) -> dict[str, ListenerSecurity]:
        """Each listener's TLS / SASL settings, this broker's own login and its login to
        the controllers (validated: a bad key stops the start with its name)."""
        from riverbed.server.config import ConfigError

        cfg = self.config
        try:
            self._inter_broker_security = client_security(
                cfg, cfg.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol"
            )
            if cfg.controller_listener_names:  # checked here: the quorum builds it later
                client_security(
                    cfg, cfg.controller_listener_names[0], "sasl.mechanism.controller.protocol"
                )
            authorizer_config(cfg)
            return {
                lst.name: listener_security(cfg, lst.name, lst.security_protocol, self._scram)
                for lst in cfg.listeners
            }
        except ConfigError as exc:
            raise NodeConfigError(str(exc)) from None

    def _scram(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        """A user's SCRAM credential in this node's metadata image (None: unknown)."""
        if self.quorum is None:
            return None
        cred = self.quorum.image.scram_credentials.get((user, mechanism.type_id))
        if cred is None:
            return None
        return ScramCredential(cred.salt, cred.stored_key, cred.server_key, cred.iterations)

    def _socket_server(self) -> SocketServer:
        cfg = self.config
        handler: RequestHandler = self._handle
        # the request/topic counters and the request times
        observer = self.metrics.traffic if cfg.get("riverbed.metrics.enable") else None
        server = SocketServer(
            handler,
            socket_request_max_bytes=cfg.socket_request_max_bytes,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            inflight_requests_max=INFLIGHT_REQUESTS_PER_CONNECTION_MAX,
            queued_requests_max=cfg.queued_max_requests,
            quotas=ConnectionQuotas(cfg.connection_limits),
            listen_backlog=cfg.socket_listen_backlog_size,
            fault_handler=self.fault_handler,
            observer=observer,
        )
        # Kafka's KRaft controller listeners have a socket server (and quotas) of their own
        self._controller_quotas = ConnectionQuotas(
            replace(cfg.connection_limits, inter_broker_listener=None)
        )
        self.metrics.watch_network(
            lambda: server.queued.held, [server.quotas, self._controller_quotas], self.purgatory
        )
        return server

    async def _listen(self, *, controller: bool) -> None:
        """Bind the controller listeners (serving at once) or the others (serving after
        registration, so the first Metadata answer already lists this broker)."""
        cfg = self.config
        assert self.server is not None
        for lst in cfg.listeners:
            is_controller = lst.name in cfg.controller_listener_names
            if is_controller != controller:
                continue
            try:
                host, port = await self.server.listen(
                    lst.name,
                    lst.host,
                    lst.port,
                    start_serving=controller,
                    quotas=self._controller_quotas if is_controller else None,
                    security=self._security[lst.name],
                )
            except OSError as exc:
                raise NodeStartError(
                    f"cannot listen on {lst.name}://{lst.host}:{lst.port} (listeners): "
                    f"{exc.strerror or exc}"
                ) from None
            self.bound_listeners[lst.name] = (host, port)

    def _dynamic_listeners(self, quorum: QuorumMetadata) -> DynamicListeners:
        """Listener key / trust stores replaced through AlterConfigs: the ones already in
        the caught-up image before the broker listeners bind, later ones as they come."""
        assert self.server is not None
        dynamic = DynamicListeners(self.config, self._security, self._scram, self.server)
        dynamic.apply(quorum.image)
        quorum.add_listener(lambda old, new, delta: dynamic.apply(new))
        return dynamic

    def _limit_connection_rates(self, broker: Broker) -> None:
        """connection_creation_rate quotas on the broker listeners (not the controller's,
        as in Kafka, whose controllers do not load client quotas)."""
        assert self.server is not None
        quotas = broker.quotas
        self.server.quotas.rate_throttle = lambda ip: quotas.connection_throttle_ms(
            broker.metadata.image, ip
        )

    async def _handle(self, ctx: RequestContext, body: Message) -> Response | None:
        """The network layer's handler: controller listeners -> the quorum; others -> the
        broker (not yet bound while the node starts)."""
        if ctx.listener_name in self.config.controller_listener_names:
            return await self._controller_apis.handle(ctx, body)
        assert self.broker is not None
        return await self.broker.handle(ctx, body)

    def advertised_endpoints(self) -> list[tuple[str, str, int, str]]:
        """(listener name, host, port, security protocol); port 0 -> the bound port."""
        out = []
        for adv in self.config.advertised_listeners:
            bound = self.bound_listeners.get(adv.name)
            port = adv.port or (bound[1] if bound else 0)
            host = adv.host or (bound[0] if bound else "") or "localhost"
            if host in ("0.0.0.0", "::"):
                host = "localhost"
            out.append((adv.name, host, port, adv.security_protocol))
        return out
