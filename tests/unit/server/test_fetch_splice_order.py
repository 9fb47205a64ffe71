"""Fetch responses of many topics and partitions, streamed from file ranges, in every
Fetch version the broker advertises.

Issue 18 defect 6: librdkafka lists the partitions of a Fetch in the order of its
rotating list of active partitions, so one topic comes back several times in one request
(A-1, B-0, B-1, A-0: topics A, B, A). The handler grouped the partitions per topic, the
encoder then wrote the records fields in another order than the file ranges were
collected, and ``splice_plan`` (which searched the tokens in collection order) closed the
connection: "fetch response token not found in the encoded response".

Each test compares the spliced stream with the same response encoded with its records
inline (byte for byte), and decodes it to check that every partition got its own data.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_response
from riverbed.protocol.messages import FetchResponse
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker.dispatch import BROKER_API_VERSIONS
from riverbed.server.broker.fetch import _build_response, _PartitionRead
from riverbed.server.broker.hosted import NotServed
from riverbed.server.network import SplicedResponse, plan_size, splice_plan
from riverbed.storage.log_files import FileRange

FETCH_VERSIONS = range(
    BROKER_API_VERSIONS[ApiKey.FETCH][0], BROKER_API_VERSIONS[ApiKey.FETCH][1] + 1
)
TOPICS = [f"topic-{i:02d}" for i in range(24)]
PARTITIONS = 3
#: From Fetch v13 on topics are named by id (KIP-516).
TOPIC_ID_VERSION = 13
TOPIC_IDS = {name: uuid.uuid5(uuid.NAMESPACE_OID, name) for name in TOPICS}
NAMES = {topic_id: name for name, topic_id in TOPIC_IDS.items()}


def _by_id(reads: list[_PartitionRead], version: int) -> list[_PartitionRead]:
    """Reads of a v13+ request name their topic by id, as the handler's do."""
    if version >= TOPIC_ID_VERSION:
        for r in reads:
            r.topic_id = TOPIC_IDS[r.topic]
    return reads


def _name(t: FetchResponse.FetchableTopicResponse) -> str:
    return t.topic or NAMES[t.topic_id]


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[tuple[Path, list[tuple[int, int]]]]:
    """A segment file of 8 batches: its path and each batch's (position, size)."""
    seg = tmp_path / "00000000000000000000.log"
    batches = [
        build_batch(
            [SimpleRecord(b"v%d-%d" % (i, j), key=b"k") for j in range(i + 1)],
            base_offset=i * 10,
            now_ms=1,
        )
        for i in range(8)
    ]
    data, spans, pos = bytearray(b"junk"), [], 4
    for b in batches:
        spans.append((pos, len(b)))
        data += b
        pos += len(b)
    seg.write_bytes(bytes(data))
    yield seg, spans


def _librdkafka_order(rotate: int) -> list[tuple[str, int]]:
    """Partitions in the order of librdkafka's active list, rotated as it does per fetch:
    a topic's partitions are not adjacent, so a topic appears several times."""
    order = [(t, p) for p in range(PARTITIONS) for t in TOPICS]
    return order[rotate:] + order[:rotate]


def _reads(
    seg: Path, spans: list[tuple[int, int]], order: list[tuple[str, int]], rng: random.Random
) -> tuple[list[_PartitionRead], dict[tuple[str, int], bytes]]:
    """One read per partition: with data (1-3 ranges), empty, or an error (some with the
    tagged current_leader / diverging_epoch in flexible versions)."""
    reads, expected = [], {}
    data = seg.read_bytes()
    for topic, p in order:
        kind = rng.randrange(5)
        if kind <= 1:
            chosen = rng.sample(spans, rng.randint(1, 3))
            ranges = [FileRange.open(seg, pos, size) for pos, size in chosen]
            size = sum(r.size for r in ranges)
            read = _PartitionRead(topic, p, 0, 90, 0, ranges, size)
            expected[(topic, p)] = b"".join(data[pos : pos + size] for pos, size in chosen)
        elif kind == 2:
            read = _PartitionRead(topic, p, 0, 90, 0, [], 0)
        elif kind == 3:
            leader = NotServed(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 7)
            read = _PartitionRead(topic, p, leader.error, -1, -1, [], 0, leader)
        else:
            read = _PartitionRead(topic, p, 0, 90, 0, [], 0, None, (3, 41))
        reads.append(read)
    return reads, expected


