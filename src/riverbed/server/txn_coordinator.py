"""The transaction coordinator's asyncio shell: the core of `riverbed.transaction` wired
to this node's ``__transaction_state`` partitions, its clock and its connections.

"The leader of that partition is its coordinator": this node leads partition ``p`` of
``__transaction_state`` at leader epoch ``e`` -> the core begins loading shard ``p`` at
coordinator epoch ``e`` (COORDINATOR_LOAD_IN_PROGRESS meanwhile), the partition is read
from its log start to its log end in a worker thread, and the shard is loaded once the
high watermark reaches that end (nothing it answers or marks can then be lost by a
fail-over; the new shard finishes every PrepareCommit / PrepareAbort it finds). It stops
leading, or the epoch changes -> the shard is unloaded and its waiting requests answer
NOT_COORDINATOR. Leadership is checked against the metadata image at every request
(`check`), as the group coordinator's shell does, so a deposed coordinator never answers
from memory.

Writes: each `TxnWrite` of a core step is one record appended as leader with acks=all
(`server.coordinator_log`, ``transaction.state.log`` compression none), and the core
hears back through ``complete_write`` once the ISR holds it, or with the partition's
error (the core maps it as Kafka's ``appendTransactionToLog`` does). A write that failed
after its append (not acknowledged within ``request.timeout.ms``) is in doubt: the core
answers it REQUEST_TIMED_OUT and the partition is loaded again from the log.

Timers: one task wakes every ``TIMER_INTERVAL_MS`` (and when a load finishes) to
re-check leadership, run the core's ``tick`` (the timed-out aborts every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``, id expiry every
``transaction.remove.expired.transaction.cleanup.interval.ms``; the core keeps those
intervals) and plan markers (`server.txn_markers`) whose leader was away or backing off.
A transaction's own steps do not wait for it, nor wake it: markers are planned the moment
their Prepare record commits and again the moment a marker request is answered (its
retriable partitions, and the Complete records now due, go at once), as Kafka's marker
channel drains its queue at each answer. A request or a write that woke the timer task
cost a whole turn (leadership, every shard's timers and markers: ~0.6 ms) between the
steps of one transaction's commit.

Crash-only: an exception out of the core in a timer, a write completion or a marker
answer halts the node through its fault handler; one out of a request is answered
UNKNOWN_SERVER_ERROR by the broker's dispatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from riverbed.coordinator.records import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from riverbed.protocol.errors import ErrorCode
from riverbed.server.coordinator_log import (
    CoordinatorPartitions,
    KeyValue,
    append_records,
    led_partitions,
    park_committed,
    read_records,
    wait_committed,
    wait_high_watermark,
    wait_until_ready,
)
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.listener_security import client_security
from riverbed.server.request_permits import park_current_request
from riverbed.server.supervise import Work, guarded, supervise_background
from riverbed.server.txn_markers import LocalMarkers, MarkerSender
from riverbed.storage.clock import Clock
from riverbed.transaction.api import ProducerIdAllocator, Result, Step, TxnConfig
from riverbed.transaction.coordinator import TransactionCoordinator
from riverbed.transaction.markers import BrokerMarkers

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage
    from riverbed.server.broker.hosted import HostedPartition
    from riverbed.server.config import ServerConfig
    from riverbed.server.replication.fetcher import Channel

log = logging.getLogger(__name__)

#: Longest sleep of the timer task: also how often leadership and markers are re-checked.
TIMER_INTERVAL_MS: Final = 100
#: Pause before a failed load of a partition is started again.
LOAD_RETRY_BACKOFF_MS: Final = 1_000
#: ``transaction.state.log`` records are written uncompressed (Kafka forces it).
TXN_LOG_COMPRESSION: Final = 0
#: The metadata feature whose level is the transaction version (KIP-890).
TRANSACTION_VERSION_FEATURE: Final = "transaction.version"
E = ErrorCode
#: What a request runs on the core: (request id, now_ms) -> its step.
CoreOp = Callable[[int, int], Step]


class ImageSource(Protocol):
    """The node's current metadata image (`QuorumMetadata`)."""

    @property
    def image(self) -> MetadataImage: ...


