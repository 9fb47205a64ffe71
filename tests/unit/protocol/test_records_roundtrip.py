"""Property tests: build_batch -> parse/validate/iter_records gives back what went in."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.protocol.records import (
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    parse_header,
    patch_base_offset,
    set_log_append_time,
    valid_prefix,
    validate_batch,
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Timestamps spread so that deltas cover 1..10 byte varlongs in both directions.
TIMESTAMPS = st.one_of(st.none(), st.integers(-1, 2**40), st.integers(0, 2**62))
OPT_BYTES = st.one_of(st.none(), st.just(b""), st.binary(max_size=300))
HEADERS = st.lists(st.tuples(st.text(max_size=20), OPT_BYTES), max_size=4)
RECORDS = st.lists(
    st.builds(SimpleRecord, value=OPT_BYTES, key=OPT_BYTES, headers=HEADERS, timestamp=TIMESTAMPS),
    min_size=1,
    max_size=30,
)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _expected(
    recs: list[SimpleRecord], base_offset: int, now_ms: int, log_append: bool
) -> list[Record]:
    stamps = [now_ms if r.timestamp is None else r.timestamp for r in recs]
    if log_append:
        stamps = [now_ms if now_ms != -1 else max(stamps)] * len(recs)
    return [
        Record(base_offset + i, ts, r.key, r.value, list(r.headers))
        for i, (r, ts) in enumerate(zip(recs, stamps, strict=True))
    ]


@SETTINGS
@given(
    recs=RECORDS,
    compression=st.sampled_from(CompressionType),
    base_offset=st.integers(0, 2**62),
    producer=st.tuples(st.integers(-1, 2**62), INT16, INT32),
    ple=INT32,
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    now_ms=st.one_of(st.just(-1), st.integers(0, 2**45)),
)
def test_build_then_read(
    recs: list[SimpleRecord],
    compression: CompressionType,
    base_offset: int,
    producer: tuple[int, int, int],
    ple: int,
    flags: tuple[bool, bool, bool],
    now_ms: int,
) -> None:
    log_append, transactional, control = flags
    pid, epoch, seq = producer
    batch = build_batch(
        recs,
        base_offset=base_offset,
        compression=compression,
        timestamp_type=1 if log_append else 0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        partition_leader_epoch=ple,
        is_transactional=transactional,
        is_control=control,
        now_ms=now_ms,
    )
    h = validate_batch(batch)
    assert h == parse_header(batch)
    assert h.size == len(batch)
    assert (h.base_offset, h.partition_leader_epoch) == (base_offset, ple)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, epoch, seq)
    assert h.compression is compression
    assert h.timestamp_type == int(log_append)
    assert (h.is_transactional, h.is_control) == (transactional, control)
    assert h.records_count == len(recs) and h.last_offset_delta == len(recs) - 1
    assert h.next_offset == base_offset + len(recs)
    got = list(iter_records(batch))
    assert got == _expected(recs, base_offset, now_ms, log_append)
    if not log_append:
        assert h.max_timestamp == max(r.timestamp for r in got)
        assert h.first_timestamp == got[0].timestamp


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    compression=st.sampled_from(CompressionType),
    append_time=st.integers(0, 2**45),
)
def test_log_of_batches_patched_like_a_broker(
    sizes: list[int], compression: CompressionType, append_time: int
) -> None:
    """Batches concatenated as in a segment, offsets assigned and LogAppendTime stamped."""
    log = bytearray()
    next_offset = 0
    for n in sizes:
        pos = len(log)
        recs = [SimpleRecord(b"x" * i, timestamp=1000 + i) for i in range(n)]
        log += build_batch(recs, compression=compression)
        patch_base_offset(log, pos, next_offset)
        set_log_append_time(log, pos, append_time)
        next_offset += n
    headers = [h for _, h in iter_batches(log)]
    assert [h.base_offset for h in headers] == [sum(sizes[:i]) for i in range(len(sizes))]
    assert valid_prefix(log) == (len(log), headers)
    offsets = []
    for pos, h in iter_batches(log):
        for r in iter_records(bytes(log[pos : pos + h.size])):
            assert r.timestamp == append_time
            offsets.append(r.offset)
    assert offsets == list(range(sum(sizes)))
