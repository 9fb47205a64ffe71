"""Complete producer snapshots (every live producer as of an offset, Kafka's format):
the newest file after a clean close, and on demand (the tiered copier's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.producer.manager import ProducerStateManager
from riverbed.producer.snapshot import decode_snapshot, entry_fields, snapshot_name
from riverbed.producer.state import ProducerStateTable
from riverbed.storage import ManualClock, PartitionLog

from .test_snapshot_manager import T0, idem, open_log, rolled_log, state_of


def reference(plog: PartitionLog, up_to: int) -> list[tuple[int, ...]]:
    """The producer state as of ``up_to``, rebuilt from the whole log in memory."""
    table = ProducerStateTable()
    for h in plog.batch_headers_from(0):
        if h.base_offset >= up_to:
            break
        table.apply(h)
    return sorted(entry_fields(e) for e in table.producers.entries())


def fields_of(data: bytes) -> list[tuple[int, ...]]:
    return [entry_fields(e) for e in decode_snapshot(data)]  # CRC checked


def spread_log(tmp_path: Path, clock: ManualClock) -> PartitionLog:
    """Producer 4 only at the start, producer 5 over many segments, 6 only at the end."""
    plog = open_log(tmp_path, clock, segment_bytes=400)
    plog.append_as_leader(idem(4, 0, 0, 2), 0)
    rolled_log(tmp_path, clock, plog)
    plog.append_as_leader(idem(6, 2, 0, 1), 0)
    return plog


def test_clean_close_leaves_a_complete_newest_snapshot(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = spread_log(tmp_path, clock)
    want = reference(plog, plog.log_end_offset)
    assert {f[0] for f in want} == {4, 5, 6}
    plog.close()
    newest = max(state_of(plog).snapshot_offsets())
    assert newest == plog.log_end_offset
    # what Kafka's loader does: read only the newest snapshot
    assert fields_of((plog.directory / snapshot_name(newest)).read_bytes()) == want
    assert not [p for p in plog.directory.iterdir() if p.name.endswith(".tmp")]
    plog2 = open_log(tmp_path, clock, segment_bytes=400)
    e4 = state_of(plog2).table.get(4)
    assert e4 is not None and e4.last_seq == 1
    assert plog2.append_as_leader(idem(6, 2, 0, 1), 0).duplicate


def test_complete_snapshot_as_of_an_offset(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = spread_log(tmp_path, clock)
    mgr = state_of(plog)
    assert isinstance(mgr, ProducerStateManager)
    sealed = mgr.snapshot_offsets()
    roll = plog.segments[2].base_offset
    assert roll in sealed and roll + 2 not in sealed
    for x in (roll, roll + 2, plog.log_end_offset, sealed[0]):  # sealed, replayed, end
        assert fields_of(mgr.complete_snapshot_bytes(x)) == reference(plog, x), x
    assert fields_of(mgr.complete_snapshot_bytes()) == reference(plog, plog.log_end_offset)
    out = tmp_path / "upload.snapshot"
    assert mgr.save_complete_snapshot(out, roll) == len(reference(plog, roll))
    assert fields_of(out.read_bytes()) == reference(plog, roll)


def test_complete_snapshot_keeps_producers_carried_forward(tmp_path: Path) -> None:
    """Producer 4's only file goes with its segment: it lives on in a later source."""
    clock = ManualClock(T0)
    plog = spread_log(tmp_path, clock)
    mgr = state_of(plog)
    x = plog.segments[-1].base_offset
    want = reference(plog, x)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records_before(plog.segments[2].base_offset)
    assert min(mgr.snapshot_offsets()) > 2  # producer 4's file (batch at 0..1) is gone
    assert 4 in {f[0] for f in want} and x in mgr.snapshot_offsets()
    assert fields_of(mgr.complete_snapshot_bytes(x)) == want
    with pytest.raises(ValueError):  # below the log start: that state is gone
        mgr.complete_snapshot_bytes(plog.log_start_offset - 1)


def test_files_below_a_complete_one_cost_no_memory_until_a_truncation(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = spread_log(tmp_path, clock)
    end = plog.log_end_offset
    plog.close()
    on_disk = state_of(plog).snapshot_offsets()
    assert len(on_disk) > 2
    plog = open_log(tmp_path, clock, segment_bytes=400)
    mgr = state_of(plog)
    # only the complete file is indexed (its filter in memory); the others stay on disk
    assert mgr.ledger.stats().sealed_files == 1 and mgr.snapshot_offsets() == on_disk
    for pid in (4, 5, 6):
        assert mgr.ledger.read(pid) is not None
    assert fields_of(mgr.complete_snapshot_bytes(on_disk[1])) == reference(plog, on_disk[1])
    # retention deletes the older files (the complete one holds everything they held)
    plog.update_high_watermark(end)
    plog.delete_records_before(plog.segments[2].base_offset)
    assert all(o >= plog.segments[0].base_offset for o in mgr.snapshot_offsets())
    # a truncation below the complete file: the older files are looked up again
    cut = plog.segments[-1].base_offset
    plog.truncate_to(cut)
    assert mgr.ledger.stats().sealed_files >= 1 and max(mgr.snapshot_offsets()) <= cut
    e5 = mgr.table.get(5)
    assert e5 is not None and e5.last_offset == cut - 1
    e4 = mgr.table.get(4)
    assert e4 is not None and e4.last_seq == 1  # carried forward, still known
