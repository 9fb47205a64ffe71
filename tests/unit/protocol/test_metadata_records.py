"""KRaft metadata record framing."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.protocol.strategies import message_strategy

from riverbed.protocol import messages as m
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.metadata_records import decode_metadata_record, encode_metadata_record

RECORD_CASES = [
    (name, version)
    for name, spec in sorted(m.all_message_specs().items())
    if spec.type == "metadata"
    for version in range(spec.valid_versions.lo, spec.valid_versions.hi + 1)
]


def test_topic_record_bytes() -> None:
    topic_id = uuid.UUID("00000000-0000-0000-0000-000000000001")
    data = encode_metadata_record(m.TopicRecord(name="foo", topic_id=topic_id), 0)
    # frame version 1, api key 2 (TopicRecord), version 0, compact "foo", uuid, no tags
    assert data.hex() == "01020004666f6f" + topic_id.bytes.hex() + "00"
    record, version = decode_metadata_record(data)
    assert version == 0
    assert record == m.TopicRecord(name="foo", topic_id=topic_id)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(RECORD_CASES), data=st.data())
def test_every_record_roundtrips(case: tuple[str, int], data: st.DataObject) -> None:
    name, version = case
    cls = m.get_message(name)
    record = data.draw(message_strategy(cls, version))
    assert decode_metadata_record(encode_metadata_record(record, version)) == (record, version)


def test_bad_frames() -> None:
    good = encode_metadata_record(m.NoOpRecord(), 0)
    with pytest.raises(ProtocolError, match="frame version"):
        decode_metadata_record(b"\x00" + good[1:])
    with pytest.raises(ProtocolError, match="unknown metadata record type"):
        decode_metadata_record(b"\x01\x7f\x00\x00")
    with pytest.raises(ProtocolError, match="no version"):
        decode_metadata_record(b"\x01\x02\x63\x00")
    with pytest.raises(ProtocolError):
        decode_metadata_record(b"\x01")
    with pytest.raises(TypeError):
        encode_metadata_record(m.ProduceRequest(), 0)
