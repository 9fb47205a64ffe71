"""Moving a replica between log dirs (AlterReplicaLogDirs): copy, swap, errors, crashes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches
from riverbed.storage import LogConfig, LogManager, ManualClock, PartitionLog, log_moves
from riverbed.storage.errors import LogDirError, LogDirNotFoundError, ReplicaNotAvailableError
from riverbed.storage.file_io import FileIO, StrPath

T0 = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=400, file_delete_delay_ms=0)


def batch(tag: int, n: int = 2) -> bytes:
    return build_batch(
        [SimpleRecord(f"v{tag}-{i}".encode() * 3, timestamp=T0 + tag) for i in range(n)]
    )


def contents(plog: PartitionLog) -> list[tuple[int, int, bytes]]:
    """(base offset, leader epoch, bytes) of every batch in the log."""
    with plog.read(plog.log_start_offset, 1 << 30) as result:
        data = result.read_bytes()
    return [
        (h.base_offset, h.partition_leader_epoch, bytes(data[pos : pos + h.size]))
        for pos, h in iter_batches(data)
    ]


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Gate:
    """Holds the manager's only pool thread, so a scheduled move step waits for `open`."""

    def __init__(self, m: LogManager) -> None:
        self.event = threading.Event()
        m._pool.submit(self.event.wait)

    def open(self) -> None:
        self.event.set()


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [(tmp_path / "d1").resolve(), (tmp_path / "d2").resolve()]


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(log_moves, "MOVE_STEP_BYTES_MAX", 500)  # many steps per move
    yield


