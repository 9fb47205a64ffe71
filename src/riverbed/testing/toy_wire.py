"""A toy request codec for testing the network layer on its own, over real sockets.

Request frames: ``int32 size`` + ``int16 api_key, int16 api_version, int32
correlation_id`` + body; a response is ``int32 size`` + ``int32 correlation_id`` + the
handler's bytes.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any

import uvloop

from riverbed.protocol.exceptions import ProtocolError
from riverbed.server.network import SocketServer

LOOPS = ["asyncio", "uvloop"]


@dataclass(frozen=True)
class Hdr:
    api_key: int
    api_version: int
    correlation_id: int


class ToyCodec:
    def decode_request(self, frame: bytes) -> tuple[Any, Any]:
        if len(frame) < 8:
            raise ProtocolError("short header")
        key, ver, cid = struct.unpack_from(">hhi", frame)
        if key < 0:
            raise ProtocolError("negative api key")
        return Hdr(key, ver, cid), frame[8:]

    def encode_response(self, header: Any, body: Any) -> bytes:
        payload = struct.pack(">i", header.correlation_id) + bytes(body)
        return struct.pack(">i", len(payload)) + payload


def frame(cid: int, body: bytes, key: int = 1) -> bytes:
    payload = struct.pack(">hhi", key, 0, cid) + body
    return struct.pack(">i", len(payload)) + payload


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    data = await reader.readexactly(size)
    return struct.unpack_from(">i", data)[0], data[4:]


async def until(cond: Any, timeout_s: float = 10.0) -> None:
    """Poll ``cond`` (a liveness wait under CPU contention, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond() and loop.time() < deadline:
        await asyncio.sleep(0.01)


def run(loop_kind: str, coro: Any) -> Any:
    if loop_kind == "uvloop":
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


async def start(handler: Any, **kw: Any) -> tuple[SocketServer, int]:
    server = SocketServer(handler, codec=ToyCodec(), **kw)
    _, port = await server.listen("PLAINTEXT", "127.0.0.1", 0)
    return server, port
