"""Bad bytes give ProtocolError — never another exception, a hang or a huge allocation."""

from __future__ import annotations

import contextlib
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import (
    BATCH_HEADER_SIZE,
    CompressionType,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    parse_header,
    set_log_append_time,
    valid_prefix,
    validate_batch,
)

CRC_START = 21


def _batch(compression: CompressionType = CompressionType.NONE) -> bytes:
    recs = [
        SimpleRecord(b"value-%d" % i, key=b"k%d" % i, headers=[("h", b"v")], timestamp=100 + i)
        for i in range(5)
    ]
    return build_batch(recs, base_offset=7, compression=compression)


def _fix_crc(b: bytearray) -> bytearray:
    struct.pack_into(">I", b, 17, crc32c(memoryview(b)[CRC_START:]))
    return b


@pytest.mark.parametrize("compression", list(CompressionType))
def test_flip_any_crc_covered_byte_is_a_crc_error(compression: CompressionType) -> None:
    good = _batch(compression)
    for i in range(17, len(good)):  # the CRC field itself and everything it covers
        for mask in (0x01, 0x80):
            bad = bytearray(good)
            bad[i] ^= mask
            with pytest.raises(ProtocolError, match="CRC"):
                validate_batch(bad)
            with pytest.raises(ProtocolError, match="CRC"):
                list(iter_records(bad))
            assert valid_prefix(bad) == (0, [])


def test_bytes_outside_the_crc() -> None:
    good = _batch()
    for i in list(range(0, 8)) + list(range(12, 16)):  # baseOffset, partitionLeaderEpoch
        bad = bytearray(good)
        bad[i] ^= 0xFF
        validate_batch(bad)  # not covered by the CRC: still a valid batch
    for i in range(8, 12):  # batchLength
        bad = bytearray(good)
        bad[i] ^= 0x01
        with pytest.raises(ProtocolError):
            validate_batch(bad)
    bad = bytearray(good)
    bad[16] = 1  # magic
    with pytest.raises(ProtocolError, match="magic 1"):
        validate_batch(bad)
    with pytest.raises(ProtocolError, match="magic 1"):
        parse_header(bad[:20])


@pytest.mark.parametrize("compression", list(CompressionType))
def test_truncated_at_every_position(compression: CompressionType) -> None:
    good = _batch(compression)
    assert list(iter_batches(b"")) == []  # no bytes: no batches, nothing torn
    for n in range(len(good)):
        cut = good[:n]
        with pytest.raises(ProtocolError):
            validate_batch(cut)
        if n:
            with pytest.raises(ProtocolError):
                list(iter_batches(cut))
        with pytest.raises(ProtocolError):
            list(iter_records(cut))
        assert valid_prefix(cut) == (0, [])
        if n >= BATCH_HEADER_SIZE:
            assert parse_header(cut).base_offset == 7  # header alone is enough to parse
        else:
            with pytest.raises(ProtocolError):
                parse_header(cut)
    # a whole batch followed by a torn one: the prefix survives
    two = good + good[: len(good) // 2]
    assert valid_prefix(two)[0] == len(good)


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 48, 2**31 - 1, 10**9])
def test_absurd_batch_length(length: int) -> None:
    bad = bytearray(_batch())
    struct.pack_into(">i", bad, 8, length)
    with pytest.raises(ProtocolError):
        validate_batch(bad)
    with pytest.raises(ProtocolError):
        list(iter_batches(bad))
    if length < 49:
        with pytest.raises(ProtocolError, match="batchLength"):
            parse_header(bad)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "match"),
    [
        (57, ">i", -1, "negative recordsCount"),
        (57, ">i", 2**31 - 1, "recordsCount"),
        (57, ">i", 6, "exceeds lastOffsetDelta"),
        (23, ">i", -5, "lastOffsetDelta"),
        (21, ">h", 5, "unknown compression type 5"),
        (21, ">h", 7, "unknown compression type 7"),
    ],
)
def test_inconsistent_header_fields(offset: int, fmt: str, value: int, match: str) -> None:
    bad = bytearray(_batch())
    struct.pack_into(fmt, bad, offset, value)
    _fix_crc(bad)  # a writer that computed a CRC over nonsense
    with pytest.raises(ProtocolError, match=match):
        validate_batch(bad)
    with pytest.raises(ProtocolError, match=match):
        parse_header(bad)


