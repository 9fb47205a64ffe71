"""SocketServer framing, ordering, back-pressure, idle timeout and sendfile splicing.

Uses a toy codec (header = api_key, api_version, correlation_id; body = the rest) so the
network layer is tested on its own, over real loopback sockets, on both event loops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from riverbed.server.network import (
    SPLICE_COPY_BYTES_MAX,
    FileRecords,
    RequestContext,
    SplicedResponse,
    splice_plan,
)
from riverbed.storage.log_files import FileRange
from riverbed.testing.toy_wire import LOOPS, frame, read_response, run, start
from riverbed.testing.toy_wire import until as _until


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_responses_in_request_order_and_acks0_silence(loop_kind: str) -> None:
    async def handler(ctx: RequestContext, body: bytes) -> Any:
        # Later requests finish first; the body "none" plays acks=0.
        await asyncio.sleep(0.05 / (1 + ctx.header.correlation_id))
        return None if body == b"none" else body.upper()

    async def main() -> list[tuple[int, bytes]]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bodies = [b"a", b"none", b"c", b"d", b"none", b"f"]
        writer.write(b"".join(frame(i, b) for i, b in enumerate(bodies)))
        got = [await read_response(reader) for _ in range(4)]
        writer.close()
        await server.stop()
        return got

    assert run(loop_kind, main()) == [(0, b"A"), (2, b"C"), (3, b"D"), (5, b"F")]


@pytest.mark.parametrize("bad", ["oversized", "negative", "malformed"])
def test_bad_frame_closes_only_that_connection(bad: str, caplog: pytest.LogCaptureFixture) -> None:
    async def handler(ctx: RequestContext, body: bytes) -> Any:
        return body

    async def main() -> tuple[bytes, tuple[int, bytes]]:
        server, port = await start(handler, socket_request_max_bytes=1000)
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        if bad == "oversized":
            w1.write(struct.pack(">i", 1001) + b"x" * 50)
        elif bad == "negative":
            w1.write(struct.pack(">i", -5))
        else:
            w1.write(frame(7, b"zz", key=-3))
        eof = await asyncio.wait_for(r1.read(), 5)
        w2.write(frame(9, b"still here"))
        other = await read_response(r2)
        w1.close()
        w2.close()
        await server.stop()
        return eof, other

    with caplog.at_level(logging.WARNING, logger="riverbed.server.network"):
        eof, other = asyncio.run(main())
    assert eof == b""
    assert other == (9, b"still here")
    assert any("closing connection from 127.0.0.1:" in r.getMessage() for r in caplog.records)


def test_inflight_bound_applies_back_pressure() -> None:
    started = 0
    release = asyncio.Event()

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        nonlocal started
        started += 1
        await release.wait()
        return body

    async def main() -> tuple[int, int]:
        server, port = await start(handler, inflight_requests_max=3)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(frame(i, b"x") for i in range(40)))
        await _until(lambda: started >= 3)
        await asyncio.sleep(0.2)  # time to (wrongly) read more, were it not bounded
        blocked = started
        release.set()
        got = [await read_response(reader) for _ in range(40)]
        writer.close()
        await server.stop()
        return blocked, len(got)

    blocked, answered = asyncio.run(main())
    # Exactly inflight_requests_max requests were read and handed to handlers.
    assert blocked == 3
    assert answered == 40


def test_idle_connection_is_closed() -> None:
    async def handler(ctx: RequestContext, body: bytes) -> Any:
        return body

    async def main() -> bytes:
        server, port = await start(handler, connections_max_idle_ms=200)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await server.stop()
        return data

    assert asyncio.run(main()) == b""


def test_idle_watch_spares_busy_connections_and_requests_in_flight() -> None:
    """connections.max.idle.ms counts from the last frame (one timer per connection, not
    a deadline per read): a client sending a frame every quarter period outlives several
    periods; a request in flight for two periods (a long poll) is answered; then,
    silent and with nothing in flight, the connection is closed."""
    idle_ms = 800
    release = asyncio.Event()

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        if body == b"park":
            await release.wait()
        return body

    async def main() -> tuple[list[bytes], bytes]:
        server, port = await start(handler, connections_max_idle_ms=idle_ms)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        answers = []
        for i in range(8):  # 8 frames 200 ms apart: 1.6 s, two idle periods
            writer.write(frame(i, b"ping"))
            answers.append((await asyncio.wait_for(read_response(reader), 5))[1])
            await asyncio.sleep(idle_ms / 4000)
        writer.write(frame(99, b"park"))
        loop.call_later(2 * idle_ms / 1000, release.set)
        answers.append((await asyncio.wait_for(read_response(reader), 10))[1])
        rest = await asyncio.wait_for(reader.read(), 10)  # closed once idle
        writer.close()
        await server.stop()
        return answers, rest

    answers, rest = run("uvloop", main())  # the nodes' loop
    assert answers == [b"ping"] * 8 + [b"park"]
    assert rest == b""


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("compact", [False, True])
def test_spliced_file_ranges_are_streamed(loop_kind: str, compact: bool, tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    content = bytes(range(256)) * 4000  # ~1 MB so sendfile cannot take it in one go
    seg.write_bytes(content)

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        ranges = [FileRange.open(seg, 10, 600_000), FileRange.open(seg, 700_000, 300_000)]
        fr = FileRecords(ranges)
        empty = FileRecords([])
        prefix = (lambda n: bytes([n + 1])) if compact else (lambda n: struct.pack(">i", n))
        encoded_body = b"HEAD" + prefix(16) + fr.token + b"MID" + prefix(16) + empty.token
        return SplicedResponse(body=encoded_body + b"TAIL", files=[fr, empty], compact=compact)

    async def main() -> tuple[int, bytes]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(42, b"fetch") + frame(43, b"fetch"))
        first = await read_response(reader)
        second = await read_response(reader)
        assert second[0] == 43 and first[1] == second[1]
        writer.close()
        await server.stop()
        return first

    cid, body = run(loop_kind, main())
    expected_data = content[10:600_010] + content[700_000:1_000_000]
    if compact:
        # 900001 as an unsigned varint, then an empty compact bytes (length 0 -> 1).
        n, length_prefix = 900_001, bytearray()
        while n >= 0x80:
            length_prefix.append((n & 0x7F) | 0x80)
            n >>= 7
        length_prefix.append(n)
        expected = b"HEAD" + bytes(length_prefix) + expected_data + b"MID" + b"\x01" + b"TAIL"
    else:
        expected = (
            b"HEAD"
            + struct.pack(">i", 900_000)
            + expected_data
            + b"MID"
            + struct.pack(">i", 0)
            + b"TAIL"
        )
    assert cid == 42
    assert body == expected


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_small_spliced_response_is_one_copied_write_large_one_uses_sendfile(
    loop_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 23: a follower's fetch at the log end carries one small batch; sent as a
    # write, a sendfile and a write it reached the follower as three segments
    seg = tmp_path / "00000000000000000000.log"
    content = bytes(range(256)) * 4000
    seg.write_bytes(content)
    sendfiles: list[int] = []
    real_sendfile = os.sendfile

    def recording_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        sendfiles.append(count)
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", recording_sendfile)
    small = SPLICE_COPY_BYTES_MAX // 2

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        size = small if body == b"small" else SPLICE_COPY_BYTES_MAX + 1
        fr = FileRecords([FileRange.open(seg, 100, size)])
        return SplicedResponse(
            body=b"HEAD" + struct.pack(">i", 16) + fr.token + b"TAIL", files=[fr], compact=False
        )

    async def main() -> list[tuple[int, bytes]]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(1, b"small"))
        got = [await read_response(reader)]
        assert sendfiles == []  # read into the one frame, not spliced
        writer.write(frame(2, b"large"))
        got.append(await read_response(reader))
        writer.close()
        await server.stop()
        return got

    (cid1, body1), (cid2, body2) = run(loop_kind, main())
    assert (
        cid1 == 1
        and body1 == b"HEAD" + struct.pack(">i", small) + content[100 : 100 + small] + b"TAIL"
    )
    large = SPLICE_COPY_BYTES_MAX + 1
    assert (
        cid2 == 2
        and body2 == b"HEAD" + struct.pack(">i", large) + content[100 : 100 + large] + b"TAIL"
    )
    assert sum(sendfiles) >= 1  # the large one went through sendfile


def test_splice_plan_rejects_missing_token() -> None:
    fr = FileRecords([])
    with pytest.raises(ValueError, match="token not found"):
        splice_plan(b"no token here", SplicedResponse(body=None, files=[fr], compact=False))


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_stop_answers_inflight_requests_then_closes(loop_kind: str) -> None:
    in_flight = asyncio.Event()

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        in_flight.set()
        await asyncio.sleep(0.3)
        return body

    async def main() -> tuple[tuple[int, bytes], bytes]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(5, b"slow"))
        await asyncio.wait_for(in_flight.wait(), 10)  # in flight when the server stops
        await server.stop()
        got = await read_response(reader)
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return got, rest

    got, rest = run(loop_kind, main())
    assert got == (5, b"slow")
    assert rest == b""


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_stop_does_not_wait_out_a_muted_connections_throttle(
    loop_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quota throttle mutes a connection for as long as the quota's window: a stop
    closes it at once (as Kafka closes a muted channel), and its request that waited is
    never handled. The grace would otherwise be spent on it whole (make test: 5 s per
    node stopped after a controller-mutation quota test)."""
    from riverbed.server import socket_server

    monkeypatch.setattr(socket_server, "SHUTDOWN_GRACE_MS", 600_000)
    handled: list[bytes] = []

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        handled.append(body)
        assert ctx.throttle is not None
        ctx.throttle.throttle(600_000)  # muted for ten minutes
        return body

    async def main() -> tuple[tuple[int, bytes], bytes]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(1, b"first"))
        got = await read_response(reader)
        writer.write(frame(2, b"muted"))
        await asyncio.sleep(0.05)
        await asyncio.wait_for(server.stop(), 30)  # not the 600 s grace, nor the throttle
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return got, rest

    got, rest = run(loop_kind, main())
    assert got == (1, b"first")
    assert rest == b""
    assert handled == [b"first"]


