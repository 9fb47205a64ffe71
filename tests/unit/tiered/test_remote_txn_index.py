"""Aborted transactions in the remote tier (KIP-405 ships each segment's ``.txnindex``):
copied with the segment, read back for a read_committed remote fetch, combined with the
local log's; segments are copied only below the last stable offset."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace

from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.remote_log import RemoteLogManager
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.txn_index import AbortedTxn
from riverbed.tiered.rsm import FsspecRemoteStorageManager

from .test_remote_log_manager import SETTINGS, T0


def _txn(pid: int, seq: int, n: int) -> bytes:
    recs = [SimpleRecord(b"x" * 300, timestamp=T0) for _ in range(n)]
    return build_batch(
        recs, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )


def _marker(pid: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(
        commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0, now_ms=T0
    )


def _tiered_log(tmp_path: Path) -> tuple[RemoteLogManager, PartitionLog]:
    clock = ManualClock(T0)
    config = LogConfig.from_props(
        {"segment.bytes": 2000, "remote.storage.enable": "true", "local.retention.bytes": 0}
    )
    plog = PartitionLog(
        tmp_path / "t-0", "t", 0, config, clock, remote_log_enabled=True, topic_id="TID"
    )
    ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig()).attach(plog)
    rsm = FsspecRemoteStorageManager(f"file://{tmp_path / 'remote'}")
    rlm = RemoteLogManager(SETTINGS, rsm, node_id=1, now_ms=clock.now_ms, rng=random.Random(1))
    hosted = SimpleNamespace(log=plog, registration=SimpleNamespace(leader=1, leader_epoch=0))
    rlm._partitions = lambda: {("t", 0): hosted}  # type: ignore[method-assign]
    rlm._image = lambda: None  # type: ignore[method-assign]
    return rlm, plog


def test_txn_index_travels_with_its_segment_and_serves_remote_reads(tmp_path: Path) -> None:
    rlm, plog = _tiered_log(tmp_path)
    # producer 1 aborts across segments; producer 2 commits; producer 3 aborts later
    for seq in range(4):
        plog.append_as_leader(_txn(1, seq * 2, 2), 0)  # 0-7
    plog.append_as_leader(_txn(2, 0, 2), 0)  # 8-9
    plog.append_as_leader(_marker(1, False), 0, origin="coordinator")  # 10
    plog.append_as_leader(_marker(2, True), 0, origin="coordinator")  # 11
    for seq in range(4):
        plog.append_as_leader(_txn(3, seq * 2, 2), 0)  # 12-19
    plog.append_as_leader(_marker(3, False), 0, origin="coordinator")  # 20
    plog.append_as_leader(_txn(4, 0, 6), 0)  # 21-26: open, holds the LSO
    plog.append_as_leader(_txn(4, 6, 6), 0)  # 27-32
    plog.update_high_watermark(plog.log_end_offset)
    assert len(plog.segments) >= 4
    rlm._sync_partitions()
    tier = rlm._tiers[("t", 0)]
    rlm._process(tier, True)
    # nothing at or after the open transaction's first offset (21) is copied
    assert tier.remote and max(m.end_offset for m in tier.remote) < 21
    copied = [m for m in tier.remote if ".txnindex" in m.files]
    assert copied, "the segment holding an ABORT ships its txn index"
    local_entries = plog.aborted_transactions(0, 21)
    assert local_entries == [AbortedTxn(1, 0, 10, 8), AbortedTxn(3, 12, 20, 21)]
    plog.delete_old_segments(T0)
    assert plog.local_log_start_offset > 0

    async def reads() -> None:
        rlm._loop = asyncio.get_running_loop()
        r = await rlm.read(("t", 0), 0, 1 << 20, True)
        assert r.error == 0 and r.data
        assert r.aborted is not None and AbortedTxn(1, 0, 10, 8) in r.aborted
        plain = await rlm.read(("t", 0), 0, 1 << 20)
        assert plain.aborted is None  # read_uncommitted asks for none
        await rlm.close()

    asyncio.run(reads())
    for m in copied:
        rsm_entries = rlm.rsm.aborted_transactions("t", 0, "TID", m)
        assert set(rsm_entries) <= {AbortedTxn(1, 0, 10, 8), AbortedTxn(3, 12, 20, 21)}
