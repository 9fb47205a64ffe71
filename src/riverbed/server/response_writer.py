"""The writing half of a client connection (`ResponseWriter`, a mixin of
`riverbed.server.connection.Connection`): the write loop answering requests strictly in
request order, small responses coalesced into one write, and fetch responses' file ranges
copied into one frame (small ones) or sent with ``os.sendfile`` (`_send_range`). The wire
format and the rules are described in `riverbed.server.network`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from riverbed.server.request_context import CloseConnection, Response
from riverbed.server.request_timing import TAKEN, TimedPermit
from riverbed.server.splice import FileRange, SplicedResponse, plan_size, splice_plan

if TYPE_CHECKING:  # the protocol engine is imported lazily (it is large)
    from riverbed.protocol.headers import RequestHeader
    from riverbed.server.request_permits import Permits
    from riverbed.server.socket_server import SocketServer

#: the network layer's logger (``log.level.riverbed.server.network`` configures it)
log = logging.getLogger("riverbed.server.network")

_INT32 = struct.Struct(">i")
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

#: An in-flight request: its header, its answer (a done future, or the task answering it:
#: `riverbed.server.eager_start`), its stage stamps (None: no observer).
InflightRequest: TypeAlias = (
    "tuple[RequestHeader, asyncio.Future[Response | None], TimedPermit | None]"
)


class ResponseWriter:
    """Writes a connection's responses in request order (the connection's writer task)."""

    if TYPE_CHECKING:  # provided by Connection
        server: SocketServer
        writer: asyncio.StreamWriter
        peer: str
        tls: bool
        closing: bool
        inflight: deque[InflightRequest | None]
        _inflight_added: asyncio.Event
        _out: list[bytes]
        _out_bytes: int
        _out_timings: list[TimedPermit]
        slots: Permits
        outstanding: int
        _answered: asyncio.Event

        def _close_with(self, reason: str) -> None: ...

    async def _write_loop(self) -> None:
        transport = self.writer.transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        try:
            await self._write_responses(transport)
        except OSError as exc:
            # The peer reset or went away (a normal close for a client), or its TLS failed
            # (ssl.SSLError, e.g. a refused renegotiation, logged by the reader): no traceback.
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
                # Still nothing: wait. (The flush may have waited for the socket: a request
                # pushed meanwhile set the event already, and clearing it then would leave
                # that request unanswered until the next one arrives.)
                if not self.inflight:
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
