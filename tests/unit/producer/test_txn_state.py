"""Transactions in the producer state and the log: open transactions, the last stable
offset, marker fencing, and the aborted-transaction index across segments, truncation and
recovery."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.producer.state import (
    InvalidTxnStateError,
    ProducerStateTable,
    TransactionCoordinatorFencedError,
)
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.records import BatchHeader, SimpleRecord, build_batch, parse_header
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.producer_hook import TxnMarker
from riverbed.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000


def data(pid: int, seq: int, n: int = 1, *, txn: bool = True, epoch: int = 0) -> bytes:
    return build_batch(
        [SimpleRecord(b"v%d" % i, timestamp=T0) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def marker(pid: int, commit: bool, coordinator_epoch: int = 0, epoch: int = 0) -> bytes:
    return build_end_txn_marker_batch(
        commit,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        now_ms=T0,
    )


def at(batch: bytes, offset: int) -> BatchHeader:
    from riverbed.protocol.records import patch_base_offset

    buf = bytearray(batch)
    patch_base_offset(buf, 0, offset)
    return parse_header(buf)


# ---- the table (pure) ---------------------------------------------------------------------


def test_lso_is_first_open_transaction_never_above_hw() -> None:
    t = ProducerStateTable()
    t.apply(at(data(1, 0, txn=False), 0))
    assert t.last_stable_offset(1) == 1  # no transaction: the high watermark
    t.apply(at(data(2, 0), 1))
    t.apply(at(data(3, 0), 2))
    assert t.first_unstable_offset() == 1
    assert t.last_stable_offset(5) == 1
    assert t.last_stable_offset(0) == 0  # never above the high watermark
    t.apply(at(marker(2, True), 3), TxnMarker(True, 0))
    assert t.last_stable_offset(5) == 2  # producer 3's transaction still holds it


def test_abort_yields_entry_with_next_open_transaction_as_lso() -> None:
    t = ProducerStateTable()
    t.apply(at(data(1, 0, 2), 0))
    t.apply(at(data(2, 0), 2))
    aborted = t.apply(at(marker(1, False), 3), TxnMarker(False, 0))
    assert aborted == AbortedTxn(1, 0, 3, 2)  # producer 2's open transaction starts at 2
    last = t.apply(at(marker(2, False), 4), TxnMarker(False, 0))
    assert last == AbortedTxn(2, 2, 4, 5)  # none open: the marker's offset + 1
    # a commit and an empty transaction's abort leave no entry
    t.apply(at(data(1, 2), 5))
    assert t.apply(at(marker(1, True), 6), TxnMarker(True, 0)) is None
    assert t.apply(at(marker(1, False), 7), TxnMarker(False, 0)) is None


def test_non_transactional_batch_inside_open_transaction_is_invalid_txn_state() -> None:
    t = ProducerStateTable()
    t.apply(at(data(1, 0), 0))
    with pytest.raises(InvalidTxnStateError):
        t.check([parse_header(data(1, 1, txn=False))])
    # after the marker the producer may write outside a transaction again
    t.apply(at(marker(1, True), 1), TxnMarker(True, 0))
    assert t.check([parse_header(data(1, 1, txn=False))]) is None


def test_marker_from_older_coordinator_epoch_is_fenced() -> None:
    t = ProducerStateTable()
    t.apply(at(data(1, 0), 0))
    t.apply(at(marker(1, True, coordinator_epoch=5), 1), TxnMarker(True, 5))
    t.apply(at(data(1, 1), 2))
    old = parse_header(marker(1, False, coordinator_epoch=4))
    with pytest.raises(TransactionCoordinatorFencedError):
        t.check([old], [TxnMarker(False, 4)])
    assert t.check([old], [TxnMarker(False, 5)]) is None
    assert t.check([old], [TxnMarker(False, 6)]) is None


# ---- the log with its producer state --------------------------------------------------------


def open_log(
    path: Path, clock: ManualClock, **cfg: int
) -> tuple[PartitionLog, ProducerStateManager]:
    plog = PartitionLog(path / "t-0", "t", 0, LogConfig(**cfg), clock)  # type: ignore[arg-type]
    mgr = ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig())
    mgr.attach(plog)
    return plog, mgr


def txn_files(plog: PartitionLog) -> dict[str, list[AbortedTxn]]:
    from riverbed.storage.txn_index import decode_entries

    return {
        p.name: decode_entries(p.read_bytes())
        for p in sorted(plog.directory.glob("*.txnindex"))
        if p.stat().st_size
    }


def fill(plog: PartitionLog) -> None:
    """Producer 1's transaction spans two segments and aborts in the second; producer 2
    commits; producer 3 aborts inside the second segment; producer 4 stays open."""
    plog.append_as_leader(data(1, 0, 3), 0)  # 0-2
    plog.append_as_leader(data(2, 0), 0)  # 3
    plog.roll()
    plog.append_as_leader(data(4, 0), 0)  # 4 (stays open)
    plog.append_as_leader(data(3, 0), 0)  # 5
    plog.append_as_leader(marker(2, True), 0, origin="coordinator")  # 6
    plog.append_as_leader(marker(1, False), 0, origin="coordinator")  # 7
    plog.append_as_leader(marker(3, False), 0, origin="coordinator")  # 8


EXPECTED = {
    "00000000000000000004.txnindex": [AbortedTxn(1, 0, 7, 4), AbortedTxn(3, 5, 8, 4)],
}


def test_abort_written_to_the_marker_segment_and_read_across_segments(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, mgr = open_log(tmp_path, clock)
    fill(plog)
    assert txn_files(plog) == EXPECTED
    assert mgr.last_stable_offset(plog.log_end_offset) == 4
    # a read of the first segment finds the abort whose marker is in the second
    assert plog.aborted_transactions(0, 4) == [AbortedTxn(1, 0, 7, 4)]
    assert plog.aborted_transactions(4, 9) == EXPECTED["00000000000000000004.txnindex"]
    assert plog.aborted_transactions(9, 10) == []


def test_clients_may_not_write_markers_and_fenced_marker_refused(tmp_path: Path) -> None:
    from riverbed.storage.errors import InvalidRecordError

    clock = ManualClock(T0)
    plog, _ = open_log(tmp_path, clock)
    plog.append_as_leader(data(1, 0), 0)
    with pytest.raises(InvalidRecordError):
        plog.append_as_leader(marker(1, True), 0)
    plog.append_as_leader(marker(1, True, coordinator_epoch=3), 0, origin="coordinator")
    plog.append_as_leader(data(1, 1), 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        plog.append_as_leader(marker(1, False, coordinator_epoch=2), 0, origin="coordinator")
    with pytest.raises(InvalidTxnStateError):
        plog.append_as_leader(data(1, 2, txn=False), 0)
    assert plog.log_end_offset == 3


def test_truncation_cuts_entries_and_reopens_transaction(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, mgr = open_log(tmp_path, clock)
    fill(plog)
    plog.truncate_to(8)  # producer 3's abort marker goes
    assert txn_files(plog) == {"00000000000000000004.txnindex": [AbortedTxn(1, 0, 7, 4)]}
    assert mgr.open_transactions() == {4: 4, 3: 5}
    plog.truncate_to(7)
    assert txn_files(plog) == {}
    assert mgr.last_stable_offset(100) == 0  # producer 1's transaction is open again


def test_open_transactions_survive_clean_restart(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, _ = open_log(tmp_path, clock)
    fill(plog)
    plog.close()
    plog2, mgr2 = open_log(tmp_path, clock)
    assert mgr2.open_transactions() == {4: 4}
    assert mgr2.last_stable_offset(plog2.log_end_offset) == 4
    with pytest.raises(InvalidTxnStateError):
        plog2.append_as_leader(data(4, 1, txn=False), 0)
    assert txn_files(plog2) == EXPECTED


def test_recovery_rebuilds_txn_index_across_segments(tmp_path: Path) -> None:
    """After a crash the recovered segments' indexes are rebuilt from the producer state:
    producer 1's transaction began in the first segment, its abort is in the second."""
    clock = ManualClock(T0)
    plog, _ = open_log(tmp_path, clock)
    fill(plog)
    plog.flush()
    plog.abandon()  # a crash: no clean shutdown, no complete snapshot
    for p in (tmp_path / "t-0").glob("*.txnindex"):
        p.write_bytes(b"")  # lost, as an unflushed index may be
    # recovery from the start of the second segment (where the recovery point was)
    plog2 = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock, recovery_point=4)
    mgr2 = ProducerStateManager(plog2.directory, clock.now_ms, ProducerStateConfig())
    mgr2.attach(plog2)
    assert txn_files(plog2) == EXPECTED
    assert plog2.aborted_transactions(0, 4) == [AbortedTxn(1, 0, 7, 4)]
    assert mgr2.open_transactions() == {4: 4}


