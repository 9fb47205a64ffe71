"""Decoders under hostile input: only ProtocolError, fast, with bounded memory."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.protocol.strategies import message_strategy

from riverbed.protocol import headers as h
from riverbed.protocol import messages as m
from riverbed.protocol.api_versions import SUPPORTED_VERSIONS
from riverbed.protocol.exceptions import ProtocolError

# Requests the server decodes from the network, at every advertised version.
REQUEST_CASES = [
    (m.request_class(key), version)
    for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    for version in range(lo, hi + 1)
]
INTERESTING = [b"\xff", b"\x7f\xff\xff\xff", b"\x80\x80\x80\x80\x08", b"\xff\xff", b"\x00"]
MEMORY_PEAK_BYTES_MAX = 4 << 20


def _mutate(data: bytes, ops: list[tuple[int, int, bytes]]) -> bytes:
    buf = bytearray(data)
    for kind, pos, chunk in ops:
        if not buf:
            buf += chunk
            continue
        p = pos % len(buf)
        if kind == 0:  # overwrite
            buf[p : p + len(chunk)] = chunk
        elif kind == 1:  # insert
            buf[p:p] = chunk
        elif kind == 2:  # truncate
            del buf[p:]
        else:  # flip a byte
            buf[p] ^= 0xFF
    return bytes(buf)


_ops = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(0, 1 << 16),
        st.one_of(st.sampled_from(INTERESTING), st.binary(min_size=1, max_size=4)),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=st.sampled_from(REQUEST_CASES), data=st.data(), ops=_ops)
def test_mutated_frames_raise_only_protocol_error(
    case: tuple[type[m.Message], int], data: st.DataObject, ops: list[tuple[int, int, bytes]]
) -> None:
    cls, version = case
    valid = m.encode(data.draw(message_strategy(cls, version)), version)
    bad = _mutate(valid, ops)
    with contextlib.suppress(ProtocolError):
        m.decode(cls, bad, version)


@settings(max_examples=300, deadline=None)
@given(
    key_version=st.sampled_from([(int(k), v) for k, (_, v) in SUPPORTED_VERSIONS.items()]),
    body=st.binary(max_size=200),
    client_id=st.one_of(st.none(), st.text(max_size=5)),
)
def test_random_request_bodies(
    key_version: tuple[int, int], body: bytes, client_id: str | None
) -> None:
    key, version = key_version
    header = h.RequestHeader(key, version, 1, client_id)
    frame = h.encode_request(header, m.request_class(key)())[4:]
    hv_len = len(frame) - len(m.encode(m.request_class(key)(), version))
    with contextlib.suppress(ProtocolError):
        h.decode_request(frame[:hv_len] + body)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_frames(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        h.decode_request(frame)


@pytest.mark.parametrize(
    ("cls", "version", "body"),
    [
        # MetadataRequest v1: topics array declaring 2^31-1 elements
        (m.MetadataRequest, 1, b"\x7f\xff\xff\xff" + b"\x00" * 16),
        # MetadataRequest v9: compact array declaring ~2^32 elements
        (m.MetadataRequest, 9, b"\xff\xff\xff\xff\x0f" + b"\x00" * 16),
        # ProduceRequest v3: records length 2^31-1
        (
            m.ProduceRequest,
            3,
            b"\xff\xff\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01"
            b"\x00\x00\x00\x00\x7f\xff\xff\xff",
        ),
        # ApiVersionsResponse v3: 2^31 tagged fields
        (m.ApiVersionsResponse, 3, b"\x00\x00\x01\x00\x00\x00\x00\x00\xff\xff\xff\xff\x07"),
        # a varint that never ends
        (m.ApiVersionsRequest, 3, b"\xff" * 64),
        # FetchRequest v4: int32 array of partitions 2^31-1 in forgotten topics is v7+,
        # so use the topics array of v4 instead
        (m.FetchRequest, 4, struct.pack(">iiiib", -1, 0, 0, 0, 0) + b"\x7f\xff\xff\xff"),
    ],
)
@pytest.mark.timeout(30)  # failing must not depend on the declared size (no loops over it)
def test_huge_declared_sizes_fail_fast(cls: type[m.Message], version: int, body: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            m.decode(cls, body, version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_PEAK_BYTES_MAX
