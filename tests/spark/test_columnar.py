"""The columnar decoder (riverbed.spark.columnar + the C module _columnar) against
riverbed's own record codec: generated batches of every codec, control batches, LogAppendTime,
offset gaps, nulls and headers; corrupt and malformed batches; read_committed filtering of
synthetic fetch responses. No broker, no Spark session."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.records import (
    CRC_START,
    CompressionType,
    SimpleRecord,
    TimestampType,
    build_batch,
    iter_records,
    parse_header,
)
from riverbed.spark import columnar
from riverbed.spark.columnar import CorruptRecordError, decode_records

TOPIC, PARTITION = "t", 3
TIMESTAMP_MS_MAX = (2**63 - 1) // 1000

blobs = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=3)
records = st.builds(
    SimpleRecord,
    value=blobs,
    key=blobs,
    headers=headers,
    timestamp=st.integers(-(2**40), 2**42),
)


@st.composite
def batch_specs(draw: Any) -> dict[str, Any]:
    """Arguments of build_batch for one batch (its base offset set later)."""
    recs = draw(st.lists(records, min_size=1, max_size=8))
    gaps = draw(st.lists(st.integers(1, 3), min_size=len(recs), max_size=len(recs)))
    deltas = [sum(gaps[:i]) for i in range(len(recs))]  # compacted: offsets with gaps
    return {
        "records": recs,
        "offset_deltas": deltas,
        "compression": draw(st.sampled_from(list(CompressionType))),
        "timestamp_type": draw(st.sampled_from([0, 1])),
        "now_ms": draw(st.integers(0, 2**41)),
        "control": draw(st.integers(0, 5)) == 0,
    }


def build_log(specs: list[dict[str, Any]], start: int = 0) -> bytes:
    out = bytearray()
    offset = start
    for s in specs:
        if s["control"]:
            batch = build_end_txn_marker_batch(
                True,
                producer_id=7,
                producer_epoch=0,
                coordinator_epoch=0,
                now_ms=s["now_ms"],
                base_offset=offset,
            )
        else:
            batch = build_batch(
                s["records"],
                base_offset=offset,
                compression=s["compression"],
                timestamp_type=s["timestamp_type"],
                now_ms=s["now_ms"],
                offset_deltas=s["offset_deltas"],
            )
        out += batch
        offset = parse_header(batch).next_offset
    return bytes(out)


def expected_rows(log: bytes, lo: int, hi: int) -> list[dict[str, Any]]:
    """What the pure-Python record codec says the rows are."""
    rows = []
    pos = 0
    while pos < len(log):
        h = parse_header(log, pos)
        batch = log[pos : pos + h.size]
        pos += h.size
        if h.is_control:
            continue
        for r in iter_records(batch):
            if lo <= r.offset < hi:
                rows.append(
                    {
                        "key": r.key,
                        "value": r.value,
                        "offset": r.offset,
                        "ts_ms": r.timestamp,
                        "timestampType": h.timestamp_type,
                        "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
                    }
                )
    return rows


def decode(log: bytes, lo: int, hi: int, *, include_headers: bool = True, **kw: Any) -> Any:
    return decode_records(
        log,
        topic=TOPIC,
        partition=PARTITION,
        from_offset=lo,
        until_offset=hi,
        include_headers=include_headers,
        **kw,
    )


def decoded_rows(log: bytes, lo: int, hi: int, **kw: Any) -> tuple[list[dict[str, Any]], int]:
    d = decode(log, lo, hi, **kw)
    rows = []
    for b in d.batches:
        b.validate(full=True)
        micros = b.column("timestamp").cast(pa.int64()).to_pylist()
        for r, us in zip(b.to_pylist(), micros, strict=True):
            assert (r.pop("topic"), r.pop("partition")) == (TOPIC, PARTITION)
            del r["timestamp"]
            r["ts_ms"] = us // 1000
            rows.append(r)
    return rows, d.next_offset


def test_the_c_decoder_is_built() -> None:
    """make builds it (hatch_build.py); without it the source silently runs 5x slower."""
    assert columnar.compiled()


@settings(max_examples=150)
@given(st.lists(batch_specs(), min_size=1, max_size=5), st.data())
def test_decoder_matches_the_record_codec(specs: list[dict[str, Any]], data: Any) -> None:
    log = build_log(specs, start=100)
    end = 100
    pos = 0
    while pos < len(log):
        h = parse_header(log, pos)
        end = h.next_offset
        pos += h.size
    lo = data.draw(st.integers(95, end + 1), label="lo")
    hi = data.draw(st.integers(lo, end + 2), label="hi")
    rows, next_offset = decoded_rows(log, lo, hi)
    assert rows == expected_rows(log, lo, hi)
    assert next_offset == max(lo, min(hi, end))


@settings(max_examples=60)
@given(st.lists(batch_specs(), min_size=1, max_size=4))
def test_python_fallback_gives_the_same_arrow_batches(specs: list[dict[str, Any]]) -> None:
    log = build_log(specs)
    args: dict[str, Any] = dict(
        topic=TOPIC, partition=PARTITION, from_offset=0, until_offset=10**9, include_headers=True
    )
    compiled = decode_records(log, **args)
    saved, columnar._columnar = columnar._columnar, None
    try:
        python = decode_records(log, **args)
    finally:
        columnar._columnar = saved
    assert len(compiled.batches) == len(python.batches)
    for a, b in zip(compiled.batches, python.batches, strict=True):
        assert a.equals(b)


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def test_bad_crc_names_partition_and_offset() -> None:
    good = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")], base_offset=40)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    log = build_batch([SimpleRecord(b"z")], base_offset=39) + bytes(bad)
    with pytest.raises(CorruptRecordError, match=r"t-3 at offset 40: CRC-32C"):
        decode_records(
            log,
            topic=TOPIC,
            partition=PARTITION,
            from_offset=39,
            until_offset=50,
            include_headers=False,
        )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(records, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_malformed_records_fail_cleanly_as_the_codec_does(
    recs: list[SimpleRecord], flips: list[tuple[int, int]]
) -> None:
    """Records mangled under a valid CRC: the decoder raises CorruptRecordError naming
    the partition exactly when the record codec rejects them, and agrees otherwise."""
    batch = bytearray(build_batch(recs, base_offset=5))
    for where, byte in flips:
        i = 61 + where % (len(batch) - 61)
        batch[i] = byte
    log = _with_crc(batch)
    try:
        want = expected_rows(log, 0, 10**9)
    except Exception:
        want = None
    if want is not None and any(abs(r["ts_ms"]) > TIMESTAMP_MS_MAX for r in want):
        want = None  # Spark's timestamps (microseconds in an int64) cannot hold it
    if want is None:
        with pytest.raises(CorruptRecordError, match=r"t-3"):
            decoded_rows(log, 0, 10**9)
        return
    try:
        got = decoded_rows(log, 0, 10**9)[0]
    except CorruptRecordError as e:
        # a varlong beyond 64 bits: refused as Kafka's Java client does (the Python
        # codec reads it as a big integer)
        assert "varint too long" in str(e)
        return
    assert got == want


def test_a_batch_cut_by_the_fetch_size_is_left_for_the_next_fetch() -> None:
    a = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")], base_offset=0)
    b = build_batch([SimpleRecord(b"c" * 100)], base_offset=2)
    d = decode_records(
        a + b[:50],
        topic=TOPIC,
        partition=PARTITION,
        from_offset=0,
        until_offset=10,
        include_headers=False,
    )
    assert [r["value"] for r in d.batches[0].to_pylist()] == [b"a", b"b"]
    assert (d.next_offset, d.oversized_batch_bytes) == (2, 0)
    d = decode_records(
        b[:50],
        topic=TOPIC,
        partition=PARTITION,
        from_offset=2,
        until_offset=10,
        include_headers=False,
    )
    assert (d.batches, d.next_offset, d.oversized_batch_bytes) == ([], 2, len(b))


def test_log_append_time_batches_use_the_batch_time() -> None:
    batch = build_batch(
        [SimpleRecord(b"a", timestamp=5), SimpleRecord(b"b", timestamp=9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        now_ms=1_700_000_000_123,
    )
    rows, _ = decoded_rows(batch, 0, 2)
    assert [(r["ts_ms"], r["timestampType"]) for r in rows] == [(1_700_000_000_123, 1)] * 2


# ----------------------------------------------------------------- read_committed


def _txn(pid: int, offset: int, values: list[bytes]) -> bytes:
    return build_batch(
        [SimpleRecord(v) for v in values],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(
        commit,
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=0,
        now_ms=1,
        base_offset=offset,
    )


def _values(log: bytes, lo: int, hi: int, **kw: Any) -> tuple[list[bytes], int]:
    d = decode(log, lo, hi, include_headers=False, **kw)
    return [v for b in d.batches for v in b.column("value").to_pylist()], d.next_offset


# Producer 1 commits (offsets 0-1, marker 4), producer 2 aborts (2-3, 5-6, marker 7),
# a plain record at 8, then producer 2 again in a transaction that commits (9, marker 10).
INTERLEAVED = (
    _txn(1, 0, [b"c1", b"c2"])
    + _txn(2, 2, [b"a1", b"a2"])
    + _marker(1, 4, True)
    + _txn(2, 5, [b"a3", b"a4"])
    + _marker(2, 7, False)
    + build_batch([SimpleRecord(b"plain")], base_offset=8)
    + _txn(2, 9, [b"c3"])
    + _marker(2, 10, True)
)


def test_read_committed_drops_aborted_transactions_as_the_java_consumer() -> None:
    committed = dict(read_committed=True, aborted=[(2, 2)], last_stable_offset=11)
    assert _values(INTERLEAVED, 0, 11, **committed) == ([b"c1", b"c2", b"plain", b"c3"], 11)
    # read_uncommitted: everything but the markers
    assert _values(INTERLEAVED, 0, 11)[0] == [
        b"c1",
        b"c2",
        b"a1",
        b"a2",
        b"a3",
        b"a4",
        b"plain",
        b"c3",
    ]
    # a fetch from the middle of the aborted transaction (its first offset is before it)
    first = len(_txn(1, 0, [b"c1", b"c2"]))
    assert _values(INTERLEAVED[first:], 2, 11, **committed)[0] == [b"plain", b"c3"]


def test_read_committed_stops_at_the_last_stable_offset() -> None:
    log = (
        _txn(1, 0, [b"c1"])
        + _marker(1, 1, True)
        + build_batch([SimpleRecord(b"late")], base_offset=2)
        + _txn(3, 3, [b"open"])
    )
    values, next_offset = _values(log, 0, 10, read_committed=True, aborted=[], last_stable_offset=3)
    assert (values, next_offset) == ([b"c1", b"late"], 3)
    # an unknown LSO (-1: an old broker) does not cap
    assert _values(log, 0, 10, read_committed=True, aborted=None)[0] == [b"c1", b"late", b"open"]


def test_an_aborted_transaction_starting_later_does_not_drop_earlier_batches() -> None:
    """Producer 5 commits a transaction, then aborts the next: only the second is dropped
    (the aborted entry's first offset is after the first transaction's batches)."""
    log = _txn(5, 0, [b"ok"]) + _marker(5, 1, True) + _txn(5, 2, [b"no"]) + _marker(5, 3, False)
    assert _values(log, 0, 4, read_committed=True, aborted=[(5, 2)], last_stable_offset=4) == (
        [b"ok"],
        4,
    )
