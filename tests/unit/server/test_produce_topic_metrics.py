"""BrokerTopicMetrics of produce, counted by the produce handler at its append (Kafka's
ReplicaManager marks BytesIn / MessagesIn from the append): what they count equals what
the log took, for every produce version with record batches v2 (3-13; v13 names topics
by id) and for a request of several partitions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.unit.server.test_produce_record_errors import COMPACTED, PLAIN, Node

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import ProduceRequest, ProduceResponse
from riverbed.protocol.records import CompressionType, SimpleRecord, build_batch
from riverbed.server.broker import produce
from riverbed.server.network import RequestContext

P = ProduceRequest
#: Produce versions with record batches v2; from 13 topics are named by id (KIP-516).
VERSIONS = range(3, 14)
TOPIC_IDS_VERSION = 13


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = Node(tmp_path)
    yield n
    n.logs.shutdown()


def _batch(n: int, compression: CompressionType = CompressionType.NONE) -> bytes:
    return build_batch(
        [SimpleRecord(b"v%d" % i, key=b"k%d" % i) for i in range(n)], compression=compression
    )


def _topic(node: Node, version: int, name: str, parts: list[tuple[int, bytes]]) -> Any:
    data = [P.PartitionProduceData(index=i, records=records) for i, records in parts]
    if version >= TOPIC_IDS_VERSION:
        topic_id = node.broker.metadata.image.topic(name).topic_id
        return P.TopicProduceData(topic_id=topic_id, partition_data=data)
    return P.TopicProduceData(name=name, partition_data=data)


def _produce(node: Node, version: int, topics: list[Any], acks: int = 1) -> ProduceResponse | None:
    req = P(acks=acks, timeout_ms=1000, topic_data=topics)
    header = RequestHeader(int(ApiKey.PRODUCE), version, 7, "test")
    ctx = RequestContext(header, "peer", "PLAINTEXT", 1, 0)
    return asyncio.run(produce.handle_produce(node.broker, ctx, req))


def _log(node: Node, topic: str) -> tuple[int, int]:
    """(log end offset, bytes on disk) of the topic's partition 0."""
    log = node.logs.get(topic, 0)
    assert log is not None
    return int(log.log_end_offset), int(log.size_bytes)


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_and_messages_in_equal_what_was_appended(node: Node, version: int) -> None:
    """One partition, two batches in its records (one compressed): the counted records
    are the offsets the log advanced by, the counted bytes what it grew by."""
    records = _batch(3) + _batch(version, CompressionType.ZSTD)
    before = _log(node, PLAIN)
    resp = _produce(node, version, [_topic(node, version, PLAIN, [(0, records)])])
    assert resp is not None
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    end, size = _log(node, PLAIN)
    counters = node.stats.topics[PLAIN]  # by its name, v13's topic id included
    assert set(node.stats.topics) == {PLAIN}
    assert counters.messages_in == end - before[0] == 3 + version
    assert counters.bytes_in == size - before[1] == len(records)
    assert (counters.total_produce, counters.failed_produce) == (1, 0)


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_request_of_several_partitions_counts_each(node: Node, version: int) -> None:
    """Two topics, three partitions, one of them unknown (answered with an error: counted,
    failed, no bytes); the others' counts equal what their logs took."""
    plain, compacted = _batch(4), _batch(2) + _batch(5)
    before = {t: _log(node, t) for t in (PLAIN, COMPACTED)}
    topics = [
        _topic(node, version, PLAIN, [(0, plain), (7, _batch(9))]),  # partition 7: none
        _topic(node, version, COMPACTED, [(0, compacted)]),
    ]
    resp = _produce(node, version, topics)
    assert resp is not None
    codes = [[p.error_code for p in t.partition_responses] for t in resp.responses]
    assert codes == [[ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], [ErrorCode.NONE]]
    for topic, records, total, failed in ((PLAIN, plain, 2, 1), (COMPACTED, compacted, 1, 0)):
        end, size = _log(node, topic)
        counters = node.stats.topics[topic]
        assert counters.messages_in == end - before[topic][0]
        assert counters.bytes_in == size - before[topic][1] == len(records)
        assert (counters.total_produce, counters.failed_produce) == (total, failed)
    assert node.stats.all_topics().messages_in == 4 + 7
    # the network layer counts the request and each partition's answer (errorCounts)
    header = RequestHeader(int(ApiKey.PRODUCE), version, 7, "test")
    ctx = RequestContext(header, "peer", "PLAINTEXT", 1, 0)
    req = P(acks=1, timeout_ms=1000, topic_data=topics)
    assert node.stats.record(ctx, req, resp) == "Produce"
    assert node.stats.requests == {("Produce", version): 1}
    assert node.stats.errors == {
        ("Produce", "NONE"): 2,
        ("Produce", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
    }
    assert node.stats.all_topics().messages_in == 4 + 7  # not counted twice


def test_acks_0_counts_its_appends(node: Node) -> None:
    """acks=0 has no response (nothing for the network layer to read): the append
    counts."""
    records = _batch(2)
    assert _produce(node, 9, [_topic(node, 9, PLAIN, [(0, records)])], acks=0) is None
    counters = node.stats.topics[PLAIN]
    assert (counters.messages_in, counters.bytes_in) == (_log(node, PLAIN)[0], len(records))
    assert (counters.total_produce, counters.failed_produce) == (1, 0)


def test_no_counting_when_metrics_are_off(node: Node) -> None:
    node.broker.topic_stats = None  # riverbed.metrics.enable=false
    resp = _produce(node, 9, [_topic(node, 9, PLAIN, [(0, _batch(2))])])
    assert resp is not None and _log(node, PLAIN)[0] == 2
    assert node.stats.topics == {}


@pytest.mark.parametrize("version", [9, 13])
def test_a_refused_partition_counts_as_failed_without_bytes(node: Node, version: int) -> None:
    """One partition (the handler's loop-free path) answered with an error."""
    resp = _produce(node, version, [_topic(node, version, PLAIN, [(7, _batch(2))])])
    assert resp is not None
    code = resp.responses[0].partition_responses[0].error_code
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    counters = node.stats.topics[PLAIN]
    assert (counters.total_produce, counters.failed_produce) == (1, 1)
    assert (counters.bytes_in, counters.messages_in) == (0, 0)


class _TimingOutReplicas:
    """A replica manager whose every acks=all wait ends REQUEST_TIMED_OUT (the ISR never
    caught up): the append happened, the answer is an error."""

    def check_produce(self, hosted: object, acks: int) -> ErrorCode:
        return ErrorCode.NONE

    def on_local_append(self, hosted: object) -> None:
        """The high watermark stays: no follower fetches."""

    def acks_future(
        self, hosted: object, required_offset: int, timeout_ms: int
    ) -> asyncio.Future[ErrorCode]:
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        future.set_result(ErrorCode.REQUEST_TIMED_OUT)
        return future


@pytest.mark.parametrize("version", [9, 13])
def test_an_appended_partition_whose_acks_all_wait_failed_counts_once(
    node: Node, version: int
) -> None:
    """The append counts the partition in the total (and its bytes); its failed wait
    adds a failure, not a second partition; beside it a refused partition counts in both."""
    node.broker.partitions.replicas = _TimingOutReplicas()  # type: ignore[assignment]
    records = _batch(3)
    topics = [_topic(node, version, PLAIN, [(0, records), (7, _batch(2))])]
    resp = _produce(node, version, topics, acks=-1)
    assert resp is not None
    codes = [p.error_code for p in resp.responses[0].partition_responses]
    assert codes == [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    counters = node.stats.topics[PLAIN]
    assert (counters.total_produce, counters.failed_produce) == (2, 2)
    assert (counters.bytes_in, counters.messages_in) == (len(records), 3)
    one = _produce(node, version, [_topic(node, version, PLAIN, [(0, records)])], acks=-1)
    assert one is not None  # one partition: the handler's loop-free check sends it on
    assert one.responses[0].partition_responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert (counters.total_produce, counters.failed_produce) == (3, 3)
