import asyncio
import uuid

import pytest

from riverbed.metadata.image import MetadataImage, image_to_records, replay_all
from riverbed.metadata.records import decode_record, encode_record
from riverbed.metadata.storage_format import (
    StorageFormatError,
    ensure_formatted,
    format_storage,
    random_uuid,
    read_meta_properties,
    uuid_from_str,
)
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import ConfigRecord, PartitionChangeRecord, TopicRecord
from riverbed.server.metadata_log import (
    LocalMetadataLog,
    MetadataLogError,
    metadata_partition_dir,
    read_metadata_log,
)

from .conftest import cluster_image, make_controller
from .test_controller import create, topic


def sample_records():
    c = make_controller()
    image = cluster_image(c, brokers=2)
    _, image = create(c, image, topic("a", 2, configs={"retention.ms": "7"}))
    return image, image_to_records(image)


def test_every_written_record_roundtrips():
    _, records = sample_records()
    records.append(PartitionChangeRecord(topic_id=uuid.UUID(int=5), partition_id=0, isr=[1]))
    records.append(ConfigRecord(resource_type=2, resource_name="a", name="x", value=None))
    for r in records:
        assert decode_record(encode_record(r)) == r


def test_decode_rejects_garbage():
    with pytest.raises(ProtocolError):
        decode_record(b"\x01\x02")
    with pytest.raises(ProtocolError):
        decode_record(b"\x07\x02\x00")
    good = encode_record(TopicRecord(name="t", topic_id=uuid.UUID(int=9)))
    with pytest.raises(ProtocolError):
        decode_record(good + b"\x00")


def test_local_log_append_and_replay(tmp_path):
    image, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    last = asyncio.run(log.append(records[:3]))
    assert last == 2
    last = asyncio.run(log.append(records[3:]))
    assert last == len(records) - 1
    log.close()
    reopened = LocalMetadataLog(tmp_path)
    got = list(reopened.read_committed())
    assert [o for o, _ in got] == list(range(len(records)))
    assert replay_all(MetadataImage.EMPTY, [r for _, r in got]) == image
    assert reopened.end_offset == len(records)
    reopened.close()


def test_local_log_cuts_torn_tail(tmp_path):
    _, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    asyncio.run(log.append(records[:2]))
    asyncio.run(log.append(records[2:4]))
    log.close()
    path = metadata_partition_dir(tmp_path) / "00000000000000000000.log"
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # crash in the middle of the second batch
    reopened = LocalMetadataLog(tmp_path)
    assert [o for o, _ in reopened.read_committed()] == [0, 1]
    assert reopened.end_offset == 2
    assert asyncio.run(reopened.append(records[2:3])) == 2
    reopened.close()


def test_random_uuid_is_kafka_form():
    ids = {random_uuid() for _ in range(50)}
    assert len(ids) == 50
    for i in ids:
        assert len(i) == 22 and not i.startswith("-")
        uuid_from_str(i)