def filled(m: LogManager, batches: int = 20) -> PartitionLog:
    plog = m.get_or_create("t", 0, SMALL)
    for i in range(batches):
        plog.append_as_leader(batch(i), leader_epoch=0 if i < batches // 2 else 3)
    plog.update_high_watermark(plog.log_end_offset - 2)
    plog.delete_records_before(4)
    return plog


def test_a_move_copies_swaps_and_survives_a_restart(dirs: list[Path], small_steps: None) -> None:
    m = LogManager(dirs, ManualClock(T0), flush_threads_max=1)
    replaced: list[tuple[tuple[str, int], PartitionLog]] = []
    m.on_log_replaced = lambda key, plog: replaced.append((key, plog))
    plog = filled(m)
    assert m.log_dir_of("t", 0) == dirs[0]
    before = contents(plog)
    hw, start, leo = plog.high_watermark, plog.log_start_offset, plog.log_end_offset

    gate = Gate(m)
    m.alter_log_dir("t", 0, str(dirs[1]))
    # scheduled, not started: DescribeLogDirs shows the future replica a whole log behind
    assert m.future_logs() == {("t", 0): (dirs[1], 0, leo)}
    m.alter_log_dir("t", 0, str(dirs[1]))  # the same target again: a no-op
    plog.append_as_leader(batch(99), leader_epoch=5)  # appends go on during the move
    gate.open()
    wait_until("the move", lambda: m.log_dir_of("t", 0) == dirs[1])

    moved = m.get("t", 0)
    assert moved is not None and moved is not plog and plog.closed
    assert replaced == [(("t", 0), moved)]
    assert contents(moved) == before + contents_tail(moved, leo)
    assert moved.log_end_offset == leo + 2
    assert (moved.high_watermark, moved.log_start_offset) == (hw, start)
    assert moved.end_offset_for_epoch(3) == plog.end_offset_for_epoch(3)
    assert moved.directory == dirs[1] / "t-0"
    assert m.future_logs() == {}
    assert not any(p.name.endswith("-future") for d in dirs for p in d.iterdir())
    moved.append_as_leader(batch(100), leader_epoch=5)  # the new log takes appends
    expected = contents(moved)
    m.shutdown()

    again = LogManager(dirs, ManualClock(T0))
    reloaded = again.get("t", 0)
    assert again.log_dir_of("t", 0) == dirs[1] and reloaded is not None
    assert contents(reloaded) == expected
    assert not (dirs[0] / "t-0").exists()
    again.shutdown()


def contents_tail(plog: PartitionLog, from_offset: int) -> list[tuple[int, int, bytes]]:
    return [c for c in contents(plog) if c[0] >= from_offset]


def test_a_truncation_during_the_move_restarts_the_copy(
    dirs: list[Path], small_steps: None
) -> None:
    m = LogManager(dirs, ManualClock(T0), flush_threads_max=1)
    plog = filled(m)
    kept = [c for c in contents(plog) if c[0] < 20]
    new = build_batch(
        [SimpleRecord(b"new", timestamp=T0)], base_offset=20, partition_leader_epoch=7
    )
    gate = Gate(m)
    m.alter_log_dir("t", 0, str(dirs[1]))
    m._pool.submit(plog.truncate_to, 20)  # runs after the first copy step
    m._pool.submit(plog.append_as_follower, new)
    gate.open()
    wait_until("the move", lambda: m.log_dir_of("t", 0) == dirs[1])
    moved = m.get("t", 0)
    assert moved is not None and moved.log_end_offset == 21
    assert contents(moved) == [*kept, (20, 7, new)]
    m.shutdown()


def test_errors_and_the_preferred_dir(dirs: list[Path]) -> None:
    m = LogManager(dirs, ManualClock(T0))
    filled(m)
    with pytest.raises(LogDirNotFoundError):
        m.alter_log_dir("t", 0, str(dirs[0].parent / "elsewhere"))
    with pytest.raises(ReplicaNotAvailableError):
        m.alter_log_dir("t", 5, str(dirs[1]))
    # remembered: the partition's log is created in that dir later (Kafka's preferred dir)
    m.get_or_create("u", 0)  # d2 is the least loaded now
    assert m.log_dir_of("u", 0) == dirs[1]
    with pytest.raises(ReplicaNotAvailableError):
        m.alter_log_dir("u", 1, str(dirs[0]))
    m.get_or_create("u", 1)
    assert m.log_dir_of("u", 1) == dirs[0]
    m.alter_log_dir("t", 0, str(dirs[0]))  # where it is: nothing to do
    assert m.future_logs() == {}
    m._dirs[dirs[1]].fail("test", OSError(5, "Input/output error"))
    with pytest.raises(LogDirError):
        m.alter_log_dir("t", 0, str(dirs[1]))
    assert m.future_logs() == {}
    m.shutdown()


def test_deleting_a_moving_partition_removes_its_future_log(
    dirs: list[Path], small_steps: None
) -> None:
    m = LogManager(dirs, ManualClock(T0), flush_threads_max=1)
    filled(m)
    m._swap = lambda move, current: False  # type: ignore[method-assign]  # never caught up
    m.alter_log_dir("t", 0, str(dirs[1]))
    wait_until("a future dir", lambda: any(p.name.endswith("-future") for p in dirs[1].iterdir()))
    m.delete("t", 0)
    assert m.future_logs() == {}
    assert not any(p.name.endswith("-future") for p in dirs[1].iterdir())
    m.shutdown()
    again = LogManager(dirs, ManualClock(T0))
    assert again.get("t", 0) is None
    again.shutdown()


class Crash(BaseException):
    """The process dies here (nothing after it runs)."""


class CrashingRenames(FileIO):
    """Dies at the ``n``-th rename of a partition dir during a move."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.renames = 0

    def replace(self, src: StrPath, dst: StrPath) -> None:
        name = Path(src).name
        if name == "t-0" or name.endswith("-future"):  # current away, future into place
            self.renames += 1
            if self.renames == self.n:
                raise Crash(f"crash before renaming {src} to {dst}")
        super().replace(src, dst)


@pytest.mark.parametrize(("n", "lands_in"), [(1, 0), (2, 1)])
def test_a_crash_during_the_swap_leaves_the_old_or_the_new_log(
    dirs: list[Path], n: int, lands_in: int
) -> None:
    """n=1: dies before the current dir is renamed away (the copy is discarded at start-up);
    n=2: between the two renames (the complete future log is renamed into place)."""
    io = CrashingRenames(n)
    m = LogManager(dirs, ManualClock(T0), io=io, flush_threads_max=1)
    plog = filled(m)
    plog.flush()
    m.write_checkpoints()  # what the periodic checkpoint had written before the crash
    expected = contents(plog)
    done = threading.Event()
    outcome: list[Any] = []
    original = m._move_step

    def step(move: Any, budget: int | None = None) -> None:
        try:
            original(move, budget)
        except Crash as e:
            outcome.append(e)
        finally:
            done.set()

    m._move_step = step  # type: ignore[method-assign]
    m.alter_log_dir("t", 0, str(dirs[1]))
    assert done.wait(10) and outcome, "the move did not reach the crash"
    for log in m.all_logs().values():
        log.abandon()  # the process is gone: nothing more is written

    again = LogManager(dirs, ManualClock(T0))
    restored = again.get("t", 0)
    assert restored is not None and again.log_dir_of("t", 0) == dirs[lands_in]
    assert contents(restored) == expected
    assert not any(p.name.endswith(("-future", "-delete")) for d in dirs for p in d.iterdir())
    assert not (dirs[1 - lands_in] / "t-0").exists()
    again.shutdown()


def test_the_move_rate_paces_the_copy(dirs: list[Path]) -> None:
    """replica.alter.log.dirs.io.max.bytes.per.second: each flush_due tick copies what the
    rate allows since the last step; no tick, no progress."""
    clock = ManualClock(T0)
    m = LogManager(dirs, clock, move_bytes_per_s=600)
    plog = filled(m)
    size, before = plog.size_bytes, contents(plog)
    m.alter_log_dir("t", 0, str(dirs[1]))
    move = m._moves[("t", 0)]
    ticks = 0
    lags = []
    while m.log_dir_of("t", 0) != dirs[1]:
        wait_until("the step", lambda: not move.in_flight)
        if m.log_dir_of("t", 0) == dirs[1]:
            break
        lags.append(m.future_logs()[("t", 0)][2])
        m.flush_due(clock.now_ms())  # no time passed: nothing more is copied
        assert not move.in_flight
        clock.advance(1000)
        m.flush_due(clock.now_ms())
        ticks += 1
        assert ticks < 50
    # ~600 bytes per second of a ~1.7 KB log: the copy took a few ticks, the lag shrank
    assert size // 600 - 1 <= ticks <= size // 600 + 2
    assert lags == sorted(lags, reverse=True) and lags[0] > 0
    moved = m.get("t", 0)
    assert moved is not None and contents(moved) == before
    m.shutdown()
