"""The request metrics' hooks in the network layer (issue 21): with an observer, each
request's handler task (`TrafficStats.run_timed`) stamps dequeue and answer on the request's permit
and counts the answer, the park points stamp the first park through the permit; the
writer stamps taken and hands each write's permits to the observer with the send time.
Over real loopback sockets with the toy codec, on both event loops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from riverbed.server.metrics.traffic import TrafficStats
from riverbed.server.network import RequestContext, Response
from riverbed.server.request_permits import CURRENT_PERMIT, RequestPermit, park_current_request
from riverbed.server.request_timing import (
    ANSWERED,
    DEQUEUED,
    PARKED,
    RECEIVED,
    SENT,
    TAKEN,
    TimedPermit,
)
from riverbed.testing.toy_wire import LOOPS, frame, read_response, run, start, until


class Recorder(TrafficStats):
    """The node's `RequestObserver` (its handler task, `TrafficStats.run_timed`), keeping
    what it counted and was told was sent."""

    def __init__(self) -> None:
        super().__init__(lambda _topic_id: None)
        self.answered_bodies: list[bytes] = []
        self.timings: list[TimedPermit] = []

    def record(self, ctx: RequestContext, body: Any, response: Response | None) -> str:
        self.answered_bodies.append(body)
        return f"Toy{ctx.header.api_key}"

    def sent(self, permits: list[TimedPermit], sent: float) -> None:
        assert all(p.stamps[SENT] == 0.0 for p in permits)  # the observer's to stamp
        for p in permits:
            p.stamps[SENT] = sent
        self.timings.extend(permits)


async def handler(ctx: RequestContext, body: bytes) -> Any:
    if body == b"park":  # a purgatory wait: parked twice, the first park counts
        park_current_request()
        await asyncio.sleep(0.02)
        park_current_request()
        await asyncio.sleep(0.01)
    if body == b"raise":
        raise RuntimeError("handler failed")
    return None if body == b"none" else body.upper()


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_every_request_is_stamped_in_stage_order_and_counted_once(loop_kind: str) -> None:
    observer = Recorder()

    async def main() -> tuple[list[tuple[int, bytes]], int]:
        server, port = await start(handler, observer=observer)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bodies = [b"a", b"park", b"none", b"d"]
        writer.write(b"".join(frame(i, b) for i, b in enumerate(bodies)))
        got = [await read_response(reader) for _ in range(3)]
        await until(lambda: len(observer.timings) == 4)  # acks=0's too, at once
        writer.close()
        held = server.queued.held
        await server.stop()
        return got, held

    got, held = run(loop_kind, main())
    assert got == [(0, b"A"), (1, b"PARK"), (3, b"D")]
    assert held == 0  # every permit given back (the parked one at its first park)
    assert sorted(observer.answered_bodies) == [b"a", b"d", b"none", b"park"]
    in_order = sorted(observer.timings, key=_key)
    by_body = dict(zip([b"a", b"park", b"none", b"d"], in_order, strict=True))
    for t in observer.timings:
        assert t.name == "Toy1"
        s = t.stamps
        assert 0 < s[RECEIVED] <= s[DEQUEUED] <= s[ANSWERED] <= s[TAKEN] <= s[SENT]
    parked = by_body[b"park"].stamps
    assert parked[DEQUEUED] <= parked[PARKED] < parked[ANSWERED]
    # the first park counts: the handler waited 20 ms after it, then parked again
    assert parked[ANSWERED] - parked[PARKED] >= 0.025
    assert [by_body[b].stamps[PARKED] for b in (b"a", b"none", b"d")] == [0.0, 0.0, 0.0]


def _key(t: TimedPermit) -> float:
    return t.stamps[RECEIVED]


def test_a_request_whose_handler_raised_is_neither_counted_nor_timed() -> None:
    observer = Recorder()

    async def main() -> int:
        server, port = await start(handler, observer=observer)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(0, b"raise"))
        assert await reader.read() == b""  # the connection is closed
        writer.close()
        held = server.queued.held
        await server.stop()
        return held

    assert asyncio.run(main()) == 0  # its permit came back
    assert observer.answered_bodies == [] and observer.timings == []


def test_without_an_observer_requests_carry_no_timing() -> None:
    seen: list[type[RequestPermit] | None] = []

    async def plain(ctx: RequestContext, body: bytes) -> Any:
        permit = CURRENT_PERMIT.get()
        seen.append(None if permit is None else type(permit))
        park_current_request()  # nothing to stamp: only the permit goes back
        return body

    async def main() -> tuple[int, bytes]:
        server, port = await start(plain)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(0, b"x"))
        got = await read_response(reader)
        writer.close()
        await server.stop()
        return got

    assert asyncio.run(main()) == (0, b"x")
    assert seen == [RequestPermit]  # a plain permit: no stamps
