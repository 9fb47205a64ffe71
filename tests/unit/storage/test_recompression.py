"""A leader stores a client's batches in the topic's ``compression.type`` (Kafka's
LogValidator; `riverbed.storage.recompression`): the records read back are the ones
produced, every header field but the codec and CRC kept, control batches untouched, and a
batch that grows past ``max.message.bytes`` refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.records import (
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    validate_batch,
)
from riverbed.storage import LogConfig, ManualClock, PartitionLog, RecordTooLargeError
from riverbed.storage.log import ORIGIN_COORDINATOR

T0 = 1_700_000_000_000
CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def _records(n: int) -> list[SimpleRecord]:
    return [
        SimpleRecord(
            b"value-%d-" % i + b"x" * (i * 7 % 50),
            key=None if i % 3 == 0 else b"k%d" % i,
            timestamp=T0 + i,
            headers=[("h", b"%d" % i)],
        )
        for i in range(n)
    ]


def _log(tmp_path: Path, **config: object) -> PartitionLog:
    cfg = LogConfig.from_props(config)
    return PartitionLog(tmp_path / "t-0", "t", 0, cfg, ManualClock(T0))


def _stored(log: PartitionLog) -> bytes:
    return log.read(log.log_start_offset, 1 << 30).read_bytes()


@settings(max_examples=40, deadline=None)
@given(
    topic_codec=st.sampled_from([*CODECS, "producer"]),
    producer_codec=st.sampled_from(list(CODECS.values())),
    n=st.integers(1, 30),
)
def test_the_log_stores_the_topics_codec_and_the_same_records(
    tmp_path_factory: pytest.TempPathFactory,
    topic_codec: str,
    producer_codec: CompressionType,
    n: int,
) -> None:
    log = _log(tmp_path_factory.mktemp("log"), **{"compression.type": topic_codec})
    produced = build_batch(
        _records(n),
        compression=producer_codec,
        producer_id=77,
        producer_epoch=2,
        base_sequence=0,
    )
    info = log.append_as_leader(produced, leader_epoch=5)
    assert (info.first_offset, info.last_offset) == (0, n - 1)
    data = _stored(log)
    [(pos, h)] = list(iter_batches(data))
    validate_batch(data, pos)  # its CRC holds
    want = producer_codec if topic_codec == "producer" else CODECS[topic_codec]
    assert h.compression == want
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 2, 0)
    assert (h.base_offset, h.records_count, h.partition_leader_epoch) == (0, n, 5)
    assert (h.first_timestamp, h.max_timestamp) == (T0, T0 + n - 1)
    got = [(r.key, r.value, r.timestamp, r.headers) for r in iter_records(data)]
    assert got == [
        (r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers]) for r in _records(n)
    ]


def test_a_transaction_marker_is_stored_as_written(tmp_path: Path) -> None:
    log = _log(tmp_path, **{"compression.type": "zstd"})
    log.append_as_leader(
        build_batch(_records(2), producer_id=9, producer_epoch=0, base_sequence=0,
                    is_transactional=True),
        leader_epoch=0,
    )  # fmt: skip
    marker = build_end_txn_marker_batch(
        True, producer_id=9, producer_epoch=0, coordinator_epoch=0, now_ms=T0
    )
    log.append_as_leader(marker, leader_epoch=0, origin=ORIGIN_COORDINATOR)
    kinds = [
        (h.is_control, h.is_transactional, h.compression) for _, h in iter_batches(_stored(log))
    ]
    assert kinds == [(False, True, CompressionType.ZSTD), (True, True, CompressionType.NONE)]


def test_a_batch_that_grows_past_max_message_bytes_is_refused(tmp_path: Path) -> None:
    records = [SimpleRecord(b"a" * 900, timestamp=T0) for _ in range(4)]
    zstd = build_batch(records, compression=CompressionType.ZSTD)
    limit = len(zstd) + 100  # the producer's batch fits; stored uncompressed it does not
    log = _log(tmp_path, **{"compression.type": "uncompressed", "max.message.bytes": str(limit)})
    with pytest.raises(RecordTooLargeError, match=r"in uncompressed exceeds max\.message\.bytes"):
        log.append_as_leader(zstd, 0)
    assert log.log_end_offset == 0


def test_the_level_reaches_the_codec(tmp_path: Path) -> None:
    records = [SimpleRecord(b"abcdefgh" * 64 + b"%d" % i, timestamp=T0) for i in range(200)]
    sizes = {}
    for level in ("1", "9"):
        log = _log(
            tmp_path / level, **{"compression.type": "gzip", "compression.gzip.level": level}
        )
        log.append_as_leader(build_batch(records), 0)
        sizes[level] = len(_stored(log))
    assert sizes["9"] < sizes["1"]
