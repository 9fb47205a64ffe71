"""Transaction-aware compaction (Kafka's CleanedTransactionMetadata): aborted
transactions removed whole, markers kept until delete.retention.ms after their
transaction was cleaned (two passes), committed transactional records compacted as any
others, and nothing cleaned at or after the last stable offset."""

from __future__ import annotations

from pathlib import Path

from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.cleaner import OffsetMap
from riverbed.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000
RETENTION_MS = 1000
COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=100_000,
    delete_retention_ms=RETENTION_MS,
    min_cleanable_dirty_ratio=0.0,
)


def txn(pid: int, seq: int, *pairs: tuple[bytes, bytes]) -> bytes:
    return build_batch(
        [SimpleRecord(v, key=k, timestamp=T0) for k, v in pairs],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
        now_ms=T0,
    )


def plain(*pairs: tuple[bytes, bytes]) -> bytes:
    return build_batch([SimpleRecord(v, key=k, timestamp=T0) for k, v in pairs], now_ms=T0)


def marker(pid: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(
        commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0, now_ms=T0
    )


def open_log(path: Path, clock: ManualClock) -> PartitionLog:
    plog = PartitionLog(path, "t", 0, COMPACT, clock)
    ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig()).attach(plog)
    return plog


def contents(plog: PartitionLog) -> tuple[list[tuple[int, bytes | None]], list[tuple[int, str]]]:
    """(offset, value) of the data records; (offset, kind) of the control batches."""
    with plog.read(plog.log_start_offset, 1 << 30) as result:
        data = result.read_bytes()
    values: list[tuple[int, bytes | None]] = []
    controls: list[tuple[int, str]] = []
    for pos, h in iter_batches(data):
        batch = memoryview(data)[pos : pos + h.size]
        if h.is_control:
            kind = "horizon" if h.has_delete_horizon else "marker"
            controls.append((h.base_offset, kind))
        else:
            values += [(r.offset, r.value) for r in iter_records(batch)]
    return values, controls


def clean(plog: PartitionLog, now: int) -> None:
    plog.clean(0, OffsetMap(1 << 20), now, lambda _n: None, expire_tombstones=True)


def test_aborted_removed_markers_in_two_passes(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path / "t-0", clock)
    plog.append_as_leader(txn(1, 0, (b"k1", b"a1"), (b"k2", b"a2")), 0)  # 0-1 aborted
    plog.append_as_leader(txn(2, 0, (b"k1", b"c1")), 0)  # 2 committed
    plog.append_as_leader(plain((b"k3", b"v3")), 0)  # 3
    plog.append_as_leader(marker(1, False), 0, origin="coordinator")  # 4
    plog.append_as_leader(marker(2, True), 0, origin="coordinator")  # 5
    plog.roll()
    plog.append_as_leader(plain((b"k4", b"v4")), 0)  # 6 (active segment)
    plog.update_high_watermark(plog.log_end_offset)

    clean(plog, T0)
    values, controls = contents(plog)
    # the aborted transaction's records go whole; the committed one stays
    assert values == [(2, b"c1"), (3, b"v3"), (6, b"v4")]
    # both markers stay this pass: their transactions' batches were seen
    assert controls == [(4, "marker"), (5, "marker")]
    assert plog.aborted_transactions(0, 7) == [AbortedTxn(1, 0, 4, 2)]  # moved with its marker

    clean(plog, T0 + 1)  # the aborted batches are gone: its marker gets a horizon
    _, controls = contents(plog)
    assert controls == [(4, "horizon"), (5, "marker")]

    clean(plog, T0 + 1 + RETENTION_MS)  # past the horizon: the marker goes
    values, controls = contents(plog)
    assert controls == [(5, "marker")]
    assert values == [(2, b"c1"), (3, b"v3"), (6, b"v4")]


def test_no_cleaning_at_or_after_the_last_stable_offset(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path / "t-0", clock)
    plog.append_as_leader(plain((b"k1", b"old")), 0)  # 0
    plog.roll()
    plog.append_as_leader(txn(7, 0, (b"k2", b"open")), 0)  # 1: open transaction
    plog.append_as_leader(plain((b"k1", b"new")), 0)  # 2
    plog.roll()
    plog.append_as_leader(plain((b"k2", b"newer")), 0)  # 3
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    clean(plog, T0)
    values, _ = contents(plog)
    # the segment of the open transaction and after are not cleanable: "old" at 0 has
    # no later key in the cleaned range, "open" is never superseded while open
    assert (1, b"open") in values and (0, b"old") in values
    plog.append_as_leader(marker(7, False), 0, origin="coordinator")  # 4: aborted
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    clean(plog, T0 + 1)
    values, _ = contents(plog)
    assert values == [(2, b"new"), (3, b"newer")]
