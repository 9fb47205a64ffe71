"""A request pushed while the connection's idle writer waits for the socket is answered.

The idle writer flushes, then waits for the next request. When the flush waits (the
socket is full), a request read and answered meanwhile has set the writer's event
already: the writer must look at its queue again before it clears the event and waits,
or that answer sits unwritten until the next request arrives (a replica fetcher, with
one request in flight, would wait for its request timeout).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from riverbed.server.network import RequestContext
from riverbed.server.response_writer import ResponseWriter
from riverbed.testing.toy_wire import LOOPS, frame, read_response, run, start


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_an_answer_ready_during_the_idle_flush_is_written(
    loop_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ResponseWriter._flush

    async def slow_flush(self: ResponseWriter) -> None:
        await original(self)
        for _ in range(20):  # a socket slow to drain: requests arrive and are answered
            await asyncio.sleep(0)

    monkeypatch.setattr(ResponseWriter, "_flush", slow_flush)

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        return body.upper()  # answered in its first turn

    async def main() -> list[tuple[int, bytes]]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = []
        for cid in range(5):
            writer.write(frame(cid, b"x%d" % cid))
            got.append(await asyncio.wait_for(read_response(reader), 10))
        writer.close()
        await server.stop()
        return got

    assert run(loop_kind, main()) == [(i, b"X%d" % i) for i in range(5)]
