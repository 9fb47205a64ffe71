"""One append = one record batch: fetch, the high watermark, commit delivery, truncation,
flushes and snapshots never split an operation (issue 11, "Metadata operations are
atomic"; Kafka's KRaft does the same with its record batches)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from riverbed.protocol.record_batch import iter_batches
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.raft.actions import CommitEntries, CreateSnapshot
from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import (
    Entry,
    EntryKind,
    FetchRequest,
    FetchResponse,
    OffsetAndEpoch,
)
from riverbed.raft.node import RaftNode
from riverbed.raft.storage_log import StorageRaftLog
from riverbed.raft.wire import entries_to_records, records_to_entries
from riverbed.storage.clock import ManualClock
from riverbed.storage.config import LogConfig
from riverbed.storage.log import PartitionLog
from riverbed.testing.raft_sim_helpers import (
    fetch,
    fetch_reply,
    make_follower,
    make_leader,
    make_node,
    of_type,
    responses,
)

OP = [b"set t topic", b"set t-0 p0", b"set t-1 p1"]  # a topic with two partitions


def batch(start: int, epoch: int, *values: bytes) -> list[Entry]:
    last = len(values) - 1
    return [Entry(start + i, epoch, v, batch_end=i == last) for i, v in enumerate(values)]


def leader_with_op(**cfg: object) -> tuple[RaftNode, int]:
    """Leader of epoch 1: LeaderChange at 0, then the operation OP at 1..3, all flushed."""
    node = make_node(append_linger_ms=0, **cfg)  # type: ignore[arg-type]
    now, _ = make_leader(node)
    last, _ = node.append(list(OP), now)
    assert last == 3
    node.log.flush(node.log.end_offset)
    node.on_log_flushed(node.log.end_offset, now)
    return node, now


def test_one_append_is_one_batch_and_the_leader_change_its_own() -> None:
    node, _ = leader_with_op()
    assert [(e.offset, e.kind, e.batch_end) for e in node.log.read(0, 1 << 20)] == [
        (0, EntryKind.LEADER_CHANGE, True),
        (1, EntryKind.DATA, False),
        (2, EntryKind.DATA, False),
        (3, EntryKind.DATA, True),
    ]


def test_appends_in_one_linger_stay_separate_batches() -> None:
    node = make_node(append_linger_ms=20)
    now, _ = make_leader(node)
    node.append([b"set a 1", b"set b 2"], now)
    node.append([b"set c 3"], now)
    node.tick(now + 20)
    assert [e.batch_end for e in node.log.read(1, 1 << 20)] == [False, True, True]


def test_fetch_smaller_than_a_batch_returns_the_whole_first_batch() -> None:
    node, now = leader_with_op()
    # the budget fits the LeaderChange batch only: the operation waits for the next fetch
    reply = responses(node.handle_request(2, 1, fetch_with_budget(0, 0, 1), now), FetchResponse)[0]
    assert [e.offset for e in reply.entries] == [0]
    # a budget of 1 byte still gets the operation's batch whole (Kafka: the first batch is
    # returned even when it is larger than the fetch's max bytes)
    reply = responses(node.handle_request(2, 2, fetch_with_budget(1, 1, 1), now), FetchResponse)[0]
    assert [e.offset for e in reply.entries] == [1, 2, 3]
    assert reply.entries[-1].batch_end


def fetch_with_budget(offset: int, last_epoch: int, max_bytes: int) -> FetchRequest:
    return replace(fetch(2, offset, last_epoch, 1), max_bytes=max_bytes)


def test_small_fetch_budget_never_leaves_the_high_watermark_inside_an_operation() -> None:
    node, now = leader_with_op()
    seen_hw = {node.high_watermark}
    offset, last_epoch = 0, 0
    for corr in range(1, 6):  # follower 2 fetches with a tiny budget until caught up
        actions = node.handle_request(2, corr, fetch_with_budget(offset, last_epoch, 30), now)
        seen_hw.add(node.high_watermark)
        got = [r for r in responses(actions, FetchResponse) if r.entries]
        if got:
            offset, last_epoch = got[0].entries[-1].offset + 1, got[0].entries[-1].epoch
    assert node.high_watermark == 4
    assert seen_hw <= {0, 1, 4}  # batch boundaries only


def test_leader_high_watermark_is_aligned_to_a_batch_boundary() -> None:
    node, now = leader_with_op()
    # a voter that reports an offset inside the operation (e.g. it had flushed part of
    # the batch) must not commit the operation's first records
    actions = node.handle_request(2, 1, fetch(2, 2, 1, 1), now)
    assert node.high_watermark == 1
    assert [e.offset for c in of_type(actions, CommitEntries) for e in c.entries] == [0]


def test_follower_delivers_commits_in_whole_batches() -> None:
    node = make_node(2)
    make_follower(node, 1, 1)
    ents = [Entry(0, 1, b"lc", EntryKind.LEADER_CHANGE), *batch(1, 1, *OP)]
    # the leader's high watermark said 2 (inside the operation, e.g. an older leader's
    # rule): the follower commits up to the batch boundary below it only
    actions = node.handle_response(1, node.fetch_correlation_id, fetch_reply(1, 1, 2, ents), 0)
    assert [e.offset for c in of_type(actions, CommitEntries) for e in c.entries] == [0]
    assert node.high_watermark == 1
    node.log.flush(4)
    node.on_log_flushed(4, 0)
    actions = node.handle_response(1, node.fetch_correlation_id, fetch_reply(1, 1, 4, []), 1)
    commits = of_type(actions, CommitEntries)
    assert [[e.offset for e in c.entries] for c in commits] == [[1, 2, 3]]


def test_follower_rejects_a_fetch_reply_that_ends_inside_a_batch() -> None:
    node = make_node(2)
    make_follower(node, 1, 1)
    half = batch(0, 1, *OP)[:2]
    node.handle_response(1, node.fetch_correlation_id, fetch_reply(1, 1, 0, half), 0)
    assert node.log.end_offset == 0


def test_truncation_removes_the_whole_batch_holding_the_offset() -> None:
    log = MemoryLog()
    log.append(batch(0, 1, b"a"))
    log.append(batch(1, 1, *OP))
    log.truncate_to(2)  # inside the operation at 1..3: it goes entirely
    assert log.end_offset == 1
    assert log.batch_start(3) == 1 and log.batch_start(1) == 1 and log.batch_start(9) == 1


def test_diverging_epoch_inside_a_batch_truncates_the_whole_batch() -> None:
    log = MemoryLog()
    log.append([Entry(0, 1, b"lc", EntryKind.LEADER_CHANGE)])
    log.append(batch(1, 1, *OP))
    log.flush(4)
    node = make_node(2, log=log)
    make_follower(node, 1, 2)
    reply = FetchResponse(0, 1, 2, 1, 0, diverging_epoch=OffsetAndEpoch(2, 1))
    node.handle_response(1, node.fetch_correlation_id, reply, 0)
    assert node.log.end_offset == 1


def test_a_crash_keeps_whole_batches_only() -> None:
    log = MemoryLog()
    log.append(batch(0, 1, *OP))
    log.flush(2)  # an fsync that covered part of the batch vouches for none of it
    assert log.flushed_end_offset == 0
    assert log.durable_copy().end_offset == 0


def test_snapshots_end_on_batch_boundaries() -> None:
    node, now = leader_with_op(snapshot_minimum_records=2)
    node.handle_request(2, 1, fetch(2, 2, 1, 1), now)  # inside the operation
    actions = node.handle_request(3, 2, fetch(3, 2, 1, 1), now)
    assert all(a.snapshot_id.end_offset in (1, 4) for a in of_type(actions, CreateSnapshot))
    actions = node.handle_request(2, 3, fetch(2, 4, 1, 1), now)
    assert [a.snapshot_id.end_offset for a in of_type(actions, CreateSnapshot)] == [4]


def test_wire_writes_one_record_batch_per_operation() -> None:
    ents = [Entry(0, 1, b"lc", EntryKind.LEADER_CHANGE), *batch(1, 1, *OP), *batch(4, 1, b"x")]
    data = entries_to_records(ents)
    assert [(h.base_offset, h.last_offset_delta) for _, h in iter_batches(data)] == [
        (0, 0),
        (1, 2),
        (4, 0),
    ]
    assert records_to_entries(data) == tuple(ents)


def test_a_log_written_before_batches_were_operations_still_decodes(tmp_path: Path) -> None:
    # the old writer put every run of one epoch (several appends) into one record batch,
    # and each LeaderChange into a control batch: each record batch loads as one batch
    old = entries_to_records([Entry(0, 1, b"lc", EntryKind.LEADER_CHANGE)]) + build_batch(
        [SimpleRecord(v) for v in [b"set a 1", b"set b 2", b"set c 3"]],
        base_offset=1,
        partition_leader_epoch=1,
    )
    plog = PartitionLog(tmp_path / "m", "__cluster_metadata", 0, LogConfig(), ManualClock(0))
    plog.append_as_follower(old)
    plog.flush()
    reopened = StorageRaftLog(plog)
    assert [(e.offset, e.batch_end) for e in reopened.read(0, 1 << 20)] == [
        (0, True),
        (1, False),
        (2, False),
        (3, True),
    ]
    reopened.append(batch(4, 2, b"set d 4", b"set e 5"))
    reopened.truncate_to(5)  # inside the new operation: back to 4, on disk too
    assert reopened.end_offset == 4 and plog.log_end_offset == 4
    reopened.close()
    again = StorageRaftLog(
        PartitionLog(tmp_path / "m", "__cluster_metadata", 0, LogConfig(), ManualClock(0))
    )
    assert [e.batch_end for e in again.read(0, 1 << 20)] == [True, False, False, True]
    again.close()