def test_deleted_segment_takes_its_txn_index(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog, _ = open_log(tmp_path, clock)
    fill(plog)
    plog.roll()
    plog.append_as_leader(data(9, 0, txn=False), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records_before(9)
    plog.delete_old_segments(clock.now_ms())
    plog.delete_expired_files(clock.now_ms() + 10**9)
    assert not (tmp_path / "t-0" / "00000000000000000004.txnindex").exists()
    shutil.rmtree(tmp_path / "t-0")


def test_coordinator_batches_skip_sequence_checks_but_not_epochs() -> None:
    """The group coordinator appends each TxnOffsetCommit of a producer as a batch with
    base sequence 0 (Kafka's AppendOrigin.COORDINATOR checks no sequences): a second one
    is neither a duplicate (silently not appended) nor out of order; an older epoch is
    still refused."""
    from riverbed.producer.state import InvalidProducerEpochError

    t = ProducerStateTable()
    t.apply(at(data(7, 0, epoch=3), 0))
    second = at(data(7, 0, epoch=3), 1)
    assert t.check([second]) is not None  # a client's retry: the duplicate of offset 0
    assert t.check([second], sequences=False) is None
    with pytest.raises(InvalidProducerEpochError):
        t.check([at(data(7, 0, epoch=2), 1)], sequences=False)


def test_verification_guard_is_dropped_by_a_marker() -> None:
    """KIP-890's VerificationGuard: a marker of the producer between the verification and
    the append means the verified transaction ended; the append must be refused."""
    t = ProducerStateTable()
    guard = t.begin_verification(1)
    assert t.begin_verification(1) == guard  # concurrent produces share the guard
    assert t.end_verification(1, guard)  # nothing happened meanwhile
    t.apply(at(data(1, 0), 0))  # the first verified append opens the transaction
    assert t.end_verification(1, guard)  # a concurrent one may follow it
    t.apply(at(marker(1, False), 1), TxnMarker(False, 0))
    assert not t.end_verification(1, guard)  # the transaction it verified ended
    again = t.begin_verification(1)
    assert again != guard
    t.apply(at(marker(1, False), 2), TxnMarker(False, 0))  # e.g. a timeout's abort
    assert not t.end_verification(1, again)
    failed = t.begin_verification(2)
    t.end_verification(2, failed, verified=False)  # a failed verification drops it
    assert t.begin_verification(2) != failed
    assert not t.has_open_transaction(1)
    t.apply(at(data(1, 1), 3))
    assert t.has_open_transaction(1)


def test_an_open_transaction_of_an_older_epoch_is_not_the_batchs() -> None:
    """KIP-890 part 2: under transaction.version 2 every transaction has its own epoch, so
    a batch of a higher epoch than the open transaction's starts the next transaction and
    needs its add (the open one is the previous, its marker not yet written here)."""
    t = ProducerStateTable()
    t.apply(at(data(1, 0, epoch=4), 0))
    assert t.has_open_transaction(1) and t.has_open_transaction(1, 4)
    assert not t.has_open_transaction(1, 5)
    assert not t.has_open_transaction(2, 4)


def test_produce_errors_of_a_failed_verification() -> None:
    from riverbed.protocol.errors import ErrorCode as E
    from riverbed.server.broker.txn_verification import produce_error

    assert produce_error(E.COORDINATOR_NOT_AVAILABLE, 9) == E.NOT_ENOUGH_REPLICAS
    assert produce_error(E.CONCURRENT_TRANSACTIONS, 11) == E.NOT_ENOUGH_REPLICAS
    assert produce_error(E.PRODUCER_FENCED, 9) == E.INVALID_PRODUCER_EPOCH
    assert produce_error(E.TRANSACTION_ABORTABLE, 10) == E.INVALID_TXN_STATE
    assert produce_error(E.TRANSACTION_ABORTABLE, 11) == E.TRANSACTION_ABORTABLE
    assert produce_error(E.INVALID_PRODUCER_ID_MAPPING, 9) == E.INVALID_PRODUCER_ID_MAPPING


def test_coordinator_epoch_of_a_replayed_marker_still_fences(tmp_path: Path) -> None:
    """A crash before any ledger flush: the replay of the log restores the coordinator
    epoch of the producer's last marker, so an older coordinator stays fenced."""
    clock = ManualClock(T0)
    plog, _ = open_log(tmp_path, clock)
    plog.append_as_leader(data(5, 0), 0)
    plog.append_as_leader(marker(5, True, coordinator_epoch=9), 0, origin="coordinator")
    plog.append_as_leader(data(5, 1), 0)
    plog.flush()
    plog.abandon()  # a crash: the ledger was never sealed
    plog2, mgr2 = open_log(tmp_path, clock)
    assert mgr2.open_transactions() == {5: 2}
    with pytest.raises(TransactionCoordinatorFencedError):
        plog2.append_as_leader(marker(5, False, coordinator_epoch=8), 0, origin="coordinator")


def test_follower_replaying_markers_keeps_the_same_state_and_index(tmp_path: Path) -> None:
    """A follower appends the leader's batches unchanged: its producer state, LSO and
    aborted-transaction index follow the markers as the leader's do."""
    clock = ManualClock(T0)
    leader, leader_state = open_log(tmp_path / "leader", clock)
    fill(leader)
    follower, follower_state = open_log(tmp_path / "follower", clock)
    with leader.read(0, 1 << 30) as result:
        follower.append_as_follower(result.read_bytes())
    assert follower.log_end_offset == leader.log_end_offset
    assert follower_state.open_transactions() == leader_state.open_transactions() == {4: 4}
    end = leader.log_end_offset
    assert follower_state.last_stable_offset(end) == leader_state.last_stable_offset(end) == 4
    assert follower.aborted_transactions(0, end) == leader.aborted_transactions(0, end)
    assert follower.aborted_transactions(0, end) == EXPECTED["00000000000000000004.txnindex"]


def test_lso_never_below_the_log_start(tmp_path: Path) -> None:
    """DeleteRecords past an open transaction's first offset: the LSO is the log start
    (else a read_committed consumer at the log start would never get anything)."""
    from riverbed.server.broker.hosted import last_stable_offset

    clock = ManualClock(T0)
    plog, mgr = open_log(tmp_path, clock)
    plog.append_as_leader(data(6, 0), 0)  # 0: opens producer 6's transaction
    plog.append_as_leader(data(-1, -1, 2, txn=False), 0)  # 1-2
    plog.update_high_watermark(plog.log_end_offset)
    assert last_stable_offset(plog) == 0
    plog.delete_records_before(2)
    assert mgr.last_stable_offset(plog.high_watermark) == 0  # still open in the state
    assert last_stable_offset(plog) == 2


def test_a_remote_snapshot_brings_its_open_transactions(tmp_path: Path) -> None:
    """A log restarted at its leader's local start takes the producers of the remote range
    from the shipped snapshot: a transaction open there is open here until its marker."""
    from riverbed.producer.snapshot import encode_snapshot
    from riverbed.producer.state import ProducerEntry

    clock = ManualClock(T0)
    plog, mgr = open_log(tmp_path, clock)
    plog.truncate_fully_and_start_at(100)
    entry = ProducerEntry(8, 0, current_txn_first_offset=90, last_timestamp=T0)
    assert mgr.install_remote_snapshot(encode_snapshot([entry])) == 1
    assert mgr.open_transactions() == {8: 90}
    assert mgr.last_stable_offset(100) == 90
    from riverbed.protocol.records import patch_base_offset

    replicated = bytearray(marker(8, False))  # the ABORT, as the leader wrote it
    patch_base_offset(replicated, 0, 100)
    plog.append_as_follower(replicated)
    assert mgr.open_transactions() == {}
    assert plog.aborted_transactions(0, 101) == [AbortedTxn(8, 90, 100, 101)]


@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from(["data", "txn", "commit", "abort"])),
        max_size=60,
    )
)
def test_lso_and_aborted_entries_match_a_model(steps: list[tuple[int, str]]) -> None:
    """Any interleaving of producers' transactional batches and markers: the LSO is the
    first offset of the earliest open transaction (kept as changes come, not per read),
    and each abort of a transaction with data yields its first offset and that LSO."""
    t = ProducerStateTable()
    model: dict[int, int] = {}  # producer -> first offset of its open transaction
    for offset, (pid, kind) in enumerate(steps):
        if kind == "data" and pid in model:
            kind = "txn"  # a plain batch inside a transaction is refused at the leader
        if kind in ("data", "txn"):
            t.apply(at(data(pid, 0, txn=kind == "txn"), offset))
            if kind == "txn":
                model.setdefault(pid, offset)
        else:
            aborted = t.apply(
                at(marker(pid, kind == "commit"), offset), TxnMarker(kind == "commit", 0)
            )
            first = model.pop(pid, None)
            if kind == "abort" and first is not None:
                lso = min(model.values()) if model else offset + 1
                assert aborted == AbortedTxn(pid, first, offset, lso)
            else:
                assert aborted is None
        assert t.first_unstable_offset() == (min(model.values()) if model else None)
        assert t.last_stable_offset(offset + 1) == min([*model.values(), offset + 1])


def test_recovery_keeps_the_index_until_the_rebuild(tmp_path: Path) -> None:
    """Recovery only marks the revalidated segments' txn indexes for a rebuild: a log
    recovered and closed again before its producer state was attached keeps them (a
    restart loop must not lose the aborts), and a torn tail takes its entries along."""
    clock = ManualClock(T0)
    plog, _ = open_log(tmp_path, clock)
    fill(plog)
    plog.flush()
    plog.abandon()
    untouched = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock, recovery_point=4)
    assert untouched.stale_txn_index_base() == 4
    assert txn_files(untouched) == EXPECTED
    untouched.abandon()
    log_file = tmp_path / "t-0" / "00000000000000000004.log"
    with open(log_file, "r+b") as f:  # tear the last batch (producer 3's ABORT at 8)
        f.truncate(log_file.stat().st_size - 10)
    torn, mgr = open_log(tmp_path, clock)
    assert torn.log_end_offset == 8
    assert txn_files(torn) == {"00000000000000000004.txnindex": [AbortedTxn(1, 0, 7, 4)]}
    assert mgr.open_transactions() == {4: 4, 3: 5}
