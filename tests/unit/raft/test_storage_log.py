"""StorageRaftLog: the raft log on riverbed.storage survives reopening with entries,
epochs, control records, truncations and the log begin offset intact."""

from __future__ import annotations

from pathlib import Path

from riverbed.raft.messages import Entry, EntryKind, OffsetAndEpoch
from riverbed.raft.role_transitions import leader_change_value
from riverbed.raft.storage_log import StorageRaftLog
from riverbed.storage.clock import ManualClock
from riverbed.storage.config import LogConfig
from riverbed.storage.log import PartitionLog
from riverbed.testing.raft_kv import KV


def open_log(path: Path, **kw: int) -> PartitionLog:
    return PartitionLog(path, "__cluster_metadata", 0, LogConfig(), ManualClock(0), **kw)


def entries(start: int, epoch: int, n: int) -> list[Entry]:
    return [Entry(start + i, epoch, f"set k{start + i} v".encode()) for i in range(n)]


def test_roundtrip_reopen_truncate_and_lbo(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    log = StorageRaftLog(open_log(d))
    lc = Entry(0, 1, leader_change_value(1, [1, 2, 3]), EntryKind.LEADER_CHANGE)
    log.append([lc, *entries(1, 1, 4)])
    log.append(entries(5, 2, 3))
    log.flush(8)
    assert log.flushed_end_offset == 8
    log.close()
    reopened = StorageRaftLog(open_log(d, recovery_point=8))
    assert reopened.end_offset == 8 and reopened.last_epoch == 2
    assert reopened.entry(0) == lc
    assert reopened.end_offset_for_epoch(1) == OffsetAndEpoch(5, 1)
    assert [e.value for e in reopened.read(5, 1 << 20)] == [e.value for e in entries(5, 2, 3)]
    reopened.truncate_to(6)
    reopened.append(entries(6, 3, 2))
    reopened.flush(8)
    reopened.delete_before(3, 1)
    assert reopened.start_offset == 3
    reopened.close()
    again = StorageRaftLog(open_log(d, recovery_point=8, log_start_offset=3), start_epoch=1)
    assert (again.start_offset, again.end_offset) == (3, 8)
    assert [e.epoch for e in again.read(3, 1 << 20)] == [1, 1, 2, 3, 3]
    assert again.epoch_at(2) == 1
    again.truncate_fully_and_start_at(20, 4)
    assert (again.start_offset, again.end_offset, again.last_epoch) == (20, 20, 4)
    again.close()


def test_single_voter_node_on_disk_commits_snapshots_and_restarts(tmp_path: Path) -> None:
    """A RaftNode driven like a shell would: real log files, quorum-state file and
    snapshot files; after a restart it loads the snapshot and replays the rest."""
    import random

    from riverbed.raft.actions import FlushLog, PersistQuorumState
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.node import RaftNode
    from riverbed.raft.quorum_state import read_quorum_state_file, write_quorum_state_file
    from riverbed.raft.roles import Role
    from riverbed.raft.snapshot_files import FileSnapshotStore
    from riverbed.raft.state_machine import run_state_machine_actions

    d = tmp_path / "__cluster_metadata-0"
    cfg = RaftConfig(voters=frozenset({1}), append_linger_ms=0, snapshot_minimum_records=10)

    def boot() -> tuple[RaftNode, KV]:
        snaps = FileSnapshotStore(d)
        snaps.remove_partial_files()
        latest = snaps.list()[-1] if snaps.list() else None
        plog = open_log(d, recovery_point=1 << 40)
        log = StorageRaftLog(plog, start_epoch=latest.epoch if latest else 0)
        return RaftNode(1, cfg, log, snaps, random.Random(0), read_quorum_state_file(d)), KV()

    def run(node: RaftNode, kv: KV, actions: list, now: int) -> None:
        for a in run_state_machine_actions(node, kv, actions, now):
            if isinstance(a, PersistQuorumState):
                write_quorum_state_file(d, a.state)
            elif isinstance(a, FlushLog):
                node.log.flush(a.end_offset)
                run(node, kv, node.on_log_flushed(a.end_offset, now), now)

    node, kv = boot()
    run(node, kv, node.start(0), 0)
    now = 0
    while node.role is not Role.LEADER:
        now = node.next_deadline_ms()
        run(node, kv, node.tick(now), now)
    for i in range(25):
        _, actions = node.append([f"set k{i % 7} v{i}".encode()], now)
        run(node, kv, actions, now)
        now += 10
        run(node, kv, node.tick(now), now)
    assert node.high_watermark == 26 and len(node.snapshots.list()) >= 1
    assert kv.position == 26
    expected = dict(kv.state)
    epoch = node.epoch
    node.log.close()  # type: ignore[attr-defined]
    assert read_quorum_state_file(d).leader_epoch == epoch  # type: ignore[union-attr]
    node, kv = boot()
    run(node, kv, node.start(now), now)
    assert node.applied_offset >= 20 and kv.position == node.applied_offset  # a snapshot
    while node.role is not Role.LEADER:
        now = node.next_deadline_ms()
        run(node, kv, node.tick(now), now)
    assert node.epoch == epoch + 1
    assert kv.state == expected  # snapshot + replay of the committed tail
    node.log.close()  # type: ignore[attr-defined]
