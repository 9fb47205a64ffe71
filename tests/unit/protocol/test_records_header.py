"""Record batch v2 header: parse, validate, in-place patches."""

from __future__ import annotations

import pytest

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    CompressionType,
    SimpleRecord,
    build_batch,
    check_dense_offsets,
    iter_batches,
    iter_records,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
    valid_prefix,
    validate_batch,
)


def _batch(n: int = 3, **kw: object) -> bytes:
    recs = [SimpleRecord(f"v{i}".encode(), key=b"k", timestamp=1000 + i) for i in range(n)]
    return build_batch(recs, **kw)  # type: ignore[arg-type]


def test_header_fields() -> None:
    b = _batch(3, base_offset=42, producer_id=7, producer_epoch=2, base_sequence=5)
    h = validate_batch(b)
    assert h.base_offset == 42
    assert h.size == len(b) == LOG_OVERHEAD + h.batch_length
    assert h.magic == 2
    assert h.last_offset_delta == 2 and h.records_count == 3
    assert h.last_offset == 44 and h.next_offset == 45
    assert h.first_timestamp == 1000 and h.max_timestamp == 1002
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 5)
    assert h.compression is CompressionType.NONE
    assert h.timestamp_type == 0 and not h.is_transactional and not h.is_control
    assert parse_header(b) == h


def test_iter_batches_and_valid_prefix() -> None:
    a, b = _batch(2, base_offset=0), _batch(4, base_offset=2)
    buf = a + b
    assert [(pos, h.base_offset) for pos, h in iter_batches(buf)] == [(0, 0), (len(a), 2)]
    assert valid_prefix(buf)[0] == len(buf)
    torn = buf[:-1]
    assert valid_prefix(torn)[0] == len(a)
    assert len(valid_prefix(torn)[1]) == 1
    with pytest.raises(ProtocolError):
        list(iter_batches(torn))


def test_patches_keep_crc_valid() -> None:
    buf = bytearray(_batch(3))
    patch_base_offset(buf, 0, 1000)
    patch_partition_leader_epoch(buf, 0, 9)
    h = validate_batch(buf)
    assert h.base_offset == 1000 and h.partition_leader_epoch == 9
    set_log_append_time(buf, 0, 5555)
    h = validate_batch(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 5555 and h.first_timestamp == 1000
    assert [r.timestamp for r in iter_records(buf)] == [5555] * 3
    assert [r.offset for r in iter_records(buf)] == [1000, 1001, 1002]


def test_bad_magic_and_short_header() -> None:
    b = bytearray(_batch(1))
    b[16] = 1
    with pytest.raises(ProtocolError, match="magic"):
        parse_header(b)
    with pytest.raises(ProtocolError, match="truncated"):
        parse_header(_batch(1)[: BATCH_HEADER_SIZE - 1])


@pytest.mark.parametrize("compression", list(CompressionType))
def test_cleaner_style_batches(compression: CompressionType) -> None:
    """Records kept at their old offsets, the original last offset, a delete horizon."""
    recs = [SimpleRecord(b"a", key=b"k1", timestamp=500), SimpleRecord(b"c", timestamp=700)]
    b = build_batch(
        recs,
        base_offset=100,
        compression=compression,
        offset_deltas=[0, 2],
        last_offset_delta=4,
        delete_horizon_ms=1_000_000,
        producer_id=5,
        producer_epoch=0,
        base_sequence=10,
    )
    h = validate_batch(b)
    assert (h.records_count, h.last_offset_delta, h.next_offset) == (2, 4, 105)
    assert h.has_delete_horizon and h.first_timestamp == 1_000_000 and h.max_timestamp == 700
    assert h.last_sequence == 14
    got = [(r.offset, r.timestamp, r.value) for r in iter_records(b)]
    assert got == [(100, 500, b"a"), (102, 700, b"c")]
    empty = build_batch(
        [], base_offset=100, compression=compression, last_offset_delta=4, now_ms=700
    )
    e = validate_batch(empty)
    assert len(empty) == BATCH_HEADER_SIZE
    assert (e.records_count, e.next_offset, e.max_timestamp) == (0, 105, 700)
    assert e.compression is CompressionType.NONE
    assert list(iter_records(empty)) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"offset_deltas": [0]},
        {"offset_deltas": [1, 1]},
        {"offset_deltas": [-1, 0]},
        {"last_offset_delta": 0},
        {"last_offset_delta": 2**31},
        {"timestamp_type": 2},
    ],
)
def test_build_batch_rejects_inconsistent_arguments(kwargs: dict[str, object]) -> None:
    recs = [SimpleRecord(b"a"), SimpleRecord(b"b")]
    with pytest.raises(ValueError):
        build_batch(recs, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        build_batch([])


def test_check_dense_offsets() -> None:
    check_dense_offsets(validate_batch(_batch(3)))
    gappy = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")], offset_deltas=[0, 5])
    with pytest.raises(ProtocolError, match="inconsistent batch offset range"):
        check_dense_offsets(validate_batch(gappy))


def test_last_sequence_wraps_like_kafka() -> None:
    h = validate_batch(_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert h.last_sequence == 0  # 2**31-2, 2**31-1, 0
    assert validate_batch(_batch(3)).last_sequence == -1  # no producer: no sequence