def test_format_and_ensure(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    cid = random_uuid()
    assert len(format_storage([a, b], a, 3, cid)) == 2
    meta = read_meta_properties(a)
    assert meta is not None and meta.cluster_id == cid and meta.node_id == 3
    assert (tmp_path / "a" / "meta.properties").read_text().count("cluster.id=") == 1
    with pytest.raises(StorageFormatError, match="already formatted"):
        format_storage([a], a, 3, cid)
    assert format_storage([a], a, 3, cid, ignore_formatted=True) == []
    assert ensure_formatted([a, b], a, 3, auto_format=False) == cid
    with pytest.raises(StorageFormatError, match=r"node\.id"):
        ensure_formatted([a, b], a, 4, auto_format=False)
    with pytest.raises(StorageFormatError, match="valid UUID"):
        format_storage([str(tmp_path / "c")], str(tmp_path / "c"), 1, "not-a-uuid")


def test_ensure_formatted_auto(tmp_path):
    d = str(tmp_path / "data")
    with pytest.raises(StorageFormatError, match="riverbed storage format"):
        ensure_formatted([d], d, 1, auto_format=False)
    cid = ensure_formatted([d], d, 1, auto_format=True)
    assert ensure_formatted([d], d, 1, auto_format=False) == cid


def test_snapshot_rolls_and_bounds_the_log(tmp_path):
    image, records = sample_records()
    log = LocalMetadataLog(tmp_path, snapshot_bytes=1)
    asyncio.run(log.append(records[:4]))
    assert log.snapshot_due()
    head = replay_all(MetadataImage.EMPTY, records[:4])
    log.write_snapshot_sync(image_to_records(head), 4)
    assert not log.snapshot_due()
    asyncio.run(log.append(records[4:]))
    log.close()
    d = metadata_partition_dir(tmp_path)
    names = sorted(p.name for p in d.iterdir())
    assert "00000000000000000000.log" not in names  # covered by the snapshot, deleted
    assert "00000000000000000004.log" in names
    assert "00000000000000000004-0000000001.checkpoint" in names
    reopened = LocalMetadataLog(tmp_path)
    got = list(reopened.read_committed())
    assert replay_all(MetadataImage.EMPTY, [r for _, r in got]) == image
    assert got[-1][0] == len(records) - 1
    assert reopened.start_offset == 4 and reopened.end_offset == len(records)
    reopened.close()


def test_snapshot_must_end_at_log_end(tmp_path):
    _, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    asyncio.run(log.append(records[:3]))
    with pytest.raises(MetadataLogError, match="log end"):
        log.write_snapshot_sync([], 2)
    log.close()


def test_corrupt_snapshot_is_a_clear_error(tmp_path):
    _, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    asyncio.run(log.append(records[:3]))
    log.write_snapshot_sync(records[:3], 3)
    log.close()
    snap = metadata_partition_dir(tmp_path) / "00000000000000000003-0000000001.checkpoint"
    snap.write_bytes(snap.read_bytes()[:-7])
    reopened = LocalMetadataLog(tmp_path)
    with pytest.raises(MetadataLogError, match="snapshot"):
        list(reopened.read_committed())
    reopened.close()


def test_read_only_walk_never_truncates(tmp_path):
    _, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    asyncio.run(log.append(records[:3]))
    log.write_snapshot_sync(records[:3], 3)
    asyncio.run(log.append(records[3:5]))
    log.close()
    seg = metadata_partition_dir(tmp_path) / "00000000000000000003.log"
    seg.write_bytes(seg.read_bytes() + b"\x00\x01garbage")
    size = seg.stat().st_size
    got = list(read_metadata_log(tmp_path))
    assert [o for o, _ in got] == [2, 2, 2, 3, 4]
    assert [r for _, r in got][3:] == records[3:5]
    assert seg.stat().st_size == size  # the torn tail is left for the broker to recover
    assert [o for o, _ in read_metadata_log(tmp_path, use_snapshot=False)] == [3, 4]
    with pytest.raises(MetadataLogError, match="no metadata log"):
        list(read_metadata_log(tmp_path / "elsewhere"))


def test_write_failure_stops_appends(tmp_path):
    _, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    asyncio.run(log.append(records[:1]))

    def broken(batch):
        raise OSError(28, "No space left on device")

    log._write = broken
    with pytest.raises(MetadataLogError, match="No space left"):
        asyncio.run(log.append(records[1:2]))
    del log._write
    with pytest.raises(MetadataLogError, match="restart the node"):
        asyncio.run(log.append(records[1:2]))
    log.close()
    reopened = LocalMetadataLog(tmp_path)
    assert reopened.end_offset == 1
    reopened.close()


def test_control_batches_are_skipped(tmp_path):
    from riverbed.protocol.control_records import ControlRecordType, build_control_batch

    _, records = sample_records()
    log = LocalMetadataLog(tmp_path)
    asyncio.run(log.append(records[:2]))
    log.close()
    seg = metadata_partition_dir(tmp_path) / "00000000000000000000.log"
    control = build_control_batch(
        ControlRecordType.LEADER_CHANGE, b"\x00\x00", now_ms=0, base_offset=2
    )
    seg.write_bytes(seg.read_bytes() + control)
    reopened = LocalMetadataLog(tmp_path)
    assert [r for _, r in reopened.read_committed()] == records[:2]
    assert [r for _, r in read_metadata_log(tmp_path)] == records[:2]
    reopened.close()
