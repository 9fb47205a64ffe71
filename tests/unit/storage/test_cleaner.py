"""Log compaction: latest value per key, tombstones after delete.retention.ms, offsets and
batch boundaries kept, bounded offset map, crash-safe swap, checkpoint, keyless refusal."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from riverbed.protocol.record_batch import iter_batches
from riverbed.protocol.records import Record, SimpleRecord, build_batch, iter_records
from riverbed.storage import LogConfig, LogManager, ManualClock, PartitionLog
from riverbed.storage.checkpoints import read_offset_checkpoint
from riverbed.storage.cleaner import CLEANER_CHECKPOINT, OffsetMap
from riverbed.storage.errors import InvalidRecordError
from riverbed.storage.log_cleaner import CleanerConfig
from riverbed.storage.segment import segment_file_name

T0 = 1_700_000_000_000
COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=600,
    delete_retention_ms=1000,
    min_cleanable_dirty_ratio=0.0,
)


def no_throttle(_n: int) -> None:
    return None


def keyed(pairs: list[tuple[bytes, bytes | None]], ts: int = T0, **kw: object) -> bytes:
    return build_batch(
        [SimpleRecord(value=v, key=k, timestamp=ts) for k, v in pairs], now_ms=ts, **kw
    )  # type: ignore[arg-type]


def records(log: PartitionLog) -> list[Record]:
    out: list[Record] = []
    with log.read(log.log_start_offset, 1 << 30) as result:
        data = result.read_bytes()
    for pos, h in iter_batches(data):
        out += iter_records(memoryview(data)[pos : pos + h.size])
    return out


def latest(log: PartitionLog) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for r in records(log):
        assert r.key is not None
        out[r.key] = (r.offset, r.value)
    return out


def fill(
    log: PartitionLog, rng: random.Random, n: int, keys: int
) -> dict[bytes, tuple[int, bytes | None]]:
    """n records over ``keys`` keys (some tombstones), a few per batch; the model."""
    model: dict[bytes, tuple[int, bytes | None]] = {}
    i = 0
    while i < n:
        size = rng.randint(1, 4)
        pairs: list[tuple[bytes, bytes | None]] = []
        for _ in range(size):
            k = b"k%d" % rng.randrange(keys)
            v = None if rng.random() < 0.1 else b"v%d" % i
            pairs.append((k, v))
            i += 1
        info = log.append_as_leader(keyed(pairs), 0)
        for j, (k, v) in enumerate(pairs):
            model[k] = (info.first_offset + j, v)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return model


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def open_log(d: Path, clock: ManualClock, cfg: LogConfig = COMPACT) -> PartitionLog:
    return PartitionLog(d, "t", 0, cfg, clock)


@pytest.mark.parametrize("seed", range(5))
def test_cleaning_keeps_the_latest_record_per_key_at_its_offset(
    tmp_path: Path, clock: ManualClock, seed: int
) -> None:
    rng = random.Random(seed)
    log = open_log(tmp_path / "t-0", clock)
    model = fill(log, rng, 400, 30)
    before = records(log)
    result = log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
    assert result is not None and result.segments_swapped > 0
    after = records(log)
    assert latest(log) == model, f"seed {seed}"
    assert len(after) < len(before)
    # every kept record is the same record at the same offset
    original = {r.offset: r for r in before}
    assert all(original[r.offset][1:4] == r[1:4] for r in after)
    assert log.log_end_offset == before[-1].offset + 1
    # tombstones survive the first cleaning (delete.retention.ms from now)...
    tombstones = {k for k, (_o, v) in model.items() if v is None}
    assert {r.key for r in after if r.value is None} == tombstones
    # ...and go in a cleaning after the horizon
    clock.advance(1001)
    log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
    assert latest(log) == {k: ov for k, ov in model.items() if ov[1] is not None}
    log.close()
    reopened = open_log(tmp_path / "t-0", clock)
    assert latest(reopened) == {k: ov for k, ov in model.items() if ov[1] is not None}
    reopened.close()


def test_a_small_dedupe_buffer_cleans_in_several_passes(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    model = fill(log, random.Random(7), 300, 40)
    tiny = OffsetMap(25 * 24)  # 22 entries for 40 keys: several passes
    first_dirty = 0
    passes = 0
    while True:
        result = log.clean(first_dirty, tiny, clock.now_ms(), no_throttle)
        if result is None:
            break
        assert result.first_dirty > first_dirty and len(tiny) <= tiny.capacity
        first_dirty = result.first_dirty
        passes += 1
    assert passes > 1
    # a key's older copies in segments before the pass that saw its latest stay until a
    # later pass covers them again from the start: one more full pass compacts all
    log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
    assert latest(log) == model


def test_producer_state_keeps_the_last_batch_of_each_producer(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(keyed([(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0), 0)
    log.append_as_leader(keyed([(b"a", b"2")]), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
    with log.read(0, 1 << 20) as result:
        data = result.read_bytes()
    headers = [h for _p, h in iter_batches(data)]
    assert [(h.base_offset, h.producer_id, h.records_count) for h in headers] == [
        (0, 7, 0),  # emptied, kept as a header for the producer's sequence
        (1, -1, 1),
    ]


def test_a_crash_during_the_swap_loses_nothing(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, clock)
    model = fill(log, random.Random(3), 200, 10)
    original = records(log)
    log.close()
    seg0 = segment_file_name(0, ".log")
    # crash after the cleaned file was written, before it committed: rolled back
    log = open_log(d, clock)
    data = (d / seg0).read_bytes()
    (d / (seg0 + ".cleaned")).write_bytes(data[: len(data) // 2])
    log.close()
    log = open_log(d, clock)
    assert not (d / (seg0 + ".cleaned")).exists()
    assert records(log) == original
    log.close()
    # crash after the commit point (.swap written), before the old file was replaced
    log = open_log(d, clock)
    log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
    cleaned_first = (d / seg0).read_bytes()
    log.close()
    (d / seg0).write_bytes(data)  # the old segment is back, as before the swap
    (d / (seg0 + ".swap")).write_bytes(cleaned_first)
    (d / segment_file_name(0, ".index")).unlink(missing_ok=True)
    log = open_log(d, clock)
    assert not (d / (seg0 + ".swap")).exists()
    assert (d / seg0).read_bytes() == cleaned_first
    assert latest(log) == model
    log.close()


def test_keyless_records_are_refused_on_compacted_topics(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path / "t-0", clock)
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append_as_leader(build_batch([SimpleRecord(b"v")], now_ms=T0), 0)
    assert log.log_end_offset == 0
    log.append_as_leader(keyed([(b"k", b"v")]), 0)
    plain = open_log(tmp_path / "u-0", clock, LogConfig())
    plain.append_as_leader(build_batch([SimpleRecord(b"v")], now_ms=T0), 0)
    log.close()
    plain.close()


def test_log_manager_cleans_compacted_logs_in_the_background(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = LogManager(
        [tmp_path / "data"],
        clock,
        default_config=COMPACT,
        cleaner_config=CleanerConfig(backoff_ms=0),
    )
    log = manager.get_or_create("t", 0, COMPACT)
    model = fill(log, random.Random(11), 200, 8)
    manager.flush_due(clock.now_ms())  # starts the cleaner's scan (backoff 0)
    manager.cleaner.wait(30)
    assert manager.cleaner.cleanings == 1
    assert latest(log) == model
    checkpoint = read_offset_checkpoint(tmp_path / "data" / CLEANER_CHECKPOINT)
    assert checkpoint[("t", 0)] == manager.cleaner.first_dirty[("t", 0)] > 0
    manager.shutdown()


class Crash(Exception):
    """The process dies here (raised from the n-th rename of a cleaning)."""


def test_a_crash_at_every_rename_of_a_cleaning_recovers_every_record(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cleaning's renames: per group .cleaned -> .swap (the commit point), each old
    .log/.index/.timeindex -> .deleted, .swap -> .log. The process dies before the n-th
    of them (fault injection on os.replace), for every n; the restarted log must read
    the latest value of every key, hold no leftover, and clean again."""
    real_replace = os.replace
    calls = 0
    crash_at = 0
    armed = False  # only the cleaning's renames count

    def replace(src: Any, dst: Any) -> None:
        nonlocal calls
        if armed:
            calls += 1
            if calls == crash_at:
                raise Crash(f"crash before renaming {src} -> {dst}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    # a dry run counts the renames of one cleaning of this log
    log = open_log(tmp_path / "dry" / "t-0", clock)
    fill(log, random.Random(5), 200, 10)
    armed = True
    log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
    armed = False
    log.close()
    total = calls
    assert total >= 6
    for crash_at in range(1, total + 1):
        calls = 0
        d = tmp_path / f"crash-{crash_at}" / "t-0"
        log = open_log(d, clock)
        model = fill(log, random.Random(5), 200, 10)
        armed = True
        with pytest.raises(Crash):
            log.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
        armed = False
        log.abandon()
        reopened = open_log(d, clock)
        assert latest(reopened) == model, f"crash before rename {crash_at}"
        assert not [p for p in d.iterdir() if p.name.endswith((".cleaned", ".swap"))]
        reopened.update_high_watermark(reopened.log_end_offset)
        reopened.clean(0, OffsetMap(1 << 20), clock.now_ms(), no_throttle)
        assert latest(reopened) == model
        reopened.close()


def test_offset_map_memory_stays_within_the_dedupe_buffer() -> None:
    buffer = 1 << 20
    m = OffsetMap(buffer)
    start = m.memory_bytes
    assert start < buffer // 10  # grows with the keys, not allocated up front
    latest: dict[bytes, int] = {}
    i = 0
    while not m.full():
        keys = [b"key-%d" % ((i + j) % (m.capacity + 100)) for j in range(1000)]
        digests = OffsetMap.digests(keys)
        room = m.capacity - len(m)
        fits = np.cumsum(m.new_keys(digests)) <= room
        n = int(fits.sum()) if not fits.all() else len(keys)
        m.put_many(digests[:n], np.arange(i, i + n))
        latest.update((k, i + j) for j, k in enumerate(keys[:n]))
        i += n
        assert m.memory_bytes <= buffer
        if n < len(keys):
            break
    assert len(m) == len(latest) and len(m) >= 0.85 * buffer / 24 * 0.9
    assert all(m.get(k) == v for k, v in list(latest.items())[:: len(latest) // 500])
    found = m.lookup(OffsetMap.digests(latest))
    assert found.tolist() == list(latest.values())
    assert m.get(b"never") is None
    with pytest.raises(OverflowError):
        for j in range(10):
            m.put(b"new-%d" % j, j)
    m.clear()
    assert len(m) == 0 and m.memory_bytes == start


def test_offset_map_tells_apart_digests_sharing_their_first_half() -> None:
    from riverbed.storage.cleaner import as_digests

    m = OffsetMap(1 << 16)
    same_hi = [bytes(8) + bytes([i]) * 8 for i in (3, 1, 2)]
    m.put_many(as_digests(b"".join(same_hi)), np.array([10, 11, 12]))
    m.put_many(as_digests(same_hi[1]), np.array([20]))
    found = m.lookup(as_digests(b"".join([*same_hi, bytes(8) + b"\x09" * 8, b"\x01" * 16])))
    assert found.tolist() == [10, 20, 12, -1, -1]
    assert len(m) == 3


@pytest.mark.parametrize("seed", range(4))
def test_clean_segment_keeps_each_kept_record_exact_in_every_batch_kind(seed: int) -> None:
    """Compressed batches, headers, LogAppendTime, timestamps out of order, tombstones
    (stamped with a horizon, then dropped past it): every kept record reads back with
    its offset, timestamp, key, value and headers; batches keep their base offset."""
    from riverbed.storage.cleaner import clean_segment

    rng = random.Random(seed)
    data = bytearray()
    written: list[Record] = []
    offset = 0
    for _ in range(40):
        n = rng.randint(1, 6)
        ts_type = rng.choice((0, 0, 1))
        recs = [
            SimpleRecord(
                value=None if rng.random() < 0.15 else b"v%d" % rng.randrange(10**6) * 3,
                key=b"k%d" % rng.randrange(12),
                headers=[("h", b"x%d" % i)] if rng.random() < 0.3 else (),
                timestamp=T0 + rng.randrange(-5000, 5000),
            )
            for i in range(n)
        ]
        batch = build_batch(
            recs,
            base_offset=offset,
            compression=rng.choice((0, 0, 1, 3, 4)),
            timestamp_type=ts_type,
            now_ms=T0 + 7 if ts_type else T0,
        )
        data += batch
        written += iter_records(batch)
        offset += n
    last_of: dict[bytes, int] = {}
    for r in written:
        assert r.key is not None
        last_of[r.key] = r.offset
    m = OffsetMap(1 << 16)
    m.put_many(OffsetMap.digests(last_of), np.array(list(last_of.values())))
    cleaned = clean_segment(bytes(data), m, T0, 1000, {})
    got: list[Record] = []
    bases = {h.base_offset for _p, h in iter_batches(bytes(data))}
    for pos, h in iter_batches(cleaned):
        assert h.base_offset in bases
        got += iter_records(memoryview(cleaned)[pos : pos + h.size])
    assert got == [r for r in written if last_of[r.key or b""] == r.offset]
    # past the horizon the tombstones go, everything else stays as it was
    again = clean_segment(cleaned, m, T0 + 1000, 1000, {})
    got2 = [r for pos, h in iter_batches(again) for r in iter_records(again[pos : pos + h.size])]
    assert got2 == [r for r in got if r.value is not None]
