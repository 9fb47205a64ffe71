"""Fetch (api key 1) for consumers: file ranges of whole batches, long polling.

For every requested partition (all of them are answered: kafka-python rejects a full
response that lacks one) the handler reads from the fetch offset up to the high
watermark, or for ``isolation_level=READ_COMMITTED`` up to the last stable offset (the
first offset of the earliest open transaction, never above the high watermark), and then
answers the aborted transactions overlapping the fetched range from the segments'
``.txnindex`` (read_uncommitted: null; Kafka's ``FetchIsolation.TXN_COMMITTED``). Every
answer carries ``last_stable_offset``:

- unknown partition -> UNKNOWN_TOPIC_OR_PARTITION; a ``current_leader_epoch`` newer than
  ours -> UNKNOWN_LEADER_EPOCH, older -> FENCED_LEADER_EPOCH; a partition this node does
  not lead -> NOT_LEADER_OR_FOLLOWER (both with the current leader in ``current_leader``
  from v12 on, and its endpoint on the request's listener in ``node_endpoints`` from v16
  on, KIP-951); an offset below the log start or above the log end ->
  OFFSET_OUT_OF_RANGE;
- ``partition_max_bytes`` and the response's ``max_bytes`` bound the data, except that
  the first partition returning data returns at least one whole batch (so a batch larger
  than the limits still makes progress), and no partition ever returns part of a batch;
- the data is the storage's file ranges, streamed with sendfile (network.FileRecords),
  or, when they hold at most ``SPLICE_COPY_BYTES_MAX`` in all (a follower's or a
  tailing consumer's fetch at the log end), read into the response by the handler;
- an offset below the local log start of a tiered partition is read from the remote
  tier (tiered storage, :mod:`riverbed.server.broker.remote_fetch`): in-memory bytes.

When fewer than ``min_bytes`` are ready and no partition has an error, the request is
parked in the fetch purgatory for up to ``max_wait_ms`` and woken by appends to any of
its partitions. Fetch versions below 4 (message sets v0/v1) get UNSUPPORTED_VERSION for
partitions with data: batches are never down-converted. Fetch sessions (KIP-227) are
not kept: every response has session id 0, which clients treat as "no session, send
full requests".

Follower fetches (``replica_id`` >= 0, or v15+ ``ReplicaState`` with the follower's broker
epoch): the leader's partition core judges each one first (``riverbed.replication.leader``:
epoch fencing, a stale incarnation's broker epoch (KIP-903), KIP-320 DivergingEpoch,
follower progress, ISR and high watermark); a follower then reads up to the log end, not
the high watermark, and is parked like a consumer (``replica.fetch.wait.max.ms`` /
``replica.fetch.min.bytes`` are its max_wait_ms / min_bytes). Replica fetchers send v15;
from v13 on topics are named by id (UNKNOWN_TOPIC_ID for an unknown one). The v17
``ReplicaDirectoryId`` and v18 ``HighWatermark`` (KIP-853, KIP-1166) are KRaft voters'
fields, ignored here as Kafka's brokers ignore them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from riverbed.metadata.records import ZERO_UUID
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import FetchRequest, FetchResponse
from riverbed.replication.actions import FetchAnswer, FetchPosition
from riverbed.server.broker.hosted import (
    DEBUGGING_REPLICA_ID,
    HostedPartition,
    NotServed,
    last_stable_offset,
    leader_endpoints,
)
from riverbed.server.broker.remote_fetch import read_remote, remote_tier_serves
from riverbed.server.network import (
    SPLICE_COPY_BYTES_MAX,
    CloseConnection,
    FileRecords,
    RequestContext,
    SplicedResponse,
)
from riverbed.server.replication import cycle_trace
from riverbed.storage.errors import StorageError
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_files import FileRange, StaleRangeError
from riverbed.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

FetchPartition = FetchRequest.FetchPartition
#: FetchRequest.isolation_level of a read_committed consumer.
READ_COMMITTED = 1
#: Fetch versions from this one on are flexible (compact ``records`` length).
FETCH_FLEXIBLE_VERSION = 12
#: From this version on a response names the endpoints of the leaders it names (KIP-951).
FETCH_NODE_ENDPOINTS_VERSION = 16
#: Older Fetch versions expect message sets v0/v1; riverbed does not down-convert (like
#: Kafka with message.downconversion.enable=false: UNSUPPORTED_VERSION for such data).
FETCH_RECORD_BATCH_V2_VERSION = 4


@dataclass
class _PartitionRead:
    topic: str
    index: int
    error: int
    high_watermark: int
    log_start_offset: int
    ranges: list[FileRange]
    size: int
    #: the current leader, named with NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
    leader: NotServed | None = None
    #: KIP-320 (epoch, end offset) for a follower whose log diverges from the leader's
    diverging: tuple[int, int] | None = None
    data: bytes = b""  # in-memory records (the remote tier's, or small ranges read)
    remote_max_bytes: int = 0  # > 0: the offset lives in the remote tier (tiered storage)
    fetch_offset: int = -1
    topic_id: uuid.UUID = ZERO_UUID  # Fetch v13+ names topics by id
    last_stable_offset: int = -1  # -1: the high watermark (no log to ask)
    #: read_committed: the aborted transactions overlapping the data read
    aborted: list[AbortedTxn] | None = None
    end_offset: int = -1  # the offset after the last batch read


def _follower_read(
    broker: Broker,
    hosted: HostedPartition,
    p: FetchPartition,
    replica: tuple[int, int],
    reread: bool = False,
) -> FetchAnswer | None:
    """The leader core's verdict on a follower's fetch (None: no replication here); a
    ``reread`` (the purgatory completing a parked fetch) records no progress again."""
    replicas = broker.partitions.replicas
    if replica[0] < 0 or replicas is None:
        return None
    position = follower_position(replica, p)
    if reread:
        return replicas.follower_reread(hosted, position)
    return replicas.follower_fetch(hosted, position)


def replica_of(req: FetchRequest) -> tuple[int, int]:
    """(replica id, broker epoch) of a Fetch: v15+ ReplicaState (KIP-903), else the v0-14
    ReplicaId with an unknown epoch (-1); (-1, -1) for a consumer."""
    state = req.replica_state
    if state is not None and state.replica_id >= 0:
        return state.replica_id, state.replica_epoch
    return req.replica_id, -1


def follower_position(replica: tuple[int, int], p: FetchPartition) -> FetchPosition:
    """A follower's Fetch of one partition as the leader core takes it (also the
    replication simulation's leader side); ``replica`` as `replica_of` gives it."""
    replica_id, replica_epoch = replica
    return FetchPosition(
        replica_id, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, replica_epoch
    )


