"""The fsspec remote storage manager on file://: copy, list, ranged read, delete, orphans."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from riverbed.metadata.config_control import check_topic_configs
from riverbed.metadata.controller import ControllerError
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches
from riverbed.tiered.rsm import (
    FsspecRemoteStorageManager,
    RemoteResourceNotFoundError,
    SegmentUpload,
)
from riverbed.tiered.segment_chunks import chunk_segment


def _segment(path: Path, batches: int, base: int = 0) -> bytes:
    data = b""
    for i in range(batches):
        b = bytearray(build_batch([SimpleRecord(b"v%d" % i, timestamp=1000 + i)] * 3))
        b[0:8] = (base + 3 * i).to_bytes(8, "big")
        data += bytes(b)
    path.write_bytes(data)
    return data


def _upload(log_path: Path, base: int, interval: int) -> SegmentUpload:
    seg_id = f"{base:020d}-{uuid.uuid4().hex}"
    s = chunk_segment(log_path, seg_id, interval_bytes=interval)
    return SegmentUpload(
        seg_id,
        log_path,
        s.entries,
        s.base_offset,
        s.last_offset,
        s.max_timestamp,
        s.size_bytes,
        ((0, base),),
        1234,
    )


def test_copy_list_read_delete(tmp_path: Path) -> None:
    rsm = FsspecRemoteStorageManager.from_props({"rsm.config.url": f"file://{tmp_path}/remote"})
    local = tmp_path / "00000000000000000000.log"
    data = _segment(local, 10)
    snap = tmp_path / "00000000000000000030.snapshot"
    snap.write_bytes(b"snap")
    up = _upload(local, 0, interval=200)
    up = SegmentUpload(
        **{**{f: getattr(up, f) for f in up.__dataclass_fields__}, "producer_snapshot_path": snap}
    )
    assert len(up.entries) > 1 and sum(e.data_length for e in up.entries) == len(data)
    assert up.entries[0].first_offset == 0 and up.entries[-1].last_offset == 29
    meta = rsm.copy_segment("t", 0, "TID", up)
    assert ".snapshot" in meta.files and ".leader-epoch-checkpoint" in meta.files
    listed = FsspecRemoteStorageManager.from_props(
        {"rsm.config.url": f"file://{tmp_path}/remote"}
    ).list_segments("t", 0, "TID")
    assert listed == [meta]
    # each entry is whole batches, byte-identical to the local segment
    for e in up.entries:
        chunk = rsm.read("t", 0, "TID", e.segment_id, e.position, e.data_length)
        assert chunk == data[e.position : e.position + e.data_length]
        offsets = [h.base_offset for _, h in iter_batches(chunk)]
        assert offsets[0] == e.first_offset
    assert rsm.index_entries("t", 0, "TID", meta.segment_id) == up.entries
    # a failed attempt leaves objects without a manifest: an orphan
    other = _upload(local, 0, interval=200)
    remote_dir = Path(rsm.partition_path("t", 0, "TID"))
    (remote_dir / f"{other.segment_id}.log").write_bytes(b"partial")
    assert rsm.orphans("t", 0, "TID", set()) == [other.segment_id]
    assert rsm.orphans("t", 0, "TID", {other.segment_id}) == []
    rsm.delete_segment("t", 0, "TID", other.segment_id)
    rsm.delete_segment("t", 0, "TID", meta.segment_id)
    assert rsm.list_segments("t", 0, "TID") == []
    assert list(remote_dir.iterdir()) == []
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.read("t", 0, "TID", meta.segment_id, 0, 10)


def test_url_is_required() -> None:
    with pytest.raises(ValueError, match=r"rsm\.config\.url"):
        FsspecRemoteStorageManager.from_props({})


def test_controller_refuses_tiering_a_compacted_topic() -> None:
    check_topic_configs({"remote.storage.enable": "true", "cleanup.policy": "delete"})
    with pytest.raises(ControllerError, match="compacted"):
        check_topic_configs({"remote.storage.enable": "true", "cleanup.policy": "compact"})


def test_fence_segments_keeps_the_newest_epoch_from_where_it_started() -> None:
    from riverbed.tiered.rsm import RemoteSegmentMetadata, fence_segments

    def seg(name: str, base: int, end: int, epoch: int) -> RemoteSegmentMetadata:
        return RemoteSegmentMetadata(name, base, end, 0, 1, ((epoch, base),), 0, (), epoch)

    a0, a1 = seg("a0", 0, 99, 0), seg("a1", 100, 199, 0)
    late = seg("late", 200, 299, 0)  # a deposed leader's upload published late
    b = seg("b", 180, 280, 1)  # the new leader's first copy (its own segment bounds)
    b2 = seg("b2", 281, 350, 1)
    valid, stale = fence_segments([a0, a1, late, b, b2], set())
    assert valid == [a0, a1, b, b2] and stale == [late]
    valid, stale = fence_segments([a0, a1, b], {"a1"})  # a1's upload was fenced
    assert valid == [a0, b] and stale == [a1]
    legacy = seg("legacy", 0, 99, -1)  # ids without an epoch stay valid on their own
    assert fence_segments([legacy], set()) == ([legacy], [])