def _stream(seg: Path, header: RequestHeader, spliced: SplicedResponse) -> bytes:
    """The frame as the connection writes it: the plan's bytes and its ranges' bytes."""
    parts = splice_plan(encode_response(header, spliced.body)[4:], spliced)
    data = seg.read_bytes()
    out = bytearray(struct.pack(">i", plan_size(parts)))
    for part in parts:
        if isinstance(part, bytes):
            out += part
        else:
            out += b"".join(data[r.position : r.position + r.size] for r in part.ranges)
    return bytes(out)


def _inline(header: RequestHeader, spliced: SplicedResponse, seg: Path) -> bytes:
    """The same response with every token replaced by its records (tokens put back)."""
    data = seg.read_bytes()
    by_token = {
        fr.token: b"".join(data[r.position : r.position + r.size] for r in fr.ranges)
        for fr in spliced.files
    }
    parts = [p for t in spliced.body.responses for p in t.partitions]
    tokens = [p.records for p in parts]
    for p in parts:
        p.records = by_token.get(p.records, p.records)
    try:
        return encode_response(header, spliced.body)
    finally:
        for p, token in zip(parts, tokens, strict=True):
            p.records = token


def _decoded_records(header: RequestHeader, frame: bytes) -> dict[tuple[str, int], bytes]:
    body = decode_response(header, frame[4:])
    assert isinstance(body, FetchResponse)
    return {
        (_name(t), p.partition_index): p.records or b""
        for t in body.responses
        for p in t.partitions
    }


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_of_many_topics_splices_in_every_version(
    version: int, segment: tuple[Path, list[tuple[int, int]]]
) -> None:
    seg, spans = segment
    rng = random.Random(version)
    for rotate in (0, 1, 25, 50, 71):
        order = _librdkafka_order(rotate)
        reads, expected = _reads(seg, spans, order, rng)
        header = RequestHeader(ApiKey.FETCH, version, 1000 + rotate, "rdkafka")
        spliced = _build_response(_by_id(reads, version), version, read_committed=rotate % 2 == 0)
        assert isinstance(spliced, SplicedResponse)
        try:
            streamed = _stream(seg, header, spliced)
            assert streamed == _inline(header, spliced, seg)
        finally:
            for fr in spliced.files:
                for r in fr.ranges:
                    r.close()
        got = _decoded_records(header, streamed)
        assert {k: v for k, v in got.items() if v} == expected
        # Kafka keeps the request's order (it groups only adjacent partitions of a topic).
        wire = decode_response(header, streamed[4:])
        assert [
            (_name(t), p.partition_index) for t in wire.responses for p in t.partitions
        ] == order


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_splice_plan_finds_ranges_in_any_order(
    version: int, segment: tuple[Path, list[tuple[int, int]]]
) -> None:
    """Whatever order the encoder writes the records fields in (topic ids, tagged fields,
    a regrouping), the ranges are found where it put them."""
    seg, spans = segment
    rng = random.Random(1000 + version)
    reads, expected = _reads(seg, spans, _librdkafka_order(7), rng)
    spliced = _build_response(_by_id(reads, version), version, read_committed=False)
    assert isinstance(spliced, SplicedResponse)
    header = RequestHeader(ApiKey.FETCH, version, 9, "c")
    for _ in range(5):
        rng.shuffle(spliced.files)
        # the encoder's order differs from the list's: the body's topics reversed too
        spliced.body.responses.reverse()
        streamed = _stream(seg, header, spliced)
        assert streamed == _inline(header, spliced, seg)
        got = _decoded_records(header, streamed)
        assert {k: v for k, v in got.items() if v} == expected
    for fr in spliced.files:
        for r in fr.ranges:
            r.close()
