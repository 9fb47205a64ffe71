"""A leader stores a client's batches in the topic's ``compression.type`` (Kafka's
LogValidator).

``compression.type=producer`` (the default) keeps every batch as its producer compressed
it. Any codec name (``uncompressed``, ``gzip``, ``snappy``, ``lz4``, ``zstd``) makes the
leader store each batch in that codec: a batch in another codec has its records section
decompressed and compressed again, at the topic's ``compression.<codec>.level``
(KIP-390), every header field kept (offsets, timestamps, producer id, epoch and sequence,
the transactional bit), and its CRC computed anew. The records themselves, once
decompressed, are the same bytes. Control batches (transaction markers) are kept as they
are. As in Kafka, a batch that grows past ``max.message.bytes`` in the new codec is
refused (MESSAGE_TOO_LARGE). Followers copy the leader's bytes, so every replica stores
the same batches.
"""

from __future__ import annotations

from typing import Final

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.record_batch import BatchHeader, parse_header
from riverbed.protocol.records import recompressed_batch
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import CorruptRecordError, RecordTooLargeError

__all__ = ["stored_batches", "target_codec"]

_CODECS: Final = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def target_codec(cfg: LogConfig) -> tuple[CompressionType, int | None] | None:
    """The codec and level batches are stored in (None: the producer's, kept)."""
    codec = _CODECS.get(cfg.compression_type)
    if codec is None:
        return None
    levels = {
        CompressionType.GZIP: cfg.compression_gzip_level,
        CompressionType.LZ4: cfg.compression_lz4_level,
        CompressionType.ZSTD: cfg.compression_zstd_level,
    }
    return codec, levels.get(codec)


def stored_batches(
    buf: bytearray, found: list[tuple[int, BatchHeader]], cfg: LogConfig, name: str
) -> tuple[bytearray, list[tuple[int, BatchHeader]]]:
    """``buf``'s validated batches (``found``: position, header) as the topic stores
    them: unchanged (the same objects) when every batch is already in its codec."""
    target = target_codec(cfg)
    if target is None:
        return buf, found
    codec, level = target
    if all(h.is_control or h.compression == codec for _, h in found):
        return buf, found
    out = bytearray()
    stored: list[tuple[int, BatchHeader]] = []
    for pos, h in found:
        batch = memoryview(buf)[pos : pos + h.size]
        if h.is_control or h.compression == codec:
            piece: bytes | memoryview = batch
        else:
            try:
                piece = recompressed_batch(batch, codec, level)
            except ProtocolError as e:
                raise CorruptRecordError(f"{name}: {e}") from None
        header = parse_header(piece)
        if header.size > cfg.max_message_bytes:
            raise RecordTooLargeError(
                f"{name}: record batch of {header.size} bytes in {cfg.compression_type} "
                f"exceeds max.message.bytes ({cfg.max_message_bytes})"
            )
        stored.append((len(out), header))
        out += piece
    return out, stored