def txn_config(config: ServerConfig, image: MetadataImage) -> TxnConfig:
    """The core's config: the broker's ``transaction.*`` keys; the partition counts of the
    internal topics as they exist (FindCoordinator maps ids over the topic's partitions),
    else as configured; the transaction version the cluster has finalized."""

    def partitions_of(topic: str, key: str) -> int:
        t = image.topic(topic)
        return len(t.partitions) if t is not None and t.partitions else config.get_int(key)

    return TxnConfig(
        num_partitions=partitions_of(
            TRANSACTION_STATE_TOPIC, "transaction.state.log.num.partitions"
        ),
        max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
        id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
        abort_cleanup_interval_ms=config.get_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        expiry_cleanup_interval_ms=config.get_int(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
        transaction_version_level=image.features.get(TRANSACTION_VERSION_FEATURE, 0),
        offsets_num_partitions=partitions_of(OFFSETS_TOPIC, "offsets.topic.num.partitions"),
        two_phase_commit_enable=bool(config.get("transaction.two.phase.commit.enable")),
    )


class TransactionCoordinatorShell:
    """This node's transaction coordinator (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        node_id: int,
        partitions: CoordinatorPartitions,
        metadata: ImageSource,
        clock: Clock,
        allocator: ProducerIdAllocator,
        fault_handler: FaultHandler | None = None,
        *,
        channel_factory: Callable[[int], Channel | None] | None = None,
        local_markers: LocalMarkers | None = None,
    ) -> None:
        self.config = config
        self.node_id = node_id
        self.partitions = partitions
        self.metadata = metadata
        self.clock = clock
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self.core = TransactionCoordinator(txn_config(config, metadata.image), allocator)
        self.write_timeout_ms = config.get_int("request.timeout.ms")
        self.load_read_bytes = config.get_int("transaction.state.log.load.buffer.size")
        self.markers = MarkerSender(
            node_id,
            metadata,
            config.inter_broker_listener_name,
            clock.now_ms,
            config.get_int("request.timeout.ms"),
            channel_factory=channel_factory,
            security=client_security(
                config, config.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol"
            ),
            local=local_markers,
        )
        #: partition -> the leader epoch loaded (or being loaded) here
        self._epochs: dict[int, int] = {}
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._replies: dict[int, asyncio.Future[Result]] = {}
        self._next_request = 0
        self._wake = asyncio.Event()
        #: set (and replaced) whenever a write or a marker answer may have moved a
        #: transaction on: what a request answered CONCURRENT_TRANSACTIONS waits for
        self._progress = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._closed = False
        #: a write's completion, run from the replica manager's acks=all wait (crash-only)
        self._guarded_committed = guarded("a write completion", self._committed, self.fault_handler)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._timer_task is None:
            self._timer_task = self._spawn("transaction coordinator timers", self._timer_loop())

    def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for partition in list(self._epochs):
            self._unload(partition)
        self.markers.close()

    def _spawn(self, what: str, coro: Work) -> asyncio.Task[None]:
        return supervise_background(what, coro, self.fault_handler, self._tasks)

    # ------------------------------------------------------------------ leadership
    def reconcile(self) -> None:
        """Load the partitions this node now leads; unload the ones it no longer does."""
        if self._closed:
            return
        led = led_partitions(
            self.metadata.image, TRANSACTION_STATE_TOPIC, self.node_id, self.partitions
        )
        for p in list(self._epochs):
            if led.get(p) != self._epochs[p]:
                self._unload(p)
        if not self._epochs:  # the topic's partition counts route ids (none loaded yet)
            self.core.config = txn_config(self.config, self.metadata.image)
        for p, epoch in led.items():
            if p not in self._epochs:
                self._epochs[p] = epoch
                self._run(self.core.begin_load(p, epoch))
                self._loading[p] = self._spawn(
                    f"loading {TRANSACTION_STATE_TOPIC}-{p}", self._load(p, epoch)
                )

    async def _load(self, partition: int, epoch: int) -> None:
        hosted = self.partitions.get(TRANSACTION_STATE_TOPIC, partition)
        try:
            if hosted is None:  # deleted or moved away since reconcile saw it
                raise LookupError(f"{TRANSACTION_STATE_TOPIC}-{partition} is not hosted here")
            records, end = await asyncio.to_thread(read_records, hosted.log, self.load_read_bytes)
            # answer nothing from records a fail-over could still lose
            if not await wait_high_watermark(self.partitions, hosted, end, self.write_timeout_ms):
                raise LookupError(f"its log end {end} was not committed in time")
        except Exception as exc:
            log.warning("loading %s-%d failed: %r", TRANSACTION_STATE_TOPIC, partition, exc)
            await asyncio.sleep(LOAD_RETRY_BACKOFF_MS / 1000)  # (cancelled by an unload)
            if self._loading.get(partition) is asyncio.current_task():
                self._unload(partition)  # the next reconcile starts again
            return
        if self._loading.get(partition) is not asyncio.current_task():
            return  # unloaded (or reloaded) meanwhile
        del self._loading[partition]
        self._finish_load(partition, epoch, records)

    def _finish_load(self, partition: int, epoch: int, records: list[KeyValue]) -> None:
        if self.core.load(partition, epoch, records, self.clock.now_ms()):
            shard = self.core.shards[partition]
            log.info(
                "loaded %d transactional ids of %s-%d (coordinator epoch %d), %d to complete",
                len(shard.txns),
                TRANSACTION_STATE_TOPIC,
                partition,
                epoch,
                len(shard.markers.pending()),
            )
        self._wake.set()

    def _unload(self, partition: int) -> None:
        task = self._loading.pop(partition, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if self._epochs.pop(partition, None) is not None:
            if partition in self.core.shards:
                log.info("unloaded transactions of %s-%d", TRANSACTION_STATE_TOPIC, partition)
            self._run(self.core.unload(partition))
            self._progressed()

    def loading(self) -> bool:
        return bool(self._loading)

    def check(self, tid: str) -> ErrorCode:
        """NONE when this node coordinates ``tid`` now (its shard loaded at the image's
        leader epoch), else Kafka's answer: COORDINATOR_NOT_AVAILABLE before the topic
        exists, NOT_COORDINATOR when another node leads its partition,
        COORDINATOR_LOAD_IN_PROGRESS while its replica is created or its shard loads."""
        topic = self.metadata.image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return E.COORDINATOR_NOT_AVAILABLE
        if not tid:
            return E.NONE  # the core answers INVALID_REQUEST
        partition = self.core.partition_for(tid)
        reg = topic.partitions.get(partition)
        hosted = self.partitions.get(TRANSACTION_STATE_TOPIC, partition)
        if reg is None or reg.leader != self.node_id or hosted is None:
            if partition in self._epochs:
                self._unload(partition)
            becoming = reg is not None and reg.leader == self.node_id  # replica on its way
            return E.COORDINATOR_LOAD_IN_PROGRESS if becoming else E.NOT_COORDINATOR
        if self._epochs.get(partition) != reg.leader_epoch:
            self.reconcile()
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.core.shards:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    async def wait_ready(self, tids: Sequence[str]) -> None:
        """Until no id of ``tids`` would answer COORDINATOR_LOAD_IN_PROGRESS
        (`wait_until_ready`)."""
        loading = E.COORDINATOR_LOAD_IN_PROGRESS
        await wait_until_ready(lambda: any(self.check(t) is loading for t in tids))

    # ------------------------------------------------------------------ requests
    async def call(self, op: CoreOp) -> Result:
        """Run ``op(request_id, now_ms)`` on the core and await the answer to its request
        (at once, or once its record is committed)."""
        self._next_request += 1
        rid = self._next_request
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._replies[rid] = fut
        try:
            self._run(op(rid, self.clock.now_ms()))
        except BaseException:
            self._replies.pop(rid, None)
            raise
        if not fut.done():
            park_current_request()  # a request waiting for its write holds no permit
        try:
            return await fut
        finally:
            self._replies.pop(rid, None)

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def progress(self) -> asyncio.Event:
        """An event set at the next step of any transaction (a write completed, markers
        answered, a partition unloaded); take it before asking the core."""
        return self._progress

    async def wait_progress(self, progress: asyncio.Event, timeout_ms: int) -> None:
        """Until `progress` is set or ``timeout_ms`` passed (the request holds no permit)."""
        park_current_request()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(progress.wait(), timeout_ms / 1000)

    def _progressed(self) -> None:
        done, self._progress = self._progress, asyncio.Event()
        done.set()

    # ------------------------------------------------------------------ outputs
    def _run(self, step: Step) -> None:
        for answer in step.answers:
            fut = self._replies.pop(answer.request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(answer.result)
        for write in step.writes:
            self._start_write(write.partition, write.coordinator_epoch, write.token,
                              [(write.key, write.value)])  # fmt: skip

    def _complete(self, partition: int, epoch: int, token: int, code: ErrorCode) -> None:
        self._run(self.core.complete_write(partition, epoch, token, code, self.clock.now_ms()))
        self._progressed()

    def _start_write(self, partition: int, epoch: int, token: int, records: list[KeyValue]) -> None:
        hosted = self.partitions.get(TRANSACTION_STATE_TOPIC, partition)
        if hosted is None or self._epochs.get(partition) != epoch:
            self._complete(partition, epoch, token, E.NOT_LEADER_OR_FOLLOWER)
            return
        end = append_records(
            self.partitions, hosted, records, TXN_LOG_COMPRESSION, self.clock.now_ms()
        )
        if isinstance(end, ErrorCode):
            log.warning("writing to %s-%d failed: %s", TRANSACTION_STATE_TOPIC, partition, end.name)
            self._complete(partition, epoch, token, end)
            return
        self._await_write(partition, epoch, token, hosted, end)

    def _await_write(
        self, partition: int, epoch: int, token: int, hosted: HostedPartition, end: int
    ) -> None:
        """The write's acks=all wait, parked with the replica manager (no task, no loop
        turn): a record the ISR already holds (a leader alone in its ISR) is committed
        here and now, so the request that wrote it is answered in the same turn; one
        committed later, or failed, is handled at the loop's next turn (outside the
        replica manager's step that completed it)."""
        loop = asyncio.get_running_loop()
        at_once: list[ErrorCode] = []
        parking = True

        def done(code: ErrorCode) -> None:
            if parking:
                at_once.append(code)
            else:
                loop.call_soon(self._guarded_committed, partition, epoch, token, code)

        if not park_committed(self.partitions, hosted, end, self.write_timeout_ms, done):
            self._spawn(
                f"a write to {TRANSACTION_STATE_TOPIC}-{partition}",
                self._await_committed(partition, epoch, token, hosted, end),
            )
            return
        parking = False
        if not at_once:
            return
        if at_once[0] != E.NONE:  # the in-doubt path reloads the shard: not mid-step
            loop.call_soon(self._guarded_committed, partition, epoch, token, at_once[0])
            return
        self._guarded_committed(partition, epoch, token, E.NONE)

    async def _await_committed(
        self, partition: int, epoch: int, token: int, hosted: HostedPartition, end: int
    ) -> None:
        code = await wait_committed(self.partitions, hosted, end, self.write_timeout_ms)
        self._committed(partition, epoch, token, code)

    def _committed(self, partition: int, epoch: int, token: int, code: ErrorCode) -> None:
        if code == E.NONE or self._epochs.get(partition) != epoch:
            # (unloaded meanwhile: the core ignores it, its request was answered)
            self._complete(partition, epoch, token, code)
            # a committed Prepare record's markers go now, not at the timer task's next
            # turn: the producer's next transaction waits for them
            self._send_markers(self.clock.now_ms())
            return
        # Appended but not acknowledged: the record may still commit, while the core
        # takes a failed write as never written. The log is the truth: the write is
        # answered (REQUEST_TIMED_OUT: the client retries) and the partition loaded again.
        log.warning(
            "a write to %s-%d is in doubt (%s): loading its transactions again",
            TRANSACTION_STATE_TOPIC,
            partition,
            code.name,
        )
        self._complete(partition, epoch, token, E.REQUEST_TIMED_OUT)
        self._unload(partition)
        self.reconcile()

    # ------------------------------------------------------------------ timers, markers
    async def _timer_loop(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                self.reconcile()
                now = self.clock.now_ms()
                self._run(self.core.tick(now))
                self._send_markers(now)
            except Exception as exc:
                log.exception("transaction coordinator timers failed")
                self.fault_handler.handle_fault("transaction coordinator timers failed", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TIMER_INTERVAL_MS / 1000)

    def _send_markers(self, now_ms: int) -> None:
        batches, step = self.core.plan_broker_markers(self.markers.leader_of, now_ms)
        self._run(step)
        for batch in batches:
            self._spawn(f"WriteTxnMarkers to broker {batch.broker_id}", self._send_batch(batch))

    async def _send_batch(self, batch: BrokerMarkers) -> None:
        # one loop turn first: the EndTxn whose Prepare record was committed in the turn
        # that planned these markers is answered (its response written) before them
        await asyncio.sleep(0)
        errors = await self.markers.send(batch)
        if errors is None:
            self.core.on_broker_markers_failed(batch)
        else:
            self._run(self.core.on_broker_markers_response(batch, errors, self.clock.now_ms()))
        self._progressed()
        # the partitions answered with a retriable error go again now (a broker whose
        # request was lost is backing off: the timer task's turn sends them later)
        self._send_markers(self.clock.now_ms())
