"""Kafka wire primitives: fixed-width integers, varints, strings, bytes, arrays, tagged fields.

Wire formats (all big-endian, as in Kafka's protocol guide):

- ``int8/int16/int32/int64`` two's complement; ``uint16/uint32`` unsigned; ``float64`` IEEE 754.
- ``bool`` one byte, 0 = false, anything else = true.
- ``uuid`` 16 raw bytes.
- ``unsigned varint`` 7 bits per byte, low groups first, high bit = "more" (at most 5 bytes
  for 32-bit values, 10 for 64-bit). ``varint``/``varlong`` are zig-zag encoded signed values
  carried in an unsigned varint.
- classic ``string``: int16 length then UTF-8 bytes (-1 = null when nullable);
  classic ``bytes``/``array``: int32 length (-1 = null).
- compact (flexible-version) ``string``/``bytes``/``array``: unsigned varint of length + 1
  (0 = null).
- tagged-field section: unsigned varint count, then per field: unsigned varint tag,
  unsigned varint size, ``size`` bytes of data; tags ascend.

``Reader`` checks every length against the bytes that remain *before* allocating anything,
so a declared length of 2^31 fails at once with a ``ProtocolError`` naming the field.
"""

from __future__ import annotations

import struct
import uuid

from riverbed.protocol.exceptions import ProtocolError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

UVARINT32_BYTES_MAX = 5
UVARINT64_BYTES_MAX = 10
# Encoded forms of small unsigned varints, precomputed because compact lengths, tag counts and
# tags are almost always tiny and are written for every string/array in flexible versions.
UVARINT_CACHE_SIZE = 1 << 14

ZERO_UUID = uuid.UUID(int=0)


def _encode_uvarint_slow(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UVARINT_CACHE: tuple[bytes, ...] = tuple(
    _encode_uvarint_slow(i) for i in range(UVARINT_CACHE_SIZE)
)


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint (up to 64 bits)."""
    if 0 <= value < UVARINT_CACHE_SIZE:
        return _UVARINT_CACHE[value]
    if value < 0 or value >= 1 << 64:
        raise ProtocolError(f"unsigned varint out of range: {value}")
    return _encode_uvarint_slow(value)


def zigzag32(value: int) -> int:
    """Signed 32-bit value -> zig-zag unsigned form."""
    if not -(1 << 31) <= value < 1 << 31:
        raise ProtocolError(f"varint out of int32 range: {value}")
    return ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF


def zigzag64(value: int) -> int:
    """Signed 64-bit value -> zig-zag unsigned form."""
    if not -(1 << 63) <= value < 1 << 63:
        raise ProtocolError(f"varlong out of int64 range: {value}")
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Zig-zag signed 32-bit varint."""
    return encode_uvarint(zigzag32(value))


def encode_varlong(value: int) -> bytes:
    """Zig-zag signed 64-bit varint."""
    return encode_uvarint(zigzag64(value))


def read_uvarint(
    buf: bytes | bytearray | memoryview,
    pos: int,
    max_bytes: int = UVARINT32_BYTES_MAX,
    field: str | None = None,
) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns (value, new position).

    Reads at most ``max_bytes`` bytes so a run of continuation bits cannot loop on.
    """
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise ProtocolError("truncated varint", field=field)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == UVARINT32_BYTES_MAX and result > 0xFFFFFFFF:
                raise ProtocolError("varint exceeds 32 bits", field=field)
            return result, pos
        shift += 7
    raise ProtocolError(f"varint longer than {max_bytes} bytes", field=field)


def read_varint(
    buf: bytes | bytearray | memoryview, pos: int, field: str | None = None
) -> tuple[int, int]:
    """Zig-zag signed 32-bit varint."""
    raw, pos = read_uvarint(buf, pos, UVARINT32_BYTES_MAX, field)
    return unzigzag(raw), pos


def read_varlong(
    buf: bytes | bytearray | memoryview, pos: int, field: str | None = None
) -> tuple[int, int]:
    """Zig-zag signed 64-bit varint."""
    raw, pos = read_uvarint(buf, pos, UVARINT64_BYTES_MAX, field)
    return unzigzag(raw), pos


class Reader:
    """Sequential reader over a byte buffer; every read is bounds-checked first."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, field: str | None) -> int:
        if n < 0 or self.pos + n > self.end:
            raise ProtocolError(
                f"need {n} bytes at offset {self.pos}, only {self.end - self.pos} remain",
                field=field,
            )
        p = self.pos
        self.pos = p + n
        return p

    def _fixed(self, s: struct.Struct, field: str | None) -> int:
        p = self._need(s.size, field)
        value: int = s.unpack_from(self.buf, p)[0]
        return value

    def int8(self, field: str | None = None) -> int:
        return self._fixed(INT8, field)

    def int16(self, field: str | None = None) -> int:
        return self._fixed(INT16, field)

    def int32(self, field: str | None = None) -> int:
        return self._fixed(INT32, field)

    def int64(self, field: str | None = None) -> int:
        return self._fixed(INT64, field)

    def uint16(self, field: str | None = None) -> int:
        return self._fixed(UINT16, field)

    def uint32(self, field: str | None = None) -> int:
        return self._fixed(UINT32, field)

    def float64(self, field: str | None = None) -> float:
        p = self._need(8, field)
        value: float = FLOAT64.unpack_from(self.buf, p)[0]
        return value

    def boolean(self, field: str | None = None) -> bool:
        p = self._need(1, field)
        return self.buf[p] != 0

    def uuid(self, field: str | None = None) -> uuid.UUID:
        p = self._need(16, field)
        return uuid.UUID(bytes=bytes(self.buf[p : p + 16]))

    def uvarint(self, field: str | None = None) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos, UVARINT32_BYTES_MAX, field)
        return value

    def uvarlong(self, field: str | None = None) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos, UVARINT64_BYTES_MAX, field)
        return value

    def varint(self, field: str | None = None) -> int:
        return unzigzag(self.uvarint(field))

    def varlong(self, field: str | None = None) -> int:
        return unzigzag(self.uvarlong(field))

    def raw(self, n: int, field: str | None = None) -> bytes:
        p = self._need(n, field)
        return bytes(self.buf[p : p + n])

    def _length(self, compact: bool, classic: struct.Struct, field: str | None) -> int:
        """Declared length; -1 means null."""
        if compact:
            return self.uvarint(field) - 1
        return self._fixed(classic, field)

    def string(self, compact: bool = False, field: str | None = None) -> str:
        value = self.nullable_string(compact, field)
        if value is None:
            raise ProtocolError("null string in a non-nullable field", field=field)
        return value

    def nullable_string(self, compact: bool = False, field: str | None = None) -> str | None:
        n = self._length(compact, INT16, field)
        if n == -1:
            return None
        if n < -1:
            raise ProtocolError(f"negative string length {n}", field=field)
        data = self.raw(n, field)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string is not UTF-8: {exc.reason}", field=field) from None

    def bytes_(self, compact: bool = False, field: str | None = None) -> bytes:
        value = self.nullable_bytes(compact, field)
        if value is None:
            raise ProtocolError("null bytes in a non-nullable field", field=field)
        return value

    def nullable_bytes(self, compact: bool = False, field: str | None = None) -> bytes | None:
        n = self._length(compact, INT32, field)
        if n == -1:
            return None
        if n < -1:
            raise ProtocolError(f"negative bytes length {n}", field=field)
        return self.raw(n, field)

    def array_length(
        self, compact: bool = False, element_size_min: int = 1, field: str | None = None
    ) -> int:
        """Declared element count (-1 = null), checked against what could fit in the rest."""
        n = self._length(compact, INT32, field)
        if n < -1:
            raise ProtocolError(f"negative array length {n}", field=field)
        if n > 0 and n * max(element_size_min, 1) > self.remaining:
            raise ProtocolError(
                f"array of {n} elements cannot fit in {self.remaining} remaining bytes",
                field=field,
            )
        return n

    def tagged_fields(self, field: str | None = None) -> list[tuple[int, bytes]]:
        """A whole tagged-field section as (tag, raw data) pairs."""
        count = self.uvarint(field)
        if count * 2 > self.remaining:
            raise ProtocolError(f"{count} tagged fields cannot fit", field=field)
        out: list[tuple[int, bytes]] = []
        for _ in range(count):
            tag = self.uvarint(field)
            size = self.uvarint(field)
            out.append((tag, self.raw(size, field)))
        return out


