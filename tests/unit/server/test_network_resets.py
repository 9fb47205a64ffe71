"""A client that resets its connection is a normal close: no traceback, no error line."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any

import pytest

from riverbed.server.network import RequestContext
from riverbed.testing.toy_wire import LOOPS, frame, read_response, run, start


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_connection_reset_is_a_normal_close(
    loop_kind: str, caplog: pytest.LogCaptureFixture
) -> None:

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        if body == b"slow":
            await asyncio.sleep(0.2)  # the client resets while this is in flight
            return b"x" * 1_000_000
        return body

    async def main() -> tuple[int, bytes]:
        server, port = await start(handler)
        loop = asyncio.get_running_loop()
        for _ in range(3):
            # reset while a large response is about to be written
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(frame(1, b"slow") + frame(2, b"slow"))
            _reset(s)
            # reset while idle, after an answered request
            s = socket.create_connection(("127.0.0.1", port))
            s.setblocking(False)
            await loop.sock_sendall(s, frame(3, b"hi"))
            await asyncio.sleep(0.05)
            _reset(s)
        await asyncio.sleep(0.6)  # the slow handlers finish and meet the reset sockets
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(9, b"still served"))
        got = await read_response(reader)
        writer.close()
        await server.stop()
        return got

    with caplog.at_level(logging.DEBUG):
        got = run(loop_kind, main())
    assert got == (9, b"still served")
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert noisy == [], [r.getMessage() for r in noisy]