def test_queued_requests_bound_spans_connections() -> None:
    started = 0
    release = asyncio.Event()

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        nonlocal started
        started += 1
        await release.wait()
        return body

    async def main() -> tuple[int, int, int]:
        server, port = await start(handler, inflight_requests_max=4, queued_requests_max=3)
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        for _, w in conns:
            w.write(b"".join(frame(i, b"x") for i in range(4)))
        await _until(lambda: started >= 3)
        await asyncio.sleep(0.2)  # time to (wrongly) read more, were it not bounded
        blocked = started
        release.set()
        answered = [len([await read_response(r) for _ in range(4)]) for r, _ in conns]
        # Every permit came back: another full round fits again.
        for _, w in conns:
            w.write(frame(9, b"again"))
        again = [await read_response(r) for r, _ in conns]
        for _, w in conns:
            w.close()
        await server.stop()
        return blocked, sum(answered), len(again)

    assert asyncio.run(main()) == (3, 8, 2)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_pipelined_responses_before_a_close_are_delivered(loop_kind: str) -> None:
    from riverbed.server.network import CloseConnection

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        if body == b"close":
            raise CloseConnection("test asked to close")
        return body

    async def main() -> tuple[list[tuple[int, bytes]], bytes]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bodies = [b"r%d" % i for i in range(30)] + [b"close", b"never"]
        writer.write(b"".join(frame(i, b) for i, b in enumerate(bodies)))
        got = [await read_response(reader) for _ in range(30)]
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await server.stop()
        return got, rest

    got, rest = run(loop_kind, main())
    assert got == [(i, b"r%d" % i) for i in range(30)]
    assert rest == b""
