"""Producer snapshots (Kafka's format) and the state manager beside a real partition log."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.producer.snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    snapshot_name,
)
from riverbed.producer.state import BatchMetadata, InvalidProducerEpochError, ProducerEntry
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, ManualClock, PartitionLog

T0 = 1_700_000_000_000


def idem(pid: int, epoch: int, seq: int, n: int = 1, ts: int = T0) -> bytes:
    return build_batch(
        [SimpleRecord(b"x" * 20, timestamp=ts) for _ in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def open_log(path: Path, clock: ManualClock, **cfg: int) -> PartitionLog:
    plog = PartitionLog(path / "t-0", "t", 0, LogConfig(**cfg), clock)  # type: ignore[arg-type]
    ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig()).attach(plog)
    return plog


def rolled_log(
    path: Path, clock: ManualClock, plog: PartitionLog | None = None
) -> tuple[PartitionLog, int]:
    """Producer 5 writes 10 batches of 2 records over 400-byte segments (many rolls);
    returns the log and the producer's next sequence."""
    plog = plog or open_log(path, clock, segment_bytes=400)
    for seq in range(0, 20, 2):
        plog.append_as_leader(idem(5, 0, seq, 2), 0)
    return plog, 20


def state_of(plog: PartitionLog) -> ProducerStateManager:
    assert isinstance(plog.producer_state, ProducerStateManager)
    return plog.producer_state


# ---- file format --------------------------------------------------------------------------


def test_snapshot_layout_is_kafkas() -> None:
    e = ProducerEntry(42, 3, [BatchMetadata(5, 9, 100, 104, T0)], 7, -1, T0)
    data = encode_snapshot([e])
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (42, 3, 9, 104, 4, T0, 7, -1)
    assert len(data) == 10 + 46
    assert snapshot_name(123) == "00000000000000000123.snapshot"


entries = st.builds(
    lambda pid, epoch, last, delta, off, ts, txn: ProducerEntry(
        pid,
        epoch,
        [BatchMetadata((last - delta) % 0x80000000, last, off, off + delta, ts)],
        -1,
        txn,
        ts,
    ),
    st.integers(0, 2**63 - 1),
    st.integers(0, 32767),
    st.integers(0, 0x7FFFFFFF),
    st.integers(0, 1000),
    st.integers(0, 2**40),
    st.integers(-1, 2**45),
    st.sampled_from([-1, 10]),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(entries, max_size=20, unique_by=lambda e: e.producer_id))
def test_snapshot_round_trip(es: list[ProducerEntry]) -> None:
    assert decode_snapshot(encode_snapshot(es)) == es


def test_corrupt_snapshot_is_detected() -> None:
    data = bytearray(encode_snapshot([ProducerEntry(1, 0, [BatchMetadata(0, 0, 0, 0, 5)])]))
    data[-1] ^= 1
    try:
        decode_snapshot(bytes(data))
    except CorruptSnapshotError:
        pass
    else:
        raise AssertionError("flipped bit not detected")


# ---- beside a partition log ----------------------------------------------------------------


def test_duplicate_append_returns_original_offsets_and_appends_nothing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, clock)
    plog.append_as_leader(idem(9, 0, 0, 2), 0)
    first = plog.append_as_leader(idem(9, 0, 2, 3), 0)
    assert (first.first_offset, first.duplicate) == (2, False)
    again = plog.append_as_leader(idem(9, 0, 2, 3), 0)
    assert (again.first_offset, again.last_offset, again.duplicate) == (2, 4, True)
    assert plog.log_end_offset == 5


def test_fenced_epoch_is_refused(tmp_path: Path) -> None:
    plog = open_log(tmp_path, ManualClock(T0))
    plog.append_as_leader(idem(9, 2, 0), 0)
    try:
        plog.append_as_leader(idem(9, 1, 1), 0)
    except InvalidProducerEpochError:
        pass
    else:
        raise AssertionError("lower epoch accepted")
    assert plog.log_end_offset == 1


