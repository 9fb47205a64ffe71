"""A coordinator's own partition: acks=all appends and the read of a load.

The transaction coordinator's shell writes ``__transaction_state`` as the group
coordinator's writes ``__consumer_offsets``: a record batch appended through the partition
manager as leader (the same path as a produce with acks=all), refused up front when the
ISR is below ``min.insync.replicas``, then acknowledged once the ISR holds it (the replica
manager's delayed produce) or REQUEST_TIMED_OUT after the coordinator's timeout. The
error codes are the partition's (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, ...): each
coordinator maps them as Kafka's does.

A load reads the partition from its log start to its log end (Kafka's loaders read to the
log end: this leader wrote or replicated all of it, and a truncation below it means a new
leader epoch, hence another load); `log_entries` gives the transaction markers too.

While a node is becoming a coordinator (the image names it the partition's leader; the
replica is being created, the shard loaded, or what it loaded committed) a request is
held for up to READY_WAIT_MS (`wait_until_ready`) rather than answered
COORDINATOR_LOAD_IN_PROGRESS at once: clients back off after that answer (librdkafka's
JoinGroup ~3 s, its InitProducerId ~0.5 s) for a load that takes milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple, Protocol

from riverbed.protocol.control_records import ControlRecordType, decode_control_key
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.record_batch import iter_batches
from riverbed.protocol.records import SimpleRecord, build_batch, iter_records
from riverbed.server.request_permits import park_current_request
from riverbed.storage.errors import StorageError
from riverbed.storage.log import ORIGIN_COORDINATOR, AppendInfo, PartitionLog

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage
    from riverbed.server.broker.hosted import HostedPartition
    from riverbed.server.purgatory import Purgatory
    from riverbed.server.replication.manager import ReplicaManager

#: Most a request waits while this node is becoming its coordinator.
READY_WAIT_MS = 2_000
#: How often a waiting request looks again: nothing signals that a replica's log was
#: created (off the loop) or that a high watermark moved, so it polls, for at most
#: READY_WAIT_MS / READY_POLL_MS rounds.
READY_POLL_MS = 10

#: A record of a coordinator's partition: (key, value); a None value is a tombstone.
KeyValue = tuple[bytes, bytes | None]


class CoordinatorPartitions(Protocol):
    """What a coordinator uses of the node's `PartitionManager`."""

    @property
    def replicas(self) -> ReplicaManager | None: ...

    @property
    def purgatory(self) -> Purgatory: ...

    def get(self, topic: str, index: int) -> HostedPartition | None: ...

    def append(
        self, hosted: HostedPartition, batches: bytearray, *, origin: str = ...
    ) -> AppendInfo: ...


def append_records(
    partitions: CoordinatorPartitions,
    hosted: HostedPartition,
    records: list[KeyValue],
    compression: int,
    now_ms: int,
) -> int | ErrorCode:
    """Append ``records`` as one batch as leader: the offset after it, or why not (the
    partition's error code; nothing was appended)."""
    replicas = partitions.replicas
    if replicas is not None:  # acks=all: refused up front when the ISR is too small
        refused = replicas.check_produce(hosted, -1)
        if refused != ErrorCode.NONE:
            return refused
    batch = build_batch(
        [SimpleRecord(value=v, key=k, timestamp=now_ms) for k, v in records],
        now_ms=now_ms,
        compression=compression,
    )
    try:
        info = partitions.append(hosted, bytearray(batch), origin=ORIGIN_COORDINATOR)
    except StorageError as exc:
        return ErrorCode.of(exc.error_code)
    return info.last_offset + 1


async def wait_committed(
    partitions: CoordinatorPartitions, hosted: HostedPartition, end: int, timeout_ms: int
) -> ErrorCode:
    """NONE once the ISR holds every offset below ``end`` (min.insync.replicas held), else
    the partition's error (REQUEST_TIMED_OUT after ``timeout_ms``)."""
    replicas = partitions.replicas
    if replicas is not None:
        replicas.on_local_append(hosted)  # a leader alone in its ISR commits its tail now
        return await replicas.wait_for_acks(hosted, end, timeout_ms)
    ok = await partitions.purgatory.wait_until(
        [(hosted.topic, hosted.index)], lambda: hosted.log.high_watermark >= end, timeout_ms
    )
    return ErrorCode.NONE if ok else ErrorCode.REQUEST_TIMED_OUT


