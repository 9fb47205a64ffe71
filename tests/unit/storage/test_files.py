"""Index files, checkpoint files, the leader-epoch cache, LogConfig and the clock."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.server.clock import SystemClock
from riverbed.storage import InvalidConfigError, LogConfig, ManualClock
from riverbed.storage.checkpoints import (
    CheckpointError,
    read_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    write_epoch_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from riverbed.storage.config import LONG_MAX
from riverbed.storage.epoch_cache import LeaderEpochCache
from riverbed.storage.index_file import CorruptIndexError
from riverbed.storage.offset_index import OffsetIndex
from riverbed.storage.segment import segment_file_name
from riverbed.storage.time_index import TimeIndex

# ---- offset index --------------------------------------------------------------------------


def test_offset_index_append_lookup_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", base_offset=100, max_index_bytes=8 * 4)
    idx.reset()
    for off, pos in [(105, 40), (110, 90), (120, 300)]:
        idx.append(off, pos)
    assert (tmp_path / "x.index").read_bytes() == b""  # entries reach the file on flush/roll
    idx.write_pending()
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">iIiIiI", 5, 40, 10, 90, 20, 300)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(104) == (100, 0)
    assert idx.lookup(105) == (105, 40)
    assert idx.lookup(119) == (110, 90)
    assert idx.lookup(10**9) == (120, 300)
    with pytest.raises(ValueError):
        idx.append(120, 400)  # offsets must increase
    idx.append(121, 400)
    assert idx.is_full
    with pytest.raises(CorruptIndexError):
        idx.append(130, 500)
    idx.truncate_to(110)
    assert list(idx.iter_raw()) == [(5, 40)]
    assert (tmp_path / "x.index").stat().st_size == 8
    idx.close()
    again = OffsetIndex(tmp_path / "x.index", 100, 1024)
    assert again.lookup(200) == (105, 40)
    again.sanity_check(log_size=41)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=40)  # position beyond the log


def test_offset_index_sanity_detects_torn_and_unordered(tmp_path: Path) -> None:
    p = tmp_path / "y.index"
    p.write_bytes(struct.pack(">iI", 5, 40) + b"\x00\x01")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(p, 0, 1024).load()
    p.write_bytes(struct.pack(">iIiI", 5, 40, 4, 50))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(p, 0, 1024).sanity_check(1000)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(tmp_path / "missing.index", 0, 1024).load()


def test_time_index(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", base_offset=50, max_index_bytes=12 * 3)
    idx.reset()
    assert idx.last_entry() == (-1, 50)
    assert idx.maybe_append(1000, 52)
    assert not idx.maybe_append(1000, 53)  # only when the max timestamp grows
    assert not idx.maybe_append(900, 54)
    assert idx.maybe_append(2000, 60)
    idx.flush()
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qiqi", 1000, 2, 2000, 10)
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1500) == (1000, 52)
    assert idx.lookup(2000) == (2000, 60)
    assert idx.maybe_append(3000, 70)
    assert idx.is_full
    assert idx.maybe_append(4000, 80, skip_full_check=True)  # final entry on roll
    with pytest.raises(ValueError):
        idx.maybe_append(5000, 79, skip_full_check=True)  # offsets never go back
    idx.truncate_to(60)
    assert idx.last_entry() == (1000, 52)
    idx.sanity_check(next_offset=53)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(next_offset=52)


def test_segment_file_names() -> None:
    assert segment_file_name(0, ".log") == "00000000000000000000.log"
    assert segment_file_name(1234567, ".timeindex") == "00000000000001234567.timeindex"


# ---- checkpoints ---------------------------------------------------------------------------


def test_offset_checkpoint_format_and_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(p, {("b-topic", 1): 7, ("a.topic", 0): 1234})
    assert p.read_text() == "0\n2\na.topic 0 1234\nb-topic 1 7\n"
    assert read_offset_checkpoint(p) == {("a.topic", 0): 1234, ("b-topic", 1): 7}
    assert not list(tmp_path.glob("*.tmp"))
    assert read_offset_checkpoint(tmp_path / "missing") == {}
    for bad in ["", "1\n0\n", "0\n2\na 0 1\n", "0\n1\na x 1\n", "0\n1\na 0\n", "x\n0\n"]:
        p.write_text(bad)
        with pytest.raises(CheckpointError) as e:
            read_offset_checkpoint(p)
        assert "recovery-point-offset-checkpoint" in str(e.value)


def test_epoch_checkpoint_partition_metadata_meta_properties(tmp_path: Path) -> None:
    p = tmp_path / "leader-epoch-checkpoint"
    write_epoch_checkpoint(p, [(0, 0), (3, 150)])
    assert p.read_text() == "0\n2\n0 0\n3 150\n"
    assert read_epoch_checkpoint(p) == [(0, 0), (3, 150)]
    pm = tmp_path / "partition.metadata"
    write_partition_metadata(pm, "2rZ3qY3-Q8aWQ3h3V2n1sg")
    assert pm.read_text() == "version: 0\ntopic_id: 2rZ3qY3-Q8aWQ3h3V2n1sg\n"
    assert read_partition_metadata(pm) == "2rZ3qY3-Q8aWQ3h3V2n1sg"
    pm.write_text("garbage")
    with pytest.raises(CheckpointError):
        read_partition_metadata(pm)
    mp = tmp_path / "meta.properties"
    write_meta_properties(mp, {"version": "1", "node.id": "1", "cluster.id": "abc"}, "x")
    assert read_meta_properties(mp) == {"version": "1", "node.id": "1", "cluster.id": "abc"}
    assert mp.read_text().startswith("#\n#x\n")


# ---- leader epoch cache --------------------------------------------------------------------


def test_epoch_cache_assign_and_end_offsets(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCache(path)
    assert c.end_offset_for(0, 10) == (-1, -1)
    c.assign(1, 0)
    c.assign(1, 5)  # same epoch later: no change
    c.assign(3, 10)
    c.assign(5, 20)
    assert c.entries() == [(1, 0), (3, 10), (5, 20)]
    assert read_epoch_checkpoint(path) == c.entries()
    assert c.end_offset_for(5, 42) == (5, 42)
    assert c.end_offset_for(3, 42) == (3, 20)
    assert c.end_offset_for(4, 42) == (3, 20)  # unknown epoch: the one before it
    assert c.end_offset_for(0, 42) == (0, 0)  # before every epoch
    assert c.end_offset_for(6, 42) == (-1, -1)
    assert c.end_offset_for(-1, 42) == (-1, -1)
    assert c.epoch_for_offset(15) == 3
    # a new leader's history replaces conflicting entries
    c.assign(4, 15)
    assert c.entries() == [(1, 0), (3, 10), (4, 15)]
    c.truncate_from_end(12)
    assert c.entries() == [(1, 0), (3, 10)]
    c.truncate_from_start(11)
    assert c.entries() == [(3, 11)]
    assert LeaderEpochCache(path).entries() == [(3, 11)]
    path.write_text("0\n2\n5 10\n3 20\n")  # unordered: ignored, rebuilt from the log
    assert LeaderEpochCache(path).entries() == []


# ---- config and clock ----------------------------------------------------------------------


def test_log_config_defaults_are_kafkas() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1073741824 and c.segment_ms == 604800000
    assert c.segment_index_bytes == 10485760 and c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.message_timestamp_type == "CreateTime"
    assert c.message_timestamp_before_max_ms == LONG_MAX
    assert c.message_timestamp_after_max_ms == 3600000
    assert c.max_message_bytes == 1048588 and c.flush_messages == LONG_MAX
    assert c.file_delete_delay_ms == 60000 and c.cleanup_policy == ("delete",)
    assert c.min_insync_replicas == 1
    assert LogConfig.from_props(c.to_props()) == c


def test_log_config_from_props_and_errors() -> None:
    c = LogConfig.from_props(
        {
            "segment.bytes": "1000",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact,delete",
            "compression.type": "lz4",  # not storage's: ignored
        }
    )
    assert c.segment_bytes == 1000 and c.log_append_time and c.compact_enabled
    for key, value in [
        ("segment.bytes", "abc"),
        ("segment.bytes", "0"),
        ("retention.ms", "-2"),
        ("message.timestamp.type", "WallTime"),
        ("cleanup.policy", "shred"),
        ("min.insync.replicas", "0"),
        ("preallocate", "maybe"),
    ]:
        with pytest.raises(InvalidConfigError) as e:
            LogConfig.from_props({key: value})
        assert e.value.key == key and e.value.error_code == 40
        assert key in str(e.value) and value in str(e.value)
    with pytest.raises(InvalidConfigError):
        LogConfig.from_props({"no.such.key": "1"}, strict=True)


def test_clocks() -> None:
    m = ManualClock(100)
    assert m.now_ms() == 100 and m.advance(-50) == 50
    m.set(7)
    assert m.now_ms() == 7
    assert SystemClock().now_ms() > 1_600_000_000_000


# ---- index lookups against a sorted-list model (hypothesis) --------------------------------


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=40),
    probes=st.lists(st.integers(-10, 300_000), min_size=1, max_size=20),
)
def test_offset_index_lookup_matches_model(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[tuple[int, int]], probes: list[int]
) -> None:
    base = 1000
    idx = OffsetIndex(tmp_path_factory.mktemp("oi") / "a.index", base, 1 << 20)
    idx.reset()
    entries = []
    off, pos = base, 0
    for d_off, d_pos in gaps:
        off, pos = off + d_off, pos + d_pos
        idx.append(off, pos)
        entries.append((off, pos))
    for p in probes:
        target = base + p
        want = max((e for e in entries if e[0] <= target), default=(base, 0))
        assert idx.lookup(target) == want
        want_pos = max((e for e in entries if e[1] <= p), default=(base, 0), key=lambda e: e[1])
        assert idx.floor_position(p) == want_pos
    idx.write_pending()
    idx.close()
    assert list(OffsetIndex(idx.path, base, 1 << 20).iter_raw()) == [
        (o - base, p) for o, p in entries
    ]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(-5, 20), st.integers(0, 3)), max_size=50),
    probes=st.lists(st.integers(0, 2000), min_size=1, max_size=20),
)
def test_time_index_lookup_matches_model(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]], probes: list[int]
) -> None:
    idx = TimeIndex(tmp_path_factory.mktemp("ti") / "a.timeindex", 0, 1 << 20)
    idx.reset()
    entries: list[tuple[int, int]] = []
    ts, off = 100, 0
    for d_ts, d_off in steps:
        ts, off = ts + d_ts, off + d_off
        appended = idx.maybe_append(ts, off)
        assert appended == (not entries or ts > entries[-1][0])
        if appended:
            entries.append((ts, off))
    for p in probes:
        want = max((e for e in entries if e[0] <= p), default=(-1, 0))
        assert idx.lookup(p) == want
