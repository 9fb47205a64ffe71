"""Config parsing, the quorum-state file, MemoryLog, snapshot names and file format."""

from __future__ import annotations

import os

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.raft.config import RaftConfig, RaftConfigError, parse_bootstrap_servers, parse_voters
from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import OffsetAndEpoch, SnapshotId
from riverbed.raft.quorum_state import (
    QuorumState,
    QuorumStateError,
    read_quorum_state_file,
    write_quorum_state_file,
)
from riverbed.raft.snapshot_format import SnapshotFormatError, encode_snapshot, read_snapshot
from riverbed.raft.snapshots import (
    MemorySnapshotStore,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from riverbed.testing.raft_sim_helpers import entries


def test_parse_voters_and_errors() -> None:
    voters = parse_voters("1@localhost:9093, 2@[::1]:9094,3@h:1")
    assert sorted(voters) == [1, 2, 3]
    assert voters[2].host == "::1" and voters[2].port == 9094
    for bad in ("1localhost:9093", "x@h:1", "1@h:0", "1@h:1,1@h:2", "1@:5"):
        with pytest.raises(RaftConfigError, match=r"controller\.quorum\.voters"):
            parse_voters(bad)
    assert [e.port for e in parse_bootstrap_servers("a:1,b:2")] == [1, 2]
    with pytest.raises(RaftConfigError, match=r"bootstrap\.servers"):
        parse_bootstrap_servers("a")


def test_config_kafka_names_and_defaults() -> None:
    cfg = RaftConfig.from_properties({"controller.quorum.voters": "1@h:1,2@h:2,3@h:3"})
    assert cfg.voters == frozenset({1, 2, 3}) and cfg.majority == 2
    assert (cfg.election_timeout_ms, cfg.fetch_timeout_ms) == (1000, 2000)
    assert (cfg.election_backoff_max_ms, cfg.append_linger_ms, cfg.request_timeout_ms) == (
        1000,
        25,
        2000,
    )
    assert cfg.snapshot_max_bytes_between == 20 * 1024 * 1024
    cfg = RaftConfig.from_properties(
        {
            "controller.quorum.voters": "1@h:1",
            "controller.quorum.election.timeout.ms": "300",
            "controller.snapshot.minimum.records": "50",
            "metadata.log.max.snapshot.interval.ms": "1000",
            "max.replication.lag.ms": "7",
        }
    )
    assert cfg.election_timeout_ms == 300 and cfg.snapshot_minimum_records == 50
    assert cfg.snapshot_max_interval_ms == 1000 and cfg.max_replication_lag_ms == 7
    with pytest.raises(RaftConfigError, match=r"controller\.quorum\.fetch\.timeout\.ms"):
        RaftConfig.from_properties(
            {"controller.quorum.voters": "1@h:1", "controller.quorum.fetch.timeout.ms": "x"}
        )
    with pytest.raises(RaftConfigError, match="required"):
        RaftConfig.from_properties({})
    with pytest.raises(RaftConfigError, match="election_timeout_ms"):
        RaftConfig(voters=frozenset({1}), election_timeout_ms=0)


def test_quorum_state_file_roundtrip_and_atomic_replace(tmp_path: object) -> None:
    d = str(tmp_path)
    assert read_quorum_state_file(d) is None
    st = QuorumState(leader_epoch=5, leader_id=2, voted_id=1, voted_directory_id="abc")
    write_quorum_state_file(d, st)
    assert read_quorum_state_file(d) == st
    write_quorum_state_file(d, QuorumState(6))
    assert read_quorum_state_file(d) == QuorumState(6)
    assert sorted(os.listdir(d)) == ["quorum-state"]  # the temp file was renamed away
    with open(os.path.join(d, "quorum-state"), "rb") as f:
        raw = f.read()
    assert b'"leaderEpoch": 6' in raw and b'"votedId": -1' in raw


def test_quorum_state_bad_files_raise_typed_errors(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "quorum-state")
    for content, msg in (
        (b"{not json", "not valid JSON"),
        (b"[1]", "JSON object"),
        (b'{"leaderEpoch": -3}', "negative"),
        (b'{"leaderEpoch": "x"}', "leaderEpoch must be an integer"),
        (b" " * 70000, "larger than"),
    ):
        with open(path, "wb") as f:
            f.write(content)
        with pytest.raises(QuorumStateError, match=msg):
            read_quorum_state_file(str(tmp_path))


def test_memory_log_epochs_truncation_and_crash() -> None:
    log = MemoryLog()
    log.append(entries(0, 1, "a", "b") + entries(2, 3, "c", "d", "e"))
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)  # largest epoch <= 2
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    log.flush(3)
    crashed = log.durable_copy()
    assert crashed.end_offset == 3 and crashed.flushed_end_offset == 3
    log.truncate_to(2)
    assert log.end_offset == 2 and log.flushed_end_offset == 2
    log.delete_before(1, 1)
    assert (log.start_offset, log.start_epoch, log.end_offset) == (1, 1, 2)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(-1, -1)  # below the LBO
    assert log.epoch_at(0) == 1  # = the snapshot's epoch for LBO - 1
    assert [e.offset for e in log.read(1, 10)] == [1]
    assert log.read(0, 10) == ()
    log.truncate_fully_and_start_at(10, 4)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 4)
    with pytest.raises(AssertionError):
        log.append(entries(12, 4, "gap"))


