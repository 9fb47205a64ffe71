"""KIP-467 per-record errors in Produce responses (issue 18 defect 7).

Kafka's LogValidator checks every record of a batch and collects the ones that fail:
a keyless record on a compacted topic (INVALID_RECORD) and a CreateTime out of
``message.timestamp.before.max.ms`` / ``after.max.ms`` (INVALID_TIMESTAMP). The batch is
refused as a whole, but from Produce v8 on the partition response lists each bad record
(``record_errors``: batch_index and batch_index_error_message) and an ``error_message``
summing them up, so that a client fails only those records. Older versions carry neither
field and answer as before.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, replay_all
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_response
from riverbed.protocol.messages import CreateTopicsRequest, ProduceRequest, ProduceResponse
from riverbed.protocol.records import CompressionType, SimpleRecord, build_batch
from riverbed.server.broker import produce
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.metrics.traffic import TrafficStats
from riverbed.server.network import RequestContext
from riverbed.server.purgatory import Purgatory
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager

NODE = 1
NOW = 1_700_000_000_000
HOUR = 3_600_000
COMPACTED, BOUNDED, BOTH, PLAIN = "compacted", "bounded", "both", "plain"
#: Produce versions with record batches v2 (3+); record_errors and error_message from 8.
PRODUCE_VERSIONS = range(3, 11)
RECORD_ERRORS_VERSION = 8


def registered_image(c: Controller) -> MetadataImage:
    """Broker 1 registered and unfenced on ``c``'s bootstrapped metadata."""
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records())
    eps = [BrokerEndpoint("PLAINTEXT", "host1", 9091)]
    image = replay_all(image, c.register_broker(image, 1, uuid.UUID(int=1), eps, None, 0).records)
    # a registration starts fenced (issue 18 defect 2): unfenced once caught up
    return replay_all(
        image, c.unfence_broker(image, 1, -1, 0, metadata_offset=image.offset).records
    )


def _image() -> MetadataImage:
    c = Controller(ControllerConfig(node_id=NODE))
    image = registered_image(c)
    CT = CreateTopicsRequest
    configs = {
        COMPACTED: {"cleanup.policy": "compact"},
        BOUNDED: {
            "message.timestamp.before.max.ms": str(HOUR),
            "message.timestamp.after.max.ms": str(HOUR),
        },
        BOTH: {"cleanup.policy": "compact", "message.timestamp.before.max.ms": str(HOUR)},
        PLAIN: {},
    }
    req = CT(
        topics=[
            CT.CreatableTopic(
                name=name,
                num_partitions=1,
                replication_factor=1,
                configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in conf.items()],
            )
            for name, conf in configs.items()
        ],
        timeout_ms=0,
        validate_only=False,
    )
    return replay_all(image, c.create_topics(image, req, 0).records)


