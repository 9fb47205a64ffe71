"""Seeded fuzzing of the listener with the real protocol codec.

Every connection gets mutated or random frames; whatever happens to that connection
(an answer, or a close), the server must keep serving: a well-formed ApiVersions request
on a fresh connection is answered after every round.
"""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import (
    RequestHeader,
    decode_response,
    encode_request,
    response_body_version,
)
from riverbed.protocol.messages import ApiVersionsRequest, MetadataRequest, response_class
from riverbed.server.broker.versioning import fit_to_version
from riverbed.server.network import RequestContext, SocketServer

SEEDS = 120


def _valid_frames() -> list[bytes]:
    return [
        encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "fuzz"), ApiVersionsRequest()),
        encode_request(
            RequestHeader(ApiKey.METADATA, 12, 2, "fuzz"),
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]),
        ),
        encode_request(RequestHeader(ApiKey.METADATA, 1, 3, "fuzz"), MetadataRequest(topics=None)),
    ]


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    kind = rng.randrange(4)
    if kind == 0:  # flip bytes after the size prefix
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(4, len(data))
            data[i] = rng.randrange(256)
    elif kind == 1:  # truncate the body but keep the declared size consistent
        cut = rng.randrange(8, len(data))
        data = data[:cut]
        struct.pack_into(">i", data, 0, len(data) - 4)
    elif kind == 2:  # random body of random length
        body = rng.randbytes(rng.randrange(0, 200))
        data = bytearray(struct.pack(">i", len(body)) + body)
    else:  # absurd size prefix
        struct.pack_into(">i", data, 0, rng.choice([-1, 2**31 - 1, 10**9]))
    return bytes(data)


def test_fuzzed_frames_never_stop_the_server() -> None:
    async def handler(ctx: RequestContext, body: Any) -> Any:
        resp = response_class(ctx.header.api_key)()
        return fit_to_version(resp, response_body_version(ctx.header))

    async def main() -> int:
        server = SocketServer(handler, socket_request_max_bytes=4096, connections_max_idle_ms=2000)
        _, port = await server.listen("PLAINTEXT", "127.0.0.1", 0)
        valid = _valid_frames()
        answered = 0
        for seed in range(SEEDS):
            rng = random.Random(seed)
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"".join(_mutate(rng, rng.choice(valid)) for _ in range(3)))
            writer.close()
            # A fresh, well-formed client is still answered.
            r2, w2 = await asyncio.open_connection("127.0.0.1", port)
            header = RequestHeader(ApiKey.API_VERSIONS, 3, 1000 + seed, "ok")
            w2.write(encode_request(header, ApiVersionsRequest()))
            (size,) = struct.unpack(">i", await asyncio.wait_for(r2.readexactly(4), 5))
            resp = decode_response(header, await r2.readexactly(size))
            assert resp.error_code == 0
            answered += 1
            w2.close()
        await server.stop()
        return answered

    assert asyncio.run(main()) == SEEDS
