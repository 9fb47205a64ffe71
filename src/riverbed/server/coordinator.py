"""The group coordinator's asyncio shell: shards per led ``__consumer_offsets`` partition.

Which groups this node coordinates follows the metadata image: a node leads partition
``p`` of ``__consumer_offsets`` -> it loads shard ``p`` (a `GroupShard`) by replaying
that partition from its log start to its log end in a worker thread
(COORDINATOR_LOAD_IN_PROGRESS meanwhile, and until the high watermark reaches the log
end it loaded: nothing is told from records a fail-over could still lose); it stops
leading (or the leader epoch changes) -> the shard is dropped and its parked requests
answer NOT_COORDINATOR. Leadership is checked against the metadata image whenever a
shard is used (`shard_of`), so a deposed coordinator never answers from memory. A group
whose partition another node leads is NOT_COORDINATOR; before the topic exists,
COORDINATOR_NOT_AVAILABLE (FindCoordinator creates it, as Kafka does).

Writes: a shard's records become one record batch appended through the partition
manager as leader (the same path as a produce, acks=all): refused up front when the ISR
is below ``min.insync.replicas``, then the shard hears back once the ISR holds the batch
(the replica manager's delayed produce), or REQUEST_TIMED_OUT after
``offsets.commit.timeout.ms``; append errors map as Kafka's coordinator maps them
(NOT_ENOUGH_REPLICAS -> COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER ->
NOT_COORDINATOR, a batch too large -> INVALID_COMMIT_OFFSET_SIZE). A shard is told of a
failed write only with its error (and puts its group back, `coordinator.writes`); a
write that failed after its append (not acknowledged in time) is in doubt, since its
records may still commit: the shard is then reloaded from the log.

Crash-only: an exception out of a shard's timers halts the node through its fault
handler (the start-up path reloads every group); one out of a request is answered
UNKNOWN_SERVER_ERROR by the broker's dispatch, as for any handler.

Delayed responses (a JoinGroup waiting for the rebalance, a SyncGroup waiting for the
leader, a commit waiting for its write) are futures; a request parked on one gives its
``queued.max.requests`` permit back. Timers run on the node's clock in one task that
sleeps until the earliest shard deadline (or a wake-up after any request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from riverbed.coordinator.consumer_records import parse_consumer_record
from riverbed.coordinator.group import Reply
from riverbed.coordinator.records import OFFSETS_TOPIC, parse_record, partition_for
from riverbed.coordinator.shard import GroupConfig, GroupShard, Write
from riverbed.metadata.records import ResourceType
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.coordinator_log import (
    CoordinatorPartitions,
    led_partitions,
    log_entries,
    wait_until_ready,
)
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.request_permits import park_current_request
from riverbed.server.supervise import Work, supervise_background
from riverbed.storage.clock import Clock
from riverbed.storage.errors import StorageError
from riverbed.storage.log import ORIGIN_COORDINATOR, PartitionLog

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage
    from riverbed.server.broker.hosted import HostedPartition
    from riverbed.server.config import ServerConfig

log = logging.getLogger(__name__)


class ImageSource(Protocol):
    """The node's current metadata image (`QuorumMetadata`)."""

    @property
    def image(self) -> MetadataImage: ...


#: Longest sleep of the timer task: also how often leadership is re-checked.
RECONCILE_INTERVAL_MS = 200
#: Bytes read per step while loading a partition (Kafka's offsets.load.buffer.size).
LOAD_READ_BYTES_DEFAULT = 5 * 1024 * 1024
#: Transaction markers kept for a partition that is loading (applied after the load when
#: it did not read them); beyond, the load starts again from the log.
LOADING_MARKERS_MAX = 10_000


def append_error(code: ErrorCode) -> ErrorCode:
    """What a group request answers for a failed ``__consumer_offsets`` write (Kafka's
    mapping in its group coordinator)."""
    if code in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT):
        return code
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if code in (
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_TXN_STATE,
    ):
        return code  # a TxnOffsetCommit of a fenced producer (its client aborts)
    return ErrorCode.NOT_COORDINATOR  # NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, ...