def _remote_read(
    broker: Broker,
    topic: str,
    p: FetchPartition,
    plog: PartitionLog,
    replica_id: int,
    hw: int,
    start: int,
    max_bytes: int,
) -> _PartitionRead | None:
    """The read of an offset below the local log start of a tiered partition (None: the
    offset is local, or the partition is not tiered here)."""
    if not remote_tier_serves(broker, topic, p) or p.fetch_offset >= plog.local_log_start_offset:
        return None  # (no remote tier here: nothing more is asked of the log)
    if replica_id >= 0:
        # Followers never read the remote tier (KIP-405): OFFSET_OUT_OF_RANGE with the
        # local log start, where the follower restarts its log (its remote log manager
        # then finds the rest in the remote tier).
        code, local = ErrorCode.OFFSET_OUT_OF_RANGE, plog.local_log_start_offset
        return _PartitionRead(topic, p.partition, code, hw, local, [], 0)
    read = _PartitionRead(topic, p.partition, 0, hw, start, [], 0)
    read.remote_max_bytes, read.fetch_offset = max_bytes, p.fetch_offset
    return read


def _read_partition(
    broker: Broker,
    topic: str,
    p: FetchPartition,
    budget: int,
    first: bool,
    replica: tuple[int, int],
    read_committed: bool = False,
    reread: bool = False,
) -> _PartitionRead:
    """One partition's read, its last stable offset and (read_committed) aborted
    transactions."""
    read = _read_partition_data(broker, topic, p, budget, first, replica, read_committed, reread)
    hosted = broker.partitions.get(topic, p.partition)
    if hosted is not None and read.high_watermark >= 0:
        read.last_stable_offset = min(last_stable_offset(hosted.log), read.high_watermark)
        if read_committed and read.ranges:
            read.aborted = hosted.log.aborted_transactions(p.fetch_offset, read.end_offset)
    return read


