"""A node's Kafka listeners (`SocketServer`): binding, the acceptors (connection quotas,
connection-rate throttles, accept back-off), each accepted connection's setup, and the
clean shutdown. Each connection is served by `riverbed.server.connection.Connection`; the
rules are described in `riverbed.server.network`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from riverbed.server.backoff import ExponentialBackoff, Retrier
from riverbed.server.connection import Connection
from riverbed.server.connection_quotas import ConnectionQuotas
from riverbed.server.connection_setup import SetupFailed, open_transport
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.listener_security import PLAINTEXT, ListenerSecurity
from riverbed.server.request_context import RequestHandler, RequestObserver
from riverbed.server.request_permits import Permits
from riverbed.server.supervise import guarded, supervise
from riverbed.server.tls import HandshakeLimiter

if TYPE_CHECKING:  # the protocol engine is imported lazily (it is large)
    from riverbed.protocol.headers import RequestHeader
    from riverbed.protocol.messages import Message

#: the network layer's logger (``log.level.riverbed.server.network`` configures it)
log = logging.getLogger("riverbed.server.network")

#: How long a clean shutdown waits for in-flight requests before closing connections.
SHUTDOWN_GRACE_MS = 5000
#: Pause of an acceptor after a failed accept (e.g. EMFILE), instead of spinning.
ACCEPT_ERROR_BACKOFF_MS = 100
#: ... doubling up to this while accept keeps failing
ACCEPT_ERROR_BACKOFF_MAX_MS = 2_000
ACCEPT_BACKOFF = ExponentialBackoff(ACCEPT_ERROR_BACKOFF_MS, ACCEPT_ERROR_BACKOFF_MAX_MS)
#: StreamReader buffer per connection (reading pauses above twice this).
STREAM_LIMIT_BYTES = 64 * 1024
#: Connections held open until their connection-rate throttle ends; more are closed at once.
THROTTLED_SOCKETS_MAX = 1000


class _Codec(Protocol):
    def decode_request(self, frame: bytes) -> tuple[RequestHeader, Message]: ...
    def encode_response(self, header: RequestHeader, body: Message) -> bytes: ...


class _DefaultCodec:
    """The protocol engine's header codec, imported when a server is made (not with this
    module: it is large). Its two functions are bound once here: an import statement in
    a function runs on every call (~0.5 us, twice a request)."""

    def __init__(self) -> None:
        from riverbed.protocol.headers import decode_request, encode_response

        # Trailing bytes after a body are ignored by decode_request, as by Kafka
        # (librdkafka 2.x sends MetadataRequest v12 with 3 extra bytes).
        self.decode_request: Callable[[bytes], tuple[RequestHeader, Message]] = decode_request
        self.encode_response: Callable[[RequestHeader, Message], bytes] = encode_response


@dataclass
class _Listener:
    name: str
    sock: socket.socket
    quotas: ConnectionQuotas
    security: ListenerSecurity = PLAINTEXT
    acceptor: asyncio.Task[None] | None = None


class SocketServer:
    """Kafka listeners of one node: accepts connections and feeds the request handler."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        socket_request_max_bytes: int = 104857600,
        connections_max_idle_ms: int = 600000,
        inflight_requests_max: int = 16,
        queued_requests_max: int = 500,
        quotas: ConnectionQuotas | None = None,
        listen_backlog: int = 50,
        codec: _Codec | None = None,
        fault_handler: FaultHandler | None = None,
        rng: random.Random | None = None,
        observer: RequestObserver | None = None,
    ) -> None:
        if socket_request_max_bytes <= 0 or inflight_requests_max <= 0:
            raise ValueError("socket_request_max_bytes and inflight_requests_max must be > 0")
        if queued_requests_max <= 0 or listen_backlog <= 0:
            raise ValueError("queued_requests_max and listen_backlog must be > 0")
        self.handler = handler
        self.socket_request_max_bytes = socket_request_max_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self.inflight_requests_max = inflight_requests_max
        # queued.max.requests: requests read and waiting for (or in) a handler, over all
        # connections; parked requests and idle connections hold none (request_permits).
        self.queued = Permits(queued_requests_max)
        # max.connections(.per.ip): the default quotas; `listen` may name others (a
        # combined node's controller listeners count apart, as in Kafka).
        self.quotas = quotas if quotas is not None else ConnectionQuotas()
        self.listen_backlog = listen_backlog
        self.codec: _Codec = codec if codec is not None else _DefaultCodec()
        #: an acceptor that fails unexpectedly halts the node (a node that accepts nothing
        #: is wedged); the node passes its own, standalone servers halt the process
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(-1)
        self.rng = rng or random.Random()
        self.stopping = False
        self._listeners: list[_Listener] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._open: set[Connection] = set()
        #: connections still in their TLS handshake (no request read yet): cancelled at stop
        self._setting_up: set[asyncio.Task[None]] = set()
        self._throttled: set[socket.socket] = set()  # closed when their throttle ends
        self._next_connection_id = 0
        #: os.sendfile from the pinned fds (False: every byte is copied; tests, non-Linux)
        self.sendfile = hasattr(os, "sendfile")
        self.handshakes = HandshakeLimiter()
        self.bound: dict[str, tuple[str, int]] = {}
        #: told of each request once answered and once its response is sent (request
        #: metrics; None: the requests carry no stage stamps and nothing is counted)
        self.observer = observer

    @property
    def connection_count(self) -> int:
        return len(self._open)

    async def listen(
        self,
        name: str,
        host: str,
        port: int,
        *,
        start_serving: bool = True,
        quotas: ConnectionQuotas | None = None,
        security: ListenerSecurity = PLAINTEXT,
    ) -> tuple[str, int]:
        """Bind one listener; returns the actual (host, port). With ``start_serving=False``
        connections wait in the backlog until `start_serving` (the node registers itself
        first, so the first Metadata answer already lists it)."""
        quotas = quotas if quotas is not None else self.quotas
        quotas.add_listener(name)
        socks = await self._bind(host, port)
        self._listeners.extend(_Listener(name, sock, quotas, security) for sock in socks)
        if start_serving:
            await self.start_serving()
        self.bound[name] = (host, int(socks[0].getsockname()[1]))
        return self.bound[name]

    def reconfigure(self, name: str, security: ListenerSecurity) -> None:
        """New connections to listener ``name`` are set up with ``security`` (a replaced
        key store); open connections keep the security they were set up with."""
        for lst in self._listeners:
            if lst.name == name:
                lst.security = security

    async def _bind(self, host: str, port: int) -> list[socket.socket]:
        """Listening sockets for ``host`` (all interfaces when empty), like start_server."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        socks: list[socket.socket] = []
        try:
            for family, type_, proto, _, addr in dict.fromkeys(infos):
                sock = socket.socket(family, type_, proto)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(socks) > 1:
                    addr = (addr[0], socks[0].getsockname()[1], *addr[2:])
                try:
                    sock.bind(addr)
                except OSError as exc:
                    reason = (exc.strerror or str(exc)).lower()
                    raise OSError(exc.errno, f"cannot bind {addr!r}: {reason}") from exc
                sock.listen(self.listen_backlog)
                sock.setblocking(False)
        except OSError:
            for sock in socks:
                sock.close()
            raise
        return socks

    async def _accept_loop(self, lst: _Listener) -> None:
        """Kafka's acceptor: wait for a connection slot, accept, check the per-ip limit."""
        loop = asyncio.get_running_loop()
        name, lsock, quotas = lst.name, lst.sock, lst.quotas
        retrier = Retrier(ACCEPT_BACKOFF, self.rng)
        while not self.stopping:
            # max.connections / listener.name.<l>.max.connections: stop accepting until a
            # connection closes; new connections wait in the listen backlog meanwhile.
            await quotas.wait_for_slot(name)
            try:
                csock, addr = await loop.sock_accept(lsock)
            except OSError as exc:
                if self.stopping:
                    return
                # e.g. EMFILE: the socket stays readable, so back off instead of spinning
                delay_ms = retrier.failed()
                log.warning(
                    "cannot accept a connection on %s (retry in %d ms): %s", name, delay_ms, exc
                )
                await asyncio.sleep(delay_ms / 1000)
                continue
            retrier.succeeded()
            ip = str(addr[0]) if isinstance(addr, tuple) else str(addr)
            throttle_ms = 0 if quotas.rate_throttle is None else quotas.rate_throttle(ip)
            if throttle_ms > 0 and not self.stopping:
                self._close_later(csock, throttle_ms)
                continue
            if self.stopping or not quotas.try_add(name, ip):
                if not self.stopping:
                    log.info(
                        "rejected connection from %s on %s: it already has the maximum of %d "
                        "connections (max.connections.per.ip)",
                        ip,
                        name,
                        quotas.ip_limit(ip),
                    )
                csock.close()
                continue
            task = asyncio.create_task(self._serve(lst, csock, ip))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    def _close_later(self, csock: socket.socket, throttle_ms: int) -> None:
        """Kafka's delayed close of a connection over its address's connection rate: the
        client learns of the refusal only when the throttle time is over."""
        if len(self._throttled) >= THROTTLED_SOCKETS_MAX:
            csock.close()
            return
        self._throttled.add(csock)

        def close() -> None:
            self._throttled.discard(csock)
            csock.close()

        asyncio.get_running_loop().call_later(
            throttle_ms / 1000,
            guarded("close of a throttled connection", close, self.fault_handler),
        )

    async def _serve(self, lst: _Listener, csock: socket.socket, ip: str) -> None:
        name = lst.name
        security = lst.security  # the one this connection keeps (`reconfigure`)
        try:
            with contextlib.suppress(OSError):
                csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=STREAM_LIMIT_BYTES)
            protocol = asyncio.StreamReaderProtocol(reader)
            task = asyncio.current_task()
            assert task is not None
            self._setting_up.add(task)
            try:
                transport, principal = await open_transport(
                    csock, protocol, security, self.handshakes
                )
            except SetupFailed as exc:
                log.info("connection from %s on %s closed: %s", ip, name, exc)
                return
            except asyncio.CancelledError:
                csock.close()  # shutdown: a stalled handshake is not waited for
                raise
            finally:
                self._setting_up.discard(task)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            self._next_connection_id += 1
            conn = Connection(
                self, reader, writer, self._next_connection_id, name, security, principal
            )
            self._open.add(conn)
            try:
                await conn.run()
            finally:
                self._open.discard(conn)
        except Exception:
            # one connection's failure ends that connection, never the node: a client's
            # bytes must not halt a broker (the request handlers answer typed errors)
            log.exception("connection from %s on %s failed", ip, name)
        finally:
            lst.quotas.remove(name, ip)

    async def start_serving(self) -> None:
        for lst in self._listeners:
            if lst.acceptor is None:
                lst.acceptor = supervise(
                    f"acceptor of listener {lst.name}",
                    self._accept_loop(lst),
                    self.fault_handler,
                )

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish and their responses go out
        (bounded wait), then close every connection."""
        self.stopping = True
        acceptors = [lst.acceptor for lst in self._listeners if lst.acceptor is not None]
        for task in acceptors:
            task.cancel()
        if acceptors:
            await asyncio.wait(acceptors, timeout=1.0)
        for lst in self._listeners:
            lst.sock.close()
        for csock in list(self._throttled):
            csock.close()
        self._throttled.clear()
        grace_s = SHUTDOWN_GRACE_MS / 1000
        for conn in list(self._open):
            conn.stop_reading()
        for task in list(self._setting_up):
            task.cancel()  # nothing of theirs is in flight: the grace is for answers
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=grace_s)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=grace_s)
