"""A client connection's read side as a `asyncio.BufferedProtocol`: the event loop reads
(and on TLS decrypts) straight into riverbed's buffers instead of handing it new bytes
objects.

Why (issue 20's TLS throughput): with a plain `asyncio.StreamReaderProtocol` the TLS
layer (asyncio's and uvloop's SSLProtocol alike) takes its "copied" path: every TLS record
is decrypted into a freshly allocated bytes object of the read size (256 KiB, then shrunk),
the records of one socket read are joined into another, which the StreamReader copies
into its buffer, from which ``readexactly`` copies the frame out. librdkafka writes a
Produce request over TLS as one record per ~1.3 KiB, so a 256 KiB request cost ~190 such
allocations and four copies. Given a `BufferedProtocol`, the TLS layer decrypts records
into the buffer `get_buffer` returns (the socket layer on PLAINTEXT reads into it alike):

- a frame of at least `DIRECT_READ_MIN_BYTES` (its size is known from its 4-byte prefix)
  is read straight into a buffer of its own size, so the transport never writes past it;
- smaller reads go through a staging buffer of `READ_CHUNK_BYTES` into ``_data``
  (requests read ahead by a pipelining client wait there). The connections of one
  SocketServer share one staging buffer: a transport calls ``get_buffer``, fills the
  buffer and calls ``buffer_updated`` in one step on the loop's thread (asyncio's and
  uvloop's socket and TLS transports alike), and ``buffer_updated`` copies out at once.

Reading pauses while more than ``buffered_max`` bytes wait unasked (as StreamReader's
2 x limit: a client cannot make the broker buffer without bound) and resumes when a read
waits. The write side's flow control (``pause_writing`` / ``resume_writing``) is what
`asyncio.StreamWriter.drain` awaits through ``_drain_helper``, as with asyncio's
FlowControlMixin, which cannot be used: it is an `asyncio.Protocol`, and uvloop hands an
`asyncio.Protocol` its data through ``data_received`` even when it has ``get_buffer``.
"""

from __future__ import annotations

import asyncio
import collections

#: The staging buffer a read lands in when no frame buffer is waiting (uvloop's and
#: asyncio's TLS layers hand at most 256 KiB to the application per call).
READ_CHUNK_BYTES = 256 * 1024
#: A read of at least this many bytes gets a buffer of its own, filled by the transport.
DIRECT_READ_MIN_BYTES = 16 * 1024


class FrameReader(asyncio.BufferedProtocol):
    """The subset of `asyncio.StreamReader` a connection uses (``readexactly``,
    ``feed_eof``, ``exception``) fed through the buffered-protocol interface, and the
    protocol side of `asyncio.StreamWriter` (pass it as the writer's protocol, with no
    reader)."""

    def __init__(self, buffered_max: int, stage: bytearray | None = None) -> None:
        self._buffered_max = buffered_max
        self._transport: asyncio.BaseTransport | None = None
        self._stage = stage if stage is not None else bytearray(READ_CHUNK_BYTES)
        self._data = bytearray()
        #: the buffer of the read in progress (None: reads land in ``_stage``)
        self._frame: memoryview | None = None
        self._filled = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._exc: BaseException | None = None
        self._paused = False
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writing_paused = False
        self._lost = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    # -- protocol side -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None and self._filled < len(self._frame):
            return self._frame[self._filled :]
        return memoryview(self._stage)

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None and self._filled < len(self._frame):
            self._filled += nbytes
        else:
            self._data += memoryview(self._stage)[:nbytes]
            if len(self._data) > self._buffered_max:
                self._pause()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # as StreamReaderProtocol: a TCP half-close leaves the write side open for the
        # answers still due; TLS cannot half-close
        return self._transport is not None and self._transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writing_paused = False
        self._release_drains(exc)
        if exc is not None and self._exc is None:
            self._exc = exc
        self._eof = True
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        """What `asyncio.StreamWriter.wait_closed` awaits."""
        return self._closed

    # -- write flow control (asyncio.StreamWriter.drain) ---------------------------------

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._release_drains(None)

    async def _drain_helper(self) -> None:
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._writing_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)

    def _release_drains(self, exc: Exception | None) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    # -- reader side ---------------------------------------------------------------------

    def exception(self) -> BaseException | None:
        return self._exc

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; `asyncio.IncompleteReadError` at end of stream first, the
        connection's error if it was lost with one."""
        if len(self._data) >= n:
            return self._take(n)
        if n < DIRECT_READ_MIN_BYTES:
            while len(self._data) < n:
                await self._wait_for_data(n)
            return self._take(n)
        buf = bytearray(n)
        have = len(self._data)
        buf[:have] = self._data
        self._data.clear()
        self._frame, self._filled = memoryview(buf), have
        try:
            while self._filled < n:
                await self._wait_for_data(n, buf)
        except BaseException:
            # cancelled (a timeout) or failed: what arrived stays readable
            self._data[:0] = self._frame[: self._filled]
            raise
        finally:
            self._frame = None
        return bytes(buf)

    def _take(self, n: int) -> bytes:
        with memoryview(self._data) as view:
            out = bytes(view[:n])
        del self._data[:n]
        return out

    async def _wait_for_data(self, n: int, partial: bytearray | None = None) -> None:
        if self._exc is not None:
            raise self._exc
        if self._eof:
            got = bytes(self._data) if partial is None else bytes(partial[: self._filled])
            raise asyncio.IncompleteReadError(got, n)
        if self._paused:
            self._paused = False
            if isinstance(self._transport, asyncio.ReadTransport):
                self._transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _pause(self) -> None:
        if not self._paused and isinstance(self._transport, asyncio.ReadTransport):
            self._paused = True
            self._transport.pause_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