def _read_partition_data(
    broker: Broker,
    topic: str,
    p: FetchPartition,
    budget: int,
    first: bool,
    replica: tuple[int, int],
    read_committed: bool,
    reread: bool,
) -> _PartitionRead:
    replica_id = replica[0]
    hosted = broker.partitions.leader_partition(
        topic, p.partition, p, require_leader=replica_id != DEBUGGING_REPLICA_ID
    )
    if isinstance(hosted, NotServed):
        leader = hosted if hosted.names_leader else None
        return _PartitionRead(topic, p.partition, hosted.error, -1, -1, [], 0, leader)
    plog = hosted.log
    hw = upper = int(plog.high_watermark)
    if read_committed:
        upper = last_stable_offset(plog)
    start = plog.log_start_offset
    replicas = broker.partitions.replicas
    verdict = _follower_read(broker, hosted, p, replica, reread)
    if verdict is not None and replicas is not None:
        hw, upper = verdict.high_watermark, int(plog.log_end_offset)
        if verdict.error or verdict.diverging_epoch is not None:
            return _PartitionRead(
                topic, p.partition, verdict.error, hw, start, [], 0, None, verdict.diverging_epoch
            )
        allowance = replicas.leader_allowance(hosted, replica_id)
        if allowance == 0:
            # leader.replication.throttled.rate spent: an out-of-sync follower waits
            return _PartitionRead(topic, p.partition, 0, hw, start, [], 0)
        if allowance is not None:
            budget = min(budget, allowance)
    if p.fetch_offset < start or p.fetch_offset > plog.log_end_offset:
        return _PartitionRead(topic, p.partition, ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, [], 0)
    if p.fetch_offset >= upper or (budget <= 0 and not first):
        return _PartitionRead(topic, p.partition, 0, hw, start, [], 0)
    max_bytes = max(1, min(p.partition_max_bytes, budget))
    remote = _remote_read(broker, topic, p, plog, replica_id, hw, start, max_bytes)
    if remote is not None:
        return remote
    try:
        result = plog.read(p.fetch_offset, max_bytes, upper)
    except StorageError as exc:
        # local retention may have just moved the local start past the offset
        remote = _remote_read(broker, topic, p, plog, replica_id, hw, start, max_bytes)
        if remote is not None:
            return remote
        return _PartitionRead(topic, p.partition, exc.error_code, hw, start, [], 0)
    except OSError:
        code = ErrorCode.KAFKA_STORAGE_ERROR
        return _PartitionRead(topic, p.partition, code, hw, start, [], 0)
    ranges = list(result.ranges)
    size = sum(r.size for r in ranges)
    if size > max_bytes and not first:
        # Only the first partition with data may exceed the limits (one whole batch).
        result.close()
        return _PartitionRead(topic, p.partition, 0, hw, start, [], 0)
    if verdict is not None and replicas is not None:
        replicas.leader_sent(hosted, replica_id, size)
    read = _PartitionRead(topic, p.partition, 0, hw, start, ranges, size)
    read.end_offset = result.next_offset
    return read


