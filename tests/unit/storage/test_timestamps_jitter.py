"""CreateTime bounds decided per record where the header cannot (timestamp_bounds), and
segment.jitter.ms drawn per segment from an injected random.Random."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.records import SimpleRecord, build_batch, parse_header, record_timestamps
from riverbed.storage import (
    CorruptRecordError,
    InvalidTimestampError,
    LogConfig,
    LogManager,
    ManualClock,
    PartitionLog,
    timestamp_bounds,
)
from riverbed.storage.timestamp_bounds import create_time_violation

T0 = 1_700_000_000_000
HOUR = 3_600_000
BOUNDED = LogConfig(message_timestamp_before_max_ms=HOUR, message_timestamp_after_max_ms=HOUR)


def batch(stamps: list[int], compression: CompressionType = CompressionType.NONE) -> bytes:
    recs = [SimpleRecord(b"value-%d" % i, timestamp=t) for i, t in enumerate(stamps)]
    return build_batch(recs, compression=compression)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def open_log(tmp_path: Path, clock: ManualClock, cfg: LogConfig, **kw: object) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", "t", 0, cfg, clock, **kw)  # type: ignore[arg-type]


# ---- CreateTime bounds ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD]
)
def test_a_middle_record_out_of_bounds_rejects_the_batch(
    tmp_path: Path, clock: ManualClock, compression: CompressionType
) -> None:
    log = open_log(tmp_path, clock, BOUNDED)
    old = batch([T0, T0 - HOUR - 1, T0 + 5], compression)
    h = parse_header(old)
    # the header alone looks fine: first and max timestamps are within the bounds
    assert h.first_timestamp == T0 and h.max_timestamp == T0 + 5
    with pytest.raises(InvalidTimestampError) as e:
        log.append_as_leader(old, leader_epoch=0)
    assert e.value.error_code == 32 and str(T0 - HOUR - 1) in str(e.value)
    assert log.log_end_offset == 0  # nothing of the request was appended
    # at the bound exactly is fine
    log.append_as_leader(batch([T0, T0 - HOUR, T0 + 5], compression), leader_epoch=0)
    assert log.log_end_offset == 3
    # a middle record too far in the future moves the max timestamp: the header decides
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch([T0, T0 + HOUR + 1, T0], compression), leader_epoch=0)
    log.close()


@pytest.mark.parametrize("value_size", [10, 100, 20_000])  # 1, 2 and 3-byte record lengths
def test_every_record_timestamp_is_read_whatever_the_varint_sizes(value_size: int) -> None:
    stamps = [T0, T0 + 1, T0 - 30, T0 - HOUR - 7, T0 + 63, T0 - 64, T0 + 8191]
    recs = [SimpleRecord(bytes([i]) * value_size, timestamp=t) for i, t in enumerate(stamps)]
    data = build_batch(recs)
    assert record_timestamps(data, 0, parse_header(data)) == stamps
    h = parse_header(data)
    assert create_time_violation(data, 0, h, T0, HOUR, HOUR) == T0 - HOUR - 7
    assert create_time_violation(data, 0, h, T0, HOUR + 7, HOUR) is None


def test_header_decides_when_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[int] = []
    real = timestamp_bounds.record_timestamps

    def spy(buf: bytes, position: int, h: object) -> list[int]:
        decoded.append(position)
        return real(buf, position, h)  # type: ignore[arg-type]

    monkeypatch.setattr(timestamp_bounds, "record_timestamps", spy)
    long_max = 2**63 - 1

    def check(stamps: list[int], before: int, after: int = HOUR) -> int | None:
        data = batch(stamps)
        return create_time_violation(data, 0, parse_header(data), T0, before, after)

    # default before.max.ms (Long.MAX_VALUE) can reject nothing: no decode, like Kafka
    assert check([T0, -(2**40), T0], long_max) is None
    assert check([T0, T0 + 2 * HOUR], long_max) == T0 + 2 * HOUR
    assert decoded == []
    # one record: its timestamp is the header's first timestamp
    assert check([T0 - 2 * HOUR], HOUR) == T0 - 2 * HOUR
    assert check([T0 - 10], HOUR) is None
    assert decoded == []
    # a header out of bounds rejects before any decode
    assert check([T0 - 2 * HOUR, T0], HOUR) == T0 - 2 * HOUR
    assert decoded == []
    # otherwise the records are read: the smallest timestamp is not in the header
    assert check([T0, T0 - 10, T0 - 2 * HOUR, T0], HOUR) == T0 - 2 * HOUR
    assert check([T0, T0 - 10, T0], HOUR) is None
    assert len(decoded) == 2
    # records without a timestamp (-1) are not checked (Kafka's rule)
    assert check([-1, -1, -1], HOUR) is None


def test_a_malformed_records_section_is_a_corrupt_record(
    tmp_path: Path, clock: ManualClock
) -> None:
    data = bytearray(batch([T0, T0 + 1, T0 + 2]))
    data[61] = 0x01  # first record's length varint: -1
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))  # a valid CRC again
    log = open_log(tmp_path, clock, BOUNDED)
    with pytest.raises(CorruptRecordError) as e:
        log.append_as_leader(data, leader_epoch=0)
    assert e.value.error_code == 2 and "record length" in str(e.value)
    log.close()


# ---- segment.jitter.ms ---------------------------------------------------------------------


def test_jitter_is_drawn_per_segment_from_the_injected_rng(
    tmp_path: Path, clock: ManualClock
) -> None:
    jitter = HOUR // 2
    cfg = LogConfig(
        segment_ms=HOUR, segment_jitter_ms=jitter, message_timestamp_after_max_ms=10 * HOUR
    )
    log = open_log(tmp_path, clock, cfg, rng=random.Random(42))
    expected = random.Random(42)
    draws = [expected.randrange(jitter)]
    assert log.active_segment.roll_jitter_ms == draws[0]
    t = T0
    for _ in range(4):
        log.append_as_leader(batch([t]), leader_epoch=0)
        seg = log.active_segment
        # rolls once the record time passes segment.ms minus THIS segment's jitter
        t += HOUR - seg.roll_jitter_ms
        log.append_as_leader(batch([t]), leader_epoch=0)
        assert log.active_segment is seg
        t += 1
        log.append_as_leader(batch([t]), leader_epoch=0)
        assert log.active_segment is not seg
        draws.append(expected.randrange(jitter))
        assert log.active_segment.roll_jitter_ms == draws[-1]
    assert len(set(draws)) == len(draws)  # a fresh draw per segment, not one per partition
    assert [s.roll_jitter_ms for s in log.segments] == draws
    log.close()


def test_jitter_is_bounded_by_segment_ms_and_zero_without_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = LogConfig(segment_ms=1000, segment_jitter_ms=10**12)
    log = open_log(tmp_path, clock, cfg, rng=random.Random(1))
    rng = random.Random(1)
    assert log.active_segment.roll_jitter_ms == rng.randrange(1000)
    log.close()
    log = PartitionLog(tmp_path / "u-0", "u", 0, LogConfig(), clock, rng=random.Random(1))
    assert log.active_segment.roll_jitter_ms == 0
    log.close()


def test_log_manager_passes_its_rng_to_every_log(tmp_path: Path) -> None:
    cfg = LogConfig(segment_ms=HOUR, segment_jitter_ms=HOUR)

    def jitters(name: str) -> list[int]:
        m = LogManager([tmp_path / name], ManualClock(T0), default_config=cfg, rng=random.Random(7))
        out = [m.get_or_create("t", p).active_segment.roll_jitter_ms for p in range(3)]
        m.shutdown()
        return out

    expected = random.Random(7)
    assert jitters("a") == jitters("b") == [expected.randrange(HOUR) for _ in range(3)]


def test_log_append_time_after_restart_ignores_create_time_batches(
    tmp_path: Path, clock: ManualClock
) -> None:
    # a CreateTime record 50 minutes in the future (within message.timestamp.after.max.ms)
    future = T0 + 50 * 60_000
    log = open_log(tmp_path, clock, LogConfig())
    log.append_as_leader(batch([T0, future]), leader_epoch=0)
    log.close()
    switched = LogConfig(message_timestamp_type="LogAppendTime")
    reopened = open_log(tmp_path, clock, switched, recovery_point=2, clean_shutdown=True)
    clock.advance(1_000)
    info = reopened.append_as_leader(batch([T0]), leader_epoch=0)
    assert info.log_append_time == T0 + 1_000  # not pinned 50 minutes ahead
    reopened.close()
    # a stamped LogAppendTime does survive a restart (stamps never go backwards)
    clock.advance(-500)
    again = open_log(tmp_path, clock, switched, recovery_point=4, clean_shutdown=True)
    assert again.append_as_leader(batch([T0]), leader_epoch=0).log_append_time == T0 + 1_000
    again.close()