def test_memory_log_read_respects_max_bytes_but_returns_one() -> None:
    log = MemoryLog()
    log.append(entries(0, 1, *["x" * 100] * 5))
    assert len(log.read(0, 1)) == 1
    assert len(log.read(0, 250)) == 2
    assert len(log.read(0, 10_000, upper=3)) == 3


def test_snapshot_file_names() -> None:
    sid = SnapshotId(5120793, 2)
    assert snapshot_file_name(sid) == "00000000000005120793-0000000002.checkpoint"
    assert parse_snapshot_file_name(snapshot_file_name(sid)) == sid
    for bad in ("1-2.checkpoint", "00000000000005120793-0000000002.checkpoint.part", "x.log"):
        assert parse_snapshot_file_name(bad) is None


def test_snapshot_format_roundtrip_and_validation() -> None:
    sid = SnapshotId(42, 3)
    records = [f"r{i}".encode() * 10 for i in range(500)]
    data = encode_snapshot(
        sid, records, last_contained_log_timestamp=99, snapshot_batch_bytes_max=1000
    )
    contents = read_snapshot(data)
    assert contents.records == records and contents.last_contained_log_timestamp == 99
    empty = read_snapshot(encode_snapshot(sid, []))
    assert empty.records == []
    with pytest.raises(SnapshotFormatError, match="empty"):
        read_snapshot(b"")
    with pytest.raises(SnapshotFormatError):
        read_snapshot(data[:-5])  # a truncated .part
    corrupt = bytearray(data)
    corrupt[200] ^= 0xFF
    with pytest.raises(SnapshotFormatError):
        read_snapshot(bytes(corrupt))
    # header and footer are required: the data batches alone are not a snapshot
    body = build_batch([SimpleRecord(r) for r in records[:3]])
    with pytest.raises(SnapshotFormatError, match="SnapshotHeader"):
        read_snapshot(body + body)


def test_memory_snapshot_store_partial_downloads_do_not_survive_a_crash() -> None:
    store = MemorySnapshotStore()
    a, b = SnapshotId(5, 1), SnapshotId(9, 1)
    store.write(a, b"abc")
    store.begin_download(b)
    store.write_chunk(b, 0, b"12")
    assert store.list() == [a] and store.partial_size(b) == 2
    after_crash = store.durable_copy()
    assert after_crash.list() == [a]
    store.write_chunk(b, 2, b"3")
    store.complete_download(b)
    assert store.list() == [a, b] and store.read(b, 1, 5) == b"23"


def test_file_snapshot_store(tmp_path: object) -> None:
    from riverbed.raft.snapshot_files import FileSnapshotStore, SnapshotFileError
    from riverbed.raft.snapshots import SnapshotNotFoundError

    store = FileSnapshotStore(os.path.join(str(tmp_path), "__cluster_metadata-0"))
    a, b = SnapshotId(10, 1), SnapshotId(20, 2)
    data = encode_snapshot(a, [b"x", b"y"])
    store.write(a, data)
    assert store.list() == [a] and store.size(a) == len(data)
    assert store.read(a, 5, 7) == data[5:12]
    assert read_snapshot(store.read_all(a)).records == [b"x", b"y"]
    names = sorted(os.listdir(store.directory))
    assert names == ["00000000000000000010-0000000001.checkpoint"]
    store.begin_download(b)
    store.write_chunk(b, 0, b"abc")
    with pytest.raises(SnapshotFileError, match="position 7"):
        store.write_chunk(b, 7, b"x")
    assert store.partial_size(b) == 3 and store.list() == [a]  # .part is not listed
    # a restart removes the partial download
    assert store.remove_partial_files() == ["00000000000000000020-0000000002.checkpoint.part"]
    store.begin_download(b)
    store.write_chunk(b, 0, b"abc")
    store.complete_download(b)
    assert store.list() == [a, b] and store.read_all(b) == b"abc"
    store.delete(a)
    assert store.list() == [b]
    with pytest.raises(SnapshotNotFoundError):
        store.read(a, 0, 1)