def _read_all(
    broker: Broker, req: FetchRequest, quota_bytes_max: int | None = None, reread: bool = False
) -> list[_PartitionRead]:
    """Every partition's read; ``reread``: the purgatory's check of a parked fetch (a
    follower's progress was recorded when the fetch arrived, Kafka's ``updateFetchState =
    !readFromPurgatory``)."""
    budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    if quota_bytes_max is not None:  # Kafka: min(maxBytes, the quota window's bytes)
        budget = min(budget, quota_bytes_max)
    replica = replica_of(req)
    reads: list[_PartitionRead] = []
    first = True
    for topic in req.topics:
        name = _topic_name(broker, topic)
        for p in topic.partitions:
            if name is None:
                code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                r = _PartitionRead("", p.partition, code, -1, -1, [], 0)
            else:
                committed = req.isolation_level == READ_COMMITTED
                r = _read_partition(broker, name, p, budget, first, replica, committed, reread)
            r.topic_id = topic.topic_id
            if r.size:
                first = False
                budget -= r.size
            reads.append(r)
    return reads


def _topic_name(broker: Broker, topic: FetchRequest.FetchTopic) -> str | None:
    """The topic a Fetch names: by name (v0-12), or by id (v13+; None: unknown id)."""
    if topic.topic:
        return topic.topic
    found = broker.metadata.image.topic_by_id(topic.topic_id)
    return found.name if found is not None else None


def _close(reads: list[_PartitionRead]) -> None:
    """Release the pinned ranges of reads that will not be sent."""
    for r in reads:
        for rng in r.ranges:
            rng.close()


async def handle_fetch(
    broker: Broker, ctx: RequestContext, req: FetchRequest
) -> FetchResponse | SplicedResponse:
    version = ctx.header.api_version
    if req.session_id != 0:
        return FetchResponse(error_code=int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), session_id=0)
    consumer = replica_of(req)[0] < 0
    trace = None if consumer else cycle_trace.TRACE
    if trace is not None:
        trace.event("fetch_in", replica_of(req)[0], *_fetch_offsets(req))
    # a consumer's byte-rate quota bounds the read; the quotas themselves are applied to
    # the response once it is ready (`fetch_throttle`, from the dispatch)
    quota_max = broker.quotas.fetch_bytes_max(broker.metadata.image, ctx) if consumer else None
    reads = _read_all(broker, req, quota_max)
    remote = [r for r in reads if r.remote_max_bytes]
    if remote:  # the delayed remote fetch instead of the fetch purgatory
        await read_remote(broker, remote, req.isolation_level == READ_COMMITTED)
    ready = sum(r.size for r in reads)
    has_error = any(r.error or r.diverging for r in reads)  # answered at once
    if ready < req.min_bytes and req.max_wait_ms > 0 and not has_error and reads and not remote:
        keys = [(r.topic, r.index) for r in reads]

        def enough() -> bool:
            nonlocal reads
            _close(reads)
            reads = _read_all(broker, req, quota_max, reread=True)
            ready = sum(r.size for r in reads)
            return ready >= req.min_bytes or any(r.error or r.diverging for r in reads)

        # (``checked``: the reads above are the first check; nothing was awaited since)
        await broker.fetch_purgatory.wait_until(keys, enough, req.max_wait_ms, checked=True)
    if version < FETCH_RECORD_BATCH_V2_VERSION:
        for r in reads:
            if r.ranges:
                _close([r])
                r.error, r.ranges, r.size = int(ErrorCode.UNSUPPORTED_VERSION), [], 0
    endpoints: list[FetchResponse.NodeEndpoint] = []
    if version >= FETCH_NODE_ENDPOINTS_VERSION:
        leaders = [r.leader.leader_id for r in reads if r.leader is not None]
        endpoints = [
            FetchResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=rack)
            for i, h, p, rack in leader_endpoints(broker.metadata.image, leaders, ctx.listener_name)
        ]
    _read_small(reads)
    committed = req.isolation_level == READ_COMMITTED
    response = _build_response(reads, version, committed, endpoints)
    if trace is not None:
        for r, offset in zip(reads, _fetch_offsets(req), strict=False):
            trace.event("fetch_out", replica_of(req)[0], offset, r.end_offset, r.size)
    return response


