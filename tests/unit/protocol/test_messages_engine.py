"""The message engine on hand-checked byte vectors and its error behaviour."""

from __future__ import annotations

import uuid

import pytest

from riverbed.protocol import messages as m
from riverbed.protocol.codec import EncodeError, UnsupportedVersionError, source_for
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupHeartbeatResponse,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
    decode,
    encode,
)


def _produce() -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=3000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"abc")],
            )
        ],
    )


# (message, version, hex) checked by hand against the protocol guide.
VECTORS = [
    (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="foo")]), 1,
     "00000001" "0003666f6f"),
    (MetadataRequest(topics=None), 1, "ffffffff"),
    (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="foo")]), 9,
     "02" "04666f6f" "00" "01" "00" "00" "00"),
    (ApiVersionsRequest(client_software_name="kcat", client_software_version="1.0"), 3,
     "056b63617404312e3000"),
    (ApiVersionsRequest(), 0, ""),
    (_produce(), 3,
     "ffff" "ffff" "00000bb8" "00000001" "000174" "00000001" "00000000" "00000003616263"),
    (_produce(), 9,
     "00" "ffff" "00000bb8" "02" "0274" "02" "00000000" "04616263" "00" "00" "00"),
    (ApiVersionsResponse(
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)],
        finalized_features_epoch=5), 3,
     "0000" "02" "001200000003" "00" "00000000" "01" "01" "08" "0000000000000005"),
]  # fmt: skip


@pytest.mark.parametrize(("msg", "version", "hexdata"), VECTORS)
def test_known_vectors(msg: m.Message, version: int, hexdata: str) -> None:
    assert encode(msg, version).hex() == hexdata
    assert decode(type(msg), bytes.fromhex(hexdata), version) == msg


def test_nullable_struct_marker() -> None:
    absent = encode(ConsumerGroupHeartbeatResponse(), 0)
    assert absent.endswith(b"\xff\x00")
    assignment = ConsumerGroupHeartbeatResponse.Assignment(
        topic_partitions=[
            ConsumerGroupHeartbeatResponse.TopicPartitions(
                topic_id=uuid.UUID(int=1), partitions=[3]
            )
        ]
    )
    present = encode(ConsumerGroupHeartbeatResponse(assignment=assignment), 0)
    tail = present[len(absent) - 2 :]
    assert tail[0] == 1  # present marker, then the struct
    assert decode(ConsumerGroupHeartbeatResponse, present, 0).assignment == assignment


def test_non_default_field_missing_from_version_is_rejected() -> None:
    with pytest.raises(UnsupportedVersionError, match="TransactionalId"):
        encode(ProduceRequest(transactional_id="tx"), 2)
    with pytest.raises(UnsupportedVersionError, match="AllowAutoTopicCreation"):
        encode(MetadataRequest(allow_auto_topic_creation=False), 3)
    # a nested field: FetchRequest.FetchPartition.LastFetchedEpoch appears in v12
    req = FetchRequest(
        topics=[
            FetchRequest.FetchTopic(
                topic="t", partitions=[FetchRequest.FetchPartition(last_fetched_epoch=4)]
            )
        ]
    )
    encode(req, 12)
    with pytest.raises(UnsupportedVersionError) as info:
        encode(req, 11)
    assert info.value.field == "FetchRequest.FetchPartition.LastFetchedEpoch"
    # CurrentLeaderEpoch (v9+) is ignorable: older versions silently drop it
    req.topics[0].partitions[0] = FetchRequest.FetchPartition(current_leader_epoch=4)
    assert (
        decode(FetchRequest, encode(req, 8), 8).topics[0].partitions[0].current_leader_epoch == -1
    )


def test_ignorable_field_is_dropped() -> None:
    data = encode(ApiVersionsResponse(throttle_time_ms=5), 0)
    assert decode(ApiVersionsResponse, data, 0).throttle_time_ms == 0


def test_unknown_tagged_fields_are_preserved() -> None:
    raw = bytes.fromhex("056b63617404312e30010702abcd")
    msg = decode(ApiVersionsRequest, raw, 3)
    assert msg._unknown_tagged_fields == [(7, b"\xab\xcd")]
    assert encode(msg, 3) == raw


def test_tagged_field_with_wrong_declared_size() -> None:
    # tag 1 (FinalizedFeaturesEpoch, int64) declared as 9 bytes
    raw = bytes.fromhex("00000100000000010109000000000000000500")
    with pytest.raises(ProtocolError, match="declared 9 bytes"):
        decode(ApiVersionsResponse, raw, 3)


def test_decode_errors_name_the_field() -> None:
    data = encode(_produce(), 3)
    with pytest.raises(ProtocolError) as info:
        decode(ProduceRequest, data[:-2], 3)
    err = info.value
    assert err.api_key == 0 and err.api_version == 3
    assert err.field == "ProduceRequest.PartitionProduceData.Records"
    with pytest.raises(ProtocolError, match="trailing"):
        decode(ProduceRequest, data + b"\x00", 3)


def test_null_where_not_nullable() -> None:
    with pytest.raises(ProtocolError) as info:
        decode(MetadataRequest, bytes.fromhex("ffffffff"), 0)
    assert info.value.field == "MetadataRequest.Topics"
    with pytest.raises(EncodeError):
        encode(MetadataRequest(topics=None), 0)


def test_encode_bad_values() -> None:
    with pytest.raises(EncodeError, match="Acks"):
        encode(ProduceRequest(acks=1 << 20), 3)
    with pytest.raises(EncodeError, match="Acks"):
        encode(ProduceRequest(acks="1"), 3)  # type: ignore[arg-type]


def test_unknown_version() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode(ProduceRequest(), 99)
    with pytest.raises(UnsupportedVersionError):
        decode(ProduceRequest, b"", 99)


def test_classes_and_lookup() -> None:
    assert m.get_message("ProduceRequest") is ProduceRequest
    assert m.request_class(0) is ProduceRequest
    assert m.response_class(1) is m.FetchResponse
    assert m.metadata_record_class(2) is m.TopicRecord
    with pytest.raises(ProtocolError):
        m.request_class(999)
    req = ProduceRequest()
    assert req.topic_data == [] and req.transactional_id is None
    assert ProduceRequest().topic_data is not req.topic_data  # fresh default per instance
    assert FetchRequest().replica_id == -1 and FetchRequest().max_bytes == 0x7FFFFFFF
    assert repr(ProduceRequest.PartitionProduceData(index=1)).startswith(
        "ProduceRequest.PartitionProduceData(index=1"
    )
    assert _produce() == _produce() and _produce() != ProduceRequest()
    assert _produce().to_dict()["topic_data"][0]["name"] == "t"
    with pytest.raises(TypeError):
        ProduceRequest(bogus=1)  # type: ignore[call-arg]


def test_records_stay_raw_bytes() -> None:
    data = encode(_produce(), 9)
    got = decode(ProduceRequest, memoryview(data), 9)
    assert got.topic_data[0].partition_data[0].records == b"abc"
    assert type(got.topic_data[0].partition_data[0].records) is bytes


def test_generated_source_is_specialised() -> None:
    src = source_for(m.message_spec(ProduceRequest), 3)
    assert "def d_ProduceRequest" in src and "def e_PartitionProduceData" in src