class CoordinatorError(Exception):
    """A request this node cannot serve for the group (a Kafka error code)."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.error_code = int(code)
        self.code = code


def _read_shard(
    plog: PartitionLog, partition: int, config: GroupConfig, read_bytes: int
) -> tuple[GroupShard, int]:
    """Replay one partition into a fresh shard (worker thread: file reads); returns it
    and the offset it was read to."""
    shard = GroupShard(partition, config, random.Random(int.from_bytes(os.urandom(8), "big")))
    # to the log end, as Kafka's loader: this leader wrote (or replicated) all of it, and
    # a truncation below it means a new leader epoch, hence a reload
    end = int(plog.log_end_offset)
    for entry in log_entries(plog, end, read_bytes):
        if entry.marker is not None:
            # a TxnOffsetCommit's records were pending until this marker
            shard.replay_marker(entry.producer_id, entry.marker)
            continue
        parsed = parse_record(entry.key, entry.value)
        if parsed is not None:
            shard.replay(parsed, entry.producer_id, entry.offset)
        elif (consumer := parse_consumer_record(entry.key, entry.value)) is not None:
            shard.replay_consumer(consumer)
    return shard, end


class GroupCoordinator:
    """This node's classic group coordinator (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        node_id: int,
        partitions: CoordinatorPartitions,
        metadata: ImageSource,
        clock: Clock,
        fault_handler: FaultHandler | None = None,
    ) -> None:
        self.config = config
        self.node_id = node_id
        self.partitions = partitions
        self.metadata = metadata
        self.clock = clock
        #: Crash-only: a failure in the timer loop (a core's tick) or in any background
        #: task of the coordinator halts the node (``supervise``).
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self.group_config = GroupConfig.from_config(config)
        #: group id -> its KIP-848 GROUP configs, shared by every shard (`on_image`)
        self.group_overrides: dict[str, Mapping[str, str]] = {}
        self._configs_seen: object = None
        self.commit_timeout_ms = config.get_int("offsets.commit.timeout.ms")
        #: offsets.topic.compression.codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
        self.compression = config.get_int("offsets.topic.compression.codec")
        self.retention_check_ms = config.get_int("offsets.retention.check.interval.ms")
        self.load_read_bytes = config.get_int("offsets.load.buffer.size")
        self.shards: dict[int, GroupShard] = {}
        self._epochs: dict[int, int] = {}
        #: partition -> the log end its shard was loaded to: it answers once committed
        self._load_end: dict[int, int] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        #: (partition, producer id) -> the KIP-890 check of a verified TxnOffsetCommit,
        #: made again right before its write is appended
        self._txn_guards: dict[tuple[int, int], Callable[[], bool]] = {}
        #: partition -> markers (offset, producer id, commit) appended while it loads
        self._loading_markers: dict[int, list[tuple[int, int, bool]]] = {}
        self._replies: dict[int, tuple[int, asyncio.Future[object]]] = {}
        self._next_reply = 0
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._closed = False
        #: FindCoordinator creates the internal topics once, whoever asks first.
        self.create_lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._timer_task is None:
            self._timer_task = self._spawn(self._timer_loop())

    def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for partition in list(self.shards):
            self._unload(partition)

    def _spawn(self, coro: Work) -> asyncio.Task[None]:
        return supervise_background("group coordinator task", coro, self.fault_handler, self._tasks)

    def on_image(self, image: MetadataImage) -> None:
        """A new metadata image: its GROUP configs become the shards' per-group session
        timeouts and heartbeat intervals (Kafka's GroupConfigManager, fed by the metadata
        publisher). Applied from a member's next heartbeat on."""
        if image.configs is self._configs_seen:
            return
        self._configs_seen = image.configs
        self.group_overrides.clear()
        self.group_overrides.update(
            (name, configs)
            for (rtype, name), configs in image.configs.items()
            if rtype == ResourceType.GROUP
        )

    # ------------------------------------------------------------------ leadership
    def reconcile(self) -> None:
        """Load the partitions this node now leads; unload the ones it no longer does."""
        if self._closed:
            return
        led = led_partitions(self.metadata.image, OFFSETS_TOPIC, self.node_id, self.partitions)
        for p in list(self.shards) + list(self._loading):
            if led.get(p) != self._epochs.get(p):
                self._unload(p)
        for p, epoch in led.items():
            if p not in self.shards and p not in self._loading:
                self._epochs[p] = epoch
                self._loading[p] = self._spawn(self._load(p, epoch))

    async def _load(self, partition: int, epoch: int) -> None:
        hosted = self.partitions.get(OFFSETS_TOPIC, partition)
        try:
            if hosted is None:  # deleted or moved away since reconcile saw it
                raise LookupError(f"{OFFSETS_TOPIC}-{partition} is not hosted here")
            shard, end = await asyncio.to_thread(
                _read_shard, hosted.log, partition, self.group_config, self.load_read_bytes
            )
        except Exception:
            log.exception("loading groups of %s-%d failed", OFFSETS_TOPIC, partition)
            self._loading.pop(partition, None)
            self._loading_markers.pop(partition, None)
            self._epochs.pop(partition, None)
            return
        if self._loading.get(partition) is not asyncio.current_task():
            return  # unloaded (or reloaded) meanwhile
        del self._loading[partition]
        for offset, producer_id, commit in self._loading_markers.pop(partition, []):
            if offset >= end:  # appended after the load read the log
                shard.replay_marker(producer_id, commit)
        shard.group_overrides = self.group_overrides
        shard.finish_load(self.clock.now_ms())
        self.shards[partition] = shard
        self._load_end[partition] = end
        replicas = self.partitions.replicas
        if replicas is not None:  # a leader alone in its ISR commits its tail at once
            replicas.on_local_append(hosted)
        log.info(
            "loaded %d groups of %s-%d (leader epoch %d)",
            len(shard.groups),
            OFFSETS_TOPIC,
            partition,
            epoch,
        )
        self._wake.set()

    def _unload(self, partition: int) -> None:
        task = self._loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self._loading_markers.pop(partition, None)
        self._epochs.pop(partition, None)
        self._load_end.pop(partition, None)
        if self.shards.pop(partition, None) is not None:
            log.info("unloaded groups of %s-%d", OFFSETS_TOPIC, partition)
        for rid, (p, fut) in list(self._replies.items()):
            if p == partition:
                del self._replies[rid]
                if not fut.done():
                    fut.set_exception(CoordinatorError(ErrorCode.NOT_COORDINATOR))

    def loading(self) -> bool:
        return bool(self._loading)

    # ------------------------------------------------------------------ transactions
    def hold_txn_guard(
        self, group_id: str, producer_id: int, still_holds: Callable[[], bool]
    ) -> tuple[int, int] | None:
        """Keep a verified TxnOffsetCommit's check for its write (KIP-890: a marker of the
        producer between the verification and the append means the transaction ended:
        the write is refused INVALID_TXN_STATE instead of opening a new one). Returns the
        key for `release_txn_guard` once the request is answered."""
        try:
            key = (self.partition_of(group_id), producer_id)
        except CoordinatorError:
            return None
        self._txn_guards[key] = still_holds
        return key

    def release_txn_guard(
        self, key: tuple[int, int] | None, still_holds: Callable[[], bool]
    ) -> None:
        if key is not None and self._txn_guards.get(key) is still_holds:
            del self._txn_guards[key]

    def on_txn_marker(self, partition: int, producer_id: int, commit: bool, offset: int) -> None:
        """A COMMIT / ABORT marker of ``producer_id`` was appended as leader to
        ``__consumer_offsets-<partition>`` at ``offset`` (WriteTxnMarkers): the producer's
        pending transactional offsets are committed or dropped. Called on the event loop
        right after the append; a partition not coordinated here is ignored (its load
        replays the marker from the log); one still loading applies it once loaded unless
        the load read it."""
        shard = self.shards.get(partition)
        if shard is not None:
            try:
                shard.apply_marker(producer_id, commit)
                self._flush(partition, shard)
            except Exception as exc:  # crash-only: memory may no longer be the log
                self.fault_handler.handle_fault("group coordinator marker failed", exc)
            return
        if partition not in self._loading:
            return
        queued = self._loading_markers.setdefault(partition, [])
        if len(queued) >= LOADING_MARKERS_MAX:  # start the load again: it reads them all
            log.info("restarting the load of %s-%d (markers)", OFFSETS_TOPIC, partition)
            self._unload(partition)
            self.reconcile()
            return
        queued.append((offset, producer_id, commit))

    # ------------------------------------------------------------------ routing
    def partition_of(self, group_id: str) -> int:
        topic = self.metadata.image.topic(OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return partition_for(group_id, len(topic.partitions))

    def shard_of(self, group_id: str) -> tuple[int, GroupShard]:
        """The loaded shard of ``group_id``, or CoordinatorError with Kafka's code.

        Checked against the metadata image at every use, not only by the timer's
        `reconcile`: a deposed coordinator answers NOT_COORDINATOR at once (a newer
        leader epoch: a reload), and a loaded shard answers only once the records it
        was loaded from are committed (high watermark >= the log end it read), so that
        nothing it tells a client can be lost by a fail-over. Led in the image but not
        hosted yet (the replica is being created) is COORDINATOR_LOAD_IN_PROGRESS too."""
        partition = self.partition_of(group_id)
        topic = self.metadata.image.topic(OFFSETS_TOPIC)
        reg = topic.partitions.get(partition) if topic is not None else None
        hosted = self.partitions.get(OFFSETS_TOPIC, partition)
        if reg is None or reg.leader != self.node_id or hosted is None:
            if partition in self.shards or partition in self._loading:
                self._unload(partition)
            becoming = reg is not None and reg.leader == self.node_id  # replica on its way
            E = ErrorCode
            raise CoordinatorError(
                E.COORDINATOR_LOAD_IN_PROGRESS if becoming else E.NOT_COORDINATOR
            )
        shard = self.shards.get(partition)
        if shard is None or self._epochs.get(partition) != reg.leader_epoch:
            self.reconcile()
            raise CoordinatorError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if hosted.log.high_watermark < self._load_end.get(partition, 0):
            raise CoordinatorError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return partition, shard

    def current_shards(self) -> list[GroupShard]:
        """The shards of the partitions this node leads now (ListGroups)."""
        self.reconcile()
        return list(self.shards.values())

    async def wait_ready(self, group_ids: Sequence[str]) -> None:
        """Until no group of ``group_ids`` would answer COORDINATOR_LOAD_IN_PROGRESS
        (`wait_until_ready`)."""
        await wait_until_ready(lambda: any(self._becoming_ready(g) for g in group_ids))

    def _becoming_ready(self, group_id: str) -> bool:
        try:
            self.shard_of(group_id)
        except CoordinatorError as exc:
            return exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return False

    async def ready_shard(self, group_id: str) -> tuple[int, GroupShard]:
        """`shard_of`, after `wait_ready` if it says COORDINATOR_LOAD_IN_PROGRESS (a ready
        shard is looked up once, not once to check and once more to use)."""
        try:
            return self.shard_of(group_id)
        except CoordinatorError as exc:
            if exc.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise
        await self.wait_ready((group_id,))
        return self.shard_of(group_id)

    async def call(
        self, group_id: str, version: int, op: Callable[[GroupShard, Reply, int], None]
    ) -> object:
        """Run ``op(shard, reply, now_ms)`` on the group's shard once it is ready; await
        its response (a response message, or an error code for DeleteGroups' entries)."""
        partition, shard = await self.ready_shard(group_id)
        return await self.call_shard(partition, shard, version, op)

    async def call_shard(
        self,
        partition: int,
        shard: GroupShard,
        version: int,
        op: Callable[[GroupShard, Reply, int], None],
    ) -> object:
        self._next_reply += 1
        reply = Reply(self._next_reply, version)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._replies[reply.id] = (partition, fut)
        try:
            op(shard, reply, self.clock.now_ms())
            self._flush(partition, shard)
        except BaseException:
            self._replies.pop(reply.id, None)
            raise
        self._wake.set()
        if not fut.done():
            park_current_request()  # a parked join/sync/commit holds no handler permit
        try:
            return await fut
        finally:
            self._replies.pop(reply.id, None)

    # ------------------------------------------------------------------ outputs
    def _flush(self, partition: int, shard: GroupShard) -> None:
        while True:
            out, writes = shard.take_output()
            if not out and not writes:
                return
            for reply, response in out:
                entry = self._replies.pop(reply.id, None)
                if entry is not None and not entry[1].done():
                    entry[1].set_result(response)
            for write in writes:
                self._start_write(partition, shard, write)

    def _start_write(self, partition: int, shard: GroupShard, write: Write) -> None:
        hosted = self.partitions.get(OFFSETS_TOPIC, partition)
        if hosted is None or self.shards.get(partition) is not shard:
            shard.complete_write(write.token, ErrorCode.NOT_COORDINATOR)
            return
        replicas = self.partitions.replicas
        if replicas is not None:  # acks=all: refused up front when the ISR is too small
            refused = replicas.check_produce(hosted, -1)
            if refused != ErrorCode.NONE:
                shard.complete_write(write.token, append_error(refused))
                return
        now = self.clock.now_ms()
        # a TxnOffsetCommit's records: a transactional batch of its producer, appended as
        # the coordinator's (Kafka's AppendOrigin.COORDINATOR: no sequence checks)
        txn = write.producer_id >= 0
        still_holds = self._txn_guards.pop((partition, write.producer_id), None) if txn else None
        if still_holds is not None and not still_holds():
            shard.complete_write(write.token, ErrorCode.INVALID_TXN_STATE)
            return
        batch = build_batch(
            [SimpleRecord(value=v, key=k, timestamp=now) for k, v in write.records],
            now_ms=now,
            compression=self.compression,
            producer_id=write.producer_id,
            producer_epoch=write.producer_epoch,
            base_sequence=0 if txn else -1,
            is_transactional=txn,
        )
        try:
            info = self.partitions.append(hosted, bytearray(batch), origin=ORIGIN_COORDINATOR)
        except Exception as exc:
            failed = exc.error_code if isinstance(exc, StorageError) else ErrorCode.NOT_COORDINATOR
            code = ErrorCode.of(failed)
            log.warning("writing to %s-%d failed: %r", OFFSETS_TOPIC, partition, exc)
            shard.complete_write(write.token, append_error(code))
            return
        end = info.last_offset + 1
        if replicas is None and hosted.log.high_watermark >= end:
            shard.complete_write(write.token, ErrorCode.NONE, info.first_offset)
            return
        offsets = (info.first_offset, end)
        self._spawn(self._await_durable(partition, shard, hosted, write.token, offsets))

    async def _await_durable(
        self,
        partition: int,
        shard: GroupShard,
        hosted: HostedPartition,
        token: int,
        offsets: tuple[int, int],
    ) -> None:
        first, end = offsets
        replicas = self.partitions.replicas
        if replicas is not None:
            # the delayed produce of acks=all: the ISR has it, min.insync.replicas held
            code = append_error(await replicas.wait_for_acks(hosted, end, self.commit_timeout_ms))
        else:
            ok = await self.partitions.purgatory.wait_until(
                [(OFFSETS_TOPIC, partition)],
                lambda: hosted.log.high_watermark >= end,
                self.commit_timeout_ms,
            )
            code = ErrorCode.NONE if ok else ErrorCode.REQUEST_TIMED_OUT
        if self.shards.get(partition) is not shard:
            code = ErrorCode.NOT_COORDINATOR
        if code == ErrorCode.NONE or self.shards.get(partition) is not shard:
            shard.complete_write(token, code, first)
            self._flush(partition, shard)
            return
        # Appended but not acknowledged: the records may still commit, while the shard
        # puts its group back as if they never will. The log is the truth: the shard
        # stops writing (what waited for this write would build on a state the log may
        # contradict: refused, NOT_COORDINATOR), answers this write's error, and loads
        # again from the log.
        log.warning(
            "a write to %s-%d is in doubt (%s): reloading its groups",
            OFFSETS_TOPIC,
            partition,
            code.name,
        )
        del self.shards[partition]
        shard.complete_write(token, code)
        self._flush(partition, shard)
        self._unload(partition)
        self.reconcile()

    # ------------------------------------------------------------------ timers
    async def _timer_loop(self) -> None:
        next_expiry = self.clock.now_ms() + self.retention_check_ms
        while not self._closed:
            self._wake.clear()
            now = self.clock.now_ms()
            try:
                self.reconcile()
                for partition, shard in list(self.shards.items()):
                    deadline = shard.next_deadline()
                    if deadline is not None and deadline <= now:
                        shard.tick(now)
                        self._flush(partition, shard)
                if now >= next_expiry:
                    next_expiry = now + self.retention_check_ms
                    for partition, shard in list(self.shards.items()):
                        if shard.expire_offsets(now):
                            log.info("expired offsets in %s-%d", OFFSETS_TOPIC, partition)
                        self._flush(partition, shard)
            except Exception as exc:
                log.exception("group coordinator timers failed")
                if self.fault_handler is not None:
                    self.fault_handler.handle_fault("group coordinator timers failed", exc)
            deadlines = [d for s in self.shards.values() if (d := s.next_deadline()) is not None]
            wait_ms = min([RECONCILE_INTERVAL_MS, next_expiry - now, *(d - now for d in deadlines)])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(wait_ms, 1) / 1000)
