"""FrameReader, a connection's buffered-protocol read side: exact reads across the
transport's chunks, large frames read into their own buffer, bounded read-ahead, end of
stream, loss and cancellation; and over real TLS on both event loops (librdkafka-sized
TLS records), where the TLS layer must hand it the decrypted bytes through get_buffer."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from typing import Any

import pytest

from riverbed.server.frame_reader import DIRECT_READ_MIN_BYTES, FrameReader
from riverbed.testing.certs import make_pki
from riverbed.testing.cluster import scaled_s
from riverbed.testing.toy_wire import LOOPS, run


class FakeTransport(asyncio.ReadTransport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_reading(self) -> bool:
        return not self.paused

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def feed(reader: FrameReader, data: bytes, chunk: int) -> None:
    """What a transport does: fill get_buffer's buffer, then buffer_updated."""
    while data:
        buf = reader.get_buffer(-1)
        n = min(len(buf), chunk, len(data))
        buf[:n] = data[:n]
        reader.buffer_updated(n)
        data = data[n:]


def test_exact_reads_across_chunks_and_a_large_frame_in_its_own_buffer() -> None:
    async def main() -> None:
        reader = FrameReader(1 << 20)
        reader.connection_made(FakeTransport())
        big = bytes(range(256)) * (DIRECT_READ_MIN_BYTES // 64)  # 4 x the direct minimum
        stream = b"abc" + big + b"tail"
        feed(reader, stream[:10], 3)  # the start of the big frame waits in the stage
        task = asyncio.ensure_future(
            asyncio.gather(reader.readexactly(3), reader.readexactly(len(big)))
        )
        await asyncio.sleep(0)
        # the rest lands straight in the frame's buffer: get_buffer offers exactly its rest
        assert len(reader.get_buffer(-1)) == len(big) - 7
        feed(reader, stream[10:], 1360)
        assert await task == [b"abc", big]
        assert await reader.readexactly(4) == b"tail"

    asyncio.run(main())


def test_read_ahead_is_bounded_and_a_waiting_read_resumes() -> None:
    async def main() -> None:
        reader = FrameReader(buffered_max=1000)
        transport = FakeTransport()
        reader.connection_made(transport)
        feed(reader, b"x" * 1001, 500)
        assert transport.paused  # more than buffered_max waits unasked: stop reading
        assert await reader.readexactly(1001) == b"x" * 1001
        assert transport.paused  # nothing asked for yet
        waiting = asyncio.ensure_future(reader.readexactly(2))
        await asyncio.sleep(0)
        assert not transport.paused  # a read waits: reading resumes
        feed(reader, b"yz", 2)
        assert await waiting == b"yz"

    asyncio.run(main())


def test_end_of_stream_loss_and_cancellation() -> None:
    async def main() -> None:
        reader = FrameReader(1 << 20)
        reader.connection_made(FakeTransport())
        n = DIRECT_READ_MIN_BYTES * 2
        feed(reader, b"p" * 100, 100)
        pending = asyncio.ensure_future(reader.readexactly(n))
        await asyncio.sleep(0)
        feed(reader, b"q" * 50, 50)
        pending.cancel()  # a timed-out read: what arrived stays readable
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert await reader.readexactly(150) == b"p" * 100 + b"q" * 50
        feed(reader, b"r" * 10, 10)
        reader.eof_received()
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readexactly(n)
        assert info.value.partial == b"r" * 10

        lost = FrameReader(1 << 20)
        lost.connection_made(FakeTransport())
        lost.pause_writing()
        drain = asyncio.ensure_future(lost._drain_helper())
        await asyncio.sleep(0)
        assert not drain.done()  # the transport's buffer is full: the writer waits
        lost.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionResetError):
            await drain
        with pytest.raises(ConnectionResetError):
            await lost.readexactly(4)

    asyncio.run(main())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _frames() -> list[bytes]:
    return [b"s" * 5, bytes(range(256)) * 1200, b"m" * 3000, b"e" * 70_000]


async def _tls_round_trip(pki: Any) -> list[bytes]:
    loop = asyncio.get_running_loop()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki.server_pem))
    got: list[bytes] = []
    done = asyncio.Event()

    async def on_connection(sock: socket.socket) -> None:
        reader = FrameReader(128 * 1024)
        transport, _ = await loop.connect_accepted_socket(lambda: reader, sock, ssl=server_ctx)
        for _ in _frames():
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            got.append(await reader.readexactly(size))
        done.set()
        transport.close()

    deadline_s = scaled_s(20)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]

    def client() -> None:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.check_hostname = False
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port))) as s:
            s.settimeout(deadline_s)
            data = b"".join(struct.pack(">i", len(f)) + f for f in _frames())
            for i in range(0, len(data), 1360):  # one TLS record per 1360 bytes
                s.sendall(data[i : i + 1360])
            s.recv(1)  # until the server closes

    sent = loop.run_in_executor(None, client)
    sock, _ = await loop.sock_accept(listener)
    serving = asyncio.ensure_future(on_connection(sock))
    try:
        await asyncio.wait_for(done.wait(), deadline_s)
        await serving
    finally:
        serving.cancel()
        listener.close()
        await asyncio.wait_for(sent, deadline_s * 2)  # its socket times out meanwhile
    return got


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_frames_over_tls_in_small_records(loop_kind: str, pki: Any) -> None:
    """uvloop passes an asyncio.Protocol's data to data_received even when it has
    get_buffer: a FrameReader that were one would never see these bytes."""
    assert run(loop_kind, _tls_round_trip(pki)) == _frames()
