"""Old ledger files go with their segments, never while a live producer depends on them."""

from __future__ import annotations

from pathlib import Path

from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.producer.snapshot import entry_fields
from riverbed.storage import LogConfig, ManualClock, PartitionLog

from .test_snapshot_manager import T0, idem, open_log, rolled_log, state_of


def names(plog: PartitionLog, suffix: str) -> set[int]:
    return {int(p.name[:20]) for p in plog.directory.iterdir() if p.name.endswith(suffix)}


def test_files_go_with_their_segments_and_live_producers_are_carried_forward(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, clock, segment_bytes=400)
    plog.append_as_leader(idem(4, 0, 0, 2), 0)  # producer 4 writes only at the start
    rolled_log(tmp_path, clock, plog)
    mgr = state_of(plog)
    live = {f[0]: f for f in (entry_fields(e) for e in mgr.describe())}
    assert set(live) == {4, 5}
    first_files = names(plog, ".snapshot")
    assert names(plog, ".bloom") == first_files
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records_before(plog.segments[-1].base_offset)
    base = plog.segments[0].base_offset
    # the files below the first segment are gone, .snapshot and .bloom together
    assert all(o >= base for o in names(plog, ".snapshot")) and min(first_files) < base
    assert names(plog, ".bloom") == names(plog, ".snapshot")
    # ... but every live producer is still found, with its newest entry
    for pid, fields in live.items():
        assert mgr.ledger.read(pid) == fields
    # and survives a crash: it was carried into the mapped file, then sealed at the roll
    plog.append_as_leader(idem(7, 0, 0, 30), 0)
    plog.abandon()
    plog2 = open_log(tmp_path, clock, segment_bytes=400)
    e4 = state_of(plog2).table.get(4)
    assert e4 is not None and e4.last_seq == 1 and e4.last_offset == 1
    # the mapped .ledger files left are the active one at most (old ones unmapped, gone)
    assert len(names(plog2, ".ledger")) <= 1


def test_expired_producers_are_not_carried_forward(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=400), clock)
    mgr = ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig(10_000))
    mgr.attach(plog)
    plog.append_as_leader(idem(4, 0, 0, 2, ts=T0), 0)
    clock.advance(20_000)
    for seq in range(0, 20, 2):
        plog.append_as_leader(idem(5, 0, seq, 2, ts=T0 + 20_000), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records_before(plog.segments[-1].base_offset)
    assert mgr.ledger.read(4) is None  # expired: its file went, nothing depends on it
    assert mgr.ledger.read(5) is not None


def test_delete_records_after_a_clean_close_never_rolls_a_producer_back(tmp_path: Path) -> None:
    """Issue 18, defect 1: the clean close's complete file replaced the delta at the log
    end, then DeleteRecords carried producer 8's older entry (seq 0) from a file below
    it into the active file, where it hid the newer one: the retry of seq 1 was
    appended again at offset 5."""
    clock = ManualClock(T0)
    plog = open_log(tmp_path, clock)
    plog.append_as_leader(idem(8, 0, 0), 0)  # offset 0
    plog.roll()
    plog.append_as_leader(idem(9, 0, 0, 3), 0)  # offsets 1-3
    plog.roll()
    plog.append_as_leader(idem(8, 0, 1), 0)  # offset 4
    plog.close()
    plog = open_log(tmp_path, clock)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_records_before(4) == 4
    plog.abandon()  # crash
    plog = open_log(tmp_path, clock)
    e8 = state_of(plog).table.get(8)
    assert e8 is not None and (e8.last_seq, e8.last_offset) == (1, 4)
    retry = plog.append_as_leader(idem(8, 0, 1), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (4, 4)
    assert plog.log_end_offset == 5
