"""A tiered partition log (KIP-405): local log start, copy-done guard, local retention."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, ManualClock, OffsetOutOfRangeError, PartitionLog

T0 = 1_700_000_000_000


def _batch(n: int = 5, ts: int = T0) -> bytes:
    return build_batch([SimpleRecord(b"x" * 20, timestamp=ts + i) for i in range(n)])


def _tiered_log(tmp_path: Path, clock: ManualClock, **cfg: object) -> PartitionLog:
    config = LogConfig.from_props(
        {"segment.bytes": 200, "remote.storage.enable": "true", **cfg}  # type: ignore[dict-item]
    )
    return PartitionLog(tmp_path / "t-0", "t", 0, config, clock, remote_log_enabled=True)


def _fill(plog: PartitionLog, batches: int) -> None:
    for _ in range(batches):
        plog.append_as_leader(_batch(), 0)
    plog.update_high_watermark(plog.log_end_offset)


def test_local_retention_waits_for_the_copy_and_keeps_the_log_start(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    plog = _tiered_log(tmp_path, clock, **{"local.retention.bytes": "0", "retention.bytes": "-1"})
    rolls: list[int] = []
    plog.roll_listener = rolls.append
    _fill(plog, 6)
    assert len(plog.segments) >= 4 and rolls == [s.base_offset for s in plog.segments[1:]]
    # nothing copied: the copy-done guard keeps every segment
    assert plog.delete_old_segments(clock.now_ms()) == 0
    second = plog.segments[1].base_offset
    plog.update_highest_offset_in_remote(second - 1)  # the first segment is remote
    assert plog.delete_old_segments(clock.now_ms()) == 1
    assert plog.log_start_offset == 0  # the remote tier still starts at 0
    assert plog.local_log_start_offset == second
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 1000)  # below the local start: the remote tier's business
    assert plog.read(second, 1000).first_offset == second
    # remote retention removed remote data up to `second`
    assert plog.advance_log_start_offset(second) == second
    assert plog.advance_log_start_offset(1) == second  # never back


def test_untiered_log_is_unchanged(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    config = LogConfig.from_props({"segment.bytes": 200, "retention.bytes": "0"})
    plog = PartitionLog(tmp_path / "t-0", "t", 0, config, clock)
    _fill(plog, 6)
    assert plog.delete_old_segments(clock.now_ms()) > 0
    assert plog.log_start_offset == plog.local_log_start_offset > 0


def test_tiered_log_start_survives_restart_below_first_segment(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = _tiered_log(tmp_path, clock, **{"local.retention.bytes": "0"})
    _fill(plog, 6)
    plog.update_highest_offset_in_remote(plog.log_end_offset)
    plog.delete_old_segments(clock.now_ms())
    local_start = plog.local_log_start_offset
    assert local_start > 0
    plog.close()
    config = plog.config
    again = PartitionLog(
        tmp_path / "t-0",
        "t",
        0,
        config,
        clock,
        log_start_offset=0,
        recovery_point=plog.recovery_point,
        clean_shutdown=True,
        remote_log_enabled=True,
    )
    assert again.log_start_offset == 0 and again.local_log_start_offset == local_start


def test_compacted_topic_is_never_tiered() -> None:
    cfg = LogConfig.from_props({"remote.storage.enable": "true", "cleanup.policy": "compact"})
    assert cfg.remote_storage_enable and not cfg.tiered
    assert (
        LogConfig.from_props(
            {"local.retention.ms": "-2", "retention.ms": "5"}
        ).local_retention_ms_effective
        == 5
    )


def test_total_retention_deletes_uncopied_segments(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = _tiered_log(tmp_path, clock, **{"retention.ms": "1000", "local.retention.ms": "10"})
    _fill(plog, 6)
    # past local.retention.ms but never copied: kept (the copy-done guard)
    assert plog.delete_old_segments(T0 + 500) == 0
    # past the total retention.ms: gone even though the remote tier never got them
    before = len(plog.segments)
    active = plog.segments[-1].base_offset
    # every rolled one; the active one stays (never copied, as Kafka's copy guard keeps it):
    # remote retention then leaves the log starting at the local start, its records readable
    assert plog.delete_old_segments(T0 + 5000) == before - 1
    assert plog.log_start_offset == plog.local_log_start_offset == active < plog.log_end_offset
    assert plog.read(active, 1000).first_offset == active
