"""Compression codecs: round trips, Kafka's framings, bounded output, corrupt input."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc
import zlib

import kafka.codec
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.compression import (
    CompressionType,
    compress,
    decompress,
)
from riverbed.protocol.exceptions import ProtocolError

ALL = list(CompressionType)
CODECS = [c for c in CompressionType if c is not CompressionType.NONE]
XERIAL_MAGIC = b"\x82SNAPPY\x00"


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=200_000), compression=st.sampled_from(ALL))
def test_round_trip(data: bytes, compression: CompressionType) -> None:
    assert decompress(compression, compress(compression, data)) == data


@pytest.mark.parametrize("compression", ALL)
def test_round_trip_large_and_repetitive(compression: CompressionType) -> None:
    data = os.urandom(100_000) + b"abc" * 300_000  # several snappy/lz4 blocks
    z = compress(compression, data)
    assert decompress(compression, z, len(data)) == data
    with pytest.raises(ProtocolError, match="more than"):
        decompress(compression, z, len(data) - 1)


@pytest.mark.parametrize("compression", CODECS)
def test_output_larger_than_one_streaming_chunk(compression: CompressionType) -> None:
    data = (b"\x00" * 1000 + os.urandom(24)) * 3000  # ~3 MiB: several 1 MiB output calls
    assert decompress(compression, compress(compression, data)) == data


def test_snappy_is_xerial_framed_like_java() -> None:
    data = b"0123456789" * 10_000  # 100 kB: 4 blocks of 32 KiB
    z = compress(CompressionType.SNAPPY, data)
    assert z[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", z[8:16]) == (1, 1)
    # kafka-python's own xerial decoder (over python-snappy) reads it
    assert kafka.codec.has_snappy()
    assert kafka.codec.snappy_decode(z) == data
    theirs = kafka.codec.snappy_encode(data, xerial_compatible=True)
    raw = kafka.codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(CompressionType.SNAPPY, theirs) == data
    assert decompress(CompressionType.SNAPPY, raw) == data  # unframed, as some clients write


def test_lz4_frame_form() -> None:
    data = os.urandom(1000) * 300
    z = compress(CompressionType.LZ4, data)
    assert z[:4] == b"\x04\x22\x4d\x18"  # standard LZ4 frame magic
    assert lz4.frame.decompress(z) == data
    # kafka-python's writer (independent blocks) and the library's default (linked blocks)
    assert decompress(CompressionType.LZ4, kafka.codec.lz4_encode(data)) == data
    assert decompress(CompressionType.LZ4, lz4.frame.compress(data)) == data


def test_gzip_and_zstd_read_other_writers() -> None:
    data = b"kafka " * 20_000
    assert decompress(CompressionType.GZIP, gzip.compress(data)) == data
    two_members = gzip.compress(data[:1000]) + gzip.compress(data[1000:])
    assert decompress(CompressionType.GZIP, two_members) == data
    assert gzip.decompress(compress(CompressionType.GZIP, data)) == data
    # Java's zstd-jni streams frames without a content size
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(CompressionType.ZSTD, no_size) == data
    two_frames = zstandard.ZstdCompressor().compress(data[:5]) + no_size
    assert decompress(CompressionType.ZSTD, two_frames) == data[:5] + data
    assert zstandard.ZstdDecompressor().decompress(compress(CompressionType.ZSTD, data)) == data


def _bombs() -> dict[CompressionType, bytes]:
    zeros = bytes(64 * 1024 * 1024)  # 64 MiB that a bomb would expand to
    return {
        CompressionType.GZIP: _gzip(zeros),
        CompressionType.SNAPPY: compress(CompressionType.SNAPPY, zeros),
        CompressionType.LZ4: lz4.frame.compress(zeros),
        CompressionType.ZSTD: zstandard.ZstdCompressor(write_content_size=False).compress(zeros),
    }


def _gzip(data: bytes) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


@pytest.fixture(scope="module")
def bombs() -> dict[CompressionType, bytes]:
    return _bombs()


@pytest.mark.parametrize("compression", CODECS)
def test_bomb_is_bounded(compression: CompressionType, bombs: dict[CompressionType, bytes]) -> None:
    bomb = bombs[compression]
    assert len(bomb) < 4 * 1024 * 1024  # snappy tops out near 21x; the others far beyond
    limit = 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="more than 1048576 bytes"):
            decompress(compression, bomb, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # bounded by the limit (plus codec slack), never the 64 MiB the bomb holds
    assert peak < 16 * limit


def test_zstd_declared_content_size_bomb() -> None:
    # A frame header that declares a huge content size must not be trusted for allocation.
    z = zstandard.ZstdCompressor().compress(bytes(32 * 1024 * 1024))
    with pytest.raises(ProtocolError, match="more than"):
        decompress(CompressionType.ZSTD, z, 1000)


def test_zstd_frame_lying_about_its_content_size() -> None:
    """A frame that declares 1000 bytes but holds 32 MiB: libzstd stops it, we report it."""
    z = bytearray(zstandard.ZstdCompressor().compress(bytes(32 * 1024 * 1024)))
    fhd = z[4]
    assert fhd >> 6 == 2 and not fhd & 0x23  # 4-byte content size, window byte, no dict id
    struct.pack_into("<I", z, 6, 1000)
    assert zstandard.frame_content_size(bytes(z)) == 1000
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="ZSTD"):
            decompress(CompressionType.ZSTD, z)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024


def test_snappy_declared_length_is_checked_before_decompressing() -> None:
    # A raw block announcing 2**32 - 1 bytes (uvarint preamble) with no data behind it.
    block = b"\xff\xff\xff\xff\x0f" + b"\x00" * 4
    with pytest.raises(ProtocolError, match="more than"):
        decompress(CompressionType.SNAPPY, block, 1 << 20)
    framed = XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(block)) + block
    with pytest.raises(ProtocolError, match="more than"):
        decompress(CompressionType.SNAPPY, framed, 1 << 20)


@pytest.mark.parametrize("compression", CODECS)
def test_corrupt_and_truncated_input(compression: CompressionType) -> None:
    data = os.urandom(3000) + b"z" * 50_000
    z = compress(compression, data)
    for n in sorted({0, 1, 5, 9, 15, 16, 17, len(z) // 2, len(z) - 1}):
        if compression is CompressionType.SNAPPY and n == 16:
            assert decompress(compression, z[:n]) == b""  # a whole xerial header, no blocks
            continue
        with pytest.raises(ProtocolError):
            decompress(compression, z[:n])
    with pytest.raises(ProtocolError):
        decompress(compression, os.urandom(64) + z)


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=300), compression=st.sampled_from(CODECS))
def test_random_bytes_only_protocol_error(blob: bytes, compression: CompressionType) -> None:
    try:
        out = decompress(compression, blob, 1 << 20)
    except ProtocolError:
        return
    assert len(out) <= 1 << 20


def test_xerial_framing_errors() -> None:
    head = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for bad in (head[:12], head + b"\x00\x00", head + struct.pack(">i", -1), head + b"\0\0\0\x09"):
        with pytest.raises(ProtocolError):
            decompress(CompressionType.SNAPPY, bad)


def test_unknown_codec() -> None:
    with pytest.raises(ProtocolError, match="unknown compression type 5"):
        decompress(5, b"x")
    with pytest.raises(ProtocolError, match="unknown compression type 7"):
        compress(7, b"x")


def test_lz4_header_matches_kafkas_writer() -> None:
    z = compress(CompressionType.LZ4, b"records" * 1000)
    # FLG 0x60: version 01, independent blocks, no block/content checksum, no content size;
    # BD 0x40: 64 KiB blocks — the descriptor KafkaLZ4BlockOutputStream writes.
    assert z[4:6] == b"\x60\x40"
