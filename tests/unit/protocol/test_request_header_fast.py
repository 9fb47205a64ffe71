"""The request header's one-unpack read gives what the field-by-field read gives.

`decode_request_header` reads the usual header (v1/v2, a client id or null, no tagged
fields) with one ``unpack_from``; every other frame goes to `_decode_request_header`. For
any frame (well-formed or not, every header version, bytes, bytearray or memoryview)
both give the same header and body offset, or the same ProtocolError.
"""

from __future__ import annotations

import random
import struct

import pytest

from riverbed.protocol import headers as h
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.exceptions import ProtocolError

#: (api key, version) of each header version: v0 (ControlledShutdown v0), v1, v2
KEYS = [
    (ApiKey.CONTROLLED_SHUTDOWN, 0),
    (ApiKey.METADATA, 8),
    (ApiKey.PRODUCE, 8),
    (ApiKey.METADATA, 12),
    (ApiKey.FETCH, 15),
    (ApiKey.PRODUCE, 10),
    (ApiKey.API_VERSIONS, 3),
    (ApiKey.API_VERSIONS, 99),  # newer than ours: open-ended flexible range
    (999, 0),  # unknown API: header v1
]
CLIENT_IDS: list[bytes | None] = [
    None,
    b"",
    b"replica-fetcher-2",
    "prodüçer-€".encode(),
    b"\xff\xfe bad utf-8",
]
TAGS = [b"\x00", b"\x01\x00\x02ab", b"\x02\x00\x00\x01\x01x", b"\x05", b""]


def _outcome(decode: object, frame: bytes | bytearray | memoryview) -> object:
    try:
        header, pos = decode(frame)  # type: ignore[operator]
    except ProtocolError as exc:
        return ("error", type(exc), str(exc))
    return (header, pos)


def _frame(key: int, version: int, correlation: int, client: bytes | None, tags: bytes) -> bytes:
    out = struct.pack(">hhi", key, version, correlation)
    if client is None:
        out += struct.pack(">h", -1)
    else:
        out += struct.pack(">h", len(client)) + client
    return out + tags + b"body"


def _check(frame: bytes) -> None:
    for view in (frame, bytearray(frame), memoryview(frame)):
        assert _outcome(h.decode_request_header, view) == _outcome(h._decode_request_header, view)


@pytest.mark.parametrize(("key", "version"), KEYS)
def test_every_header_shape_reads_the_same(key: int, version: int) -> None:
    for client in CLIENT_IDS:
        for tags in TAGS:
            frame = _frame(key, version, 7, client, tags)
            _check(frame)
            for cut in range(len(frame)):  # truncated anywhere
                _check(frame[:cut])


def test_the_usual_header_is_read_whole() -> None:
    frame = _frame(ApiKey.FETCH, 15, 42, b"replica-fetcher-2", b"\x00")
    header, pos = h.decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (ApiKey.FETCH, 15, 42)
    assert header.client_id == "replica-fetcher-2" and header.tagged_fields == []
    assert frame[pos:] == b"body"
    header, pos = h.decode_request_header(_frame(ApiKey.PRODUCE, 8, 1, None, b""))
    assert header.client_id is None and pos == 10


def test_random_frames_read_the_same() -> None:
    rng = random.Random(23)
    for _ in range(3000):
        key, version = rng.choice(KEYS)
        n = rng.choice([-2, -1, 0, 3, 40, 0x7FFF, -0x8000])
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 24)))
        frame = struct.pack(">hhih", key, version, rng.randrange(-(2**31), 2**31), n) + body
        _check(frame)
