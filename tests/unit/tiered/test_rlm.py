"""The remote log manager's sans-I/O logic: scheduling, what to copy, what to delete."""

from __future__ import annotations

import random

import pytest

from riverbed.tiered.rlm import (
    LocalSegmentInfo,
    RlmScheduler,
    remote_segments_to_delete,
    segments_to_copy,
)
from riverbed.tiered.rsm import RemoteSegmentMetadata


def _sched(seed: int = 7) -> RlmScheduler:
    return RlmScheduler(
        task_interval_ms=1000,
        retry_backoff_ms=100,
        retry_backoff_max_ms=800,
        rng=random.Random(seed),
    )


def test_new_partitions_run_at_once_then_every_interval() -> None:
    s = _sched()
    s.assign("a", True, 0)
    s.assign("b", False, 0)
    tasks = s.due(0, limit=10)
    assert {(t.key, t.leader) for t in tasks} == {("a", True), ("b", False)}
    assert s.due(0, limit=10) == []  # never two tasks for one partition
    s.finished("a", True, 50)
    assert s.next_due_ms() == 1050
    assert s.due(1049, 10) == [] and [t.key for t in s.due(1050, 10)] == ["a"]


def test_limit_and_earliest_first() -> None:
    s = _sched()
    for i, key in enumerate("cab"):
        s.assign(key, True, i)
    assert [t.key for t in s.due(10, limit=2)] == ["c", "a"]


def test_failures_back_off_exponentially_with_bounded_jitter() -> None:
    s = _sched()
    s.assign("a", True, 0)
    now = 0
    waits = []
    for _ in range(6):
        (task,) = s.due(now, 1)
        s.finished(task.key, False, now)
        nxt = s.next_due_ms()
        assert nxt is not None
        waits.append(nxt - now)
        now = nxt
    for wait, base in zip(waits, (100, 200, 400, 800, 800, 800), strict=True):
        assert base <= wait <= base * 1.2
    s.due(now, 1)
    s.finished("a", True, now)
    assert s.failures("a") == 0 and s.next_due_ms() == now + 1000


def test_roll_makes_due_even_while_running_and_removal_waits_for_the_task() -> None:
    s = _sched()
    s.assign("a", True, 0)
    s.due(0, 1)
    s.finished("a", True, 0)
    s.notify_roll("a", 10)
    assert s.next_due_ms() == 10
    s.due(10, 1)
    s.notify_roll("a", 20)  # rolled while its task runs: due again right after
    s.finished("a", True, 30)
    assert s.next_due_ms() == 20
    s.due(30, 1)
    s.unassign("a")
    assert "a" not in s
    s.finished("a", True, 40)
    assert s.next_due_ms() is None and s.due(10**9, 5) == []


def test_leadership_change_reschedules() -> None:
    s = _sched()
    s.assign("a", False, 0)
    s.due(0, 1)
    s.finished("a", True, 0)
    s.assign("a", True, 5)
    assert s.is_leader("a") and s.next_due_ms() == 5


def test_segments_to_copy() -> None:
    segs = [
        LocalSegmentInfo(0, 100, 10),
        LocalSegmentInfo(100, 200, 10),
        LocalSegmentInfo(200, 300, 10),
        LocalSegmentInfo(300, 310, 10, active=True),
    ]
    assert [s.base_offset for s in segments_to_copy(segs, -1, 310)] == [0, 100, 200]
    assert [s.base_offset for s in segments_to_copy(segs, 99, 310)] == [100, 200]
    assert [s.base_offset for s in segments_to_copy(segs, 99, 250)] == [100]  # above the HW
    assert segments_to_copy(segs, 299, 310) == []  # never the active one


def _meta(base: int, end: int, size: int, ts: int) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(f"{base:020d}-x", base, end, ts, size, ((0, base),), 0, (".log",))


def test_remote_retention() -> None:
    remote = [_meta(0, 99, 100, 1000), _meta(100, 199, 100, 2000), _meta(200, 299, 100, 3000)]

    def doomed(**kw: int) -> list[int]:
        args = {
            "log_start_offset": 0,
            "retention_ms": -1,
            "retention_bytes": -1,
            "local_only_bytes": 0,
            "now_ms": 10_000,
        }
        args.update(kw)
        return [m.base_offset for m in remote_segments_to_delete(remote, **args)]

    assert doomed() == []
    assert doomed(log_start_offset=150) == [0]  # DeleteRecords: entirely below the start
    assert doomed(retention_ms=7500) == [0, 100]  # older than 7.5 s
    assert doomed(retention_bytes=200) == [0]
    assert doomed(retention_bytes=200, local_only_bytes=100) == [0, 100]
    assert doomed(retention_bytes=0) == [0, 100, 200]


@pytest.mark.parametrize("seed", range(20))
def test_scheduler_random_operations_keep_its_invariants(seed: int) -> None:
    """Seeded random assign/unassign/roll/due/finish; replay: pytest -k 'invariants and <seed>'."""
    rng = random.Random(seed)
    s = _sched(seed)
    keys = [f"p{i}" for i in range(6)]
    assigned: set[str] = set()
    running: set[str] = set()
    removed_while_running: set[str] = set()
    now = 0
    for step in range(400):
        now += rng.randrange(0, 300)
        op = rng.random()
        key = rng.choice(keys)
        where = f"seed {seed} step {step}"
        if op < 0.2:
            s.assign(key, rng.random() < 0.5, now)
            assigned.add(key)
            removed_while_running.discard(key)
        elif op < 0.3:
            s.unassign(key)
            assigned.discard(key)
            if key in running:
                removed_while_running.add(key)
        elif op < 0.4:
            s.notify_roll(key, now)
        elif op < 0.7:
            tasks = s.due(now, rng.randrange(0, 4))
            for t in tasks:
                assert t.key in assigned and t.key not in running, where  # one task per key
                running.add(t.key)
        elif running:
            done = rng.choice(sorted(running))
            running.discard(done)
            s.finished(done, rng.random() < 0.7, now)
            if done in removed_while_running:
                removed_while_running.discard(done)
                assert done not in s, where  # dropped after its running task
        due = s.next_due_ms()
        idle = assigned - running
        assert (due is None) == (not idle), where
        for k in keys:
            assert (k in s) == (k in assigned), where
