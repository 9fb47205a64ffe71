"""One client connection (`Connection`): its reader (framing, decoding, the in-flight
bound, quota throttles, the idle watch) and, through `ResponseWriter`, its writer. The
rules are described in `riverbed.server.network`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from collections import deque
from typing import TYPE_CHECKING

from riverbed.protocol.exceptions import ProtocolError
from riverbed.security.authorizer import ConnectionDecisions
from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.server.eager_start import start_eagerly
from riverbed.server.listener_security import PLAINTEXT, ListenerSecurity
from riverbed.server.request_context import ChannelThrottle, RequestContext
from riverbed.server.request_permits import Permits, RequestPermit, run_with_permit
from riverbed.server.request_timing import TimedPermit
from riverbed.server.response_writer import InflightRequest, ResponseWriter
from riverbed.server.supervise import guarded
from riverbed.server.tls import tls_record_hint

if TYPE_CHECKING:  # the protocol engine is imported lazily (it is large)
    from riverbed.protocol.messages import Message
    from riverbed.server.sasl_gate import SaslSession
    from riverbed.server.socket_server import SocketServer

#: the network layer's logger (``log.level.riverbed.server.network`` configures it)
log = logging.getLogger("riverbed.server.network")

_INT32 = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id


class FrameTooLarge(ProtocolError):
    """A frame's declared size is above socket.request.max.bytes (or negative)."""


