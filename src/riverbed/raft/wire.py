"""Translation between the raft core's dataclasses and Kafka's wire messages.

Each RPC is one partition of one topic, ``__cluster_metadata``-0, as KRaft sends it (a
Fetch naming the topic by id ``AAAAAAAAAAAAAAAAAAAAAQ`` = UUID(int=1), v13+, is accepted):

=================  =======  =====================================================
core               api key  wire (version riverbed sends)
=================  =======  =====================================================
VoteRequest        52       VoteRequest v1; PreVote (KIP-996 v2 field) travels as
                            tagged field ``PRE_VOTE_TAG`` of PartitionData, which
                            Kafka ignores
BeginQuorumEpoch   53       v1
EndQuorumEpoch     54       v1 (PreferredCandidates from preferred_successors)
Fetch              1        v12: ReplicaId (+ directory id as tagged field
                            ``DIRECTORY_ID_TAG``), FetchOffset,
                            LastFetchedEpoch; response DivergingEpoch,
                            CurrentLeader, SnapshotId, HighWatermark, LogStartOffset,
                            Records = record batches (below)
FetchSnapshot      59       v0: SnapshotId, Position, MaxBytes; response Size,
                            Position, UnalignedRecords = the snapshot bytes
DescribeQuorum     55       v1
=================  =======  =====================================================

Records: each raft batch (one controller operation, ``Entry.batch_end`` on its last entry)
is one record batch (``partitionLeaderEpoch`` = the epoch); a LeaderChange entry is a
control batch of its own with a LEADER_CHANGE record whose value is the
LeaderChangeMessage (the entry value). Decoding
validates CRCs and offsets and raises ``RaftWireError`` for anything malformed.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

from riverbed.protocol.control_records import ControlRecordType, build_control_batch
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    BeginQuorumEpochRequest as WBeginReq,
)
from riverbed.protocol.messages import (
    BeginQuorumEpochResponse as WBeginResp,
)
from riverbed.protocol.messages import (
    DescribeQuorumRequest as WDescReq,
)
from riverbed.protocol.messages import (
    DescribeQuorumResponse as WDescResp,
)
from riverbed.protocol.messages import (
    EndQuorumEpochRequest as WEndReq,
)
from riverbed.protocol.messages import (
    EndQuorumEpochResponse as WEndResp,
)
from riverbed.protocol.messages import (
    FetchRequest as WFetchReq,
)
from riverbed.protocol.messages import (
    FetchResponse as WFetchResp,
)
from riverbed.protocol.messages import (
    FetchSnapshotRequest as WSnapReq,
)
from riverbed.protocol.messages import (
    FetchSnapshotResponse as WSnapResp,
)
from riverbed.protocol.messages import (
    Message,
)
from riverbed.protocol.messages import (
    VoteRequest as WVoteReq,
)
from riverbed.protocol.messages import (
    VoteResponse as WVoteResp,
)
from riverbed.protocol.record_batch import LOG_OVERHEAD, iter_batches
from riverbed.protocol.records import SimpleRecord, build_batch, iter_records
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
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from riverbed.storage.layout import METADATA_TOPIC

METADATA_TOPIC_ID = uuid.UUID(int=1)
PRE_VOTE_TAG = 0x7B0  # riverbed's tagged field for KIP-996 PreVote on Vote v0-1
DIRECTORY_ID_TAG = 0x7B1  # riverbed's tagged field for KIP-853 ReplicaDirectoryId on Fetch v12
DIRECTORY_ID_BYTES_MAX = 64
FETCH_RESPONSE_ENTRIES_MAX = 100_000  # records decoded from one Fetch response

API_FETCH = 1
API_VOTE = 52
API_BEGIN_QUORUM_EPOCH = 53
API_END_QUORUM_EPOCH = 54
API_DESCRIBE_QUORUM = 55
API_FETCH_SNAPSHOT = 59

WIRE_VERSIONS: dict[int, int] = {
    API_FETCH: 12,  # the broker advertises Fetch 0-12; v12 has every KRaft field
    API_VOTE: 1,
    API_BEGIN_QUORUM_EPOCH: 1,
    API_END_QUORUM_EPOCH: 1,
    API_DESCRIBE_QUORUM: 1,
    API_FETCH_SNAPSHOT: 0,
}


M = TypeVar("M", bound=Message)


class RaftWireError(ValueError):
    """A wire message cannot be a KRaft RPC for ``__cluster_metadata``-0."""


# --- records ------------------------------------------------------------------------------


def entries_to_records(entries: Iterable[Entry], now_ms: int = -1) -> bytes:
    """One Kafka record batch per raft batch (``Entry.batch_end`` closes one); a trailing
    run without ``batch_end`` (a read cut at the log end) is a batch too."""
    out: list[bytes] = []
    run: list[Entry] = []

    def flush() -> None:
        if not run:
            return
        first = run[0]
        if first.kind is EntryKind.LEADER_CHANGE:
            if len(run) != 1:
                raise ValueError(f"LeaderChange batch at {first.offset} has {len(run)} records")
            out.append(
                build_control_batch(
                    ControlRecordType.LEADER_CHANGE,
                    first.value,
                    now_ms=now_ms,
                    base_offset=first.offset,
                    partition_leader_epoch=first.epoch,
                )
            )
        else:
            out.append(
                build_batch(
                    [SimpleRecord(e.value) for e in run],
                    base_offset=first.offset,
                    partition_leader_epoch=first.epoch,
                    now_ms=now_ms,
                )
            )
        run.clear()

    for e in entries:
        if run and (
            e.epoch != run[-1].epoch or e.kind != run[-1].kind or e.offset != run[-1].offset + 1
        ):
            # one batch has one epoch, one kind and contiguous offsets: splitting it here
            # would publish half an operation downstream
            raise ValueError(f"entry at offset {e.offset} does not continue its batch")
        run.append(e)
        if e.batch_end:
            flush()
    flush()
    return b"".join(out)


def records_to_entries(data: bytes | None) -> tuple[Entry, ...]:
    """Entries of whole record batches; the last record of each batch ends a raft batch
    (so a log written when one batch could hold several appends decodes as well)."""
    if not data:
        return ()
    out: list[Entry] = []
    view = memoryview(data)
    try:
        for pos, h in iter_batches(view):
            batch = bytes(view[pos : pos + LOG_OVERHEAD + h.batch_length])
            kind = EntryKind.LEADER_CHANGE if h.is_control else EntryKind.DATA
            first = len(out)
            for rec in iter_records(batch, verify=False):
                if rec.value is None:
                    raise RaftWireError(f"record at offset {rec.offset} has a null value")
                out.append(Entry(rec.offset, h.partition_leader_epoch, rec.value, kind, False))
                if len(out) > FETCH_RESPONSE_ENTRIES_MAX:
                    raise RaftWireError(
                        f"more than {FETCH_RESPONSE_ENTRIES_MAX} records in one response"
                    )
            if len(out) > first:
                out[-1] = replace(out[-1], batch_end=True)
    except ProtocolError as exc:
        raise RaftWireError(f"bad records in fetch response: {exc}") from None
    for a, b in itertools.pairwise(out):
        if b.offset != a.offset + 1 or b.epoch < a.epoch:
            raise RaftWireError(f"records out of order at offset {b.offset}")
    return tuple(out)


# --- requests -----------------------------------------------------------------------------


def encode_request(req: Request) -> tuple[int, int, Message]:
    """(api key, version, wire message) for a core request."""
    msg: Message
    if isinstance(req, VoteRequest):
        api_key, msg = API_VOTE, _vote_request(req)
    elif isinstance(req, BeginQuorumEpochRequest):
        api_key, msg = API_BEGIN_QUORUM_EPOCH, _begin_epoch_request(req)
    elif isinstance(req, EndQuorumEpochRequest):
        api_key, msg = API_END_QUORUM_EPOCH, _end_epoch_request(req)
    elif isinstance(req, FetchRequest):
        api_key, msg = API_FETCH, _fetch_request(req)
    elif isinstance(req, FetchSnapshotRequest):
        api_key, msg = API_FETCH_SNAPSHOT, _fetch_snapshot_request(req)
    elif isinstance(req, DescribeQuorumRequest):
        api_key = API_DESCRIBE_QUORUM
        partitions = [WDescReq.PartitionData()]
        msg = WDescReq(
            topics=[WDescReq.TopicData(topic_name=METADATA_TOPIC, partitions=partitions)]
        )
    else:
        raise TypeError(f"not a raft request: {type(req).__name__}")
    return api_key, WIRE_VERSIONS[api_key], msg


def _vote_request(req: VoteRequest) -> WVoteReq:
    vp = WVoteReq.PartitionData(
        partition_index=0,
        candidate_epoch=req.candidate_epoch,
        candidate_id=req.candidate_id,
        last_offset_epoch=req.last_offset_epoch,
        last_offset=req.last_offset,
    )
    if req.pre_vote:
        vp._unknown_tagged_fields = [(PRE_VOTE_TAG, b"\x01")]
    return WVoteReq(
        cluster_id=req.cluster_id,
        voter_id=req.voter_id,
        topics=[WVoteReq.TopicData(topic_name=METADATA_TOPIC, partitions=[vp])],
    )


def _begin_epoch_request(req: BeginQuorumEpochRequest) -> WBeginReq:
    bp = WBeginReq.PartitionData(
        partition_index=0, leader_id=req.leader_id, leader_epoch=req.leader_epoch
    )
    return WBeginReq(
        cluster_id=req.cluster_id,
        voter_id=req.voter_id,
        topics=[WBeginReq.TopicData(topic_name=METADATA_TOPIC, partitions=[bp])],
    )


def _end_epoch_request(req: EndQuorumEpochRequest) -> WEndReq:
    ep = WEndReq.PartitionData(
        partition_index=0,
        leader_id=req.leader_id,
        leader_epoch=req.leader_epoch,
        preferred_candidates=[
            WEndReq.ReplicaInfo(candidate_id=c) for c in req.preferred_successors
        ],
    )
    return WEndReq(
        cluster_id=req.cluster_id,
        topics=[WEndReq.TopicData(topic_name=METADATA_TOPIC, partitions=[ep])],
    )


def _fetch_request(req: FetchRequest) -> WFetchReq:
    fp = WFetchReq.FetchPartition(
        partition=0,
        current_leader_epoch=req.current_leader_epoch,
        fetch_offset=req.fetch_offset,
        last_fetched_epoch=req.last_fetched_epoch,
        partition_max_bytes=req.max_bytes,
    )
    if req.replica_directory_id:
        fp._unknown_tagged_fields = [
            (DIRECTORY_ID_TAG, req.replica_directory_id.encode()[:DIRECTORY_ID_BYTES_MAX])
        ]
    return WFetchReq(
        cluster_id=req.cluster_id,
        replica_id=req.replica_id,
        max_wait_ms=req.max_wait_ms,
        min_bytes=1,
        max_bytes=req.max_bytes,
        topics=[WFetchReq.FetchTopic(topic=METADATA_TOPIC, partitions=[fp])],
    )


def _fetch_snapshot_request(req: FetchSnapshotRequest) -> WSnapReq:
    sp = WSnapReq.PartitionSnapshot(
        partition=0,
        current_leader_epoch=req.current_leader_epoch,
        snapshot_id=WSnapReq.SnapshotId(
            end_offset=req.snapshot_id.end_offset, epoch=req.snapshot_id.epoch
        ),
        position=req.position,
    )
    return WSnapReq(
        cluster_id=req.cluster_id,
        replica_id=req.replica_id,
        max_bytes=req.max_bytes,
        topics=[WSnapReq.TopicSnapshot(name=METADATA_TOPIC, partitions=[sp])],
    )


def _one(topics: list[Any], what: str, name_attr: str, part_attr: str) -> Any:
    """The single partition 0 of ``__cluster_metadata`` in a KRaft RPC."""
    if len(topics) != 1:
        raise RaftWireError(f"{what}: expected one topic, got {len(topics)}")
    topic = topics[0]
    name = getattr(topic, name_attr, "")
    topic_id = getattr(topic, "topic_id", None)
    if name != METADATA_TOPIC and not (not name and topic_id == METADATA_TOPIC_ID):
        raise RaftWireError(f"{what}: topic {name or topic_id!r} is not {METADATA_TOPIC}")
    parts = topic.partitions
    if len(parts) != 1 or getattr(parts[0], part_attr) != 0:
        raise RaftWireError(f"{what}: expected partition 0 only")
    return parts[0]


def _expect(msg: Message, cls: type[M], what: str) -> M:
    if not isinstance(msg, cls):
        raise RaftWireError(f"{what}: got a {type(msg).__name__}")
    return msg


def decode_request(api_key: int, msg: Message) -> Request:
    if api_key == API_VOTE:
        msg = _expect(msg, WVoteReq, "Vote")
        p = _one(msg.topics, "Vote", "topic_name", "partition_index")
        pre = any(t == PRE_VOTE_TAG and v[:1] == b"\x01" for t, v in p._unknown_tagged_fields or ())
        return VoteRequest(
            cluster_id=msg.cluster_id or "",
            candidate_epoch=p.candidate_epoch,
            candidate_id=p.candidate_id,
            last_offset_epoch=p.last_offset_epoch,
            last_offset=p.last_offset,
            pre_vote=pre,
            voter_id=msg.voter_id,
        )
    if api_key == API_BEGIN_QUORUM_EPOCH:
        msg = _expect(msg, WBeginReq, "BeginQuorumEpoch")
        b = _one(msg.topics, "BeginQuorumEpoch", "topic_name", "partition_index")
        return BeginQuorumEpochRequest(
            msg.cluster_id or "", b.leader_id, b.leader_epoch, msg.voter_id
        )
    if api_key == API_END_QUORUM_EPOCH:
        msg = _expect(msg, WEndReq, "EndQuorumEpoch")
        e = _one(msg.topics, "EndQuorumEpoch", "topic_name", "partition_index")
        successors = tuple(c.candidate_id for c in e.preferred_candidates) or tuple(
            e.preferred_successors
        )
        return EndQuorumEpochRequest(msg.cluster_id or "", e.leader_id, e.leader_epoch, successors)
    if api_key == API_FETCH:
        msg = _expect(msg, WFetchReq, "Fetch")
        f = _one(msg.topics, "Fetch", "topic", "partition")
        replica = msg.replica_id if msg.replica_id != -1 else msg.replica_state.replica_id
        directory = ""
        for tag, value in f._unknown_tagged_fields or ():
            if tag == DIRECTORY_ID_TAG and len(value) <= DIRECTORY_ID_BYTES_MAX:
                directory = value.decode("utf-8", "replace")
        v17_dir = getattr(f, "replica_directory_id", None)
        if not directory and v17_dir not in (None, uuid.UUID(int=0)):
            directory = str(v17_dir)  # Fetch v17 carries it as a field
        return FetchRequest(
            cluster_id=msg.cluster_id or "",
            replica_id=replica,
            current_leader_epoch=f.current_leader_epoch,
            fetch_offset=f.fetch_offset,
            last_fetched_epoch=f.last_fetched_epoch,
            max_bytes=min(f.partition_max_bytes, msg.max_bytes),
            max_wait_ms=msg.max_wait_ms,
            replica_directory_id=directory,
        )
    if api_key == API_FETCH_SNAPSHOT:
        msg = _expect(msg, WSnapReq, "FetchSnapshot")
        s = _one(msg.topics, "FetchSnapshot", "name", "partition")
        return FetchSnapshotRequest(
            cluster_id=msg.cluster_id or "",
            replica_id=msg.replica_id,
            current_leader_epoch=s.current_leader_epoch,
            snapshot_id=SnapshotId(s.snapshot_id.end_offset, s.snapshot_id.epoch),
            position=s.position,
            max_bytes=msg.max_bytes,
        )
    if api_key == API_DESCRIBE_QUORUM:
        return DescribeQuorumRequest()
    raise RaftWireError(f"api key {api_key} is not a raft RPC")


# --- responses ----------------------------------------------------------------------------


def encode_response(resp: Response, now_ms: int = -1) -> Message:
    if isinstance(resp, VoteResponse):
        vp = WVoteResp.PartitionData(
            error_code=resp.error_code,
            leader_id=resp.leader_id,
            leader_epoch=resp.leader_epoch,
            vote_granted=resp.vote_granted,
        )
        return WVoteResp(topics=[WVoteResp.TopicData(topic_name=METADATA_TOPIC, partitions=[vp])])
    if isinstance(resp, BeginQuorumEpochResponse):
        bp = WBeginResp.PartitionData(
            error_code=resp.error_code, leader_id=resp.leader_id, leader_epoch=resp.leader_epoch
        )
        return WBeginResp(topics=[WBeginResp.TopicData(topic_name=METADATA_TOPIC, partitions=[bp])])
    if isinstance(resp, EndQuorumEpochResponse):
        ep = WEndResp.PartitionData(
            error_code=resp.error_code, leader_id=resp.leader_id, leader_epoch=resp.leader_epoch
        )
        return WEndResp(topics=[WEndResp.TopicData(topic_name=METADATA_TOPIC, partitions=[ep])])
    if isinstance(resp, FetchResponse):
        return _fetch_response(resp, now_ms)
    if isinstance(resp, FetchSnapshotResponse):
        return _fetch_snapshot_response(resp)
    if isinstance(resp, DescribeQuorumResponse):
        return _describe_quorum_response(resp)
    raise TypeError(f"not a raft response: {type(resp).__name__}")


def _fetch_response(resp: FetchResponse, now_ms: int) -> WFetchResp:
    fp = WFetchResp.PartitionData(
        partition_index=0,
        error_code=resp.error_code,
        high_watermark=resp.high_watermark,
        log_start_offset=resp.log_start_offset,
        current_leader=WFetchResp.LeaderIdAndEpoch(
            leader_id=resp.leader_id, leader_epoch=resp.leader_epoch
        ),
        records=entries_to_records(resp.entries, now_ms) if resp.entries else None,
    )
    if resp.diverging_epoch is not None:
        fp.diverging_epoch = WFetchResp.EpochEndOffset(
            epoch=resp.diverging_epoch.epoch, end_offset=resp.diverging_epoch.offset
        )
    if resp.snapshot_id is not None:
        fp.snapshot_id = WFetchResp.SnapshotId(
            end_offset=resp.snapshot_id.end_offset, epoch=resp.snapshot_id.epoch
        )
    return WFetchResp(
        responses=[WFetchResp.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=[fp])]
    )


def _fetch_snapshot_response(resp: FetchSnapshotResponse) -> WSnapResp:
    sp = WSnapResp.PartitionSnapshot(
        index=0,
        error_code=resp.error_code,
        snapshot_id=WSnapResp.SnapshotId(
            end_offset=resp.snapshot_id.end_offset, epoch=resp.snapshot_id.epoch
        ),
        current_leader=WSnapResp.LeaderIdAndEpoch(
            leader_id=resp.leader_id, leader_epoch=resp.leader_epoch
        ),
        size=resp.size,
        position=resp.position,
        unaligned_records=resp.data,
    )
    return WSnapResp(topics=[WSnapResp.TopicSnapshot(name=METADATA_TOPIC, partitions=[sp])])


def _describe_quorum_response(resp: DescribeQuorumResponse) -> WDescResp:
    def states(items: tuple[ReplicaState, ...]) -> list[WDescResp.ReplicaState]:
        return [
            WDescResp.ReplicaState(
                replica_id=r.replica_id,
                log_end_offset=r.log_end_offset,
                last_fetch_timestamp=r.last_fetch_timestamp,
                last_caught_up_timestamp=r.last_caught_up_timestamp,
            )
            for r in items
        ]

    dp = WDescResp.PartitionData(
        partition_index=0,
        error_code=resp.error_code,
        leader_id=resp.leader_id,
        leader_epoch=resp.leader_epoch,
        high_watermark=resp.high_watermark,
        current_voters=states(resp.current_voters),
        observers=states(resp.observers),
    )
    return WDescResp(topics=[WDescResp.TopicData(topic_name=METADATA_TOPIC, partitions=[dp])])


def decode_response(api_key: int, msg: Message) -> Response:
    if api_key == API_VOTE:
        msg = _expect(msg, WVoteResp, "Vote response")
        if not msg.topics:
            return VoteResponse(msg.error_code, -1, -1, False)
        v = _one(msg.topics, "Vote response", "topic_name", "partition_index")
        return VoteResponse(
            v.error_code or msg.error_code, v.leader_id, v.leader_epoch, v.vote_granted
        )
    if api_key in (API_BEGIN_QUORUM_EPOCH, API_END_QUORUM_EPOCH):
        return _decode_quorum_epoch_response(api_key, msg)
    if api_key == API_FETCH:
        return _decode_fetch_response(_expect(msg, WFetchResp, "Fetch response"))
    if api_key == API_FETCH_SNAPSHOT:
        msg = _expect(msg, WSnapResp, "FetchSnapshot response")
        if not msg.topics:
            return FetchSnapshotResponse(msg.error_code, -1, -1, SnapshotId(-1, -1))
        s = _one(msg.topics, "FetchSnapshot response", "name", "index")
        return FetchSnapshotResponse(
            error_code=s.error_code or msg.error_code,
            leader_id=s.current_leader.leader_id,
            leader_epoch=s.current_leader.leader_epoch,
            snapshot_id=SnapshotId(s.snapshot_id.end_offset, s.snapshot_id.epoch),
            size=s.size,
            position=s.position,
            data=s.unaligned_records or b"",
        )
    if api_key == API_DESCRIBE_QUORUM:
        return _decode_describe_quorum_response(_expect(msg, WDescResp, "DescribeQuorum response"))
    raise RaftWireError(f"api key {api_key} is not a raft RPC")


def _decode_quorum_epoch_response(api_key: int, msg: Message) -> Response:
    wire_cls: type[Message] = WBeginResp if api_key == API_BEGIN_QUORUM_EPOCH else WEndResp
    msg = _expect(msg, wire_cls, "QuorumEpoch response")
    out_cls = (
        BeginQuorumEpochResponse if api_key == API_BEGIN_QUORUM_EPOCH else EndQuorumEpochResponse
    )
    top_error = getattr(msg, "error_code", 0)
    topics = getattr(msg, "topics", [])
    if not topics:
        return out_cls(top_error, -1, -1)
    p = _one(topics, "QuorumEpoch response", "topic_name", "partition_index")
    return out_cls(p.error_code or top_error, p.leader_id, p.leader_epoch)


def _decode_fetch_response(msg: WFetchResp) -> FetchResponse:
    if not msg.responses:
        return FetchResponse(msg.error_code, -1, -1)
    f = _one(msg.responses, "Fetch response", "topic", "partition_index")
    div = None
    if f.diverging_epoch.epoch >= 0 and f.diverging_epoch.end_offset >= 0:
        div = OffsetAndEpoch(f.diverging_epoch.end_offset, f.diverging_epoch.epoch)
    snap = None
    if f.snapshot_id.end_offset >= 0 and f.snapshot_id.epoch >= 0:
        snap = SnapshotId(f.snapshot_id.end_offset, f.snapshot_id.epoch)
    return FetchResponse(
        error_code=f.error_code or msg.error_code,
        leader_id=f.current_leader.leader_id,
        leader_epoch=f.current_leader.leader_epoch,
        high_watermark=f.high_watermark,
        log_start_offset=f.log_start_offset,
        entries=records_to_entries(f.records),
        diverging_epoch=div,
        snapshot_id=snap,
    )


def _decode_describe_quorum_response(msg: WDescResp) -> DescribeQuorumResponse:
    if not msg.topics:
        return DescribeQuorumResponse(msg.error_code)
    d = _one(msg.topics, "DescribeQuorum response", "topic_name", "partition_index")

    def back(items: list[WDescResp.ReplicaState]) -> tuple[ReplicaState, ...]:
        return tuple(
            ReplicaState(
                r.replica_id, r.log_end_offset, r.last_fetch_timestamp, r.last_caught_up_timestamp
            )
            for r in items
        )

    return DescribeQuorumResponse(
        d.error_code or msg.error_code,
        d.leader_id,
        d.leader_epoch,
        d.high_watermark,
        back(d.current_voters),
        back(d.observers),
    )
