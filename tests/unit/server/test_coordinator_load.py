"""The group coordinator's load reads the ranges its log read pinned (issue 18 defect 8).

A log read returns `FileRange` s that hold their own fd of each segment file: retention
renaming and unlinking the file does not change what they read, and a truncation bumps
the segment's generation so that reading them fails cleanly (`StaleRangeError`). The
load used to re-open each range by its path: a segment deleted between the read and the
re-open failed the load, and a truncation followed by new batches at the same positions
replayed records that were never in the log it read. A log wrapper runs retention or a
truncation right after each read returns, before the load reads the bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from riverbed.coordinator.records import OffsetAndMetadata, offset_commit_key, offset_commit_value
from riverbed.coordinator.shard import GroupConfig
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.coordinator import _read_shard
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.log import ORIGIN_COORDINATOR
from riverbed.storage.log_files import ReadResult, StaleRangeError

T0 = 1_700_000_000_000
READ_BYTES = 1 << 20


def commit(partition: int, offset: int) -> bytes:
    key = offset_commit_key("g", "t", partition)
    value = offset_commit_value(OffsetAndMetadata(offset=offset, commit_timestamp_ms=T0))
    return build_batch([SimpleRecord(value, key=key)], now_ms=T0)


class RacingLog:
    """A partition log whose next read is followed at once by ``race`` (then none)."""

    def __init__(self, plog: PartitionLog, race: Callable[[], None]) -> None:
        self.plog = plog
        self.race: Callable[[], None] | None = race

    @property
    def log_start_offset(self) -> int:
        return self.plog.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.plog.log_end_offset

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> ReadResult:
        result = self.plog.read(offset, max_bytes, upper_bound)
        race, self.race = self.race, None
        if race is not None:
            race()
        return result


def offsets_log(tmp_path: Path, config: LogConfig) -> PartitionLog:
    plog = PartitionLog(
        tmp_path / "__consumer_offsets-0", "__consumer_offsets", 0, config, ManualClock(T0)
    )
    plog.append_as_leader(commit(0, 100), leader_epoch=1)
    plog.append_as_leader(commit(1, 200), leader_epoch=1)
    plog.update_high_watermark(plog.log_end_offset)
    return plog


def test_a_load_racing_a_segment_deletion_reads_the_bytes_it_was_given(tmp_path: Path) -> None:
    # one batch per segment; deleted segments are unlinked at once
    plog = offsets_log(tmp_path, LogConfig(segment_bytes=64, file_delete_delay_ms=0))

    def retention() -> None:  # DeleteRecords below 1 removes the first segment's file
        plog.delete_records_before(1)
        assert plog.delete_expired_files(T0) > 0

    shard, end = _read_shard(RacingLog(plog, retention), 0, GroupConfig(), READ_BYTES)
    assert end == 2
    offsets = shard.groups["g"].offsets
    assert {k: v.offset for k, v in offsets.items()} == {("t", 0): 100, ("t", 1): 200}
    plog.close()


def test_a_load_racing_a_truncation_fails_cleanly_instead_of_replaying_other_bytes(
    tmp_path: Path,
) -> None:
    plog = offsets_log(tmp_path, LogConfig())

    def truncate_and_rewrite() -> None:  # a new leader's batch takes the same positions
        plog.truncate_to(1)
        plog.append_as_leader(commit(1, 999), leader_epoch=2)

    with pytest.raises(StaleRangeError):
        _read_shard(RacingLog(plog, truncate_and_rewrite), 0, GroupConfig(), READ_BYTES)
    plog.close()


def txn_commit(pid: int, partition: int, offset: int) -> bytes:
    """A TxnOffsetCommit's records as the coordinator appends them: a transactional
    batch of the producer."""
    key = offset_commit_key("g", "t", partition)
    value = offset_commit_value(OffsetAndMetadata(offset=offset, commit_timestamp_ms=T0))
    return build_batch(
        [SimpleRecord(value, key=key)],
        now_ms=T0,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def test_the_load_keeps_transactional_offsets_pending_until_their_marker(tmp_path: Path) -> None:
    """Issue 19: the loader sees control batches. Producer 1's offsets commit with its
    marker, producer 2's abort, producer 3's stay pending (no marker yet)."""
    plog = offsets_log(tmp_path, LogConfig())  # ordinary commits t-0=100, t-1=200

    def marker(pid: int, commit: bool) -> None:
        batch = build_end_txn_marker_batch(
            commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0, now_ms=T0
        )
        plog.append_as_leader(batch, leader_epoch=1, origin=ORIGIN_COORDINATOR)

    plog.append_as_leader(txn_commit(1, 0, 110), leader_epoch=1, origin=ORIGIN_COORDINATOR)
    plog.append_as_leader(txn_commit(2, 1, 999), leader_epoch=1, origin=ORIGIN_COORDINATOR)
    plog.append_as_leader(txn_commit(3, 1, 300), leader_epoch=1, origin=ORIGIN_COORDINATOR)
    marker(1, True)
    marker(2, False)
    shard, end = _read_shard(plog, 0, GroupConfig(), READ_BYTES)
    assert end == plog.log_end_offset
    offsets = shard.groups["g"].offsets
    assert {k: v.offset for k, v in offsets.items()} == {("t", 0): 110, ("t", 1): 200}
    assert offsets[("t", 0)].record_offset == 2  # the transactional record's offset
    assert set(shard.pending_txn) == {3}
    assert shard.has_pending("g", ("t", 1)) and not shard.has_pending("g", ("t", 0))


def test_markers_appended_while_loading_are_applied_once_loaded(tmp_path: Path) -> None:
    """WriteTxnMarkers may append to the partition while its groups load: a marker the
    load did not read (at or after the log end it read to) is applied after it; one it
    read is not applied twice."""
    import asyncio
    from types import SimpleNamespace

    from riverbed.server.config import ServerConfig
    from riverbed.server.coordinator import GroupCoordinator

    plog = offsets_log(tmp_path, LogConfig())
    plog.append_as_leader(txn_commit(2, 0, 120), leader_epoch=1, origin=ORIGIN_COORDINATOR)
    plog.append_as_leader(txn_commit(3, 1, 300), leader_epoch=1, origin=ORIGIN_COORDINATOR)
    hosted = SimpleNamespace(log=plog)
    partitions = SimpleNamespace(get=lambda topic, index: hosted, replicas=None)
    metadata = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))

    async def run() -> Any:
        coordinator = GroupCoordinator(
            ServerConfig.embedded_default(), 1, partitions, metadata, ManualClock(T0)
        )
        coordinator._epochs[0] = 1
        task = asyncio.get_running_loop().create_task(coordinator._load(0, 1))
        coordinator._loading[0] = task
        end = plog.log_end_offset
        coordinator.on_txn_marker(0, 3, True, end)  # after what the load reads
        coordinator.on_txn_marker(0, 2, False, end - 2)  # inside it: the log has it
        await task
        return coordinator.shards[0]

    shard = asyncio.run(run())
    assert {k: v.offset for k, v in shard.groups["g"].offsets.items()} == {
        ("t", 0): 100,
        ("t", 1): 300,
    }
    assert set(shard.pending_txn) == {2}  # its marker was not in the log it read