class Connection(ResponseWriter):
    """One client connection: a reader task, a writer task, a bounded in-flight queue."""

    def __init__(
        self,
        server: SocketServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection_id: int,
        listener_name: str,
        security: ListenerSecurity = PLAINTEXT,
        principal: KafkaPrincipal = ANONYMOUS,
    ) -> None:
        self.server = server
        self.security = security
        self.principal = principal
        #: TLS: fetch data goes through the TLS stream, never sendfile on the raw socket
        self.tls = security.ssl_context is not None
        self.reader = reader
        self.writer = writer
        self.connection_id = connection_id
        self.listener_name = listener_name
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # Items are (request header, task producing the response); order = request order;
        # None ends the writer. Its length is bounded by `slots`: one per request read and
        # not yet answered.
        self.inflight: deque[InflightRequest | None] = deque()
        self._inflight_added = asyncio.Event()
        # Encoded responses waiting to go out in one write (fewer syscalls when pipelined).
        self._out: list[bytes] = []
        self._out_bytes = 0
        # The stamps of the responses in `_out`: sent when `_out` is written.
        self._out_timings: list[TimedPermit] = []
        self.slots = Permits(server.inflight_requests_max)
        self.outstanding = 0  # requests read and not yet answered (or dropped: acks=0)
        self._answered = asyncio.Event()  # set while outstanding == 0
        self._answered.set()
        self.sasl: SaslSession | None = None  # SASL listeners: the session (re-authentication)
        self.closing = False
        self.throttle = ChannelThrottle()
        self.decisions = ConnectionDecisions()
        self._idle_s = server.connections_max_idle_ms / 1000.0
        self._last_frame_s = 0.0  # the event loop's time of the last frame's arrival
        self._idle_timer: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        if self.security.sasl:
            from riverbed.server.sasl_gate import SaslSession

            self.sasl = SaslSession(self, self.security)
            principal = await self.sasl.start()
            if principal is None or self.server.stopping:
                self.writer.close()
                return
            self.principal = principal
        writer_task = asyncio.create_task(self._write_loop())
        reader_task = asyncio.create_task(self._read_loop())
        self._watch_idle()
        try:
            await asyncio.wait({reader_task, writer_task}, return_when=asyncio.FIRST_COMPLETED)
            if not writer_task.done():
                # The reader ended (EOF, bad frame, shutdown): answer what is in flight.
                self._push(None)
                await writer_task
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            for task in (reader_task, writer_task):
                task.cancel()
            self._abort_pending()
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    def stop_reading(self) -> None:
        """Shutdown: read no more requests; the writer still answers those in flight."""
        self.closing = True
        self.throttle.lift()
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            if isinstance(transport, asyncio.ReadTransport):
                transport.pause_reading()
            self.reader.feed_eof()

    def _close_with(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.closing = True

    def _watch_idle(self) -> None:
        """Start the idle watch (``connections.max.idle.ms``): one timer per connection,
        moved on by `_idle_check` as frames arrive. A deadline armed and cancelled around
        every read cost a timer and a context manager per request (~10% of the network
        layer's CPU per request, on every replication cycle)."""
        loop = asyncio.get_running_loop()
        self._last_frame_s = loop.time()
        self._guarded_idle_check = guarded(
            "idle connection watch", self._idle_check, self.server.fault_handler
        )
        self._idle_timer = loop.call_at(self._last_frame_s + self._idle_s, self._guarded_idle_check)

    def _idle_check(self) -> None:
        """No frame for ``connections.max.idle.ms`` and nothing in flight: the reader gets
        an end of stream, so the connection closes as when the peer closes it (a frame
        already buffered is still read and answered first)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = self._last_frame_s + self._idle_s
        if self.closing or self.server.stopping:
            return
        if now < due:  # a frame came meanwhile
            self._idle_timer = loop.call_at(due, self._guarded_idle_check)
            return
        if self.outstanding > 0:  # a request in flight: a whole new period from now
            self._last_frame_s = now
            self._idle_timer = loop.call_at(now + self._idle_s, self._guarded_idle_check)
            return
        log.info("closing idle connection from %s", self.peer)
        self._idle_timer = None
        self.reader.feed_eof()

    async def _read_frame(self) -> bytes | None:
        try:
            head = await self.reader.readexactly(4)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        except ssl.SSLError as exc:  # e.g. a refused renegotiation: the client's doing
            self._close_with(f"TLS error: {exc}")
            return None
        self._last_frame_s = asyncio.get_running_loop().time()
        (size,) = _INT32.unpack(head)
        if size < 0 or size > self.server.socket_request_max_bytes:
            raise FrameTooLarge(
                f"frame size {size} outside 0..{self.server.socket_request_max_bytes}"
                f" (socket.request.max.bytes){tls_record_hint(size)}"
            )
        try:
            return await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        except ssl.SSLError as exc:
            self._close_with(f"TLS error: {exc}")
            return None

    async def _read_loop(self) -> None:
        while not self.closing and not self.server.stopping:
            # Blocks when inflight_requests_max requests of this connection are
            # outstanding: the socket is not read, so back-pressure reaches the client
            # through TCP.
            slots = self.slots
            if not slots.try_acquire():
                await slots.acquire()
            throttle = self.throttle
            if throttle.engaged:  # a quota throttle mutes the connection
                await throttle.wait()
                if self.closing:
                    return  # shutdown lifted the throttle
            request = await self._read_one()
            if request is None:
                return
            # a request read while a throttle started (pipelined) waits for its end too
            if throttle.engaged:
                await throttle.wait()
                if self.closing:
                    return  # shutdown lifted the throttle: the request is never handled
            # queued.max.requests counts requests waiting for (or in) a handler over all
            # connections, never idle connections: the permit is taken once a request has
            # been read (Kafka's processor, too, holds one read request when the request
            # queue is full) and given back when its handler finishes or parks.
            ctx, body, received = request
            observer = self.server.observer
            permit: RequestPermit
            if observer is None:
                permit, timed = RequestPermit(self.server.queued), None
            else:
                permit = timed = TimedPermit(self.server.queued, received)
            if not permit.try_acquire():
                await permit.acquire()
            # The handler's first step runs now (`eager_start`): a Task only if it waits.
            # (That task is held by `inflight` until answered, and by the loop once
            # cancelled: no other reference is needed to keep it alive.)
            answer = start_eagerly(
                run_with_permit(self.server.handler, permit, ctx, body)
                if timed is None or observer is None
                else observer.run_timed(self.server.handler, timed, ctx, body)
            )
            if not answer.done():
                answer.add_done_callback(permit.release_on_done)
            self.outstanding += 1
            self._answered.clear()
            self._push((ctx.header, answer, timed))

    async def _read_one(self) -> tuple[RequestContext, Message, float] | None:
        """Read and decode one request, with when it was read (`time.perf_counter`);
        None when the connection is done."""
        try:
            frame = await self._read_frame()
        except ProtocolError as exc:
            self._close_with(str(exc))
            return None
        if frame is None:
            return None
        received = time.perf_counter()
        if self.sasl is not None:
            verdict = await self.sasl.screen(frame)
            if verdict is None:  # a re-authentication: the next request
                return await self._read_one()
            if not verdict:
                self.closing = True
                return None
        try:
            header, body = self.server.codec.decode_request(frame)
        except ProtocolError as exc:
            api = _HEADER_PREFIX.unpack_from(frame) if len(frame) >= 8 else None
            self._close_with(f"malformed request {api}: {exc}")
            return None
        except Exception as exc:  # a codec bug must not take the broker down
            self._close_with(f"undecodable request: {exc!r}")
            return None
        ctx = RequestContext(
            header=header,
            peer=self.peer,
            listener_name=self.listener_name,
            connection_id=self.connection_id,
            received_ms=int(time.time() * 1000),
            principal=self.principal,
            size_bytes=len(frame) + 4,
            throttle=self.throttle,
            decisions=self.decisions,
        )
        return ctx, body, received

    def _push(self, item: InflightRequest | None) -> None:
        self.inflight.append(item)
        self._inflight_added.set()

    def _abort_pending(self) -> None:
        """Connection gone: cancel unanswered requests (their permits come back as their
        tasks end)."""
        self.outstanding = 0
        while self.inflight:
            item = self.inflight.popleft()
            if item is not None:
                item[1].cancel()