def _read_small(reads: list[_PartitionRead]) -> None:
    """File ranges of at most ``SPLICE_COPY_BYTES_MAX`` in all (a follower's fetch at the
    log end, a tailing consumer's) read into the response here: the network layer would
    copy them into one frame anyway, and a plain response spares it the token, the
    `SplicedResponse` and the cut of the encoded bytes at the token (issue 23: on every
    replication cycle). Larger reads stay file ranges (sendfile). Each range is checked
    intact after its read, as the network layer checks it; a truncated one closes the
    connection as it would have there."""
    if sum(r.size for r in reads if r.ranges) > SPLICE_COPY_BYTES_MAX:
        return
    try:
        for r in reads:
            ranges = r.ranges
            if ranges:
                r.data = (
                    ranges[0].read() if len(ranges) == 1 else b"".join(x.read() for x in ranges)
                )
    except StaleRangeError as exc:
        raise CloseConnection(
            f"a segment was truncated before the fetch response was sent: {exc}"
        ) from exc
    finally:
        for r in reads:
            if r.ranges:
                _close([r])
                r.ranges = []


def _fetch_offsets(req: FetchRequest) -> list[int]:
    return [p.fetch_offset for t in req.topics for p in t.partitions]


def _aborted(r: _PartitionRead) -> list[FetchResponse.AbortedTransaction]:
    return [
        FetchResponse.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
        for a in r.aborted or ()
    ]


def _build_response(
    reads: list[_PartitionRead],
    version: int,
    read_committed: bool,
    endpoints: list[FetchResponse.NodeEndpoint] | None = None,
) -> FetchResponse | SplicedResponse:
    """The response in the request's order of partitions.

    Kafka (``FetchResponse.toMessage``): "We have to keep the order of input
    topic-partition. Hence, we batch the partitions only if the last batch is in the same
    topic group." librdkafka lists a topic several times in one request (its list of
    partitions rotates), so a topic may come back several times too. The file records are
    then listed in wire order, which `splice_plan` finds in one scan.
    """
    topics: list[FetchResponse.FetchableTopicResponse] = []
    files: list[FileRecords] = []
    t: FetchResponse.FetchableTopicResponse | None = None
    for r in reads:
        if t is None or t.topic != r.topic or t.topic_id != r.topic_id:
            t = FetchResponse.FetchableTopicResponse(
                topic=r.topic, topic_id=r.topic_id, partitions=[]
            )
            topics.append(t)
        records: bytes
        if r.ranges:
            fr = FileRecords(r.ranges)
            files.append(fr)
            records = fr.token
        else:
            records = r.data
        part = FetchResponse.PartitionData(
            partition_index=r.index,
            error_code=int(r.error),
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset
            if r.last_stable_offset >= 0
            else r.high_watermark,
            log_start_offset=r.log_start_offset,
            # Kafka: null for read_uncommitted, the list of aborted transactions in the
            # range for read_committed.
            aborted_transactions=_aborted(r) if read_committed or version < 4 else None,
            preferred_read_replica=-1,
            records=records,
        )
        if r.diverging is not None and version >= FETCH_FLEXIBLE_VERSION:  # v12+ tagged
            part.diverging_epoch = FetchResponse.EpochEndOffset(
                epoch=r.diverging[0], end_offset=r.diverging[1]
            )
        if r.leader is not None and version >= FETCH_FLEXIBLE_VERSION:  # a v12+ tagged field
            part.current_leader = FetchResponse.LeaderIdAndEpoch(
                leader_id=r.leader.leader_id, leader_epoch=r.leader.leader_epoch
            )
        t.partitions.append(part)
    body = FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=topics,
        node_endpoints=endpoints or [],
    )
    if not files:
        return body
    return SplicedResponse(body=body, files=files, compact=version >= FETCH_FLEXIBLE_VERSION)
