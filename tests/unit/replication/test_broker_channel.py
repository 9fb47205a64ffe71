"""BrokerChannel's request timeout (one watchdog per channel, moved on lazily): a request
unanswered past its own deadline raises TimeoutError, one answered late but within its
own deadline (past an earlier request's) does not, and the channel reconnects after."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import decode_request, encode_response
from riverbed.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from riverbed.server.fault_handler import RecordingFaultHandler
from riverbed.server.replication.fetcher import BrokerChannel

_SIZE = struct.Struct(">i")
FAULTS = RecordingFaultHandler()  # the watchdog never faults: a fault halts
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


async def _server(answer_delays_s: list[float | None]) -> tuple[asyncio.Server, int]:
    """A broker answering ApiVersions: the n-th request of each connection after
    ``answer_delays_s[n]`` seconds (None: never)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for delay in answer_delays_s:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            header, _ = decode_request(await reader.readexactly(size))
            if delay is None:
                await reader.read()  # until the client gives up
                break
            await asyncio.sleep(delay)
            writer.write(encode_response(header, ApiVersionsResponse()))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _ask(channel: BrokerChannel, timeout_s: float) -> object:
    return await channel.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(), timeout_s)


def _run(loop: str, main: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_an_unanswered_request_times_out_at_its_deadline(loop: str) -> None:
    async def main() -> None:
        server, port = await _server([0.0, None])
        channel = BrokerChannel("127.0.0.1", port, "test", 1 << 20, fault_handler=FAULTS)
        assert isinstance(await _ask(channel, 30.0), ApiVersionsResponse)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await _ask(channel, 0.5)  # shorter than the first request's timeout
        assert time.monotonic() - start < 20.0  # not the first request's 30 s
        channel.close()
        server.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_late_answer_within_its_own_deadline_is_not_a_timeout(loop: str) -> None:
    async def main() -> None:
        server, port = await _server([0.0, 1.5])
        channel = BrokerChannel("127.0.0.1", port, "test", 1 << 20, fault_handler=FAULTS)
        assert isinstance(await _ask(channel, 3.0), ApiVersionsResponse)
        await asyncio.sleep(2.0)
        # answered ~3.5 s after the first request: past its deadline, within this one's
        assert isinstance(await _ask(channel, 3.0), ApiVersionsResponse)
        channel.close()
        server.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_the_channel_reconnects_after_a_timeout(loop: str) -> None:
    async def main() -> None:
        server, port = await _server([None, 0.0])
        channel = BrokerChannel("127.0.0.1", port, "test", 1 << 20, fault_handler=FAULTS)
        with pytest.raises(TimeoutError):
            await _ask(channel, 0.3)
        # the caller closes on a timeout (every caller does); a new connection answers
        channel.close()
        server2, port2 = await _server([0.0])
        channel.port = port2
        assert isinstance(await _ask(channel, 30.0), ApiVersionsResponse)
        channel.close()
        server.close()
        server2.close()

    _run(loop, main)


def _threaded_server() -> tuple[socket.socket, threading.Thread]:
    """A broker in a thread, answering every ApiVersions at once: it answers while the
    test's event loop is blocked."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:  # a connection at a time, until the test closes the listener
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                stream = conn.makefile("rb")
                while head := stream.read(4):
                    (size,) = _SIZE.unpack(head)
                    header, _ = decode_request(stream.read(size))
                    conn.sendall(encode_response(header, ApiVersionsResponse()))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_an_answer_read_in_the_watchdogs_turn_leaves_the_channel_usable(loop: str) -> None:
    """The answer and the request's deadline arrive in one loop turn (the loop was busy
    past the deadline while the answer came): asyncio reads the answer first and then
    runs the watchdog, which aborts the connection of a request already answered. The
    request returns its answer (or, where the watchdog runs first, times out and the
    caller closes); either way the next request is answered. Before, the aborted
    connection stayed in place and the next request failed with a TimeoutError at once."""

    async def main() -> None:
        listener, thread = _threaded_server()
        port = listener.getsockname()[1]
        channel = BrokerChannel("127.0.0.1", port, "test", 1 << 20, fault_handler=FAULTS)
        assert isinstance(await _ask(channel, 30.0), ApiVersionsResponse)  # connected
        asyncio.get_running_loop().call_soon(time.sleep, 0.5)  # busy past the deadline
        try:
            assert isinstance(await _ask(channel, 0.2), ApiVersionsResponse)
        except TimeoutError:
            channel.close()  # as every caller does after a timeout
        assert isinstance(await _ask(channel, 30.0), ApiVersionsResponse)
        channel.close()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept
        listener.close()
        await asyncio.to_thread(thread.join, 5)  # the loop closes the connection meanwhile

    _run(loop, main)
