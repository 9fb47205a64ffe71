"""Small drivers for unit tests of ``RaftNode``: build a node, push it into a role, pick
actions out of its output. Deterministic (seeded ``random.Random``). Also
``raft_listener``: a minimal Kafka-framed TCP listener serving raft RPCs for a
``RaftDriver`` (what the server's controller listener does), for in-process tests."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from typing import Any, TypeVar

from riverbed.raft.actions import Action, SendRequest, SendResponse
from riverbed.raft.config import RaftConfig
from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    Entry,
    Errors,
    FetchRequest,
    FetchResponse,
    VoteResponse,
)
from riverbed.raft.node import RaftNode
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.roles import Role
from riverbed.raft.snapshots import MemorySnapshotStore

T = TypeVar("T")

FAR = 10**9  # a time after every timer


def make_config(voters: tuple[int, ...] = (1, 2, 3), **overrides: Any) -> RaftConfig:
    return RaftConfig(voters=frozenset(voters), cluster_id="test", **overrides)


def make_node(
    node_id: int = 1,
    voters: tuple[int, ...] = (1, 2, 3),
    *,
    log: MemoryLog | None = None,
    snapshots: MemorySnapshotStore | None = None,
    quorum_state: QuorumState | None = None,
    directory_id: str = "",
    seed: int = 0,
    **overrides: Any,
) -> RaftNode:
    return RaftNode(
        node_id,
        make_config(voters, **overrides),
        log if log is not None else MemoryLog(),
        snapshots if snapshots is not None else MemorySnapshotStore(),
        random.Random(seed),
        quorum_state=quorum_state,
        directory_id=directory_id,
    )


def of_type(actions: list[Action], cls: type[T]) -> list[T]:
    return [a for a in actions if isinstance(a, cls)]


def requests(actions: list[Action], cls: type[T]) -> list[tuple[SendRequest, T]]:
    return [
        (a, a.request) for a in actions if isinstance(a, SendRequest) and isinstance(a.request, cls)
    ]


def responses(actions: list[Action], cls: type[T]) -> list[T]:
    return [
        a.response for a in actions if isinstance(a, SendResponse) and isinstance(a.response, cls)
    ]


def timeout(node: RaftNode, now: int) -> tuple[int, list[Action]]:
    """Advance to the node's next deadline (at least ``now``) and tick."""
    at = max(now, node.next_deadline_ms())
    return at, node.tick(at)


def make_leader(node: RaftNode, now: int = 0) -> tuple[int, list[Action]]:
    """Start ``node`` (a voter) and win pre-vote and vote; returns (now, actions)."""
    if not node.started:
        node.start(now)
    while node.role not in (Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER):
        now, _ = timeout(node, now + 1)
    out: list[Action] = []
    if node.role is Role.PROSPECTIVE:
        pending = [
            (corr, dest) for corr, (dest, kind, _, _) in node.pending.items() if kind == "pre_vote"
        ]
        for corr, dest in pending:
            out += node.handle_response(
                dest, corr, VoteResponse(Errors.NONE, -1, node.epoch, True, True), now
            )
            if node.role is not Role.PROSPECTIVE:
                break
    if node.role is Role.CANDIDATE:
        pending = [
            (corr, dest)
            for corr, (dest, kind, epoch, _) in node.pending.items()
            if kind == "vote" and epoch == node.epoch
        ]
        for corr, dest in pending:
            out += node.handle_response(
                dest, corr, VoteResponse(Errors.NONE, -1, node.epoch, True, False), now
            )
            if node.role is not Role.CANDIDATE:
                break
    role: Role = node.role
    assert role is Role.LEADER, node.describe()
    return now, out


def make_follower(node: RaftNode, leader: int, epoch: int, now: int = 0) -> list[Action]:
    if not node.started:
        node.start(now)
    return node.handle_request(leader, 999, BeginQuorumEpochRequest("test", leader, epoch), now)


def fetch(
    replica: int, offset: int, last_epoch: int, epoch: int, max_wait_ms: int = 0
) -> FetchRequest:
    return FetchRequest("test", replica, epoch, offset, last_epoch, 1 << 20, max_wait_ms)


def entries(start: int, epoch: int, *values: str) -> list[Entry]:
    return [Entry(start + i, epoch, v.encode()) for i, v in enumerate(values)]


def fetch_reply(leader: int, epoch: int, hw: int, ents: list[Entry], lbo: int = 0) -> FetchResponse:
    return FetchResponse(Errors.NONE, leader, epoch, hw, lbo, tuple(ents))


async def raft_listener(
    drivers: dict[int, Any],
    node_id: int,
    errors: list[BaseException],
    port: int = 0,
    connections: set[asyncio.StreamWriter] | None = None,
) -> asyncio.Server:
    """Listen on 127.0.0.1:``port`` (0: a free one); answer raft RPCs with ``drivers[node_id]``, in request order
    per connection (as Kafka's network layer). Server-side failures go to ``errors``; the
    accepted connections are kept in ``connections`` (to abort them as a killed process's
    kernel would)."""
    from riverbed.protocol.headers import decode_request, encode_response
    from riverbed.server.raft_transport import RAFT_API_KEYS, is_raft_fetch, serve_raft_request

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        order: asyncio.Queue[asyncio.Task[bytes] | None] = asyncio.Queue()

        async def answer(frame: bytes) -> bytes:
            header, msg = decode_request(frame)
            if not (header.api_key in RAFT_API_KEYS or is_raft_fetch(header.api_key, msg)):
                raise ValueError(f"api key {header.api_key} is not a raft RPC")
            reply = await serve_raft_request(drivers[node_id], header.api_key, msg)
            return encode_response(header, reply)

        async def write_in_order() -> None:
            while (task := await order.get()) is not None:
                try:
                    reply = await task
                except Exception as exc:
                    errors.append(exc)
                    raise
                try:
                    writer.write(reply)
                    await writer.drain()
                except ConnectionError:
                    # the peer went away with the answer on its way (a killed process, a
                    # client closed at the end of a test): its loss, not the server's failure
                    return

        writer_task = asyncio.create_task(write_in_order())
        if connections is not None:
            connections.add(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                order.put_nowait(asyncio.create_task(answer(await reader.readexactly(size))))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            order.put_nowait(None)
            with contextlib.suppress(Exception):
                await writer_task
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", port)