def test_roll_writes_snapshot_and_restart_after_crash_rebuilds(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, seq = rolled_log(tmp_path, clock)
    plog.append_as_leader(idem(6, 1, 0), 0)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 2
    snaps = state_of(plog).snapshot_offsets()
    assert set(bases[1:]) <= set(snaps)
    plog.abandon()  # crash: no close snapshot
    plog2 = open_log(tmp_path, clock, segment_bytes=400)
    st2 = state_of(plog2)
    e5, e6 = st2.table.get(5), st2.table.get(6)
    assert e5 is not None and e5.last_seq == seq - 1 and e6 is not None and e6.epoch == 1
    # the last batch is still recognised as a duplicate after the restart
    dup = plog2.append_as_leader(idem(5, 0, seq - 2, 2), 0)
    assert dup.duplicate and dup.first_offset == plog2.log_end_offset - 3


def test_clean_close_snapshot_at_log_end_needs_no_replay(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, clock)
    plog.append_as_leader(idem(5, 0, 0, 4), 0)
    plog.close()
    assert (plog.directory / snapshot_name(4)).exists()
    plog2 = open_log(tmp_path, clock)
    e = state_of(plog2).table.get(5)
    assert e is not None and e.last_seq == 3 and e.last_offset == 3


def test_corrupt_latest_snapshot_falls_back_to_older(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, seq = rolled_log(tmp_path, clock)
    plog.close()
    latest = max(state_of(plog).snapshot_offsets())
    (plog.directory / snapshot_name(latest)).write_bytes(b"\x00\x01garbage")
    plog2 = open_log(tmp_path, clock, segment_bytes=400)
    e = state_of(plog2).table.get(5)
    assert e is not None and e.last_seq == seq - 1
    assert latest not in state_of(plog2).snapshot_offsets()


def test_truncation_cuts_snapshots_and_rewinds_state(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, _ = rolled_log(tmp_path, clock)
    plog.truncate_to(6)
    assert all(o <= plog.log_end_offset for o in state_of(plog).snapshot_offsets())
    e = state_of(plog).table.get(5)
    assert e is not None and e.last_offset == plog.log_end_offset - 1
    assert e.last_seq == plog.log_end_offset - 1
    plog.truncate_fully_and_start_at(100)
    assert state_of(plog).snapshot_offsets() == [] and state_of(plog).table.get(5) is None


def test_snapshots_are_deleted_with_their_segments(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, _ = rolled_log(tmp_path, clock)
    plog.update_high_watermark(plog.log_end_offset)
    start = plog.delete_records_before(plog.segments[2].base_offset)
    first_base = plog.segments[0].base_offset
    assert start == first_base
    assert all(o >= first_base for o in state_of(plog).snapshot_offsets())


def test_follower_append_updates_state_from_headers(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l", ManualClock(T0))
    follower = open_log(tmp_path / "f", ManualClock(T0))
    buf = bytearray(idem(3, 4, 0, 3))
    leader.append_as_leader(buf, 0)
    follower.append_as_follower(buf)
    e = state_of(follower).table.get(3)
    assert e is not None and (e.epoch, e.last_seq, e.last_offset) == (4, 2, 2)


def test_expiry_on_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock)
    mgr = ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig(1000))
    mgr.attach(plog)
    plog.append_as_leader(idem(1, 0, 0, ts=T0), 0)
    assert mgr.remove_expired() == 0
    clock.advance(1000)
    assert mgr.remove_expired() == 1 and mgr.describe() == []


def test_corrupt_older_file_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, clock, segment_bytes=400)
    plog.append_as_leader(idem(4, 0, 0, 2), 0)  # producer 4 only writes at the start
    rolled_log(tmp_path, clock, plog)
    plog.close()
    first = min(state_of(plog).snapshot_offsets())
    path = plog.directory / snapshot_name(first)
    data = bytearray(path.read_bytes())
    data[8] ^= 0xFF
    path.write_bytes(bytes(data))
    plog2 = open_log(tmp_path, clock, segment_bytes=400)
    e4 = state_of(plog2).table.get(4)
    assert e4 is not None and e4.last_seq == 1  # replayed from the log start
    dup = plog2.append_as_leader(idem(4, 0, 0, 2), 0)
    assert dup.duplicate and dup.first_offset == 0


def test_timer_flush_seals_the_active_file_at_the_log_end(tmp_path: Path) -> None:
    from riverbed.producer.ledger import LedgerConfig

    clock = ManualClock(T0)
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock)
    config = ProducerStateConfig(ledger=LedgerConfig(flush_interval_ms=1000))
    mgr = ProducerStateManager(plog.directory, clock.now_ms, config)
    mgr.attach(plog)
    plog.append_as_leader(idem(1, 0, 0, 3), 0)
    assert not mgr.flush_if_due() and mgr.snapshot_offsets() == []
    clock.advance(1000)
    assert mgr.flush_if_due() and mgr.snapshot_offsets() == [3]
    assert not mgr.flush_if_due()  # nothing new since


class ManualExecutor(Executor):
    """Runs submitted work only when told (the broker's flush pool, made observable)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Callable[..., object], tuple[object, ...]]] = []

    def submit(self, fn: Callable[..., object], /, *args: object, **kwargs: object) -> Future:  # type: ignore[override]
        self.tasks.append((fn, args))
        return Future()

    def run(self) -> None:
        tasks, self.tasks = self.tasks, []
        for fn, args in tasks:
            fn(*args)


def flush_due_in_a_pool(
    tmp_path: Path, clock: ManualClock
) -> tuple[PartitionLog, ProducerStateManager, ManualExecutor]:
    """A log whose producer 1 wrote offsets 0-2 a flush interval ago (flush due), its
    flushes finished by a pool that runs only when told."""
    from riverbed.producer.ledger import LedgerConfig

    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock)
    config = ProducerStateConfig(ledger=LedgerConfig(flush_interval_ms=1000))
    pool = ManualExecutor()
    mgr = ProducerStateManager(plog.directory, clock.now_ms, config, flush_executor=pool)
    mgr.attach(plog)
    plog.append_as_leader(idem(1, 0, 0, 3), 0)
    clock.advance(1000)
    return plog, mgr, pool


def test_timer_flush_fsyncs_in_the_executor_not_under_the_log_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from riverbed.producer import ledger as ledger_module

    clock = ManualClock(T0)
    plog, mgr, pool = flush_due_in_a_pool(tmp_path, clock)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(ledger_module.os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    assert mgr.flush_if_due()
    assert fsyncs == [] and len(pool.tasks) == 1 and mgr.snapshot_offsets() == []
    # while the old file is being sealed: retries are still duplicates, new writes land
    assert plog.append_as_leader(idem(1, 0, 0, 3), 0).duplicate
    plog.append_as_leader(idem(2, 0, 0, 2), 0)
    assert not mgr.flush_if_due()  # one pending flush at a time
    pool.run()
    assert len(fsyncs) >= 2 and mgr.snapshot_offsets() == [3]
    plog.abandon()  # crash: producer 2 only in the mapped file, producer 1 sealed
    plog2 = open_log(tmp_path, clock)
    e1, e2 = state_of(plog2).table.get(1), state_of(plog2).table.get(2)
    assert e1 is not None and e1.last_seq == 2 and e2 is not None and e2.last_offset == 4


def test_a_roll_seals_its_base_while_a_timer_flush_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention deleting the segments below a base relies on the base's sealed file:
    a roll waits for the pending flush instead of leaving its entries to a later file
    (issue 18 defect 1; before, the roll's flush was skipped)."""
    plog, mgr, pool = flush_due_in_a_pool(tmp_path, ManualClock(T0))
    assert mgr.flush_if_due()  # <3>.snapshot pending in the pool
    plog.append_as_leader(idem(2, 0, 0, 2), 0)  # offsets 3-4
    wait = mgr.ledger.wait_flush

    def pool_runs_meanwhile() -> None:
        pool.run()
        wait()

    monkeypatch.setattr(mgr.ledger, "wait_flush", pool_runs_meanwhile)
    plog.roll()
    pool.run()
    assert mgr.snapshot_offsets() == [3, 5]


def test_producers_of_the_remote_range_survive_a_crash_before_any_flush(tmp_path: Path) -> None:
    """A log restarted at its leader's local start takes the remote range's producers
    (install_remote_snapshot) into the mapped file; a process crash before any flush
    keeps them: the open recovers the mapped entries below the first local batch (the
    replay writes the others again)."""
    clock = ManualClock(T0)
    plog = open_log(tmp_path, clock)
    plog.truncate_fully_and_start_at(100)
    remote = ProducerEntry(7, 0, [BatchMetadata(0, 4, 50, 54, T0)], last_timestamp=T0)
    assert state_of(plog).install_remote_snapshot(encode_snapshot([remote])) == 1
    plog.append_as_leader(idem(8, 0, 0), 0)  # offset 100
    plog.abandon()
    plog = open_log(tmp_path, clock)
    e7, e8 = state_of(plog).table.get(7), state_of(plog).table.get(8)
    assert e7 is not None and (e7.last_seq, e7.last_offset) == (4, 54)
    assert e8 is not None and e8.last_offset == 100