class Writer:
    """Appends wire primitives to a bytearray."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def int8(self, v: int) -> None:
        self.out += INT8.pack(v)

    def int16(self, v: int) -> None:
        self.out += INT16.pack(v)

    def int32(self, v: int) -> None:
        self.out += INT32.pack(v)

    def int64(self, v: int) -> None:
        self.out += INT64.pack(v)

    def uint16(self, v: int) -> None:
        self.out += UINT16.pack(v)

    def uint32(self, v: int) -> None:
        self.out += UINT32.pack(v)

    def float64(self, v: float) -> None:
        self.out += FLOAT64.pack(v)

    def boolean(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def uuid(self, v: uuid.UUID) -> None:
        self.out += v.bytes

    def uvarint(self, v: int) -> None:
        self.out += encode_uvarint(v)

    def varint(self, v: int) -> None:
        self.out += encode_varint(v)

    def varlong(self, v: int) -> None:
        self.out += encode_varlong(v)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def _length(self, n: int, compact: bool, classic: struct.Struct) -> None:
        if compact:
            self.out += encode_uvarint(n + 1)
        else:
            self.out += classic.pack(n)

    def nullable_string(self, v: str | None, compact: bool = False) -> None:
        if v is None:
            self._length(-1, compact, INT16)
            return
        data = v.encode("utf-8")
        if not compact and len(data) > 0x7FFF:
            raise ProtocolError(f"string of {len(data)} bytes exceeds the int16 length limit")
        self._length(len(data), compact, INT16)
        self.out += data

    def string(self, v: str, compact: bool = False) -> None:
        self.nullable_string(v, compact)

    def nullable_bytes(
        self, v: bytes | bytearray | memoryview | None, compact: bool = False
    ) -> None:
        if v is None:
            self._length(-1, compact, INT32)
            return
        self._length(len(v), compact, INT32)
        self.out += v

    def bytes_(self, v: bytes | bytearray | memoryview, compact: bool = False) -> None:
        self.nullable_bytes(v, compact)

    def array_length(self, n: int | None, compact: bool = False) -> None:
        self._length(-1 if n is None else n, compact, INT32)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        self.uvarint(len(fields))
        for tag, data in sorted(fields, key=lambda f: f[0]):
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data
