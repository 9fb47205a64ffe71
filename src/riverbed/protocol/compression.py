"""Record batch compression codecs (attributes bits 0-2 of a record batch).

The compressed payload of a v2 batch is everything after the 61-byte header (the records),
compressed as one blob with the codec named by the batch attributes:

=====  ======  ===========================================================================
code   codec   wire form
=====  ======  ===========================================================================
0      none    the records as they are
1      gzip    an RFC 1952 gzip stream (one or more members)
2      snappy  xerial framing as Java clients and brokers write it (snappy-java's
               ``SnappyOutputStream``)::

                   magic  b"\\x82SNAPPY\\x00"   8 bytes
                   version int32 = 1, compatible version int32 = 1
                   then blocks of: length int32 (big endian) + one raw snappy block

               A payload without the magic is decoded as one raw snappy block (what some
               non-Java clients write).
3      lz4     a standard LZ4 frame (magic 0x184D2204). Only the magic 0/1 message format
               had Kafka's broken header checksum; magic 2 uses the real frame format.
               Written as Kafka's ``KafkaLZ4BlockOutputStream`` does: independent
               64 KiB blocks (its reader rejects dependent blocks), no content size,
               no checksums.
4      zstd    a standard zstd frame (RFC 8878)
=====  ======  ===========================================================================

Decompression is always bounded: ``decompress(type, data, max_bytes)`` raises
:class:`ProtocolError` as soon as the output would exceed ``max_bytes`` (a zip bomb costs at
most ``max_bytes`` of memory), and on any corrupt input.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Final

import cramjam
import lz4.frame
import zstandard

from riverbed.protocol.exceptions import ProtocolError

__all__ = [
    "DECOMPRESSED_MAX_BYTES",
    "GZIP_DEFAULT_LEVEL",
    "SNAPPY_XERIAL_BLOCK_BYTES",
    "CompressionType",
    "compress",
    "decompress",
]


class CompressionType(IntEnum):
    """The codec ids of record batch attributes bits 0-2 (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Default bound on one batch's decompressed records. Kafka bounds a batch by
# message.max.bytes (1 MiB default) compressed; real batches expand a few times at most.
DECOMPRESSED_MAX_BYTES: Final = 64 * 1024 * 1024

# Block size of xerial-framed snappy; snappy-java's default (32 KiB).
SNAPPY_XERIAL_BLOCK_BYTES: Final = 32 * 1024

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE: Final = len(_XERIAL_HEADER)  # 16
_INT32: Final = struct.Struct(">i")

# Output per call when streaming through a decompressor: the bound is checked between
# calls, and a call may allocate this much up front.
_STREAM_CHUNK_BYTES: Final = 1024 * 1024
_ZSTD_RATIO_MAX: Final = 32768  # 128 KiB block max / 4-byte smallest (RLE) block
_ZSTD_INPUT_MIN_BYTES: Final = 64


#: gzip's level when none is given (and for Kafka's ``compression.gzip.level=-1``):
#: java.util.zip.GZIPOutputStream's default.
GZIP_DEFAULT_LEVEL: Final = 6
#: zstd's (and Kafka's) default level.
ZSTD_DEFAULT_LEVEL: Final = 3


def compress(
    compression: CompressionType | int,
    data: bytes | bytearray | memoryview,
    level: int | None = None,
) -> bytes:
    """``data`` compressed with ``compression`` in Kafka's wire form (see module docstring),
    at ``level`` (KIP-390's ``compression.<codec>.level``; None: the codec's default, for
    lz4 its fast mode; snappy has none)."""
    kind = _kind(compression)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        # wbits 31 = gzip container
        gzip_level = GZIP_DEFAULT_LEVEL if level is None or level < 0 else level
        co = zlib.compressobj(gzip_level, zlib.DEFLATED, 31)
        return co.compress(data) + co.flush()
    if kind is CompressionType.SNAPPY:
        return _snappy_xerial_compress(memoryview(data))
    if kind is CompressionType.LZ4:
        return bytes(
            lz4.frame.compress(
                bytes(data),
                compression_level=0 if level is None else level,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    assert kind is CompressionType.ZSTD
    zstd_level = ZSTD_DEFAULT_LEVEL if level is None else level
    return bytes(zstandard.ZstdCompressor(level=zstd_level).compress(bytes(data)))


def decompress(
    compression: CompressionType | int,
    data: bytes | bytearray | memoryview,
    max_bytes: int = DECOMPRESSED_MAX_BYTES,
) -> bytes:
    """``data`` decompressed; ProtocolError when corrupt or longer than ``max_bytes``."""
    assert max_bytes >= 0
    kind = _kind(compression)
    if kind is CompressionType.NONE:
        if len(data) > max_bytes:
            raise _too_big(kind, max_bytes)
        return bytes(data)
    try:
        if kind is CompressionType.GZIP:
            return _gzip_decompress(data, max_bytes)
        if kind is CompressionType.SNAPPY:
            return _snappy_decompress(memoryview(data), max_bytes)
        if kind is CompressionType.LZ4:
            return _lz4_decompress(data, max_bytes)
        assert kind is CompressionType.ZSTD
        return _zstd_decompress(data, max_bytes)
    except ProtocolError:
        raise
    except Exception as e:
        # Each codec library has its own exception types (zlib.error, cramjam's
        # DecompressionError, ZstdError, lz4's RuntimeError); on bad bytes all mean the same.
        raise ProtocolError(f"corrupt {kind.name} data: {e}", field="records") from e


def _kind(compression: CompressionType | int) -> CompressionType:
    try:
        return CompressionType(compression)
    except ValueError:
        raise ProtocolError(f"unknown compression type {compression}", field="attributes") from None


def _too_big(kind: CompressionType, max_bytes: int) -> ProtocolError:
    return ProtocolError(
        f"{kind.name} records decompress to more than {max_bytes} bytes", field="records"
    )


def _gzip_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    rest = bytes(data)
    if not rest:
        raise ProtocolError("empty GZIP data", field="records")
    parts = []
    produced = 0
    # Java's GZIPInputStream reads concatenated members; so do we.
    while rest:
        d = zlib.decompressobj(31)
        chunk = rest
        while True:
            limit = min(max_bytes - produced + 1, _STREAM_CHUNK_BYTES)
            part = d.decompress(chunk, limit)
            produced += len(part)
            if produced > max_bytes:
                raise _too_big(CompressionType.GZIP, max_bytes)
            parts.append(part)
            if d.eof:
                break
            if not d.unconsumed_tail and len(part) < limit:
                raise ProtocolError("truncated GZIP data", field="records")
            chunk = d.unconsumed_tail
        rest = d.unused_data
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _snappy_xerial_compress(data: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), SNAPPY_XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + SNAPPY_XERIAL_BLOCK_BYTES]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_blocks(data: memoryview) -> list[memoryview]:
    """The raw snappy blocks of a payload: xerial-framed, or one unframed block."""
    if bytes(data[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        if not data:
            raise ProtocolError("empty SNAPPY data", field="records")
        return [data]
    if len(data) < _XERIAL_HEADER_SIZE:
        raise ProtocolError("truncated SNAPPY xerial header", field="records")
    blocks = []
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise ProtocolError("truncated SNAPPY xerial block length", field="records")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size <= 0 or pos + size > end:
            raise ProtocolError(f"bad SNAPPY xerial block length {size}", field="records")
        blocks.append(data[pos : pos + size])
        pos += size
    return blocks


def _snappy_decompress(data: memoryview, max_bytes: int) -> bytes:
    blocks = _snappy_blocks(data)
    # Every raw block announces its length up front: the bound is checked and the output
    # allocated once, before anything is decompressed.
    sizes = [cramjam.snappy.decompress_raw_len(block) for block in blocks]
    total = sum(sizes)
    if total > max_bytes:
        raise _too_big(CompressionType.SNAPPY, max_bytes)
    out = bytearray(total)
    view = memoryview(out)
    pos = 0
    for block, size in zip(blocks, sizes, strict=True):
        written = cramjam.snappy.decompress_raw_into(block, view[pos : pos + size])
        if written != size:
            raise ProtocolError(
                f"SNAPPY block decompressed to {written} bytes, announced {size}",
                field="records",
            )
        pos += size
    view.release()
    return bytes(out)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    if not data:
        raise ProtocolError("empty LZ4 data", field="records")
    d = lz4.frame.LZ4FrameDecompressor()
    parts = []
    produced = 0
    # bytes, not a view: fed a memoryview the decompressor measured ~10x slower here.
    chunk = bytes(data)
    while True:
        part = d.decompress(chunk, max_length=min(max_bytes - produced + 1, _STREAM_CHUNK_BYTES))
        produced += len(part)
        if produced > max_bytes:
            raise _too_big(CompressionType.LZ4, max_bytes)
        parts.append(part)
        if d.eof:
            break
        if d.needs_input:
            raise ProtocolError("truncated LZ4 frame", field="records")
        chunk = b""
    if d.unused_data:
        raise ProtocolError("trailing bytes after LZ4 frame", field="records")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    if not data:
        raise ProtocolError("empty ZSTD data", field="records")
    dctx = zstandard.ZstdDecompressor()
    rest = bytes(data)
    declared = zstandard.frame_content_size(rest)
    if declared > max_bytes:
        raise _too_big(CompressionType.ZSTD, max_bytes)
    if declared >= 0:
        # Fast path, the common case (librdkafka, kafka-python, riverbed): one frame that
        # declares its size. libzstd allocates exactly that and holds the frame to it.
        try:
            return bytes(dctx.decompress(rest, allow_extra_data=False))
        except zstandard.ZstdError:
            pass  # several frames, or corrupt: the frame-by-frame path sorts out which
    out = bytearray()
    # One decompressobj per frame (Java's ZstdInputStream reads concatenated frames). A
    # frame that declares its content size is held to it by libzstd, so it is fed whole
    # once the size fits; otherwise (zstd-jni streams omit it) the input goes in slices
    # small enough that one cannot expand far past the bound: a zstd block of at least
    # 4 bytes yields at most 128 KiB (ratio <= 32768).
    while rest:
        room = max_bytes - len(out)
        declared = zstandard.frame_content_size(rest)
        if declared > room:
            raise _too_big(CompressionType.ZSTD, max_bytes)
        dobj = dctx.decompressobj()
        pos = 0
        while not dobj.eof:
            if pos >= len(rest):
                raise ProtocolError("truncated ZSTD frame", field="records")
            if declared >= 0:
                step = len(rest)
            else:
                step = max(_ZSTD_INPUT_MIN_BYTES, (max_bytes - len(out)) // _ZSTD_RATIO_MAX)
            out += dobj.decompress(rest[pos : pos + step])
            pos += step
            if len(out) > max_bytes:
                raise _too_big(CompressionType.ZSTD, max_bytes)
        rest = dobj.unused_data + rest[pos:]
    return bytes(out)
