"""PartitionLog behaviour: appends, timestamps (KIP-32), reads, roll, retention, recovery."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.records import (
    BatchHeader,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    parse_header,
)
from riverbed.storage import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LogConfig,
    ManualClock,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordTooLargeError,
)
from riverbed.storage.log import ORIGIN_COORDINATOR
from riverbed.storage.log_files import StaleRangeError

T0 = 1_700_000_000_000
HOUR = 3_600_000


def batch(
    n: int = 3,
    ts: int | list[int] = T0,
    size: int = 10,
    compression: CompressionType = CompressionType.NONE,
    **kw: object,
) -> bytes:
    stamps = ts if isinstance(ts, list) else [ts + i for i in range(n)]
    recs = [
        SimpleRecord(bytes([65 + i % 26]) * size, key=b"k%d" % i, timestamp=t)
        for i, t in enumerate(stamps)
    ]
    return build_batch(recs, compression=compression, **kw)  # type: ignore[arg-type]


def open_log(
    path: Path, clock: ManualClock, config: LogConfig | None = None, **kw: object
) -> PartitionLog:
    return PartitionLog(path / "t-0", "t", 0, config or LogConfig(), clock, **kw)  # type: ignore[arg-type]


def headers(log: PartitionLog) -> list[BatchHeader]:
    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return [h for _, h in iter_batches(data)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


# ---- append path ---------------------------------------------------------------------------


def test_leader_append_assigns_offsets_epoch_in_place(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    buf = bytearray(batch(3))
    info = log.append_as_leader(buf, leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 2, 3)
    h = parse_header(buf)  # patched in place
    assert h.partition_leader_epoch == 7 and h.base_offset == 0
    info2 = log.append_as_leader(batch(2), leader_epoch=7)
    assert (info2.first_offset, info2.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers(log)] == [(0, 7), (3, 7)]
    assert log.epoch_cache.entries() == [(7, 0)]
    log.append_as_leader(batch(1), leader_epoch=9)
    assert log.epoch_cache.entries() == [(7, 0), (9, 5)]
    assert log.end_offset_for_epoch(7) == (7, 5)
    assert log.end_offset_for_epoch(9) == (9, 6)
    log.close()


def test_segments_are_readable_by_kafka_python(tmp_path: Path, clock: ManualClock) -> None:
    cfg = LogConfig(segment_bytes=600)
    log = open_log(tmp_path, clock, cfg)
    expected = []
    for i in range(12):
        codec = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4][i % 3]
        stamps = [T0 + 10 * i + j for j in range(4)]
        log.append_as_leader(batch(4, stamps, size=20 + i, compression=codec), leader_epoch=1)
        expected += [(4 * i + j, stamps[j], bytes([65 + j]) * (20 + i)) for j in range(4)]
    log.close()
    logs = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(logs) > 2
    got = []
    for path in logs:
        records = MemoryRecords(path.read_bytes())
        while (b := records.next_batch()) is not None:
            got += [(r.offset, r.timestamp, r.value) for r in b]
        assert int(path.stem) == min(o for o, _, _ in got if o >= int(path.stem))
    assert got == expected


def test_log_append_time_is_monotonic_across_leader_change(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = LogConfig(message_timestamp_type="LogAppendTime")
    log = open_log(tmp_path, clock, cfg)
    clock.set(T0 + 5000)
    info = log.append_as_leader(batch(2, ts=T0 - 10 * HOUR), leader_epoch=1)
    assert info.log_append_time == T0 + 5000
    recs = list(iter_records(log.read(0, 10000).read_bytes()))
    assert [r.timestamp for r in recs] == [T0 + 5000] * 2
    log.close()
    # a new leader whose clock is 3 s behind opens the same log (replicated copy)
    clock.set(T0 + 2000)
    log = open_log(tmp_path, clock, cfg, clean_shutdown=True, recovery_point=2)
    info = log.append_as_leader(batch(1), leader_epoch=2)
    assert info.log_append_time == T0 + 5000  # max(last appended, now)
    clock.set(T0 + 9000)
    assert log.append_as_leader(batch(1), leader_epoch=2).log_append_time == T0 + 9000
    # and the same after a crash (recovered from the log, not from memory)
    log.abandon()
    clock.set(T0)
    log = open_log(tmp_path, clock, cfg, clean_shutdown=False, recovery_point=0)
    assert log.append_as_leader(batch(1), leader_epoch=3).log_append_time == T0 + 9000
    stamps = [h.max_timestamp for h in headers(log)]
    assert stamps == sorted(stamps)
    assert all(h.timestamp_type == 1 for h in headers(log))
    log.close()


def test_create_time_bounds(tmp_path: Path, clock: ManualClock) -> None:
    cfg = LogConfig(message_timestamp_before_max_ms=HOUR, message_timestamp_after_max_ms=HOUR)
    log = open_log(tmp_path, clock, cfg)
    log.append_as_leader(batch(1, ts=T0 - HOUR), leader_epoch=0)
    log.append_as_leader(batch(1, ts=T0 + HOUR), leader_epoch=0)
    with pytest.raises(InvalidTimestampError) as e:
        log.append_as_leader(batch(1, ts=T0 + HOUR + 1), leader_epoch=0)
    assert e.value.error_code == 32 and "after.max.ms" in str(e.value)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, ts=T0 - HOUR - 1), leader_epoch=0)
    # the max timestamp of a batch is checked too, not only the first
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(2, ts=[T0, T0 + 2 * HOUR]), leader_epoch=0)
    assert log.log_end_offset == 2
    # default after.max is one hour; default before.max is unlimited
    log2 = PartitionLog(tmp_path / "u-0", "u", 0, LogConfig(), clock)
    log2.append_as_leader(batch(1, ts=0), leader_epoch=0)
    with pytest.raises(InvalidTimestampError):
        log2.append_as_leader(batch(1, ts=T0 + HOUR + 1), leader_epoch=0)
    log.close()
    log2.close()


def test_bad_batches_are_rejected_with_kafka_codes(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(max_message_bytes=500))
    good = bytearray(batch(2))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as e:
        log.append_as_leader(good + corrupt, leader_epoch=0)
    assert e.value.error_code == 2
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good[:-5], leader_epoch=0)  # truncated
    with pytest.raises(RecordTooLargeError) as e2:
        log.append_as_leader(batch(2, size=600), leader_epoch=0)
    assert e2.value.error_code == 10 and "max.message.bytes" in str(e2.value)
    with pytest.raises(InvalidRecordError) as e3:
        log.append_as_leader(b"", leader_epoch=0)
    assert e3.value.error_code == 87
    control = build_batch(
        [SimpleRecord(b"\x00\x00\x00\x00", key=b"\x00\x00\x00\x00")], is_control=True
    )
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(control, leader_epoch=0)
    assert log.log_end_offset == 0  # nothing half-appended
    log.append_as_leader(control, leader_epoch=0, origin=ORIGIN_COORDINATOR)
    assert log.log_end_offset == 1
    log.close()


def test_log_append_time_stays_monotonic_when_a_follower_with_a_slower_clock_takes_over(
    tmp_path: Path,
) -> None:
    """Two replicas, two clocks: leader A's clock runs 5 s ahead of follower B's. B copies
    A's LogAppendTime batches, then leads (its own earlier leadership cached a lower stamp):
    B's stamps never go below the last one it copied from A, and A, following B again,
    ends with the same monotonic stamps."""
    cfg = LogConfig(message_timestamp_type="LogAppendTime")
    clock_a, clock_b = ManualClock(T0 + 5000), ManualClock(T0)
    a, b = open_log(tmp_path / "a", clock_a, cfg), open_log(tmp_path / "b", clock_b, cfg)
    # B led first (epoch 1) with its own clock; A copied that
    b.append_as_leader(batch(1), leader_epoch=1)
    a.append_as_follower(b.read(0, 1 << 20).read_bytes())
    assert b.last_append_time == T0
    # A leads (epoch 2), stamping with its clock 5 s ahead; B copies
    for _ in range(3):
        a.append_as_leader(batch(2), leader_epoch=2)
        clock_a.advance(100)
    b.append_as_follower(a.read(1, 1 << 20).read_bytes())
    last_of_a = a.last_append_time
    assert last_of_a == T0 + 5200 and b.last_append_time == last_of_a
    # B leads again (epoch 3) with its clock 5 s behind
    clock_b.advance(1000)
    info = b.append_as_leader(batch(1), leader_epoch=3)
    assert info.log_append_time == last_of_a  # max(last copied, own clock)
    clock_b.advance(10_000)
    assert b.append_as_leader(batch(1), leader_epoch=3).log_append_time == T0 + 11_000
    a.append_as_follower(b.read(a.log_end_offset, 1 << 20).read_bytes())
    for log in (a, b):
        stamps = [h.max_timestamp for h in headers(log)]
        assert stamps == sorted(stamps) and stamps[-1] == T0 + 11_000, stamps
        log.close()


def test_follower_append_keeps_offsets_epochs_and_timestamps(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader = open_log(tmp_path / "l", clock, LogConfig(message_timestamp_type="LogAppendTime"))
    for epoch in (1, 1, 4):
        leader.append_as_leader(batch(2), leader_epoch=epoch)
        clock.advance(10)
    data = leader.read(0, 1 << 20).read_bytes()
    follower = open_log(tmp_path / "f", clock, LogConfig())
    partial = data + data[:30]  # a fetch response may end with a partial batch
    info = follower.append_as_follower(partial)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert follower.read(0, 1 << 20).read_bytes() == data
    assert follower.epoch_cache.entries() == [(1, 0), (4, 4)]
    assert follower.last_append_time == leader.last_append_time
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data)  # offsets already present
    leader.close()
    follower.close()


def test_offset_overflow_rolls_a_new_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock)
    log.append_as_follower(batch(1, base_offset=0))
    far = 2**31 + 10
    log.append_as_follower(batch(2, base_offset=far))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.log_end_offset == far + 2
    assert log.read(far, 1000).first_offset == far
    log.close()


# ---- reads ---------------------------------------------------------------------------------


def test_read_returns_whole_batches_within_bounds(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(segment_bytes=1000, index_interval_bytes=100))
    sizes = []
    for _ in range(20):
        sizes.append(len(batch(5, size=30)))
        log.append_as_leader(batch(5, size=30), leader_epoch=0)
    assert len(log.segments) > 3
    # mid-batch offset: the batch containing it comes first
    res = log.read(7, 10_000)
    assert res.first_offset == 5
    hs = [h for _, h in iter_batches(res.read_bytes())]
    assert hs[0].base_offset == 5 and hs[-1].next_offset == 100
    assert len(res.ranges) == len(log.segments)  # one range per segment crossed
    # at least one whole batch even if it is larger than max_bytes
    res = log.read(12, 1)
    assert res.size == sizes[0] and res.first_offset == 10 and res.next_offset == 15
    assert log.read(12, 1, min_one_batch=False).size == 0
    # max_bytes respected on batch boundaries
    res = log.read(0, 3 * sizes[0] + 5)
    assert res.size == 3 * sizes[0] and res.next_offset == 15
    # upper bound (high watermark): only batches entirely below it
    res = log.read(0, 1 << 20, upper_bound=42)
    assert res.next_offset == 40
    assert log.read(40, 1 << 20, upper_bound=42).size == 0
    assert log.read(100, 1000).size == 0  # at the log end: empty
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(101, 1000)
    assert e.value.error_code == 1
    log.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path, clock: ManualClock) -> None:
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=50)
    log = open_log(tmp_path, clock, cfg)
    # out-of-order CreateTime within and across batches
    stamps = [[T0 + 30, T0 + 10, T0 + 20], [T0 + 5, T0 + 50, T0 + 40], [T0 + 45, T0 + 44, T0 + 60]]
    for i in range(12):
        s = [t + 100 * (i // 3) for t in stamps[i % 3]]
        log.append_as_leader(batch(3, s, compression=CompressionType.ZSTD), leader_epoch=2)
    records = [(r.offset, r.timestamp) for r in _all_records(log)]
    for target in [T0 - 1, T0 + 6, T0 + 25, T0 + 41, T0 + 59, T0 + 150, T0 + 355, T0 + 361]:
        want = next(((o, t) for o, t in records if t >= target), None)
        got = log.offset_for_timestamp(target)
        assert ((got.offset, got.timestamp) if got else None) == want, target
        if got:
            assert got.leader_epoch == 2
    mx = log.max_timestamp_offset()
    assert mx is not None and (mx.offset, mx.timestamp) == max(records, key=lambda r: (r[1], -r[0]))
    log.close()


def _all_records(log: PartitionLog) -> list:  # type: ignore[type-arg]
    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return [r for pos, _ in iter_batches(data) for r in iter_records(memoryview(data)[pos:])]


def test_loaded_index_mirrors_are_bounded(tmp_path: Path, clock: ManualClock) -> None:
    from riverbed.storage.log import LOADED_INDEXES_MAX

    log = open_log(tmp_path, clock, LogConfig(segment_bytes=300, index_interval_bytes=10))
    for i in range(60):
        log.append_as_leader(batch(2, ts=T0 + 10 * i), leader_epoch=0)
    log.close()
    log = open_log(tmp_path, clock, LogConfig(segment_bytes=300), clean_shutdown=True)
    assert len(log.segments) > 2 * LOADED_INDEXES_MAX
    for i in range(60):
        assert log.read(2 * i, 1).first_offset == 2 * i
        assert log.offset_for_timestamp(T0 + 10 * i).offset == 2 * i  # type: ignore[union-attr]
        loaded = [s for s in log.segments if s.offset_index.loaded or s.time_index.loaded]
        assert len(loaded) <= LOADED_INDEXES_MAX + 1  # + the active segment
    log.close()


# ---- roll ----------------------------------------------------------------------------------


def test_time_based_roll_uses_record_timestamps(tmp_path: Path, clock: ManualClock) -> None:
    cfg = LogConfig(segment_ms=60_000)
    log = open_log(tmp_path, clock, cfg)
    log.append_as_leader(batch(1, ts=T0), leader_epoch=0)
    clock.advance(10 * 60_000)  # wall time alone does not roll: the record time does
    log.append_as_leader(batch(1, ts=T0 + 60_000), leader_epoch=0)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=T0 - 3 * HOUR), leader_epoch=0)  # from the past
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=T0 + 60_001), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3]
    # a record from the future rolls as soon as it arrives
    log.append_as_leader(batch(1, ts=T0 + 60_001 + 30 * 60_000), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 4]
    log.close()


def test_time_based_roll_without_timestamps_uses_segment_age(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock, LogConfig(segment_ms=1000, segment_jitter_ms=0))
    log.append_as_leader(batch(1, ts=[-1]), leader_epoch=0)
    clock.advance(1000)
    log.append_as_leader(batch(1, ts=[-1]), leader_epoch=0)
    assert len(log.segments) == 1
    clock.advance(1)
    log.append_as_leader(batch(1, ts=[-1]), leader_epoch=0)
    assert len(log.segments) == 2
    log.close()


def test_roll_on_size_and_full_index(tmp_path: Path, clock: ManualClock) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, clock, LogConfig(segment_bytes=3 * one))
    for _ in range(7):
        log.append_as_leader(batch(1), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert all(s.size <= 3 * one for s in log.segments)
    log.close()
    # segment.index.bytes = 2 entries of 12 bytes (time index) / 3 of 8 (offset index)
    cfg = LogConfig(segment_index_bytes=24, index_interval_bytes=0)
    log = PartitionLog(tmp_path / "u-0", "u", 0, cfg, clock)
    for i in range(10):
        log.append_as_leader(batch(1, ts=T0 + i), leader_epoch=0)
    assert len(log.segments) > 2
    for seg in log.segments[:-1]:
        assert seg.offset_index.is_full or seg.time_index.is_full
    log.close()


# ---- retention -----------------------------------------------------------------------------


def _log_with_segments(
    tmp_path: Path, clock: ManualClock, stamps: list[int], **cfg: object
) -> PartitionLog:
    log = open_log(tmp_path, clock, LogConfig(**cfg))  # type: ignore[arg-type]
    for ts in stamps:
        log.append_as_leader(batch(2, ts=ts), leader_epoch=0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def test_retention_ms_uses_largest_timestamp_not_file_time(
    tmp_path: Path, clock: ManualClock
) -> None:
    day = 24 * HOUR
    clock.set(T0 + 10 * day)
    stamps = [T0, T0 + day, T0 + 9 * day, T0 + 2 * day]
    log = _log_with_segments(tmp_path, clock, stamps, retention_ms=7 * day)
    assert len(log.segments) == 5  # four full + the empty active one
    early = log.read(0, 100)  # a fetch that got its ranges just before retention ran
    deleted = log.delete_old_segments(clock.now_ms())
    # the 3rd segment is recent, so the 4th (old) one stays behind it, as in Kafka
    assert deleted == 2 and log.log_start_offset == 4
    assert not list((tmp_path / "t-0").glob("00000000000000000000.log"))
    assert list((tmp_path / "t-0").glob("*.deleted"))
    before = early.read_bytes()
    assert before[:8] == bytes(8)  # the pinned range still reads its segment
    clock.advance(60_000)
    log.delete_expired_files(clock.now_ms())
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    assert early.read_bytes() == before  # unlinked: the pinned fd keeps the inode
    early.close()
    with pytest.raises(StaleRangeError):
        early.read_bytes()
    clock.advance(7 * day)
    assert log.delete_old_segments(clock.now_ms()) == 2
    assert log.log_start_offset == 8 == log.log_end_offset
    assert len(log.segments) == 1 and log.active_segment.size == 0
    log.close()


def test_retention_keeps_a_segment_with_a_future_timestamp(
    tmp_path: Path, clock: ManualClock
) -> None:
    # a producer clock running ahead (within message.timestamp.after.max.ms) keeps its
    # segment until the wall clock has passed that timestamp by retention.ms
    log = _log_with_segments(tmp_path, clock, [T0 + HOUR - 10, T0], retention_ms=60_000)
    clock.set(T0 + HOUR)
    assert log.delete_old_segments(clock.now_ms()) == 0  # the first one is from the future
    clock.set(T0 + HOUR + 60_001)
    assert log.delete_old_segments(clock.now_ms()) == 2
    log.close()


def test_retention_never_deletes_the_active_segment_it_rolls_first(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock, LogConfig(retention_ms=1000))
    log.append_as_leader(batch(2, ts=T0), leader_epoch=0)
    log.update_high_watermark(2)
    clock.advance(5000)
    assert log.delete_old_segments(clock.now_ms()) == 1
    assert [s.base_offset for s in log.segments] == [2]
    assert log.log_start_offset == 2 and log.log_end_offset == 2
    assert log.delete_old_segments(clock.now_ms()) == 0  # empty active stays
    log.append_as_leader(batch(1, ts=clock.now_ms()), leader_epoch=0)
    assert log.log_end_offset == 3
    log.close()


def test_retention_respects_high_watermark_and_hook(tmp_path: Path, clock: ManualClock) -> None:
    clock.set(T0 + 100 * HOUR)
    log = _log_with_segments(tmp_path, clock, [T0, T0, T0], retention_ms=HOUR)
    log.update_high_watermark(3)  # inside the second segment
    assert log.delete_old_segments(clock.now_ms()) == 1
    assert log.log_start_offset == 2
    log.update_high_watermark(log.log_end_offset)
    vetoed: list[int] = []

    def hook(_log: PartitionLog, seg: object) -> bool:
        vetoed.append(seg.base_offset)  # type: ignore[attr-defined]
        return seg.base_offset < 4  # type: ignore[attr-defined]

    log.retention_hook = hook
    assert log.delete_old_segments(clock.now_ms()) == 1
    assert log.log_start_offset == 4 and vetoed == [2, 4]
    log.close()


def test_retention_bytes(tmp_path: Path, clock: ManualClock) -> None:
    log = _log_with_segments(tmp_path, clock, [T0] * 5, retention_ms=-1)
    seg_size = log.segments[0].size
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=2 * seg_size + 1))
    # like Kafka: delete oldest segments only while the rest still holds retention.bytes
    assert log.delete_old_segments(clock.now_ms()) == 2
    assert log.size_bytes == 3 * seg_size and log.log_start_offset == 4
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=0))
    assert log.delete_old_segments(clock.now_ms()) == 3
    assert log.size_bytes == 0 and log.log_start_offset == 10 == log.log_end_offset
    log.close()


def test_delete_records_advances_log_start(tmp_path: Path, clock: ManualClock) -> None:
    log = _log_with_segments(tmp_path, clock, [T0] * 3)
    log.update_high_watermark(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(6)
    assert log.delete_records_before(3) == 3
    assert log.segments[0].base_offset == 2  # partly below the log start
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert log.read(3, 1000).first_offset == 2  # the batch holding offset 3
    assert log.delete_records_before(-1) == 5  # -1 = high watermark
    assert log.segments[0].base_offset == 4
    assert log.offset_for_timestamp(0).offset == 5  # type: ignore[union-attr]
    log.close()


# ---- truncation ----------------------------------------------------------------------------


def test_truncate_to_and_fully(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(segment_bytes=400))
    for epoch in (1, 1, 2, 2, 3, 3):
        log.append_as_leader(batch(2), leader_epoch=epoch)
    log.update_high_watermark(12)
    assert log.epoch_cache.entries() == [(1, 0), (2, 4), (3, 8)]
    assert log.truncate_to(6)
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert log.epoch_cache.entries() == [(1, 0), (2, 4)]
    assert [h.next_offset for h in headers(log)][-1] == 6
    assert not log.truncate_to(9)
    log.append_as_leader(batch(1), leader_epoch=5)
    assert log.epoch_cache.entries() == [(1, 0), (2, 4), (5, 6)]
    assert log.end_offset_for_epoch(3) == (2, 6)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.epoch_cache.entries() == []
    assert log.append_as_leader(batch(1), leader_epoch=6).first_offset == 100
    log.close()
    log = open_log(
        tmp_path, clock, LogConfig(segment_bytes=400), clean_shutdown=True, recovery_point=101
    )
    assert (log.log_start_offset, log.log_end_offset) == (100, 101)
    log.close()


# ---- recovery ------------------------------------------------------------------------------


def _filled(tmp_path: Path, clock: ManualClock, n: int = 10) -> PartitionLog:
    log = open_log(tmp_path, clock, LogConfig(index_interval_bytes=100))
    for i in range(n):
        log.append_as_leader(batch(3, ts=T0 + 10 * i), leader_epoch=1)
    return log


def test_recovery_truncates_torn_tail(tmp_path: Path, clock: ManualClock) -> None:
    log = _filled(tmp_path, clock)
    log.flush(up_to=15)
    rp = log.recovery_point
    path = log.active_segment.log_path
    size = log.active_segment.size
    log.abandon()
    os.truncate(path, size - 7)  # the last batch is torn
    log = open_log(tmp_path, clock, LogConfig(index_interval_bytes=100), recovery_point=rp)
    assert log.log_end_offset == 27
    assert log.recovery_point == 27
    log.append_as_leader(batch(3), leader_epoch=1)
    assert [h.base_offset for h in headers(log)][-2:] == [24, 27]
    log.close()


@pytest.mark.parametrize("chunk", [61, 100, 150, 1000])
def test_recovery_reads_in_chunks_smaller_than_batches(
    tmp_path: Path, clock: ManualClock, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import riverbed.storage.segment_scan as segment_scan

    monkeypatch.setattr(segment_scan, "RECOVERY_READ_BYTES", chunk)
    log = _filled(tmp_path, clock, n=12)
    want = log.read(0, 1 << 20).read_bytes()
    path = log.active_segment.log_path
    log.abandon()
    os.truncate(path, len(want) - 1)  # torn last batch
    log = open_log(tmp_path, clock, LogConfig(index_interval_bytes=100), recovery_point=0)
    assert log.log_end_offset == 33
    got = log.read(0, 1 << 20).read_bytes()
    assert got == want[: len(got)] and len(headers(log)) == 11
    log.close()


def test_recovery_truncates_from_a_corrupt_batch(tmp_path: Path, clock: ManualClock) -> None:
    log = _filled(tmp_path, clock)
    hs = list(log.active_segment.iter_headers())
    path = log.active_segment.log_path
    log.abandon()
    with open(path, "r+b") as f:  # flip a byte inside the 5th batch's records
        f.seek(hs[4].position + 70)
        b = f.read(1)
        f.seek(hs[4].position + 70)
        f.write(bytes([b[0] ^ 1]))
    log = open_log(tmp_path, clock, LogConfig(index_interval_bytes=100))
    assert log.log_end_offset == 12
    assert len(headers(log)) == 4
    assert log.offset_for_timestamp(T0 + 35) is None  # nothing invalid is served
    log.close()


def test_clean_restart_trusts_the_log_but_rebuilds_bad_indexes(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = LogConfig(index_interval_bytes=100, segment_bytes=500)
    log = open_log(tmp_path, clock, cfg)
    for i in range(20):
        log.append_as_leader(batch(3, ts=T0 + 10 * i), leader_epoch=1)
    log.close()
    want_index = {p.name: p.read_bytes() for p in (tmp_path / "t-0").glob("*index")}
    files = sorted((tmp_path / "t-0").glob("*.index"))
    files[0].unlink()  # missing
    with open(files[1], "ab") as f:
        f.write(b"xyz")  # torn
    tfiles = sorted((tmp_path / "t-0").glob("*.timeindex"))
    tfiles[-1].write_bytes(struct.pack(">qi", T0 + 99, 0) + struct.pack(">qi", T0, 1))  # unordered
    log = open_log(tmp_path, clock, cfg, clean_shutdown=True, recovery_point=60)
    assert log.log_end_offset == 60
    for t in range(20):
        assert log.offset_for_timestamp(T0 + 10 * t).offset == 3 * t  # type: ignore[union-attr]
        assert log.read(3 * t + 1, 1).first_offset == 3 * t
    log.close()
    got = {p.name: p.read_bytes() for p in (tmp_path / "t-0").glob("*index")}
    assert got == want_index  # rebuilt indexes equal the ones written while appending


def test_clean_flag_with_a_torn_tail_falls_back_to_recovery(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = _filled(tmp_path, clock)
    path = log.active_segment.log_path
    log.close()
    os.truncate(path, path.stat().st_size - 9)
    log = open_log(
        tmp_path, clock, LogConfig(index_interval_bytes=100), clean_shutdown=True, recovery_point=30
    )
    assert log.log_end_offset == 27 and len(headers(log)) == 9
    log.close()


def test_index_file_formats_are_kafkas(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(index_interval_bytes=1))
    positions = []
    for i in range(4):
        positions.append(log.active_segment.size)
        log.append_as_leader(batch(2, ts=T0 + 10 * i), leader_epoch=0)
    log.close()
    idx = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    # (last offset of the batch, its position), from the 2nd batch on
    assert idx == b"".join(struct.pack(">ii", 2 * i + 1, positions[i]) for i in (1, 2, 3))
    tidx = (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes()
    assert tidx == b"".join(struct.pack(">qi", T0 + 10 * i + 1, 2 * i + 1) for i in range(4))


def test_flush_moves_recovery_point_and_flush_due(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(flush_messages=5, flush_ms=10_000))
    info = log.append_as_leader(batch(3), leader_epoch=0)
    assert not info.flush_needed and not log.flush_due(clock.now_ms())
    assert log.append_as_leader(batch(3), leader_epoch=0).flush_needed
    assert log.flush_due(clock.now_ms())
    assert log.flush() == 6 == log.recovery_point
    assert not log.flush_due(clock.now_ms())
    log.append_as_leader(batch(1), leader_epoch=0)
    assert not log.flush_due(clock.now_ms())
    clock.advance(10_000)
    assert log.flush_due(clock.now_ms())
    log.close()


def test_rolled_segment_indexes_are_synced_even_past_the_recovery_point(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path, clock, LogConfig(index_interval_bytes=10))
    for _ in range(4):
        log.append_as_leader(batch(2), leader_epoch=0)
    assert log.flush() == 8  # the active segment's .log only
    first = log.active_segment
    log.roll()
    assert first.index_sync_pending and log.flush_due(clock.now_ms())
    assert log.recovery_point == log.log_end_offset
    log.flush()  # nothing new to sync in .log files, but the rolled indexes are
    assert not first.index_sync_pending and not log.flush_due(clock.now_ms())
    log.close()