def park_committed(
    partitions: CoordinatorPartitions,
    hosted: HostedPartition,
    end: int,
    timeout_ms: int,
    done: Callable[[ErrorCode], None],
) -> bool:
    """`wait_committed` without a task or a future: ``done(code)`` once the ISR holds every
    offset below ``end`` (or with the partition's error), called by the replica manager,
    maybe before this returns (a leader alone in its ISR commits its tail at once); False,
    with nothing parked, when the node has no replica manager (await `wait_committed`).
    ``end`` is that of an `append_records`, whose append already told the replica
    manager (`PartitionManager.append`: a leader alone in its ISR moved its high
    watermark there), so the parked wait finds the tail committed without telling it
    again."""
    replicas = partitions.replicas
    if replicas is None:
        return False
    replicas.park_produce(hosted, end, timeout_ms, done)
    return True


class LogEntry(NamedTuple):
    """A keyed record of a coordinator's partition, or (``marker`` True / False) the
    COMMIT / ABORT marker of a producer; ``producer_id`` is -1 unless the batch is
    transactional."""

    offset: int
    producer_id: int
    key: bytes
    value: bytes | None
    marker: bool | None = None


async def wait_high_watermark(
    partitions: CoordinatorPartitions, hosted: HostedPartition, end: int, timeout_ms: int
) -> bool:
    """True once the high watermark reaches ``end`` (what a load read is committed; no
    ``min.insync.replicas`` condition, as for a read), False after ``timeout_ms``."""
    replicas = partitions.replicas
    if replicas is not None:
        replicas.on_local_append(hosted)  # a leader alone in its ISR commits its tail now
    return await partitions.purgatory.wait_until(
        [(hosted.topic, hosted.index)], lambda: hosted.log.high_watermark >= end, timeout_ms
    )


def log_records(plog: PartitionLog, end: int, read_bytes: int) -> Iterator[KeyValue]:
    """Every keyed record of the partition below ``end`` in log order (worker thread:
    file reads), ``read_bytes`` at a time; control batches are skipped."""
    for entry in log_entries(plog, end, read_bytes):
        if entry.marker is None:
            yield entry.key, entry.value


def log_entries(plog: PartitionLog, end: int, read_bytes: int) -> Iterator[LogEntry]:
    """`log_records` with offsets, transactional producers and the transaction markers
    (the group coordinator's transactional offset commits are pending until them)."""
    offset = plog.log_start_offset
    while offset < end:
        # the ranges the read pinned, never the files by path: retention may delete a
        # segment meanwhile (the pinned fd still reads it), and a truncation makes the
        # read fail cleanly (StaleRangeError: the load fails and is started again)
        with plog.read(offset, read_bytes, end) as result:
            if not result.ranges:
                break
            data = result.read_bytes()
        for pos, h in iter_batches(data):
            pid = h.producer_id if h.is_transactional else -1
            for rec in iter_records(memoryview(data)[pos : pos + h.size]):
                if rec.key is None:
                    continue
                if not h.is_control:
                    value = None if rec.value is None else bytes(rec.value)
                    yield LogEntry(rec.offset, pid, bytes(rec.key), value)
                    continue
                kind = decode_control_key(rec.key).type
                if pid >= 0 and kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                    commit = kind == ControlRecordType.COMMIT
                    yield LogEntry(rec.offset, pid, b"", None, commit)
        if result.next_offset <= offset:
            break
        offset = result.next_offset


def read_records(plog: PartitionLog, read_bytes: int) -> tuple[list[KeyValue], int]:
    """Every keyed record of the partition to its log end, and that end."""
    end = int(plog.log_end_offset)
    return list(log_records(plog, end, read_bytes)), end


def led_partitions(
    image: MetadataImage, topic: str, node_id: int, partitions: CoordinatorPartitions
) -> dict[int, int]:
    """partition -> leader epoch of every partition of ``topic`` ``node_id`` leads and
    hosts (the shards its coordinator loads)."""
    t = image.topic(topic)
    if t is None:
        return {}
    return {
        p: reg.leader_epoch
        for p, reg in t.partitions.items()
        if reg.leader == node_id and partitions.get(topic, p) is not None
    }


async def wait_until_ready(becoming_ready: Callable[[], bool]) -> None:
    """Until ``becoming_ready()`` is false (it would answer
    COORDINATOR_LOAD_IN_PROGRESS), for at most READY_WAIT_MS; the request holds no
    handler permit meanwhile. The caller answers whatever it finds after."""
    for _ in range(READY_WAIT_MS // READY_POLL_MS):
        if not becoming_ready():
            return
        park_current_request()
        await asyncio.sleep(READY_POLL_MS / 1000)
