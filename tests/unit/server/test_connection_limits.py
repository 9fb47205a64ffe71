"""queued.max.requests counts requests, not connections; max.connections(.per.ip) as Kafka."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from riverbed.server.connection_quotas import ConnectionLimits, ConnectionQuotas
from riverbed.server.network import RequestContext
from riverbed.server.purgatory import Purgatory
from riverbed.testing.toy_wire import LOOPS, frame, read_response, run, start, until

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _echo(ctx: RequestContext, body: bytes) -> Any:
    return body


async def _ask(conn: Conn, cid: int, body: bytes) -> tuple[int, bytes]:
    reader, writer = conn
    writer.write(frame(cid, body))
    return await asyncio.wait_for(read_response(reader), 30)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_idle_connections_hold_no_request_permit(loop_kind: str) -> None:
    async def main() -> tuple[int, bytes]:
        server, port = await start(_echo, queued_requests_max=3)
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        await until(lambda: server.connection_count == 10)
        fresh = await asyncio.open_connection("127.0.0.1", port)
        got = await _ask(fresh, 1, b"answered")
        for _, w in [*idle, fresh]:
            w.close()
        await server.stop()
        return got

    assert run(loop_kind, main()) == (1, b"answered")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_parked_requests_hold_no_request_permit(loop_kind: str) -> None:
    purgatory = Purgatory()

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        if body == b"long-poll":
            await purgatory.wait_until([("t", 0)], lambda: False, 60_000)
            return b"woken"
        return body

    async def main() -> tuple[tuple[int, bytes], list[tuple[int, bytes]]]:
        server, port = await start(handler, queued_requests_max=2)
        pollers = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
        for i, (_, w) in enumerate(pollers):
            w.write(frame(i, b"long-poll"))
        await until(lambda: purgatory.parked == 5)
        assert purgatory.parked == 5
        fresh = await asyncio.open_connection("127.0.0.1", port)
        got = await _ask(fresh, 9, b"answered")
        purgatory.close()  # wakes the parked polls: each is still answered
        woken = [await asyncio.wait_for(read_response(r), 30) for r, _ in pollers]
        for _, w in [*pollers, fresh]:
            w.close()
        await server.stop()
        return got, woken

    got, woken = run(loop_kind, main())
    assert got == (9, b"answered")
    assert woken == [(i, b"woken") for i in range(5)]


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_max_connections_blocks_the_acceptor_until_one_closes(loop_kind: str) -> None:
    async def main() -> tuple[tuple[int, bytes], bool, tuple[int, bytes]]:
        quotas = ConnectionQuotas(ConnectionLimits(max_connections=1))
        server, port = await start(_echo, quotas=quotas)
        first = await asyncio.open_connection("127.0.0.1", port)
        answered = await _ask(first, 1, b"first")
        # The second connection completes in the kernel's backlog but is not accepted.
        second = await asyncio.open_connection("127.0.0.1", port)
        second[1].write(frame(2, b"second"))
        waiting = asyncio.ensure_future(read_response(second[0]))
        await asyncio.sleep(0.3)
        blocked = not waiting.done() and server.connection_count == 1
        first[1].close()
        got = await asyncio.wait_for(waiting, 30)
        second[1].close()
        await server.stop()
        return answered, blocked, got

    answered, blocked, got = run(loop_kind, main())
    assert answered == (1, b"first")
    assert blocked
    assert got == (2, b"second")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_max_connections_per_ip_closes_the_extra_connection(
    loop_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> tuple[tuple[int, bytes], bytes, tuple[int, bytes]]:
        quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip=1))
        server, port = await start(_echo, quotas=quotas)
        first = await asyncio.open_connection("127.0.0.1", port)
        answered = await _ask(first, 1, b"first")
        extra = await asyncio.open_connection("127.0.0.1", port)
        closed = await asyncio.wait_for(extra[0].read(), 30)
        extra[1].close()
        first[1].close()
        await until(lambda: quotas.ip_count("127.0.0.1") == 0)
        again = await asyncio.open_connection("127.0.0.1", port)
        got = await _ask(again, 3, b"again")
        again[1].close()
        await server.stop()
        return answered, closed, got

    with caplog.at_level(logging.INFO, logger="riverbed.server.network"):
        answered, closed, got = run(loop_kind, main())
    assert answered == (1, b"first")
    assert closed == b""
    assert got == (3, b"again")
    assert any("max.connections.per.ip" in r.getMessage() for r in caplog.records)


def test_quota_rules() -> None:
    limits = ConnectionLimits(
        max_connections=2,
        max_connections_per_ip=5,
        per_ip_overrides={"10.0.0.1": 1},
        listener_max_connections={"EXTERNAL": 1},
        inter_broker_listener="INTERNAL",
    )
    q = ConnectionQuotas(limits)
    q.add_listener("INTERNAL")
    q.add_listener("EXTERNAL")
    assert q.try_add("EXTERNAL", "10.0.0.2")
    assert not q.slot_available("EXTERNAL")  # its listener limit
    assert q.try_add("INTERNAL", "10.0.0.2")
    assert q.total == 2
    # the inter-broker listener is protected from max.connections (several listeners)
    assert q.slot_available("INTERNAL")
    assert q.try_add("INTERNAL", "10.0.0.1")
    assert not q.try_add("INTERNAL", "::ffff:10.0.0.1")  # its override: 1, same address
    assert q.ip_count("10.0.0.1") == 1
    q.remove("EXTERNAL", "10.0.0.2")
    assert q.slot_available("EXTERNAL") is False  # still 2 of max.connections=2 + 1
    q.remove("INTERNAL", "10.0.0.1")
    assert q.slot_available("EXTERNAL")


def test_quotas_with_one_listener_protect_nobody() -> None:
    q = ConnectionQuotas(ConnectionLimits(max_connections=1, inter_broker_listener="PLAINTEXT"))
    q.add_listener("PLAINTEXT")
    assert q.try_add("PLAINTEXT", "127.0.0.1")
    assert not q.slot_available("PLAINTEXT")


def test_ipv6_peers_are_counted_by_address() -> None:
    q = ConnectionQuotas()
    q.add_listener("L")
    assert q.try_add("L", "::1")
    assert q.ip_count("0:0:0:0:0:0:0:1") == 1


_BASE = [
    "process.roles=broker,controller",
    "node.id=1",
    "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    "controller.listener.names=CONTROLLER",
    "controller.quorum.voters=1@127.0.0.1:9093",
]


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("max.connections=-1", "max.connections"),
        ("max.connections=many", "max.connections"),
        ("max.connections.per.ip=-3", "max.connections.per.ip"),
        ("max.connections.per.ip=0", "max.connections.per.ip"),  # 0 needs overrides
        ("max.connections.per.ip.overrides=10.0.0.1", "max.connections.per.ip.overrides"),
        ("max.connections.per.ip.overrides=10.0.0.1:x", "max.connections.per.ip.overrides"),
        ("max.connections.per.ip.overrides=10.0.0.1:-1", "max.connections.per.ip.overrides"),
        ("listener.name.plaintext.max.connections=-1", "listener.name.plaintext.max.connections"),
        ("listener.name.nosuch.max.connections=5", "listener.name.nosuch.max.connections"),
    ],
)
def test_bad_connection_limits_exit_2_naming_the_key(
    setting: str, key: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from riverbed.cli.main import main

    cfg = tmp_path / "server.properties"
    cfg.write_text("\n".join([*_BASE, f"log.dirs={tmp_path / 'data'}", setting]) + "\n")
    assert main(["server", "start", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "invalid configuration" in err and key in err


def test_connection_limits_from_config() -> None:
    from riverbed.server.config import ServerConfig, parse_properties

    props = parse_properties(
        "\n".join(
            [
                *_BASE,
                "max.connections=100",
                "max.connections.per.ip=0",
                "max.connections.per.ip.overrides=127.0.0.1:7, [::1]:3,localhost:9",
                "listener.name.plaintext.max.connections=50",
            ]
        )
    )
    limits = ServerConfig(props).connection_limits
    assert limits.max_connections == 100
    assert limits.max_connections_per_ip == 0
    assert limits.per_ip_overrides["::1"] in (3, 9)  # localhost may resolve to ::1 too
    assert limits.per_ip_overrides["127.0.0.1"] == 9  # the later entry wins (localhost)
    assert limits.listener_max_connections == {"PLAINTEXT": 50}
    assert limits.inter_broker_listener == "PLAINTEXT"
