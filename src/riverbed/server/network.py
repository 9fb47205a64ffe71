"""The Kafka wire-protocol network layer: listeners, framing, ordered responses, sendfile.

Wire format (Kafka's): every request and response is a frame ``int32 size`` followed by
``size`` bytes. A request frame starts with the request header (api_key int16,
api_version int16, correlation_id int32, client_id, tagged fields when flexible); the
response frame starts with the response header (correlation_id, tagged fields when
flexible; ApiVersions always header v0).

Per connection (like Kafka's Processor):

- frames larger than ``socket.request.max.bytes`` (or with a negative size), and frames
  whose header or body cannot be decoded, close THAT connection with a log line naming
  the peer and the reason; every other connection keeps being served;
- requests are read ahead and handled concurrently, but at most
  ``inflight_requests_max`` of them are outstanding; when the bound is reached the reader
  stops reading the socket, so TCP back-pressure reaches the client instead of riverbed
  buffering without limit;
- responses are written strictly in request order (a pipelining client matches them by
  order as well as correlation id); a handler that returns ``None`` (produce with
  acks=0) writes nothing;
- a connection with no request in flight and nothing received for
  ``connections.max.idle.ms`` is closed;
- a request that broke a client quota throttles its connection (`ChannelThrottle`,
  Kafka's muted channel): the response goes out at once with ``throttle_time_ms``, and
  no further request of that connection is read or handled until the throttle time has
  passed, so a noisy client slows only itself.

Fetch responses carry record data as file ranges of segment files (`FileRecords`): the
response is encoded with a unique 16-byte token in place of each ``records`` field, then
written as the encoded bytes with each token (and its length prefix) replaced by the real
length and the file bytes, sent with ``os.sendfile`` straight to the socket once the
transport's buffer is empty (on both event loops: uvloop lacks ``loop.sendfile``, and
each chunk must be checked against truncation, see ``Connection._send_range``), copying
through user space only to wait for a full socket. A response with at most
``SPLICE_COPY_BYTES_MAX`` of file bytes (a follower's or a tailing consumer's fetch) is read
into memory instead and written as one frame, coalesced with the responses around it: one
segment for the peer to wake up to instead of three. The ranges are pinned by the read
(fds of their own, closed after the send), so retention or a segment roll between the
read and the send never changes the bytes sent. On a TLS listener the ranges are copied
through the TLS stream instead (sendfile would write plaintext into the TLS session).
The planning lives in `riverbed.server.splice` (its names are re-exported here).

Security (`riverbed.server.listener_security`): each listener's connections are set up
by `riverbed.server.connection_setup` (TLS handshake, bounded) and, on SASL listeners, go
through the SASL gate (`riverbed.server.sasl_gate`) before any request is read; every
request's context carries the connection's `KafkaPrincipal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, Protocol, TypeAlias

from riverbed.protocol.exceptions import ProtocolError
from riverbed.security.authorizer import ConnectionDecisions
from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.server.backoff import ExponentialBackoff, Retrier
from riverbed.server.connection_quotas import ConnectionQuotas
from riverbed.server.connection_setup import SetupFailed, open_transport
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.listener_security import PLAINTEXT, ListenerSecurity
from riverbed.server.request_permits import (
    CountedSemaphore,
    RequestPermit,
    run_with_permit,
)
from riverbed.server.request_timing import TAKEN, TimedPermit
from riverbed.server.splice import FileRange
from riverbed.server.splice import FileRecords as FileRecords
from riverbed.server.splice import SplicedResponse as SplicedResponse
from riverbed.server.splice import plan_size as plan_size
from riverbed.server.splice import splice_plan as splice_plan
from riverbed.server.supervise import guarded, supervise
from riverbed.server.tls import HandshakeLimiter

if TYPE_CHECKING:  # the protocol engine is imported lazily (it is large)
    from riverbed.protocol.headers import RequestHeader
    from riverbed.protocol.messages import Message
    from riverbed.server.sasl_gate import SaslSession

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST, drops the queue

#: Bytes copied per user-space chunk when sendfile is not used.
COPY_CHUNK_BYTES = 256 * 1024
#: Bytes copied through the transport when the socket is full, to wait for it to drain
#: (asyncio offers no writability wait on a socket a transport owns).
SENDFILE_WAIT_COPY_BYTES = 16 * 1024
#: Fetch responses with at most this many bytes of file ranges are read into memory and
#: sent as one write with the frame around them: below it, sendfile's saved copy costs
#: less than its extra syscalls and the extra segments (peer wake-ups) of a split frame.
SPLICE_COPY_BYTES_MAX = 64 * 1024
#: Encoded responses coalesced into one write at most (pipelined small responses).
COALESCE_BYTES_MAX = 256 * 1024
#: Responses buffered in the transport before the writer waits for the socket to drain.
WRITE_BUFFER_HIGH_BYTES = 1024 * 1024
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


Response: TypeAlias = "Message | SplicedResponse"
RequestHandler = Callable[["RequestContext", "Message"], Awaitable["Response | None"]]


class RequestObserver(Protocol):
    """The request metrics' two hooks (`riverbed.server.metrics.traffic.TrafficStats`)."""

    def run_timed(
        self, handler: RequestHandler, permit: TimedPermit, ctx: RequestContext, body: Message
    ) -> Coroutine[object, object, Response | None]:
        """The request's handler task for a node that records request metrics:
        `run_with_permit` that also stamps the request's dequeue and answer on its permit
        (`riverbed.server.request_timing`) and counts the answer, setting the permit's
        request name. The observer owns it so that it counts without a call per request
        (a call on this path costs a small Produce ~1% of its CPU)."""
        ...

    def sent(self, permits: list[TimedPermit], sent: float) -> None:
        """These answered requests' responses were handed to the socket at ``sent``
        (`time.perf_counter`), or (acks=0) dropped: keep their stamps (one call per
        write, not per request); the list is the observer's to keep."""
        ...


