"""Wire primitives: varints, classic/compact strings, bytes, arrays, tagged fields."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.primitives import (
    Reader,
    Writer,
    encode_uvarint,
    encode_varint,
    encode_varlong,
    read_uvarint,
    read_varint,
    read_varlong,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_uvarint_vectors(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded
    assert read_uvarint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f")],
)
def test_zigzag_vectors(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


@settings(max_examples=200, deadline=None)
@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 63), (1 << 63) - 1))
def test_varint_roundtrip(v32: int, v64: int) -> None:
    assert read_varint(encode_varint(v32), 0)[0] == v32
    assert read_varlong(encode_varlong(v64), 0)[0] == v64


def test_varint_out_of_range() -> None:
    with pytest.raises(ProtocolError):
        encode_varint(1 << 31)
    with pytest.raises(ProtocolError):
        encode_uvarint(-1)


def test_uvarint_too_long_and_truncated() -> None:
    with pytest.raises(ProtocolError, match="longer than 5"):
        read_uvarint(b"\xff" * 20, 0)
    with pytest.raises(ProtocolError, match="truncated"):
        read_uvarint(b"\x80\x80", 0)
    with pytest.raises(ProtocolError, match="32 bits"):
        read_uvarint(b"\xff\xff\xff\xff\x7f", 0)
    assert read_varlong(b"\xff" * 9 + b"\x01", 0)[0] == -(1 << 63)


def test_classic_and_compact_strings() -> None:
    w = Writer()
    w.string("héllo")
    w.nullable_string(None)
    w.string("x", compact=True)
    w.nullable_string(None, compact=True)
    assert w.getvalue() == b"\x00\x06h\xc3\xa9llo\xff\xff\x02x\x00"
    r = Reader(w.getvalue())
    assert r.string() == "héllo"
    assert r.nullable_string() is None
    assert r.string(compact=True) == "x"
    assert r.nullable_string(compact=True) is None
    assert r.remaining == 0


def test_null_in_non_nullable_string_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="null string"):
        Reader(b"\xff\xff").string(field="Topic")


def test_invalid_utf8_names_field() -> None:
    with pytest.raises(ProtocolError) as info:
        Reader(b"\x00\x02\xff\xfe").string(field="Name")
    assert info.value.field == "Name"


def test_bytes_and_arrays() -> None:
    w = Writer()
    w.bytes_(b"abc")
    w.nullable_bytes(None)
    w.bytes_(b"", compact=True)
    w.array_length(2)
    w.int32(7)
    w.int32(8)
    w.array_length(None, compact=True)
    r = Reader(w.getvalue())
    assert r.bytes_() == b"abc"
    assert r.nullable_bytes() is None
    assert r.bytes_(compact=True) == b""
    assert r.array_length(element_size_min=4) == 2
    assert (r.int32(), r.int32()) == (7, 8)
    assert r.array_length(compact=True) == -1


def test_huge_declared_lengths_fail_fast() -> None:
    with pytest.raises(ProtocolError, match="need 2147483647 bytes"):
        Reader(b"\x7f\xff\xff\xff").bytes_(field="Records")
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(b"\x7f\xff\xff\xff" + b"\x00" * 8).array_length(element_size_min=4)
    with pytest.raises(ProtocolError, match="negative"):
        Reader(b"\xff\xff\xff\xfe").array_length()


def test_fixed_width_and_uuid() -> None:
    u = uuid.uuid4()
    w = Writer()
    w.int8(-1)
    w.int16(-2)
    w.int32(-3)
    w.int64(-4)
    w.uint16(65535)
    w.uint32(1 << 31)
    w.float64(1.5)
    w.boolean(True)
    w.uuid(u)
    r = Reader(w.getvalue())
    assert [r.int8(), r.int16(), r.int32(), r.int64(), r.uint16(), r.uint32()] == [
        -1,
        -2,
        -3,
        -4,
        65535,
        1 << 31,
    ]
    assert r.float64() == 1.5
    assert r.boolean() is True
    assert r.uuid() == u
    with pytest.raises(ProtocolError, match="need 4 bytes"):
        r.int32("X")


def test_tagged_fields_roundtrip_sorted() -> None:
    w = Writer()
    w.tagged_fields([(5, b"bb"), (1, b"a")])
    assert w.getvalue() == b"\x02\x01\x01a\x05\x02bb"
    assert Reader(w.getvalue()).tagged_fields() == [(1, b"a"), (5, b"bb")]
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(b"\xff\xff\xff\x07").tagged_fields()


def test_classic_string_too_long_for_int16() -> None:
    with pytest.raises(ProtocolError, match="int16"):
        Writer().string("x" * 40000)
