"""The split partition log: the local log's lock is a leaf, taken after the unified log's.

Hooks (producer state, roll listener, retention hook) run under the unified log's lock
and never under the local one; asking for the unified lock while holding the local one
is refused at once (LockOrderError) instead of deadlocking some day.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from riverbed.protocol.records import BatchHeader, SimpleRecord, build_batch, iter_batches
from riverbed.storage import LogConfig, ManualClock, OffsetOutOfRangeError, PartitionLog
from riverbed.storage.locks import LockOrderError, OuterLock
from riverbed.storage.producer_hook import DuplicateBatch, TxnMarker
from riverbed.storage.segment import LogSegment
from riverbed.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000


def batch(n: int = 3) -> bytes:
    return build_batch([SimpleRecord(b"v" * 40, key=b"k%d" % i, timestamp=T0) for i in range(n)])


def test_outer_lock_refuses_the_reverse_order() -> None:
    leaf = threading.RLock()
    outer = OuterLock(leaf, "t-0")
    with outer, outer, leaf:  # the right order, and reentrant
        pass
    with leaf, pytest.raises(LockOrderError), outer:
        pass
    # another thread holding the leaf is no order violation for this one
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with leaf:
            taken.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    taken.wait()
    try:
        with outer:
            pass
    finally:
        release.set()
        t.join()


def test_partition_log_asserts_the_order(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0))
    plog.append_as_leader(batch(), leader_epoch=0)
    # a test may reach in (what no code may do): hold the local lock, ask for the unified
    with plog._local._lock, pytest.raises(LockOrderError):
        plog.update_high_watermark(3)
    assert plog.update_high_watermark(3) == 3
    plog.close()


class _Recorder:
    """A producer state hook (and listener, retention hook) that notes every call and
    whether the local log's lock was held by the calling thread meanwhile."""

    def __init__(self) -> None:
        self.plog: PartitionLog | None = None
        self.calls: list[str] = []
        self.under_local_lock: list[str] = []

    def _note(self, what: str) -> None:
        assert self.plog is not None
        self.calls.append(what)
        if self.plog._local.lock_held():
            self.under_local_lock.append(what)

    def check_leader_append(
        self,
        headers: Sequence[BatchHeader],
        markers: Sequence[TxnMarker | None] = (),
        sequences: bool = True,
    ) -> DuplicateBatch | None:
        self._note("check")
        return None

    def on_batch(self, header: BatchHeader, marker: TxnMarker | None = None) -> AbortedTxn | None:
        self._note("batch")
        return None

    def last_stable_offset(self, high_watermark: int) -> int:
        self._note("lso")
        return high_watermark

    def on_roll(self, base_offset: int) -> None:
        self._note("roll")

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None:
        self._note("truncate")

    def on_truncate_fully(self, offset: int) -> None:
        self._note("truncate_fully")

    def on_segments_deleted(self, first_segment_base: int) -> None:
        self._note("deleted")

    def on_close(self, log_end_offset: int) -> None:
        self._note("close")

    def listener(self, base_offset: int) -> None:
        self._note("listener")

    def retention(self, plog: PartitionLog, seg: LogSegment) -> bool:
        self._note("retention_hook")
        return True


def test_hooks_never_run_under_the_local_lock(tmp_path: Path) -> None:
    rec = _Recorder()
    plog = PartitionLog(
        tmp_path / "t-0",
        "t",
        0,
        LogConfig(segment_bytes=400),
        ManualClock(T0),
        retention_hook=rec.retention,  # type: ignore[arg-type]
    )
    rec.plog = plog
    plog.attach_producer_state(rec, lambda start, end: None)
    plog.roll_listener = rec.listener
    for _ in range(12):
        plog.append_as_leader(batch(), leader_epoch=0)  # rolls every couple of batches
    plog.append_as_follower(b"")
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records_before(9)
    plog.truncate_to(30)
    plog.truncate_to(5)  # below the local start: restarts the log
    plog.roll()
    plog.close()
    assert set(rec.calls) >= {
        "check", "batch", "roll", "listener", "retention_hook", "deleted", "truncate",
        "truncate_fully", "close",
    }  # fmt: skip
    assert rec.under_local_lock == []


def test_appends_reads_flushes_and_retention_in_threads_keep_the_log_whole(
    tmp_path: Path,
) -> None:
    """Every path takes the locks in order, so threads doing all of it at once finish
    (a lock taken in the reverse order raises at once, a deadlock fails the join), and
    the log they leave is whole: every offset readable from the log start, durable."""
    config = LogConfig(segment_bytes=600, retention_bytes=3000)
    plog = PartitionLog(tmp_path / "t-0", "t", 0, config, ManualClock(T0))
    errors: list[BaseException] = []
    appended = 200
    done = threading.Event()  # the others go on while the appends do (bounded anyway)

    def appends() -> None:
        try:
            for _ in range(appended):
                info = plog.append_as_leader(batch(), leader_epoch=0)
                plog.update_high_watermark(info.last_offset + 1)
        finally:
            done.set()

    def until_done(step: Callable[[], object]) -> Callable[[], None]:
        def loop() -> None:
            for _ in range(100_000):
                step()
                if done.is_set():
                    return

        return loop

    def read() -> None:
        with contextlib.suppress(OffsetOutOfRangeError):  # retention moved the log start
            plog.read(plog.log_start_offset, 1 << 16).close()
        list(plog.batch_headers_from(plog.log_start_offset))

    def retention() -> None:
        plog.delete_old_segments(T0)
        plog.delete_expired_files(T0 + 3_600_000)

    def run(work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    workers = [appends, until_done(read), until_done(plog.flush), until_done(retention)]
    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread never finished (deadlock?)"
    assert errors == []
    assert plog.log_end_offset == 3 * appended
    assert plog.flush() == plog.log_end_offset
    plog.delete_old_segments(T0)  # once more, after the last append
    assert plog.log_start_offset > 0 and plog.size_bytes <= 3000 + 600  # + the active one
    start = plog.log_start_offset
    offsets = list(range(start, 3 * appended, 3))
    assert [h.base_offset for h in plog.batch_headers_from(start)] == offsets
    plog.close()
    again = PartitionLog(tmp_path / "t-0", "t", 0, config, ManualClock(T0), log_start_offset=start)
    data = again.read(start, 1 << 20).read_bytes()
    assert [h.base_offset for _, h in iter_batches(data)] == offsets
    again.close()