#: An in-flight request: its header, the task answering it, its stage stamps (None:
#: no observer).
_Inflight: TypeAlias = "tuple[RequestHeader, asyncio.Task[Response | None], TimedPermit | None]"


class ChannelThrottle:
    """Kafka's channel muting for client quotas (ClientQuotaManager.throttle): a
    connection reads and handles nothing more until ``until`` (monotonic seconds)."""

    __slots__ = ("engaged", "gate", "until")

    def __init__(self) -> None:
        self.until = 0.0
        #: throttled at least once: from then on its requests are handled one at a time
        self.engaged = False
        #: held while a request of an engaged connection is handled
        self.gate = asyncio.Lock()

    def throttle(self, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.engaged = True
            self.until = max(self.until, time.monotonic() + throttle_ms / 1000.0)

    async def wait(self) -> None:
        while (delay := self.until - time.monotonic()) > 0:
            await asyncio.sleep(delay)


@dataclass(frozen=True)
class RequestContext:
    """What a handler knows about a request besides its body."""

    header: RequestHeader
    peer: str
    listener_name: str
    connection_id: int
    received_ms: int
    #: who sent it: User:ANONYMOUS, the TLS client's mapped DN, or the SASL user
    principal: KafkaPrincipal = ANONYMOUS
    #: the request's size on the wire (the produce byte-rate quota counts it)
    size_bytes: int = 0
    #: the connection's throttle: a quota violation mutes the connection through it
    throttle: ChannelThrottle | None = None
    #: the connection's remembered authorization answers (None: not from a connection)
    decisions: ConnectionDecisions | None = None


class CloseConnection(Exception):
    """Raised by a handler to close the connection (logged as a warning, no traceback)."""


class FrameTooLarge(ProtocolError):
    """A frame's declared size is above socket.request.max.bytes (or negative)."""


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


class Connection:
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
        self.inflight: deque[_Inflight | None] = deque()
        self._inflight_added = asyncio.Event()
        # Encoded responses waiting to go out in one write (fewer syscalls when pipelined).
        self._out: list[bytes] = []
        self._out_bytes = 0
        # The stamps of the responses in `_out`: sent when `_out` is written.
        self._out_timings: list[TimedPermit] = []
        self.slots = asyncio.Semaphore(server.inflight_requests_max)
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
        self._last_frame_s = asyncio.get_running_loop().time()
        (size,) = _INT32.unpack(head)
        if size < 0 or size > self.server.socket_request_max_bytes:
            raise FrameTooLarge(
                f"frame size {size} outside 0..{self.server.socket_request_max_bytes}"
                " (socket.request.max.bytes)"
            )
        try:
            return await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def _read_loop(self) -> None:
        while not self.closing and not self.server.stopping:
            # Blocks when inflight_requests_max requests of this connection are
            # outstanding: the socket is not read, so back-pressure reaches the client
            # through TCP.
            await self.slots.acquire()
            throttle = self.throttle
            if throttle.engaged:  # a quota throttle mutes the connection
                await throttle.wait()
            request = await self._read_one()
            if request is None:
                return
            # a request read while a throttle started (pipelined) waits for its end too
            if throttle.engaged:
                await throttle.wait()
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
            await permit.acquire()
            task: asyncio.Task[Response | None] = asyncio.create_task(
                run_with_permit(self.server.handler, permit, ctx, body)
                if timed is None or observer is None
                else observer.run_timed(self.server.handler, timed, ctx, body)
            )
            task.add_done_callback(permit.release_on_done)
            self.server.track(task)
            self.outstanding += 1
            self._answered.clear()
            self._push((ctx.header, task, timed))

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

    def _push(self, item: _Inflight | None) -> None:
        self.inflight.append(item)
        self._inflight_added.set()

    async def _write_loop(self) -> None:
        transport = self.writer.transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        try:
            await self._write_responses(transport)
        except ConnectionError as exc:
            # The peer reset or went away (a normal close for a client): no traceback.
            log.debug("connection to %s closed by the peer while writing: %s", self.peer, exc)
            self.closing = True
        finally:
            # Responses already encoded still go out before the connection closes.
            if self._out and not transport.is_closing():
                with contextlib.suppress(Exception):
                    self.writer.write(b"".join(self._out))
                    self._sent(self._out_timings)
            self._out.clear()
            self._out_timings = []

    async def _write_responses(self, transport: asyncio.WriteTransport) -> None:
        while True:
            if not self.inflight:
                await self._flush()
                self._inflight_added.clear()
                await self._inflight_added.wait()
                continue
            item = self.inflight[0]
            if item is None:
                await self._flush()
                return
            header, task, timed = item
            if not task.done():
                await self._flush()  # never hold finished responses behind a slow one
            try:
                response = await task
            except CloseConnection as exc:
                self._close_with(str(exc))
                return
            except Exception:
                log.exception(
                    "handler failed for api_key=%s from %s",
                    header.api_key,
                    self.peer,
                )
                self._close_with("internal error in a request handler")
                return
            if timed is not None:
                timed.stamps[TAKEN] = time.perf_counter()
                if response is None:  # acks=0: nothing to send (Kafka's NoOpResponse)
                    self._sent([timed])
            if response is not None and not transport.is_closing():
                try:
                    await self._send(header, response, timed)
                except CloseConnection as exc:
                    self._close_with(str(exc))
                    return
                except (ConnectionError, OSError) as exc:
                    log.debug("connection to %s lost while writing: %s", self.peer, exc)
                    self.closing = True
                    return
                except Exception:
                    log.exception(
                        "cannot encode the response to api_key=%s v%s for %s",
                        header.api_key,
                        header.api_version,
                        self.peer,
                    )
                    self._close_with("internal error encoding a response")
                    return
            self.inflight.popleft()
            self.outstanding -= 1
            if self.outstanding == 0:
                self._answered.set()
            self.slots.release()

    async def wait_answered(self) -> None:
        """Until every request read so far is answered and its response written (the
        SASL re-authentication writes its own responses after them)."""
        await self._answered.wait()
        await self._flush()

    async def _flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
            self.writer.write(data)
            timings = self._out_timings
            if timings:  # handed to the socket (or its transport buffer): `_sent` inline
                self._out_timings = []
                observer = self.server.observer
                assert observer is not None  # timings are kept only for an observer
                observer.sent(timings, time.perf_counter())
        await self.writer.drain()

    def _sent(self, timings: list[TimedPermit]) -> None:
        """The requests sent (one call per write, not per request); ``timings`` is
        handed over (callers give a list of their own or drop theirs after)."""
        observer = self.server.observer
        if observer is not None:
            observer.sent(timings, time.perf_counter())

    def _abort_pending(self) -> None:
        """Connection gone: cancel unanswered requests (their permits come back as their
        tasks end)."""
        self.outstanding = 0
        while self.inflight:
            item = self.inflight.popleft()
            if item is not None:
                item[1].cancel()

    async def _send(
        self, header: RequestHeader, response: Response, timing: TimedPermit | None
    ) -> None:
        codec = self.server.codec
        if not isinstance(response, SplicedResponse):
            self._queue(codec.encode_response(header, response), timing)
            if self._out_bytes >= COALESCE_BYTES_MAX:
                await self._flush()
            return
        if sum(fr.size for fr in response.files) <= SPLICE_COPY_BYTES_MAX:
            # a small fetch (a follower's or a consumer's at the log end): one frame in
            # one write, coalesced with its neighbours, instead of a write, a sendfile and
            # a write (three segments and wake-ups of the peer, four syscalls here)
            self._queue(self._copied_frame(header, response), timing)
            if self._out_bytes >= COALESCE_BYTES_MAX:
                await self._flush()
            return
        await self._flush()  # file ranges go straight to the socket: keep the order
        try:
            encoded = codec.encode_response(header, response.body)
            parts = splice_plan(encoded[4:], response)
            # The ranges were pinned by the read (their own fds): retention since then
            # changed nothing; a truncation did, and nothing is written yet.
            stale = [r for fr in response.files for r in fr.ranges if not r.intact()]
            if stale:
                raise CloseConnection(
                    f"a segment was truncated before the fetch response was sent: {stale[0]}"
                )
            self.writer.write(_INT32.pack(plan_size(parts)))
            for part in parts:
                if isinstance(part, bytes):
                    if part:
                        self.writer.write(part)
                    continue
                for rng in part.ranges:
                    await self._send_range(rng)
            if timing is not None:
                self._sent([timing])
            await self.writer.drain()
        finally:
            for fr in response.files:
                for r in fr.ranges:
                    r.close()

    def _queue(self, encoded: bytes, timing: TimedPermit | None) -> None:
        self._out.append(encoded)
        self._out_bytes += len(encoded)
        if timing is not None:
            self._out_timings.append(timing)

    def _copied_frame(self, header: RequestHeader, response: SplicedResponse) -> bytes:
        """The whole frame of ``response`` with its file ranges read into memory (each
        checked intact after the read, as a sendfile chunk is); the ranges are closed."""
        try:
            encoded = self.server.codec.encode_response(header, response.body)
            parts = splice_plan(encoded[4:], response)
            out = [_INT32.pack(plan_size(parts))]
            for part in parts:
                if isinstance(part, bytes):
                    out.append(part)
                    continue
                for rng in part.ranges:
                    chunk = os.pread(rng.fd, rng.size, rng.position)
                    if len(chunk) != rng.size or not rng.intact():
                        raise CloseConnection(
                            f"a segment was truncated before the fetch response was sent: {rng}"
                        )
                    out.append(chunk)
            return b"".join(out)
        finally:
            for fr in response.files:
                for r in fr.ranges:
                    r.close()

    async def _send_range(self, rng: FileRange) -> None:
        """Write the bytes of ``rng``: sendfile straight to the socket, else copies.

        Every chunk is taken while the range is intact (checked after it is read, and
        after each sendfile): a truncation in the middle closes the connection with the
        frame incomplete, so the client drops it; it never gets other bytes or zeros.
        """
        size = rng.size
        sent = 0
        # on TLS the "socket" extra is the raw socket: sendfile would bypass the encryption
        raw = self.server.sendfile and not self.tls
        sock = self.writer.transport.get_extra_info("socket") if raw else None
        while sent < size:
            position = rng.position + sent
            n = 0
            if sock is not None and await self._drain_fully():
                try:
                    n = os.sendfile(sock.fileno(), rng.fd, position, size - sent)
                    if n == 0:
                        self._range_changed(rng)  # end of file: it got shorter
                except (BlockingIOError, InterruptedError):
                    n = 0
                if not rng.intact():
                    self._range_changed(rng)
                if n:
                    sent += n
                    continue
                # the socket is full: a small copy waits for it in the transport's buffer
                want = min(SENDFILE_WAIT_COPY_BYTES, size - sent)
            else:
                want = min(COPY_CHUNK_BYTES, size - sent)
            chunk = os.pread(rng.fd, want, position)
            if len(chunk) != want or not rng.intact():
                self._range_changed(rng)
            self.writer.write(chunk)
            sent += want
            await self.writer.drain()

    def _range_changed(self, rng: FileRange) -> NoReturn:
        """Fail the response half-sent: reset the connection, dropping what the socket
        still holds. sendfile hands the kernel page-cache pages, not copies: a truncation
        rewrites the page it cuts in place, so bytes of the removed batches queued before
        it could change on their way (Kafka has the same window; the client's CRC check
        catches it). The reset leaves only what the client already received."""
        sock = self.writer.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        self.writer.transport.abort()
        raise CloseConnection(
            f"a segment was truncated while its fetch response was being sent ({rng})"
        )

    async def _drain_fully(self) -> bool:
        """Wait until the transport holds no buffered bytes (so raw writes keep order)."""
        transport = self.writer.transport
        if transport.get_write_buffer_size() == 0:
            return True
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            await self.writer.drain()
        finally:
            transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        return transport.get_write_buffer_size() == 0


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
        self.queued = CountedSemaphore(queued_requests_max)
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
        self._throttled: set[socket.socket] = set()  # closed when their throttle ends
        self._handler_tasks: set[asyncio.Task[Response | None]] = set()
        self._next_connection_id = 0
        #: os.sendfile from the pinned fds (False: every byte is copied; tests, non-Linux)
        self.sendfile = hasattr(os, "sendfile")
        self.handshakes = HandshakeLimiter()
        self.bound: dict[str, tuple[str, int]] = {}
        #: told of each request once answered and once its response is sent (request
        #: metrics; None: the requests carry no stage stamps and nothing is counted)
        self.observer = observer

    def track(self, task: asyncio.Task[Response | None]) -> None:
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

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
            try:
                transport, principal = await open_transport(
                    csock, protocol, security, self.handshakes
                )
            except SetupFailed as exc:
                log.info("connection from %s on %s closed: %s", ip, name, exc)
                return
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
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=grace_s)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=grace_s)