def test_records_that_cannot_fit() -> None:
    bad = bytearray(_batch())
    # lastOffsetDelta allows 1000 records but the section holds far fewer bytes than that.
    struct.pack_into(">i", bad, 23, 999)
    struct.pack_into(">i", bad, 57, 1000)
    _fix_crc(bad)
    with pytest.raises(ProtocolError, match="cannot fit"):
        validate_batch(bad)


def test_set_log_append_time_on_a_torn_batch() -> None:
    bad = bytearray(_batch()[:-3])
    with pytest.raises(ProtocolError):
        set_log_append_time(bad, 0, 1)
    with pytest.raises(TypeError):
        set_log_append_time(memoryview(_batch()), 0, 1)  # read-only buffer


def test_records_section_with_valid_crc_but_wrong_counts() -> None:
    good = bytearray(_batch())
    # Claim 4 records (CRC fixed): one record's bytes are left over after the fourth.
    fewer = bytearray(good)
    struct.pack_into(">i", fewer, 57, 4)
    with pytest.raises(ProtocolError, match="after the 4 records"):
        list(iter_records(_fix_crc(fewer)))


@settings(max_examples=1000, deadline=None)
@given(
    data=st.data(),
    compression=st.sampled_from(CompressionType),
)
def test_garbled_records_section_only_protocol_error(
    data: st.DataObject, compression: CompressionType
) -> None:
    """Mutate the records section and re-sign it: iter_records decodes or says why not."""
    good = _batch(compression)
    body = bytearray(good[BATCH_HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    extra = data.draw(st.binary(max_size=8))
    body = body[:cut] + extra
    bad = bytearray(good[:BATCH_HEADER_SIZE]) + body
    struct.pack_into(">i", bad, 8, len(bad) - 12)
    _fix_crc(bad)
    try:
        validate_batch(bad)
        records = list(iter_records(bad))
    except ProtocolError:
        return
    assert len(records) == 5
    assert all(7 <= r.offset <= 11 for r in records)


@settings(max_examples=1000, deadline=None)
@given(st.binary(min_size=0, max_size=200))
def test_random_bytes_only_protocol_error(blob: bytes) -> None:
    for fn in (parse_header, validate_batch):
        with contextlib.suppress(ProtocolError):
            fn(blob)
    n, headers = valid_prefix(blob)
    assert n == sum(h.size for h in headers) <= len(blob)
    with contextlib.suppress(ProtocolError):
        list(iter_records(blob))


def test_varint_longer_than_allowed() -> None:
    b = bytearray(_batch())
    # First record's length varint replaced by an over-long varint (all continuation bits).
    b[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + 6] = b"\xff\xff\xff\xff\xff\xff"
    with pytest.raises(ProtocolError, match="varint"):
        list(iter_records(_fix_crc(b)))


def test_compressed_batch_with_records_but_no_bytes() -> None:
    bad = bytearray(_batch(CompressionType.ZSTD)[:61])
    struct.pack_into(">i", bad, 8, 49)  # header only, yet recordsCount 5
    _fix_crc(bad)
    with pytest.raises(ProtocolError, match="cannot fit in 0 bytes"):
        validate_batch(bad)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), count=st.integers(1, 6), compression=st.sampled_from(CompressionType))
def test_recovery_stops_at_the_first_corrupt_batch(
    data: st.DataObject, count: int, compression: CompressionType
) -> None:
    batches = [
        build_batch([SimpleRecord(b"r%d" % i * (i + 1))] * (i + 1), compression=compression)
        for i in range(count)
    ]
    log = bytearray(b"".join(batches))
    k = data.draw(st.integers(0, count - 1))
    start = sum(len(b) for b in batches[:k])
    log[start + data.draw(st.integers(17, len(batches[k]) - 1))] ^= data.draw(st.integers(1, 255))
    size, headers = valid_prefix(log)
    assert (size, len(headers)) == (start, k)
    with pytest.raises(ProtocolError, match="CRC"):
        list(iter_batches(log))
