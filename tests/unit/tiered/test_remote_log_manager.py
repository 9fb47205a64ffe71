"""The remote log manager's task and reads, in process, on a real log and a file:// tier."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches
from riverbed.server.remote_copies import _epoch_slice
from riverbed.server.remote_log import RemoteLogManager, RemoteLogSettings
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.tiered.rsm import FsspecRemoteStorageManager

T0 = 1_700_000_000_000
SETTINGS = RemoteLogSettings(
    enabled=True,
    task_interval_ms=1000,
    copier_threads=1,
    retry_backoff_ms=10,
    retry_backoff_max_ms=100,
    reader_threads=2,
    reader_max_pending=4,
    fetch_max_wait_ms=2000,
)


def _setup(
    tmp_path: Path,
    remote_root: Path | None = None,
    node_id: int = 1,
    leader_epoch: int = 0,
    *,
    producers: bool = False,
) -> tuple[RemoteLogManager, Any, PartitionLog]:
    """A tiered log of 40 batches in 7 segments (epoch 1 from offset 200); with
    ``producers`` it keeps producer state and batch i is producer 1000 + i's first."""
    clock = ManualClock(T0)
    config = LogConfig.from_props(
        {"segment.bytes": 4000, "remote.storage.enable": "true", "local.retention.bytes": 0}
    )
    plog = PartitionLog(
        tmp_path / "t-0", "t", 0, config, clock, remote_log_enabled=True, topic_id="TID"
    )
    idempotent: dict[str, int] = {}
    if producers:
        ProducerStateManager(plog.directory, clock.now_ms, ProducerStateConfig()).attach(plog)
    for i in range(40):
        recs = [SimpleRecord(b"v%04d" % (i * 10 + j) * 10, timestamp=T0 + i) for j in range(10)]
        if producers:
            idempotent = {"producer_id": 1000 + i, "producer_epoch": 0, "base_sequence": 0}
        plog.append_as_leader(build_batch(recs, **idempotent), leader_epoch=i // 20)
    plog.update_high_watermark(plog.log_end_offset)
    rsm = FsspecRemoteStorageManager(f"file://{remote_root or tmp_path / 'remote'}")
    rlm = RemoteLogManager(
        SETTINGS, rsm, node_id=node_id, now_ms=clock.now_ms, rng=random.Random(1)
    )
    registration = SimpleNamespace(leader=node_id, leader_epoch=leader_epoch)
    hosted = SimpleNamespace(log=plog, registration=registration)
    rlm._partitions = lambda: {("t", 0): hosted}
    rlm._image = lambda: None
    return rlm, hosted, plog


def test_task_copies_rolled_segments_and_reads_come_back(tmp_path: Path) -> None:
    rlm, _, plog = _setup(tmp_path)
    rlm._sync_partitions()
    (task,) = rlm.scheduler.due(T0, 5)
    assert task.leader
    tier = rlm._tiers[("t", 0)]
    rlm._process(tier, True)  # in this thread: list, sync, orphans, copy, retention
    segments = plog.segments
    assert plog.highest_offset_in_remote == segments[-1].base_offset - 1
    assert [m.base_offset for m in tier.remote] == [s.base_offset for s in segments[:-1]]
    # the leader epochs of a segment travel with it
    assert tier.remote[0].leader_epochs == ((0, 0),)
    assert tier.remote[-1].leader_epochs[-1][0] == 1  # epoch 1 starts at offset 200
    for m in tier.remote:
        assert all(m.base_offset <= start <= m.end_offset for _, start in m.leader_epochs)
        assert (1, 200) in m.leader_epochs or not m.base_offset < 200 <= m.end_offset
    expected = plog.read(0, 1 << 30, segments[-1].base_offset).read_bytes()
    assert plog.delete_old_segments(T0) == len(segments) - 1
    assert plog.local_log_start_offset == segments[-1].base_offset and plog.log_start_offset == 0

    async def reads() -> None:
        rlm._loop = asyncio.get_running_loop()
        got = b""
        offset = 0
        while offset < plog.local_log_start_offset:
            r = await rlm.read(("t", 0), offset, 3000)
            assert r.error == 0 and r.data
            headers = [h for _, h in iter_batches(r.data)]
            assert headers[0].base_offset <= offset < headers[0].next_offset
            got += r.data
            offset = headers[-1].next_offset
        assert got == expected  # byte-identical whole batches
        hits, _ = rlm.cache_stats
        assert hits > 0  # sequential reads are served from the read-ahead
        found = await rlm.offset_for_timestamp(("t", 0), T0 + 3)
        assert found is not None and found.offset == 30
        # MAX_TIMESTAMP over the remote tier: the first record of the latest remote batch
        latest = max(m.max_timestamp for m in tier.remote)
        top = await rlm.max_timestamp_offset(("t", 0), -1)
        assert top is not None and top.timestamp == latest
        assert top.offset == (latest - T0) * 10
        assert await rlm.max_timestamp_offset(("t", 0), latest + 1) is None  # local wins
        # a remote segment gone under the reader: OFFSET_OUT_OF_RANGE
        for m in tier.remote:
            rlm.rsm.delete_segment("t", 0, "TID", m.segment_id)
        rlm._cache = type(rlm._cache)(1 << 20)
        r = await rlm.read(("t", 0), 0, 3000)
        assert r.error == ErrorCode.OFFSET_OUT_OF_RANGE
        await rlm.close()

    asyncio.run(reads())


def test_epoch_slice() -> None:
    epochs = [(0, 0), (3, 100), (5, 250)]
    assert _epoch_slice(epochs, 0, 100) == ((0, 0),)
    assert _epoch_slice(epochs, 50, 200) == ((0, 50), (3, 100))
    assert _epoch_slice(epochs, 120, 300) == ((3, 120), (5, 250))
    assert _epoch_slice(epochs, 300, 400) == ((5, 300),)


def _copied(
    tmp_path: Path, settings: RemoteLogSettings = SETTINGS
) -> tuple[RemoteLogManager, Any, PartitionLog, Any]:
    """_setup, then one leader task: the rolled segments are in the remote tier."""
    rlm, hosted, plog = _setup(tmp_path)
    rlm.settings = settings
    rlm._sync_partitions()
    tier = rlm._tiers[("t", 0)]
    rlm._process(tier, True)
    return rlm, hosted, plog, tier


def test_a_read_beyond_max_pending_tasks_is_rejected_with_a_retriable_error(
    tmp_path: Path,
) -> None:

    import threading

    rlm, _, plog, _ = _copied(tmp_path, dataclasses.replace(SETTINGS, reader_max_pending=1))
    plog.delete_old_segments(T0)
    gate = threading.Event()
    real_read = rlm.rsm.read

    def slow_read(*args: Any) -> bytes:
        gate.wait(5)
        return real_read(*args)

    rlm.rsm.read = slow_read  # type: ignore[method-assign]

    async def reads() -> None:
        rlm._loop = asyncio.get_running_loop()
        first = asyncio.create_task(rlm.read(("t", 0), 0, 3000))
        await asyncio.sleep(0.05)  # the first read holds the only pending slot
        second = await rlm.read(("t", 0), 0, 3000)
        assert second.error == ErrorCode.KAFKA_STORAGE_ERROR and not second.data
        assert rlm.reads_rejected == 1
        gate.set()
        done = await first
        assert done.error == 0 and done.data
        await rlm.close()

    asyncio.run(reads())


def test_cache_and_index_rotation_limits_come_from_the_settings(tmp_path: Path) -> None:

    rlm, _, _, tier = _copied(tmp_path, dataclasses.replace(SETTINGS, index_file_bytes_max=100))
    assert tier.indexes is not None and tier.indexes.file_bytes_max == 100
    assert len(tier.indexes.groups) > 1  # rotated at 100 bytes, not at the 1 MiB default
    small = RemoteLogManager(
        dataclasses.replace(SETTINGS, read_cache_bytes=2 << 20),
        rlm.rsm,
        node_id=1,
    )
    assert small._cache.bytes_max == 2 << 20


def test_delete_records_at_the_local_start_is_not_undone_by_adopting_the_remote_start(
    tmp_path: Path,
) -> None:
    rlm, _, plog, tier = _copied(tmp_path)
    plog.delete_old_segments(T0)
    local = plog.local_log_start_offset
    assert plog.log_start_offset == 0 < local
    assert plog.delete_records_before(local) == local  # exactly the local start
    # a follower's task (no remote retention) still lists the segments below it
    rlm._process(tier, False)
    assert tier.remote[0].base_offset == 0
    assert plog.log_start_offset == local  # the deleted records stay deleted
    assert not plog.adopt_remote_log_start(0)
    # the leader's task deletes the remote segments below the log start
    rlm._process(tier, True)
    assert plog.log_start_offset == local and tier.remote == []


def _remote_prefixes(tmp_path: Path) -> list[str]:
    """The partition prefixes holding objects (a file:// tier keeps empty topic dirs)."""
    root = tmp_path / "remote"
    return sorted(f"{p.parent.name}/{p.name}" for p in root.glob("*/*") if any(p.iterdir()))


def test_a_topic_recreated_before_the_manager_looked_loses_its_old_remote_data(
    tmp_path: Path,
) -> None:
    import uuid as uuid_mod

    from riverbed.metadata.storage_format import uuid_to_str

    rlm, hosted, plog, _ = _copied(tmp_path)
    assert _remote_prefixes(tmp_path) == ["t-TID/0"]
    # deleted and re-created under a new topic id between two loops of the manager
    new_id = uuid_mod.uuid4()
    fresh = PartitionLog(
        tmp_path / "new" / "t-0",
        "t",
        0,
        plog.config,
        ManualClock(T0),
        remote_log_enabled=True,
        topic_id=uuid_to_str(new_id),
    )
    rlm._partitions = lambda: {
        ("t", 0): SimpleNamespace(log=fresh, registration=hosted.registration)
    }
    rlm._sync_partitions()
    assert rlm._tiers[("t", 0)].topic_id == uuid_to_str(new_id)
    rlm._copiers.shutdown(wait=True)
    assert _remote_prefixes(tmp_path) == []  # the old topic's prefix is gone


def test_a_recreated_topic_not_hosted_yet_and_a_running_task_delay_the_deletion(
    tmp_path: Path,
) -> None:
    import uuid as uuid_mod

    rlm, _, _, tier = _copied(tmp_path)
    # the new topic's log is still being created: not hosted, the image names a new id
    image = SimpleNamespace(
        topics_by_name={"t": SimpleNamespace(topic_id=uuid_mod.uuid4(), partitions={0: None})}
    )
    rlm._partitions = dict
    rlm._image = lambda: image
    tier.running = True  # a task of the old topic still uploads
    rlm._sync_partitions()
    assert ("t", 0) not in rlm._tiers and tier.delete_when_idle
    assert _remote_prefixes(tmp_path) == ["t-TID/0"]  # not under a running upload

    async def task_ends() -> None:
        rlm._loop = asyncio.get_running_loop()
        rlm._copying = 1
        done: Any = __import__("concurrent.futures").futures.Future()
        done.set_result(None)
        rlm._task_done(("t", 0), tier, done)

    asyncio.run(task_ends())
    rlm._copiers.shutdown(wait=True)
    assert _remote_prefixes(tmp_path) == []


def _object_names(remote_root: Path) -> list[str]:
    return sorted(p.name for p in (remote_root / "t-TID" / "0").iterdir())


def test_a_deposed_leaders_late_upload_is_fenced_by_the_new_leaders_epoch(
    tmp_path: Path,
) -> None:
    import threading

    root = tmp_path / "remote"
    old, _, _ = _setup(tmp_path / "a", root, node_id=1, leader_epoch=0)
    new, _, new_log = _setup(tmp_path / "b", root, node_id=2, leader_epoch=1)
    old._sync_partitions()
    new._sync_partitions()
    at_manifest, release = threading.Event(), threading.Event()
    put_manifest = old.rsm._put_atomic

    def slow_manifest(path: str, data: bytes) -> None:
        at_manifest.set()
        release.wait(5)
        put_manifest(path, data)

    old.rsm._put_atomic = slow_manifest  # type: ignore[method-assign]
    # node 1 still believes it leads at epoch 0 (its metadata lags) and uploads
    copier = threading.Thread(target=old._process, args=(old._tiers[("t", 0)], True))
    copier.start()
    assert at_manifest.wait(5)
    new_tier = new._tiers[("t", 0)]
    new._process(new_tier, True)  # the leader at epoch 1 sweeps and copies
    release.set()
    copier.join(10)
    assert not copier.is_alive()
    valid = new.rsm.list_segments("t", 0, "TID")
    assert valid and all(m.copy_epoch == 1 for m in valid)
    assert [m.base_offset for m in valid] == [s.base_offset for s in new_log.segments[:-1]]
    for m in valid:  # every visible segment has its data
        assert new.rsm.read("t", 0, "TID", m.segment_id, 0, 61)
    # the new leader's next task deletes the stale copies and their markers
    new._process(new_tier, True)
    assert all("-1-" in name for name in _object_names(root)), _object_names(root)


def test_a_leader_that_lost_its_epoch_abandons_its_copy_and_spares_newer_uploads(
    tmp_path: Path,
) -> None:
    root = tmp_path / "remote"
    rlm, _, plog = _setup(tmp_path, root, node_id=1, leader_epoch=3)
    rlm._sync_partitions()
    tier = rlm._tiers[("t", 0)]
    # an upload of the leader at epoch 4 is running (objects, no manifest yet)
    prefix = root / "t-TID" / "0"
    prefix.mkdir(parents=True)
    newer = f"{0:020d}-4-{'ab' * 16}"
    (prefix / f"{newer}.log").write_bytes(b"x")
    put = rlm.rsm.fs.put

    def put_then_lose_leadership(*args: Any, **kwargs: Any) -> None:
        put(*args, **kwargs)
        tier.leader_epoch = 4  # the metadata image moved on mid-copy

    rlm.rsm.fs.put = put_then_lose_leadership
    rlm._process(tier, True)
    assert _object_names(root) == [f"{newer}.log"]  # spared; its own copy abandoned
    assert rlm.rsm.list_segments("t", 0, "TID") == [] and plog.highest_offset_in_remote == -1


def test_a_follower_restarted_at_the_leaders_local_start_rebuilds_the_remote_epochs(
    tmp_path: Path,
) -> None:
    _, _, leader_log, _ = _copied(tmp_path)
    leader_log.delete_old_segments(T0)
    local = leader_log.local_log_start_offset
    assert local > 200  # epoch 1 began at 200, in the remote range now
    # the leader keeps the epochs of its remote range
    assert leader_log.epoch_cache.entries() == [(0, 0), (1, 200)]
    rlm, hosted, follower_log = _setup(tmp_path / "f", tmp_path / "remote", node_id=2)
    hosted.registration.leader = 1
    follower_log.truncate_fully_and_start_at(local)  # OFFSET_OUT_OF_RANGE from the leader
    follower_log.append_as_follower(
        leader_log.read(local, 1 << 30, leader_log.log_end_offset).read_bytes()
    )
    assert follower_log.epoch_cache.entries() == [(1, local)]
    rlm._sync_partitions()
    rlm._process(rlm._tiers[("t", 0)], False)
    assert follower_log.log_start_offset == 0
    assert follower_log.epoch_cache.entries() == [(0, 0), (1, 200)]
    for epoch in (0, 1):
        assert follower_log.end_offset_for_epoch(epoch) == leader_log.end_offset_for_epoch(epoch)


def test_a_follower_restarted_at_the_leaders_local_start_installs_the_remote_producers(
    tmp_path: Path,
) -> None:
    root = tmp_path / "remote"
    leader_rlm, _, leader_log = _setup(tmp_path / "l", root, producers=True)
    leader_rlm._sync_partitions()
    leader_rlm._process(leader_rlm._tiers[("t", 0)], True)
    leader_log.delete_old_segments(T0)
    local = leader_log.local_log_start_offset
    rlm, hosted, follower_log = _setup(tmp_path / "f", root, node_id=2, producers=True)
    hosted.registration.leader = 1
    follower_log.truncate_fully_and_start_at(local)
    follower_log.append_as_follower(
        leader_log.read(local, 1 << 30, leader_log.log_end_offset).read_bytes()
    )

    def producers(plog: PartitionLog) -> set[tuple[int, int, int]]:
        state: Any = plog.producer_state
        return {(e.producer_id, e.last_seq, e.last_offset) for e in state.describe()}

    assert len(producers(follower_log)) < len(producers(leader_log)) == 40
    rlm._sync_partitions()
    rlm._process(rlm._tiers[("t", 0)], False)
    assert producers(follower_log) == producers(leader_log)
    state: Any = follower_log.producer_state
    assert state.store.get(1000).last_seq == 9  # the first producer, in the remote range only


def test_a_follower_keeps_local_segments_until_indexed_and_index_files_until_remote_deletion(
    tmp_path: Path,
) -> None:
    root = tmp_path / "remote"
    leader_rlm, _, leader_log = _setup(tmp_path / "l", root)
    rlm, hosted, follower_log = _setup(tmp_path / "f", root, node_id=2)
    hosted.registration.leader = 1
    rlm.settings = dataclasses.replace(SETTINGS, index_file_bytes_max=100)  # a group each
    rlm._sync_partitions()
    tier = rlm._tiers[("t", 0)]
    rolled = len(follower_log.segments) - 1
    # nothing in the remote tier yet: local.retention.bytes=0 deletes nothing
    rlm._process(tier, False)
    assert follower_log.delete_old_segments(T0) == 0
    leader_rlm._sync_partitions()
    leader_tier = leader_rlm._tiers[("t", 0)]
    leader_rlm._process(leader_tier, True)
    rlm._process(tier, False)  # the follower indexes the remote segments first
    assert tier.indexes is not None and len(tier.indexes.segment_ids) == rolled
    assert follower_log.highest_offset_in_remote == leader_log.highest_offset_in_remote
    assert follower_log.delete_old_segments(T0) == rolled
    first_group = follower_log.directory / f"{0:020d}.remotelogindex"
    assert len(list(follower_log.directory.glob("*.remotelogindex"))) == rolled
    # the leader's remote retention deletes the first remote segment: until the follower
    # lists again, its remote index still describes it
    first = leader_tier.remote[0]
    leader_log.delete_records_before(first.end_offset + 1)
    leader_rlm._process(leader_tier, True)
    assert first.segment_id not in {m.segment_id for m in leader_tier.remote}
    assert first.segment_id in tier.indexes.segment_ids and first_group.exists()
    rlm._process(tier, False)
    assert first.segment_id not in tier.indexes.segment_ids and not first_group.exists()
    assert len(list(follower_log.directory.glob("*.remotelogindex"))) == rolled - 1
    assert follower_log.log_start_offset == first.end_offset + 1


def test_a_follower_relies_on_an_older_leaders_copies_only_once_the_new_leader_continued(
    tmp_path: Path,
) -> None:
    root = tmp_path / "remote"
    old_leader, _, _ = _setup(tmp_path / "a", root, node_id=1, leader_epoch=0)
    old_leader._sync_partitions()
    old_leader._process(old_leader._tiers[("t", 0)], True)  # copied at epoch 0
    # leadership moved to node 3 at epoch 1; node 2 follows
    rlm, hosted, follower_log = _setup(tmp_path / "f", root, node_id=2, leader_epoch=1)
    hosted.registration.leader = 3
    rlm._sync_partitions()
    tier = rlm._tiers[("t", 0)]
    rlm._process(tier, False)
    assert tier.remote and all(m.copy_epoch == 0 for m in tier.remote)
    # an epoch-0 upload published late could still turn stale: keep the local copy
    assert follower_log.highest_offset_in_remote == -1
    assert follower_log.delete_old_segments(T0) == 0
    new_leader, _, new_log = _setup(tmp_path / "b", root, node_id=3, leader_epoch=1)
    for i in range(40, 60):  # more data rolls new segments on the new leader
        recs = [SimpleRecord(b"w%04d" % (i * 10 + j) * 10, timestamp=T0 + i) for j in range(10)]
        new_log.append_as_leader(build_batch(recs), leader_epoch=1)
    new_log.update_high_watermark(new_log.log_end_offset)
    new_leader._sync_partitions()
    new_leader._process(new_leader._tiers[("t", 0)], True)
    rlm._process(tier, False)
    assert any(m.copy_epoch == 1 for m in tier.remote)
    assert follower_log.highest_offset_in_remote == max(m.end_offset for m in tier.remote)
    assert follower_log.delete_old_segments(T0) > 0
