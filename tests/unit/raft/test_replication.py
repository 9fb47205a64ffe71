"""Fetch / FetchSnapshot / DescribeQuorum handlers, the high-watermark rule, KIP-630
snapshot triggers, log-begin-offset advancement and start-up validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riverbed.protocol.record_batch import iter_batches
from riverbed.raft.actions import (
    Action,
    CommitEntries,
    CompleteSnapshotDownload,
    CreateSnapshot,
    DeleteSnapshots,
    FlushLog,
    LoadSnapshot,
)
from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    SnapshotId,
    VoteResponse,
)
from riverbed.raft.node import NotLeaderError, RaftNode
from riverbed.raft.quorum_state import QuorumState
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_files import FileSnapshotStore
from riverbed.raft.snapshot_format import encode_snapshot
from riverbed.raft.snapshots import MemorySnapshotStore, finish_download
from riverbed.testing.raft_sim_helpers import (
    entries,
    fetch,
    fetch_reply,
    make_follower,
    make_leader,
    make_node,
    of_type,
    requests,
    responses,
)


def leader_with(values: int, **cfg: object) -> tuple[RaftNode, int]:
    node = make_node(append_linger_ms=0, **cfg)  # type: ignore[arg-type]
    now, _ = make_leader(node)
    if values:
        node.append([f"set k{i} v{i}".encode() for i in range(values)], now)
    node.log.flush(node.log.end_offset)
    node.on_log_flushed(node.log.end_offset, now)
    return node, now


def test_leader_serves_entries_and_parks_an_empty_fetch() -> None:
    node, now = leader_with(3)
    reply = responses(node.handle_request(2, 1, fetch(2, 0, 0, 1), now), FetchResponse)[0]
    assert [e.offset for e in reply.entries] == [0, 1, 2, 3]
    assert reply.error_code == Errors.NONE and reply.leader_id == 1
    # caught up, but this fetch moved the high watermark: answered at once with it
    advanced = node.handle_request(2, 5, fetch(2, 4, 1, 1, max_wait_ms=500), now)
    assert responses(advanced, FetchResponse)[0].high_watermark == 4
    # caught up with max wait: parked, answered when data arrives
    parked_now = node.handle_request(2, 2, fetch(2, 4, 1, 1, max_wait_ms=500), now)
    assert responses(parked_now, FetchResponse) == []
    _, actions = node.append([b"set x y"], now)
    parked = responses(actions, FetchResponse)
    assert [e.offset for e in parked[0].entries] == [4]
    # a replica not yet sent the current high watermark gets it at once
    first = node.handle_request(3, 4, fetch(3, 5, 1, 1, max_wait_ms=500), now)
    assert responses(first, FetchResponse)[0].high_watermark == node.high_watermark
    # or when the wait expires (empty)
    assert node.handle_request(3, 3, fetch(3, 5, 1, 1, max_wait_ms=500), now) == []
    expired = responses(node.tick(now + 500), FetchResponse)
    assert expired and expired[0].entries == ()


def test_high_watermark_needs_a_majority_and_the_epoch_start() -> None:
    node, now = leader_with(3)
    assert node.high_watermark == 0  # only the leader has the entries
    node.handle_request(2, 1, fetch(2, 1, 1, 1), now)
    # one follower at offset 1 = past the LeaderChange at 0: HW 1
    assert node.high_watermark == 1
    node.handle_request(2, 2, fetch(2, 4, 1, 1), now)
    assert node.high_watermark == 4
    # a follower going backwards (it truncated) never moves the HW back
    node.handle_request(2, 3, fetch(2, 2, 1, 1), now)
    assert node.high_watermark == 4


def test_high_watermark_does_not_count_old_epoch_entries_alone() -> None:
    log = MemoryLog()
    log.append(entries(0, 1, "set a 1", "set b 2"))
    log.flush(2)
    node = make_node(log=log, append_linger_ms=0)
    now, _ = make_leader(node)  # epoch 2; LeaderChange at offset 2
    assert node.leader_state.epoch_start_offset == 2  # type: ignore[union-attr]
    # a follower that has the two old-epoch entries but not the LeaderChange
    node.handle_request(2, 1, fetch(2, 2, 1, node.epoch), now)
    assert node.high_watermark == 0
    node.log.flush(3)
    node.on_log_flushed(3, now)
    node.handle_request(2, 2, fetch(2, 3, node.epoch, node.epoch), now)
    assert node.high_watermark == 3


def test_leader_hw_counts_only_its_flushed_entries() -> None:
    node = make_node(append_linger_ms=0)
    now, _ = make_leader(node)
    node.append([b"set a 1", b"set b 2"], now)
    node.handle_request(2, 1, fetch(2, 3, 1, 1), now)
    node.handle_request(3, 2, fetch(3, 3, 1, 1), now)
    assert node.high_watermark == 3  # two followers flushed 3 entries: a majority


def test_commits_are_delivered_in_order_exactly_once() -> None:
    node, now = leader_with(3)
    actions = node.handle_request(2, 1, fetch(2, 4, 1, 1), now)
    commits = of_type(actions, CommitEntries)
    assert [e.offset for c in commits for e in c.entries] == [0, 1, 2, 3]
    again = node.handle_request(2, 2, fetch(2, 4, 1, 1), now)
    assert of_type(again, CommitEntries) == []


def test_fetch_errors_not_leader_fenced_unknown_epoch() -> None:
    follower = make_node(2)
    make_follower(follower, 1, 1)
    reply = responses(follower.handle_request(3, 1, fetch(3, 0, 0, 1), 0), FetchResponse)[0]
    assert reply.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert (reply.leader_id, reply.leader_epoch) == (1, 1)
    node, now = leader_with(0)
    reply = responses(node.handle_request(2, 1, fetch(2, 0, 0, 0), now), FetchResponse)[0]
    assert reply.error_code == Errors.FENCED_LEADER_EPOCH
    reply = responses(node.handle_request(2, 2, fetch(2, 0, 0, 5), now), FetchResponse)[0]
    assert reply.error_code == Errors.UNKNOWN_LEADER_EPOCH
    bad = FetchRequest("test", 2, 1, -4, 0, 100)
    reply = responses(node.handle_request(2, 3, bad, now), FetchResponse)[0]
    assert reply.error_code == Errors.INVALID_REQUEST


def test_fetch_with_diverging_epoch_and_follower_truncates() -> None:
    log = MemoryLog()
    log.append(entries(0, 1, "set a 1", "set b 2"))
    log.flush(2)
    leader = make_node(log=log, append_linger_ms=0, quorum_state=QuorumState(1, -1, -1))
    now, _ = make_leader(leader)  # epoch 2 from offset 2
    assert leader.epoch == 2
    # the follower has offsets 0-3 from epoch 1 (2 and 3 never reached the new leader)
    reply = responses(leader.handle_request(2, 1, fetch(2, 4, 1, 2), now), FetchResponse)[0]
    assert reply.diverging_epoch == OffsetAndEpoch(2, 1)
    assert reply.entries == ()
    flog = MemoryLog()
    flog.append(entries(0, 1, "set a 1", "set b 2", "set c 3", "set d 4"))
    flog.flush(4)
    follower = make_node(2, log=flog)
    first = requests(make_follower(follower, 1, 2), FetchRequest)[0]
    assert first[1].fetch_offset == 4 and first[1].last_fetched_epoch == 1
    actions = follower.handle_response(1, first[0].correlation_id, reply, 1)
    assert follower.log.end_offset == 2
    # and then fetches from the truncation point
    nxt = requests(actions, FetchRequest)
    assert nxt and nxt[0][1].fetch_offset == 2 and nxt[0][1].last_fetched_epoch == 1
    reply = responses(leader.handle_request(2, 2, nxt[0][1], now), FetchResponse)[0]
    assert reply.diverging_epoch is None and [e.offset for e in reply.entries] == [2]


def test_follower_appends_flushes_then_fetches_and_follows_hw() -> None:
    node = make_node(2)
    actions = make_follower(node, 1, 1)
    first = requests(actions, FetchRequest)
    assert first and first[0][1].fetch_offset == 0 and first[0][0].dest == 1
    corr = first[0][0].correlation_id
    actions = node.handle_response(
        1, corr, fetch_reply(1, 1, 2, entries(0, 1, "set a 1", "set b 2", "set c 3")), 5
    )
    assert of_type(actions, FlushLog) == [FlushLog(3)]
    assert requests(actions, FetchRequest) == []  # not before the flush
    assert node.high_watermark == 2
    assert [e.offset for c in of_type(actions, CommitEntries) for e in c.entries] == [0, 1]
    node.log.flush(3)
    nxt = requests(node.on_log_flushed(3, 6), FetchRequest)
    assert nxt and nxt[0][1].fetch_offset == 3 and nxt[0][1].last_fetched_epoch == 1
    # a stale reply (for an older position) is ignored
    node.handle_response(1, nxt[0][0].correlation_id, fetch_reply(1, 1, 2, entries(1, 1, "x")), 7)
    assert node.log.end_offset == 3


def test_fetch_below_log_begin_offset_answers_with_the_snapshot_id() -> None:
    node, now = leader_with(0)
    sid = SnapshotId(5, 1)
    node.snapshots.write(sid, b"snapshot-bytes")
    node.log.append(entries(1, 1, "set a 1", "set b 2", "set c 3", "set d 4"))
    node.log.flush(5)
    node.high_watermark = node.applied_offset = 5
    node.on_snapshot_written(sid, now)
    node._set_log_start(sid)
    assert node.log.start_offset == 5
    reply = responses(node.handle_request(2, 1, fetch(2, 2, 1, 1), now), FetchResponse)[0]
    assert reply.snapshot_id == sid and reply.entries == ()
    assert reply.log_start_offset == 5
    # at the snapshot boundary with the snapshot's epoch: served from the log
    reply = responses(node.handle_request(2, 2, fetch(2, 5, 1, 1), now), FetchResponse)[0]
    assert reply.snapshot_id is None


def test_fetch_snapshot_handler_and_errors() -> None:
    node, now = leader_with(0)
    sid = SnapshotId(7, 1)
    node.snapshots.write(sid, bytes(range(100)))

    def ask(pos: int, snap: SnapshotId = sid, epoch: int = 1, max_bytes: int = 30):
        req = FetchSnapshotRequest("test", 2, epoch, snap, pos, max_bytes)
        return responses(node.handle_request(2, 1, req, now), FetchSnapshotResponse)[0]

    r = ask(0)
    assert (r.error_code, r.size, r.position, r.data) == (0, 100, 0, bytes(range(30)))
    r = ask(90)
    assert r.data == bytes(range(90, 100))
    assert ask(100).data == b""
    assert ask(101).error_code == Errors.POSITION_OUT_OF_RANGE
    assert ask(-1).error_code == Errors.POSITION_OUT_OF_RANGE
    assert ask(0, SnapshotId(8, 1)).error_code == Errors.SNAPSHOT_NOT_FOUND
    assert ask(0, epoch=0).error_code == Errors.FENCED_LEADER_EPOCH
    follower = make_node(2)
    make_follower(follower, 1, 1)
    req = FetchSnapshotRequest("test", 3, 1, sid, 0, 10)
    r = responses(follower.handle_request(3, 1, req, 0), FetchSnapshotResponse)[0]
    assert r.error_code == Errors.NOT_LEADER_OR_FOLLOWER


def download_setup(
    snapshots: FileSnapshotStore | None = None,
) -> tuple[RaftNode, SnapshotId, int]:
    node = make_node(2, snapshots=snapshots, fetch_snapshot_bytes_max=40)  # type: ignore[arg-type]
    node.log.append(entries(0, 1, "set old 1"))
    node.log.flush(1)
    actions = make_follower(node, 1, 1)
    corr = requests(actions, FetchRequest)[0][0].correlation_id
    sid = SnapshotId(50, 1)
    reply = FetchResponse(0, 1, 1, high_watermark=60, log_start_offset=50, snapshot_id=sid)
    actions = node.handle_response(1, corr, reply, 1)
    snap_reqs = requests(actions, FetchSnapshotRequest)
    assert snap_reqs and snap_reqs[0][1].snapshot_id == sid and snap_reqs[0][1].position == 0
    return node, sid, snap_reqs[0][0].correlation_id


def feed_snapshot(
    node: RaftNode, sid: SnapshotId, corr: int, data: bytes, now: int = 2
) -> tuple[list[LoadSnapshot], list[Action]]:
    """Answer the node's FetchSnapshot requests with ``data`` in 40-byte chunks; returns
    the loads and the actions after the last chunk."""
    pos = 0
    while True:
        chunk = data[pos : pos + 40]
        reply = FetchSnapshotResponse(0, 1, 1, sid, size=len(data), position=pos, data=chunk)
        actions = node.handle_response(1, corr, reply, now)
        pos += len(chunk)
        if pos >= len(data):
            # the shell validates and completes the file, then reports back
            (done,) = of_type(actions, CompleteSnapshotDownload)
            problem = finish_download(node.snapshots, done.snapshot_id)
            actions = node.on_snapshot_downloaded(done.snapshot_id, problem, now)
            return of_type(actions, LoadSnapshot), actions
        nxt = requests(actions, FetchSnapshotRequest)
        assert nxt[0][1].position == pos  # continuation from Position + len(Bytes)
        corr = nxt[0][0].correlation_id
        assert node.log.end_offset == 1  # the old log stays until the snapshot is complete


def test_follower_downloads_snapshot_in_chunks_then_truncates_fully_and_loads() -> None:
    node, sid, corr = download_setup()
    data = encode_snapshot(sid, [f"k{i}={i}".encode() for i in range(5)])
    assert len(data) > 100
    loads, actions = feed_snapshot(node, sid, corr, data)
    assert loads == [LoadSnapshot(sid)]
    assert node.snapshots.get(sid) == data  # type: ignore[attr-defined]
    assert (node.log.start_offset, node.log.end_offset, node.log.start_epoch) == (50, 50, 1)
    assert node.applied_offset == 50 and node.high_watermark >= 50
    # then it fetches the log after the snapshot
    nxt = requests(actions, FetchRequest)
    assert nxt and nxt[0][1].fetch_offset == 50 and nxt[0][1].last_fetched_epoch == 1


def _corruptions(sid: SnapshotId) -> dict[str, bytes]:
    good = encode_snapshot(sid, [f"k{i}={i}".encode() for i in range(5)])
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    last_batch = [pos for pos, _ in iter_batches(good)][-1]
    return {
        "crc": bytes(flipped),
        "truncated": good[:-5],
        "no footer": good[:last_batch],
        "other epoch": encode_snapshot(SnapshotId(sid.end_offset, sid.epoch + 1), [b"k=v"]),
        "not a snapshot": bytes(range(100)),
    }


@pytest.mark.parametrize("store", ["memory", "files"])
@pytest.mark.parametrize("kind", ["crc", "truncated", "no footer", "other epoch", "not a snapshot"])
def test_corrupt_snapshot_download_is_discarded_and_fetched_again(
    kind: str, store: str, tmp_path: Path
) -> None:
    snapshots = FileSnapshotStore(tmp_path) if store == "files" else None
    node, sid, corr = download_setup(snapshots)
    bad = _corruptions(sid)[kind]
    assert feed_snapshot(node, sid, corr, bad)[0] == []  # never loaded
    # it never replaced the log, and the partial download is gone
    assert (node.log.start_offset, node.log.end_offset, node.applied_offset) == (0, 1, 0)
    assert sid not in node.snapshots.list() and node.snapshot_download is None
    assert node.rejected_inputs == 1
    if snapshots is not None:
        assert os.listdir(tmp_path) == []
    # after the error backoff: a Fetch, which names the snapshot again; the download
    # restarts from position 0 and a good copy is loaded
    fetches = requests(node.tick(2 + 50), FetchRequest)
    assert fetches and fetches[0][1].fetch_offset == 1
    reply = FetchResponse(0, 1, 1, high_watermark=60, log_start_offset=50, snapshot_id=sid)
    actions = node.handle_response(1, fetches[0][0].correlation_id, reply, 60)
    again = requests(actions, FetchSnapshotRequest)
    assert again and again[0][1].position == 0
    good = encode_snapshot(sid, [b"k=v"])
    loads, _ = feed_snapshot(node, sid, again[0][0].correlation_id, good, 61)
    assert loads == [LoadSnapshot(sid)]
    assert node.snapshots.list() == [sid] and node.log.start_offset == 50


def test_snapshot_download_errors_rediscover_with_a_new_fetch() -> None:
    for code in (
        Errors.SNAPSHOT_NOT_FOUND,
        Errors.POSITION_OUT_OF_RANGE,
        Errors.NOT_LEADER_OR_FOLLOWER,
    ):
        node, sid, corr = download_setup()
        reply = FetchSnapshotResponse(code, 1, 1, sid)
        actions = node.handle_response(1, corr, reply, 2)
        assert node.snapshot_download is None
        assert sid not in node.snapshots.list()
        assert requests(actions, FetchSnapshotRequest) == []
        actions = node.tick(2 + 50)  # after the error backoff: Fetch, not FetchSnapshot
        fetches = requests(actions, FetchRequest)
        assert fetches and fetches[0][1].fetch_offset == 1
        assert node.log.end_offset == 1  # nothing was truncated


def test_snapshot_is_requested_after_minimum_records() -> None:
    node = make_node(append_linger_ms=0, snapshot_minimum_records=5)
    now, _ = make_leader(node)
    node.append([f"set k{i} {i}".encode() for i in range(3)], now)
    actions = node.handle_request(2, 1, fetch(2, 4, 1, 1), now)
    assert of_type(actions, CreateSnapshot) == []  # 4 records committed
    node.append([b"set a b"], now)
    node.log.flush(5)
    node.on_log_flushed(5, now)
    actions = node.handle_request(2, 2, fetch(2, 5, 1, 1), now)
    creates = of_type(actions, CreateSnapshot)
    assert creates == [CreateSnapshot(SnapshotId(5, 1))]
    kinds = [type(a).__name__ for a in actions]
    assert kinds.index("CommitEntries") < kinds.index("CreateSnapshot")
    # only one at a time
    node.append([b"set c d"] * 6, now)
    node.log.flush(11)
    node.on_log_flushed(11, now)
    assert of_type(node.handle_request(2, 3, fetch(2, 11, 1, 1), now), CreateSnapshot) == []


def test_log_begin_offset_waits_for_live_replicas_or_max_replication_lag() -> None:
    node = make_node(append_linger_ms=0, snapshot_minimum_records=5, max_replication_lag_ms=5000)
    now, _ = make_leader(node)
    node.append([f"set k{i} {i}".encode() for i in range(9)], now)
    node.log.flush(10)
    node.on_log_flushed(10, now)
    node.handle_request(2, 1, fetch(2, 10, 1, 1), now)  # 2 is caught up
    node.handle_request(3, 2, fetch(3, 1, 1, 1), now)  # 3 is alive but behind
    sid = SnapshotId(10, 1)
    node.snapshots.write(sid, b"x")
    node.on_snapshot_written(sid, now)
    node.tick(now + 10)
    assert node.log.start_offset == 0  # 3 still needs offsets below 10
    node.handle_request(3, 3, fetch(3, 10, 1, 1), now + 20)
    node.tick(now + 30)
    assert node.log.start_offset == 10
    # the LBO - 1 snapshot is kept; a fetch below it gets the snapshot id
    assert node.snapshots.list() == [sid]


def test_log_begin_offset_advances_past_a_lagging_replica_after_max_lag() -> None:
    node = make_node(append_linger_ms=0, max_replication_lag_ms=1000, fetch_timeout_ms=5000)
    now, _ = make_leader(node)
    node.append([b"set a 1"] * 4, now)
    node.log.flush(5)
    node.on_log_flushed(5, now)
    node.handle_request(2, 1, fetch(2, 5, 1, 1), now)
    node.handle_request(3, 2, fetch(3, 0, 0, 1), now)
    sid = SnapshotId(5, 1)
    node.snapshots.write(sid, b"x")
    node.on_snapshot_written(sid, now)
    node.handle_request(3, 3, fetch(3, 0, 0, 1), now + 999)
    node.tick(now + 999)
    assert node.log.start_offset == 0
    node.handle_request(3, 4, fetch(3, 0, 0, 1), now + 1000)
    node.tick(now + 1000)
    assert node.log.start_offset == 5


def test_old_snapshots_are_deleted_keeping_the_one_at_lbo() -> None:
    snaps = MemorySnapshotStore()
    for end in (3, 6, 9):
        snaps.write(SnapshotId(end, 1), b"s")
    log = MemoryLog()
    log.append(entries(0, 1, *[f"set k {i}" for i in range(12)]))
    log.flush(12)
    node = make_node(log=log, snapshots=snaps)
    node.start(0)
    now, _ = make_leader(node)
    node._set_log_start(SnapshotId(9, 1))
    assert node.log.start_offset == 9
    # unlinking is the shell's disk work; the node serves the doomed ones no more
    (delete,) = of_type(node._drain(), DeleteSnapshots)
    assert delete.snapshot_ids == (SnapshotId(3, 1), SnapshotId(6, 1))
    req = FetchSnapshotRequest(
        cluster_id=node.config.cluster_id,
        replica_id=2,
        current_leader_epoch=node.epoch,
        snapshot_id=SnapshotId(6, 1),
        position=0,
        max_bytes=100,
    )
    (reply,) = responses(node.handle_request(2, 1, req, now), FetchSnapshotResponse)
    assert reply.error_code == Errors.SNAPSHOT_NOT_FOUND
    for sid in delete.snapshot_ids:
        snaps.delete(sid)
    assert snaps.list() == [SnapshotId(9, 1)]


def test_startup_loads_latest_snapshot_and_removes_ones_below_lbo() -> None:
    snaps = MemorySnapshotStore()
    snaps.write(SnapshotId(2, 1), b"a")
    snaps.write(SnapshotId(6, 1), b"b")
    log = MemoryLog()
    log.append(entries(0, 1, *[f"set k {i}" for i in range(8)]))
    log.flush(8)
    log.delete_before(6, 1)
    node = make_node(log=log, snapshots=snaps)
    actions = node.start(0)
    assert of_type(actions, LoadSnapshot) == [LoadSnapshot(SnapshotId(6, 1))]
    assert snaps.list() == [SnapshotId(6, 1)]
    assert node.applied_offset == 6 and node.high_watermark == 6


def test_startup_without_snapshot_covering_lbo_treats_log_as_empty() -> None:
    log = MemoryLog(start_offset=10, start_epoch=2)
    log.append(entries(10, 2, "set a 1"))
    log.flush(11)
    node = make_node(log=log)
    node.start(0)
    assert (node.log.start_offset, node.log.end_offset) == (0, 0)
    assert node.applied_offset == 0


def test_startup_snapshot_beyond_the_log_restarts_log_at_snapshot() -> None:
    snaps = MemorySnapshotStore()
    sid = SnapshotId(20, 3)
    snaps.write(sid, b"s")
    log = MemoryLog()
    log.append(entries(0, 1, "set a 1"))
    log.flush(1)
    node = make_node(log=log, snapshots=snaps)
    actions = node.start(0)
    assert (node.log.start_offset, node.log.end_offset, node.log.last_epoch) == (20, 20, 3)
    assert of_type(actions, LoadSnapshot) == [LoadSnapshot(sid)]


def test_append_only_on_the_leader_and_bounded() -> None:
    import pytest

    from riverbed.raft.node import AppendQueueFullError

    node = make_node(2)
    make_follower(node, 1, 1)
    with pytest.raises(NotLeaderError) as info:
        node.append([b"x"], 0)
    assert info.value.leader_id == 1
    leader = make_node(append_queue_records_max=3, append_linger_ms=25)
    now, _ = make_leader(leader)
    last, _ = leader.append([b"set a 1", b"set b 2"], now)
    assert last == 2  # after the LeaderChange at 0
    with pytest.raises(AppendQueueFullError) as full:
        leader.append([b"set c 3", b"set d 4"], now)
    assert not full.value.alone_too_large  # behind the waiting batch: retriable
    with pytest.raises(AppendQueueFullError) as alone:
        leader.append([b"a", b"b", b"c", b"d"], now)
    assert alone.value.alone_too_large  # over the limit by itself: never fits
    with pytest.raises(ValueError, match="at least one"):
        leader.append([], now)
    assert leader.log.end_offset == 1  # lingering
    leader.tick(now + 25)
    assert leader.log.end_offset == 3


def test_describe_quorum() -> None:
    node, now = leader_with(2)
    node.handle_request(2, 1, fetch(2, 3, 1, 1), now + 5)
    node.handle_request(7, 2, fetch(7, 1, 1, 1), now + 6)
    reply = responses(
        node.handle_request(9, 3, DescribeQuorumRequest(), now + 7), DescribeQuorumResponse
    )[0]
    assert reply.error_code == 0 and reply.leader_id == 1 and reply.leader_epoch == 1
    assert reply.high_watermark == 3
    voters = {r.replica_id: r for r in reply.current_voters}
    assert voters[1].log_end_offset == 3 and voters[2].log_end_offset == 3
    assert voters[3].log_end_offset == -1
    assert [o.replica_id for o in reply.observers] == [7]
    follower = make_node(2)
    make_follower(follower, 1, 1)
    r = responses(follower.handle_request(9, 1, DescribeQuorumRequest(), 0), DescribeQuorumResponse)
    assert r[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER and r[0].leader_id == 1
    assert follower.role is Role.FOLLOWER


def test_follower_ignores_corrupt_or_mismatched_replies() -> None:
    node = make_node(2)
    actions = make_follower(node, 1, 2)
    corr = requests(actions, FetchRequest)[0][0].correlation_id
    # an entry from an epoch beyond the leader's: not appended, no crash
    bad = fetch_reply(1, 2, 0, entries(0, 3, "set a 1"))
    node.handle_response(1, corr, bad, 1)
    assert node.log.end_offset == 0
    actions = node.tick(1 + 50)
    corr = requests(actions, FetchRequest)[0][0].correlation_id
    # gaps in offsets
    gap = fetch_reply(1, 2, 0, entries(0, 1, "set a 1") + entries(5, 1, "set b 2"))
    node.handle_response(1, corr, gap, 60)
    assert node.log.end_offset == 0
    # a reply of the wrong type for the request
    actions = node.tick(200)
    corr = requests(actions, FetchRequest)[0][0].correlation_id
    from riverbed.raft.messages import VoteResponse

    assert node.handle_response(1, corr, VoteResponse(0, 1, 2, True), 201) == []
    assert node.role is Role.FOLLOWER
    # a fetch that claims to be from the leader itself
    leader, now = leader_with(0)
    reply = responses(leader.handle_request(1, 1, fetch(1, 0, 0, 1), now), FetchResponse)[0]
    assert reply.error_code == Errors.INVALID_REQUEST


def append_flushed(node: RaftNode, values: list[bytes], now: int) -> None:
    node.append(values, now)
    node.log.flush(node.log.end_offset)
    node.on_log_flushed(node.log.end_offset, now)


def test_snapshot_by_bytes_and_by_interval() -> None:
    by_bytes = make_node(append_linger_ms=0, snapshot_max_bytes_between=1000)
    now, _ = make_leader(by_bytes)
    append_flushed(by_bytes, [b"set k " + b"x" * 300] * 2, now)
    assert of_type(by_bytes.handle_request(2, 1, fetch(2, 3, 1, 1), now), CreateSnapshot) == []
    assert by_bytes.high_watermark == 3
    append_flushed(by_bytes, [b"set k " + b"x" * 300] * 2, now)
    creates = of_type(by_bytes.handle_request(2, 2, fetch(2, 5, 1, 1), now), CreateSnapshot)
    assert creates == [CreateSnapshot(SnapshotId(5, 1))]
    by_time = make_node(append_linger_ms=0, snapshot_max_interval_ms=10_000)
    now, _ = make_leader(by_time)
    append_flushed(by_time, [b"set a 1"], now)
    assert of_type(by_time.handle_request(2, 1, fetch(2, 2, 1, 1), now), CreateSnapshot) == []
    assert by_time.high_watermark == 2
    creates = of_type(by_time.tick(now + 10_000), CreateSnapshot)
    assert creates == [CreateSnapshot(SnapshotId(2, 1))]


def test_failed_snapshot_write_lets_the_next_trigger_retry() -> None:
    node = make_node(append_linger_ms=0, snapshot_minimum_records=3)
    now, _ = make_leader(node)
    append_flushed(node, [b"set a 1", b"set b 2"], now)
    creates = of_type(node.handle_request(2, 1, fetch(2, 3, 1, 1), now), CreateSnapshot)
    assert creates == [CreateSnapshot(SnapshotId(3, 1))]
    # while it is in progress no second one is asked for
    assert of_type(node.tick(now + 1), CreateSnapshot) == []
    node.on_snapshot_failed(SnapshotId(3, 1), now)
    assert of_type(node.tick(now + 2), CreateSnapshot) == [CreateSnapshot(SnapshotId(3, 1))]


def test_startup_log_disagreeing_with_the_snapshot_restarts_at_the_snapshot() -> None:
    # a crash after a downloaded snapshot was renamed but before the log was truncated:
    # the old log has offset 4 from epoch 1 while the snapshot says epoch 2
    snaps = MemorySnapshotStore()
    sid = SnapshotId(5, 2)
    snaps.write(sid, b"s")
    log = MemoryLog()
    log.append(entries(0, 1, *[f"set k {i}" for i in range(8)]))
    log.flush(8)
    node = make_node(log=log, snapshots=snaps)
    node.start(0)
    assert (node.log.start_offset, node.log.end_offset, node.log.last_epoch) == (5, 5, 2)
    # when they agree, the log is kept
    snaps2 = MemorySnapshotStore()
    snaps2.write(SnapshotId(5, 1), b"s")
    log2 = MemoryLog()
    log2.append(entries(0, 1, *[f"set k {i}" for i in range(8)]))
    log2.flush(8)
    node2 = make_node(log=log2, snapshots=snaps2)
    node2.start(0)
    assert (node2.log.start_offset, node2.log.end_offset) == (0, 8)


def test_reply_to_an_older_fetch_is_ignored() -> None:
    # found by the soak (seed 25598): a DivergingEpoch computed for an old fetch position,
    # arriving after a newer fetch appended entries the leader then counted as flushed
    log = MemoryLog()
    log.append(entries(0, 1, "set a 1", "set b 2", "set c 3", "set d 4"))
    log.flush(4)
    node = make_node(2, log=log, request_timeout_ms=5000, fetch_timeout_ms=1000)
    old = requests(make_follower(node, 1, 2), FetchRequest)[0][0]
    # fetch timeout -> Prospective; the pre-vote is lost -> back to following 1, which
    # sends a new fetch while the old one is still outstanding
    node.tick(1000)
    assert node.role is Role.PROSPECTIVE
    for corr, (dest, kind, _, _) in list(node.pending.items()):
        if kind == "pre_vote":
            node.handle_response(dest, corr, VoteResponse(0, 1, 2, False), 1001)
    assert node.role is Role.FOLLOWER
    new = [
        corr
        for corr, (_, kind, _, _) in node.pending.items()
        if kind == "fetch" and corr != old.correlation_id
    ]
    assert len(new) == 1 and old.correlation_id in node.pending
    node.handle_response(1, new[0], fetch_reply(1, 2, 0, entries(4, 2, "set e 5")), 1002)
    assert node.log.end_offset == 5
    stale = FetchResponse(0, 1, 2, 0, 0, diverging_epoch=OffsetAndEpoch(2, 1))
    assert node.handle_response(1, old.correlation_id, stale, 1003) == []
    assert node.log.end_offset == 5  # not truncated


def test_acks_from_a_reformatted_voter_do_not_count() -> None:
    # found by the soak (seed 103126): a stale leader of an old epoch committed with the
    # acks of a voter whose disk had been wiped (it had acked the newer epoch before)
    dirs = {1: "d1", 2: "d2", 3: "d3"}
    node = make_node(append_linger_ms=0, voter_directory_ids=dirs, directory_id="d1")
    now, _ = make_leader(node)
    append_flushed(node, [b"set a 1"], now)
    wiped = FetchRequest("test", 2, 1, 2, 1, 1 << 20, 0, replica_directory_id="d2-new")
    reply = responses(node.handle_request(2, 1, wiped, now), FetchResponse)[0]
    assert reply.error_code == 0  # it is served...
    assert node.high_watermark == 0  # ...but its ack is not a vote for the majority
    ok = FetchRequest("test", 3, 1, 2, 1, 1 << 20, 0, replica_directory_id="d3")
    node.handle_request(3, 2, ok, now)
    assert node.high_watermark == 2


def test_last_snapshot_chunk_hands_completion_to_the_shell() -> None:
    # validating, fsyncing and renaming a downloaded snapshot is disk work: the core asks
    # the shell for it (off the event loop and the driver's lock) and replaces the log
    # only when the shell reports back; meanwhile it sends no fetch
    node, sid, corr = download_setup()
    data = encode_snapshot(sid, [f"k{i}={i}".encode() for i in range(5)])
    pos = 0
    while pos + 40 < len(data):
        reply = FetchSnapshotResponse(
            0, 1, 1, sid, size=len(data), position=pos, data=data[pos : pos + 40]
        )
        corr = requests(node.handle_response(1, corr, reply, 2), FetchSnapshotRequest)[0][
            0
        ].correlation_id
        pos += 40
    last = FetchSnapshotResponse(0, 1, 1, sid, size=len(data), position=pos, data=data[pos:])
    actions = node.handle_response(1, corr, last, 3)
    assert of_type(actions, CompleteSnapshotDownload) == [CompleteSnapshotDownload(sid)]
    assert not of_type(actions, LoadSnapshot) and sid not in node.snapshots.list()
    assert node.log.end_offset == 1  # the old log stays until the shell reports back
    assert not requests(node.tick(4), FetchRequest) + requests(node.tick(4), FetchSnapshotRequest)
    assert finish_download(node.snapshots, sid) is None
    done = node.on_snapshot_downloaded(sid, None, 5)
    assert of_type(done, LoadSnapshot) == [LoadSnapshot(sid)]
    assert node.snapshots.list() == [sid] and node.log.start_offset == 50