class Node:
    def __init__(self, tmp_path: Path) -> None:
        purgatory = Purgatory()
        self.logs = LogManager([tmp_path / "logs"], ManualClock(NOW))
        self.partitions = PartitionManager(self.logs, NODE, {}, purgatory)
        metadata = SimpleNamespace(image=_image())
        self.partitions.apply_image(metadata.image)
        #: the produce handler's BrokerTopicMetrics (riverbed.metrics.enable)
        self.stats = TrafficStats(lambda _topic_id: None)
        self.broker: Any = SimpleNamespace(
            partitions=self.partitions,
            metadata=metadata,
            fetch_purgatory=purgatory,
            topic_stats=self.stats,
        )

    def produce(self, version: int, topic: str, batch: bytes) -> Any:
        """The partition response as a client decodes it at ``version``."""
        P = ProduceRequest
        req = P(
            acks=1,
            timeout_ms=1000,
            topic_data=[
                P.TopicProduceData(
                    name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        header = RequestHeader(int(ApiKey.PRODUCE), version, 7, "test")
        ctx = RequestContext(header, "peer", "PLAINTEXT", 1, 0)
        response = asyncio.run(produce.handle_produce(self.broker, ctx, req))
        decoded = decode_response(header, encode_response(header, response)[4:])
        assert isinstance(decoded, ProduceResponse)
        return decoded.responses[0].partition_responses[0]

    def log_end(self, topic: str) -> int:
        log = self.logs.get(topic, 0)
        assert log is not None
        return int(log.log_end_offset)


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = Node(tmp_path)
    yield n
    n.logs.shutdown()


def _indices(part: Any) -> list[int]:
    return [e.batch_index for e in part.record_errors]


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.ZSTD])
@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_keyless_records_on_a_compacted_topic_are_named(
    node: Node, version: int, compression: CompressionType
) -> None:
    keyless = set(range(3, 100, 10))  # 10 keyless records among 100
    records = [SimpleRecord(b"v", key=None if i in keyless else b"k%d" % i) for i in range(100)]
    part = node.produce(version, COMPACTED, build_batch(records, compression=compression))
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert part.base_offset == -1
    assert node.log_end(COMPACTED) == 0  # the batch is refused as a whole, as by Kafka
    if version < RECORD_ERRORS_VERSION:
        assert part.record_errors == [] and part.error_message is None
        return
    assert _indices(part) == sorted(keyless)
    for e in part.record_errors:
        assert e.batch_index_error_message == (
            f"Compacted topic cannot accept message without key in topic partition {COMPACTED}-0"
        )
    assert part.error_message.startswith(
        "One or more records have been rejected due to 10 record errors in total"
    )


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_timestamps_out_of_bounds_are_named(node: Node, version: int) -> None:
    stamps = {2: NOW - 2 * HOUR, 5: NOW + 2 * HOUR, 6: NOW - HOUR - 1}
    records = [SimpleRecord(b"v", timestamp=stamps.get(i, NOW - i)) for i in range(8)]
    part = node.produce(version, BOUNDED, build_batch(records))
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert node.log_end(BOUNDED) == 0
    if version < RECORD_ERRORS_VERSION:
        assert part.record_errors == [] and part.error_message is None
        return
    assert _indices(part) == [2, 5, 6]
    assert part.record_errors[0].batch_index_error_message == (
        f"Timestamp {NOW - 2 * HOUR} of message with offset 2 is out of range. "
        f"The timestamp should be within [{NOW - HOUR}, {NOW + HOUR}]"
    )
    assert part.error_message.startswith(
        "One or more records have been rejected due to invalid timestamp "
        f"(message.timestamp.before.max.ms {HOUR}, message.timestamp.after.max.ms {HOUR}): "
        "3 record errors in total"
    )
    assert str(NOW - 2 * HOUR) in part.error_message


@pytest.mark.parametrize("version", [RECORD_ERRORS_VERSION, 10])
def test_key_and_timestamp_errors_together(node: Node, version: int) -> None:
    """Kafka checks a record's key first (one error per record); INVALID_TIMESTAMP is the
    partition's error as soon as one record has a bad timestamp."""
    records = [
        SimpleRecord(b"v", key=None, timestamp=NOW - 2 * HOUR),
        SimpleRecord(b"v", key=b"k", timestamp=NOW),
        SimpleRecord(b"v", key=b"k", timestamp=NOW - 2 * HOUR),
        SimpleRecord(b"v", key=None, timestamp=NOW),
    ]
    part = node.produce(version, BOTH, build_batch(records))
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert _indices(part) == [0, 2, 3]
    messages = [e.batch_index_error_message for e in part.record_errors]
    assert [m.startswith("Compacted topic") for m in messages] == [True, False, True]
    assert messages[1].startswith(f"Timestamp {NOW - 2 * HOUR} of message with offset 2 ")


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_a_valid_batch_has_no_record_errors(node: Node, version: int) -> None:
    records = [SimpleRecord(b"v", key=b"k%d" % i) for i in range(5)]
    for topic in (COMPACTED, BOUNDED, PLAIN):
        part = node.produce(version, topic, build_batch(records, now_ms=NOW))
        assert part.error_code == ErrorCode.NONE
        assert part.record_errors == [] and part.error_message is None
        assert node.log_end(topic) == part.base_offset + 5


@pytest.mark.parametrize("version", [RECORD_ERRORS_VERSION, 10])
def test_batch_level_errors_carry_no_record_errors(node: Node, version: int) -> None:
    """A corrupt batch is refused as a whole, without per-record errors (as by Kafka)."""
    batch = bytearray(build_batch([SimpleRecord(b"v", key=b"k")], now_ms=NOW))
    batch[-1] ^= 0xFF  # breaks the CRC
    part = node.produce(version, PLAIN, bytes(batch))
    assert part.error_code == ErrorCode.CORRUPT_MESSAGE
    assert part.record_errors == []
