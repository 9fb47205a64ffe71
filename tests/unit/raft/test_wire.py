"""Every raft RPC through riverbed.raft.wire and the message engine's bytes, both ways."""

from __future__ import annotations

import pytest

from riverbed.protocol.messages import decode, encode, request_class, response_class
from riverbed.raft import wire
from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Entry,
    EntryKind,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    ReplicaState,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from riverbed.raft.role_transitions import leader_change_value

REQUESTS = [
    VoteRequest("c", 5, 2, 4, 100, pre_vote=False, voter_id=3),
    VoteRequest("c", 6, 2, 4, 100, pre_vote=True, voter_id=1),
    BeginQuorumEpochRequest("c", 2, 5, voter_id=3),
    EndQuorumEpochRequest("c", 2, 5, (3, 1)),
    FetchRequest("c", 3, 5, 120, 4, 65536, 500),
    FetchRequest("c", 3, 5, 120, 4, 65536, 500, replica_directory_id="dir-3-1"),
    FetchSnapshotRequest("c", 3, 5, SnapshotId(100, 4), 4096, 1 << 20),
    DescribeQuorumRequest(),
]

ENTRIES = (
    Entry(10, 4, b"set a 1", batch_end=False),  # one operation of two records: one batch
    Entry(11, 4, b"set b 2"),
    Entry(12, 5, leader_change_value(2, [1, 2, 3]), EntryKind.LEADER_CHANGE),
    Entry(13, 5, b"set c 3"),
)

RESPONSES = [
    (52, VoteResponse(0, -1, 5, True)),
    (53, BeginQuorumEpochResponse(0, 2, 5)),
    (54, EndQuorumEpochResponse(74, 2, 6)),
    (1, FetchResponse(0, 2, 5, high_watermark=12, log_start_offset=10, entries=ENTRIES)),
    (1, FetchResponse(0, 2, 5, 12, 10, diverging_epoch=OffsetAndEpoch(11, 3))),
    (1, FetchResponse(0, 2, 5, 12, 10, snapshot_id=SnapshotId(10, 4))),
    (1, FetchResponse(6, 3, 7, -1, 0)),
    (59, FetchSnapshotResponse(0, 2, 5, SnapshotId(10, 4), 300, 100, b"x" * 100)),
    (59, FetchSnapshotResponse(98, 2, 5, SnapshotId(10, 4))),
    (
        55,
        DescribeQuorumResponse(
            0,
            2,
            5,
            12,
            (ReplicaState(1, 12, 5, 5), ReplicaState(2, 13, 6, 6)),
            (ReplicaState(7, 3),),
        ),
    ),
]


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_requests_roundtrip_through_wire_bytes(req: object) -> None:
    api_key, version, msg = wire.encode_request(req)  # type: ignore[arg-type]
    data = encode(msg, version)
    back = wire.decode_request(api_key, decode(request_class(api_key), data, version))
    assert back == req


@pytest.mark.parametrize(("api_key", "resp"), RESPONSES)
def test_responses_roundtrip_through_wire_bytes(api_key: int, resp: object) -> None:
    version = wire.WIRE_VERSIONS[api_key]
    data = encode(wire.encode_response(resp), version)  # type: ignore[arg-type]
    back = wire.decode_response(api_key, decode(response_class(api_key), data, version))
    assert back == resp


def test_entries_become_kafka_record_batches() -> None:
    from riverbed.protocol.control_records import ControlRecordType, read_control_records
    from riverbed.protocol.record_batch import iter_batches

    data = wire.entries_to_records(ENTRIES)
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for h in headers] == [
        (10, 4, False),
        (12, 5, True),
        (13, 5, False),
    ]
    pos = [p for p, _ in iter_batches(data)]
    control = read_control_records(data[pos[1] : pos[2]])
    assert control[0][1].type == ControlRecordType.LEADER_CHANGE
    assert wire.records_to_entries(data) == ENTRIES


def test_bad_wire_input_raises_typed_errors() -> None:
    with pytest.raises(wire.RaftWireError, match="bad records"):
        wire.records_to_entries(b"\x00" * 30)
    data = bytearray(wire.entries_to_records(ENTRIES[:2]))
    data[-1] ^= 0xFF  # CRC mismatch
    with pytest.raises(wire.RaftWireError):
        wire.records_to_entries(bytes(data))
    api_key, _version, msg = wire.encode_request(REQUESTS[0])
    msg.topics[0].topic_name = "other"  # type: ignore[attr-defined]
    with pytest.raises(wire.RaftWireError, match="__cluster_metadata"):
        wire.decode_request(api_key, msg)
    with pytest.raises(wire.RaftWireError, match="not a raft RPC"):
        wire.decode_request(0, msg)
    with pytest.raises(wire.RaftWireError, match="got a VoteRequest"):
        wire.decode_request(wire.API_FETCH, msg)
