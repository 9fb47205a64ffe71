"""The broker's replica manager: one ``riverbed.replication.partition.Partition`` core per
hosted partition, driven by metadata, follower fetches, appends, AlterPartition answers
and a timer (Kafka's ``ReplicaManager`` + ``Partition`` + ``AlterPartitionManager``).

- Metadata: after every image the partition manager calls ``apply`` for each hosted
  partition: the core becomes leader or follower at the registration's leader epoch;
  followers are handed to the replica fetchers (``fetcher``), leaders taken from them.
- Leader: ``follower_fetch`` is the core's verdict on a Fetch with ``replica_id`` >= 0;
  ``on_local_append`` after every append; acks=all produces wait in ``wait_for_acks``
  (the delayed produce: parked without a request permit, completed by the core when the
  high watermark covers the batch, REQUEST_TIMED_OUT after the request's ``timeout.ms``).
- High watermark: set on the log when the core moves it (consumers read below it; the
  log manager checkpoints it to ``replication-offset-checkpoint``), and parked fetches
  are woken.
- AlterPartition: the cores' ISR proposals are sent to the active controller, batched,
  one request in flight; NOT_CONTROLLER (no controller reachable), timeouts and the
  controller's refusals come back to the cores as such, and the cores resend.
- Timer: every ``TICK_MS`` the leader cores with something due tick (ISR shrink after
  ``replica.lag.time.max.ms``, produce timeouts, AlterPartition resends), on the injected
  clock. Each leader is in a heap by the time its next tick can do something
  (``PartitionLeader.next_tick_ms``), rescheduled after each event that can bring that
  time closer (metadata, a parked produce, an ISR proposal and its answer, a config
  change, an append or fetch when it waits for one), so a tick costs O(leaders due), not
  O(partitions): walking 10,000 partitions every 100 ms took a fifth of a core.
- Crash-only: the timer and the AlterPartition sender run under ``supervise``; an error
  they do not expect halts the node with a FATAL line (a stopped sender would freeze
  every ISR of this broker, so a dead follower would pin the high watermark).
- State changes (each registration received with its epochs, become leader/follower,
  ISR proposals and commits, truncations) go to the ``riverbed.state.change`` logger, which ``open_state_change_log``
  also writes to ``state-change.log`` in the first log dir (rotated at
  ``STATE_CHANGE_LOG_BYTES_MAX``, as Kafka's log4j appender does).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from riverbed.metadata.control_common import ControllerError
from riverbed.metadata.effective_config import PerTopicConfigs, partition_config
from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from riverbed.raft.node import NotLeaderError
from riverbed.replication.actions import (
    Action,
    AlterIsr,
    FetchAnswer,
    FetchPosition,
    FetchResult,
    HighWatermarkChanged,
    ProduceCompleted,
    StateChange,
)
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.partition import Partition
from riverbed.replication.wire import Item, alter_partition_request, alter_partition_results
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.purgatory import Purgatory
from riverbed.server.replication import cycle_trace
from riverbed.server.replication.fetcher import ReplicaFetcherManager
from riverbed.server.replication.replica_log import PartitionReplicaLog
from riverbed.server.replication.state_change_file import StateChangeFileHandler
from riverbed.server.replication.throttling import ReplicationThrottles
from riverbed.server.request_permits import park_current_request
from riverbed.server.supervise import supervise
from riverbed.storage.log import PartitionLog

if TYPE_CHECKING:
    from riverbed.server.broker.hosted import HostedPartition
    from riverbed.server.broker.partitions import PartitionManager

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("riverbed.state.change")

Key = tuple[str, int]
#: Period of the leader cores' timer (ISR checks, produce timeouts, AlterPartition resends).
TICK_MS = 100
#: Stale entries the timer heap may hold beyond twice its live ones before a compaction.
TIMER_SLACK_ENTRIES = 1024
#: "Nothing timed" (``PartitionLeader.next_tick_ms``).
NEVER_MS = 2**62
#: Partitions per AlterPartition request (Kafka batches all pending ones too).
ALTER_PARTITION_ITEMS_MAX = 1000
#: state-change.log rolls at this size, keeping STATE_CHANGE_LOG_BACKUPS old files.
STATE_CHANGE_LOG_BYTES_MAX = 10 * 1024 * 1024
STATE_CHANGE_LOG_BACKUPS = 2


def open_state_change_log(log_dir: str | Path) -> logging.Handler:
    """Write the state-change lines of this process to ``<log_dir>/state-change.log``."""
    handler = StateChangeFileHandler(
        Path(log_dir) / "state-change.log", STATE_CHANGE_LOG_BYTES_MAX, STATE_CHANGE_LOG_BACKUPS
    )
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s"))
    state_change_log.addHandler(handler)
    state_change_log.setLevel(logging.INFO)
    return handler


@dataclass(frozen=True)
class AlterBatch:
    """One AlterPartition request in flight and the partitions it speaks for."""

    keys: list[Key]
    items: list[Item]
    request: AlterPartitionRequest


AlterPartitionCall = Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]]


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        static_config: Mapping[str, str],
        partitions: PartitionManager,
        purgatory: Purgatory,
        now_ms: Callable[[], int],
        alter_partition: AlterPartitionCall,
        image: Callable[[], MetadataImage],
        inter_broker_listener: str,
        *,
        fault_handler: FaultHandler | None = None,
        rng: random.Random | None = None,
        run_fetchers: bool = True,
        client_security: ClientSecurity = PLAINTEXT_CLIENT,
    ) -> None:
        """``run_fetchers=False``: the replica fetchers keep their state but start no
        tasks; the caller sends their requests (the replication simulation)."""
        self.node_id = node_id
        self.static_config = dict(static_config)
        self.partitions = partitions
        self.purgatory = purgatory
        self.now_ms = now_ms
        self._alter_partition = alter_partition
        self._image = image
        self.cores: dict[Key, Partition] = {}
        #: parked acks=all produces: request id -> what to call with the outcome
        self._waiters: dict[int, Callable[[ErrorCode], None]] = {}
        self._request_ids = itertools.count(1)
        self._alter_queue: dict[Key, tuple[uuid.UUID, AlterIsr]] = {}
        # The timer (see the module docstring): (due ms, key) entries, the live due time
        # per key (an entry that differs is stale), the leaders to reschedule at their next
        # append or follower fetch. All bounded by the leaders hosted here (compacted).
        self._timer: list[tuple[int, Key]] = []
        self._due: dict[Key, int] = {}
        self._on_append: set[Key] = set()
        self._alter_wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: the image's configs map the cores last took theirs from (refresh_configs)
        self._configs_applied: object = None
        self._configs = PerTopicConfigs(
            lambda image, topic: ReplicaConfig.from_configs(
                partition_config(image, topic, node_id, self.static_config)
            )
        )
        self._brokers_applied: object = None  # the brokers map `refresh_brokers` last took
        #: where an unexpected error of a loop goes (crash-only: riverbed.server.supervise)
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self.rng = rng or random.Random()
        self.fetchers = ReplicaFetcherManager(
            self,
            node_id,
            static_config,
            inter_broker_listener,
            rng=self.rng,
            run_tasks=run_fetchers,
            security=client_security,
        )
        self.throttles = ReplicationThrottles(node_id, self.static_config, image, now_ms)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        fh = self.fault_handler
        self._tasks.append(supervise("replica manager ticker", self._ticker(), fh))
        self._tasks.append(supervise("AlterPartition sender", self._alter_loop(), fh))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)  # a task's own fault went to the fault handler
        await self.fetchers.close()
        waiters, self._waiters = self._waiters, {}
        for done in waiters.values():
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def broker_epoch(self) -> int:
        reg = self._image().brokers.get(self.node_id)
        return reg.broker_epoch if reg is not None else -1

    def _config_for(self, image: MetadataImage, topic: str) -> ReplicaConfig:
        """The topic's replica config, resolved once per configs map (an ISR change of
        every partition must not pay a resolution per partition)."""
        return self._configs.get(image, topic)

    def refresh_configs(self, image: MetadataImage) -> None:
        """After every metadata update: each core takes its topic's effective config now, so
        a dynamic ``min.insync.replicas`` binds the next acks=all produce and
        ``replica.lag.time.max.ms`` the next tick (Kafka's ``Partition.updateConfig`` from
        the dynamic config publisher), not the next ISR or leader change."""
        if image.configs is self._configs_applied:
            return  # no config record since (the image shares an unchanged configs map)
        self._configs_applied = image.configs
        for (topic, index), core in self.cores.items():
            core.update_config(self._config_for(image, topic))
            self._reschedule((topic, index))  # a new lag or timeout moves the due time

    def refresh_brokers(self, image: MetadataImage) -> None:
        """After every metadata update: the brokers' registered epochs reach every core, so
        a leader refuses the fetches of a replica's previous incarnation as soon as its new
        registration is known (KIP-903), whether or not a partition record changed."""
        if image.brokers is self._brokers_applied:
            return  # no broker record since (the image shares an unchanged brokers map)
        self._brokers_applied = image.brokers
        epochs = self._registered_epochs(image)
        own = epochs.get(self.node_id, -1)
        for core in self.cores.values():
            core.set_registered_epochs(epochs)
            core.set_broker_epoch(own)

    def _registered_epochs(self, image: MetadataImage) -> dict[int, int]:
        return {b: reg.broker_epoch for b, reg in image.brokers.items()}

    # ------------------------------------------------------------------ metadata
    def apply(self, hosted: HostedPartition) -> None:
        """The hosted partition's registration (maybe) changed: switch role accordingly."""
        key: Key = (hosted.topic, hosted.index)
        image = self._image()
        config = self._config_for(image, hosted.topic)
        core = self.cores.get(key)
        if core is None:
            core = Partition(
                self.node_id,
                PartitionReplicaLog(hosted.log),
                config,
                high_watermark=int(hosted.log.high_watermark),
                broker_epoch=self.broker_epoch(),
                name=f"{hosted.topic}-{hosted.index}",
            )
            self.cores[key] = core
        else:
            core.set_broker_epoch(self.broker_epoch())
        core.update_config(config)
        reg = hosted.registration
        core.set_registered_epochs(self._registered_epochs(image))
        if (reg.leader_epoch, reg.partition_epoch) != (core.leader_epoch, core.partition_epoch):
            state_change_log.info(
                "broker %d received %s-%d: leader %d at leader epoch %d, partition epoch %d, "
                "replicas %s, ISR %s",
                self.node_id,
                hosted.topic,
                hosted.index,
                reg.leader,
                reg.leader_epoch,
                reg.partition_epoch,
                list(reg.replicas),
                list(reg.isr),
            )
        actions = core.apply_registration(reg, self.now_ms())
        self._run(key, hosted, actions)
        self._reschedule(key)
        if int(hosted.log.high_watermark) != core.high_watermark:
            hosted.log.update_high_watermark(core.high_watermark)
        if core.follower is not None and core.follower.leader_id >= 0:
            self.fetchers.ensure(key, core.follower.leader_id)
        else:
            self.fetchers.remove(key)

    def replace_log(self, key: Key, plog: PartitionLog) -> None:
        """The partition's log reopened in another log dir (AlterReplicaLogDirs): the same
        batches, offsets and epochs; the core goes on over the new one."""
        core = self.cores.get(key)
        if core is not None and isinstance(core.log, PartitionReplicaLog):
            core.log.plog = plog

    def offset_lag(self, key: Key) -> int:
        """DescribeLogDirs' offset_lag of a hosted replica: 0 on the leader, the fetcher lag
        (leader HW - own log end) on a follower."""
        core = self.cores.get(key)
        if core is None or core.follower is None:
            return 0
        return core.follower.offset_lag()

    def leads_with_followers(self) -> bool:
        """Does this broker lead a partition another in-sync replica could take over?"""
        return any(
            core.leader is not None and len(core.leader.isr.isr) > 1 for core in self.cores.values()
        )

    def remove(self, key: Key) -> None:
        core = self.cores.pop(key, None)
        self.fetchers.remove(key)
        self._alter_queue.pop(key, None)
        self._due.pop(key, None)
        self._on_append.discard(key)
        if core is not None:
            self._run(key, None, core.stop("partition deleted here"))

    # ------------------------------------------------------------------ actions
    def _run(self, key: Key, hosted: HostedPartition | None, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, HighWatermarkChanged):
                if hosted is None:
                    hosted = self.partitions.get(*key)
                if hosted is not None:
                    hosted.log.update_high_watermark(a.high_watermark)
                self.purgatory.notify(key)
                if cycle_trace.TRACE is not None:
                    cycle_trace.TRACE.event("hw", a.high_watermark)
            elif isinstance(a, ProduceCompleted):
                done = self._waiters.pop(a.request_id, None)
                if done is not None:
                    done(a.error)
            elif isinstance(a, AlterIsr):
                topic = self._image().topic(key[0])
                if topic is not None:
                    self._alter_queue[key] = (topic.topic_id, a)
                    self._alter_wakeup.set()
                self._reschedule(key)  # its resend is timed
            elif isinstance(a, StateChange):
                state_change_log.info("%s", a.message)

    # ------------------------------------------------------------------ leader side
    def follower_fetch(self, hosted: HostedPartition, pos: FetchPosition) -> FetchAnswer:
        key: Key = (hosted.topic, hosted.index)
        core = self.cores.get(key)
        if core is None or core.leader is None:
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        answer, actions = core.leader.on_follower_fetch(pos, self.now_ms())
        self._run(key, hosted, actions)
        if key in self._on_append:
            self._reschedule(key)  # (a follower that went back behind the log end)
        return answer

    def follower_reread(self, hosted: HostedPartition, pos: FetchPosition) -> FetchAnswer:
        """A parked follower fetch read again when woken: judged, its progress not
        recorded a second time (`PartitionLeader.reread_follower_fetch`)."""
        core = self.cores.get((hosted.topic, hosted.index))
        if core is None or core.leader is None:
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return core.leader.reread_follower_fetch(pos)

    def _follower_in_isr(self, key: Key, replica_id: int) -> bool:
        core = self.cores.get(key)
        return core is not None and core.leader is not None and replica_id in core.leader.isr.isr

    def leader_allowance(self, hosted: HostedPartition, replica_id: int) -> int | None:
        """Bytes the leader-side replication quota lets this follower have now (None:
        unthrottled)."""
        key: Key = (hosted.topic, hosted.index)
        if not self.throttles.leader_throttled(key):  # (every follower fetch asks)
            return None
        return self.throttles.leader_allowance(key, self._follower_in_isr(key, replica_id))

    def leader_sent(self, hosted: HostedPartition, replica_id: int, size_bytes: int) -> None:
        key: Key = (hosted.topic, hosted.index)
        if size_bytes > 0 and self.throttles.leader_throttled(key):
            in_isr = self._follower_in_isr(key, replica_id)
            self.throttles.leader_sent(key, in_isr, size_bytes)

    def on_local_append(self, hosted: HostedPartition) -> None:
        key: Key = (hosted.topic, hosted.index)
        core = self.cores.get(key)
        if core is not None and core.leader is not None:
            self._run(key, hosted, core.leader.on_local_append(self.now_ms()))
            if key in self._on_append:
                self._reschedule(key)  # an ISR member at the old log end is behind now

    def check_produce(self, hosted: HostedPartition, acks: int) -> ErrorCode:
        core = self.cores.get((hosted.topic, hosted.index))
        if core is None or core.leader is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return core.leader.check_produce(acks)

    def park_produce(
        self,
        hosted: HostedPartition,
        required_offset: int,
        timeout_ms: int,
        done: Callable[[ErrorCode], None],
    ) -> None:
        """The delayed produce (Kafka's ``DelayedProduce``): ``done(error)`` once the ISR
        holds every offset below ``required_offset``, or with the core's error (timeout,
        lost leadership); maybe at once."""
        key: Key = (hosted.topic, hosted.index)
        core = self.cores.get(key)
        if core is None or core.leader is None:
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        rid = next(self._request_ids)
        self._waiters[rid] = done
        now = self.now_ms()
        actions = core.leader.park_produce(rid, required_offset, timeout_ms, now)
        self._run(key, hosted, actions)
        self._schedule(key, now + timeout_ms)  # its expiry

    async def wait_for_acks(
        self, hosted: HostedPartition, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """acks=all: wait until the ISR holds every offset below ``required_offset``."""
        fut = self.acks_future(hosted, required_offset, timeout_ms)
        if not fut.done():
            park_current_request()  # a delayed produce holds no request permit
        return await fut

    def acks_future(
        self, hosted: HostedPartition, required_offset: int, timeout_ms: int
    ) -> asyncio.Future[ErrorCode]:
        """acks=all: the delayed produce, parked now; its future is resolved with the
        outcome (`park_produce`). The produce handler awaits it directly, with no task
        of its own: the completion reaches the handler one event-loop pass after the
        follower fetch that moved the high watermark, not three (task, gather, handler)."""
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode) -> None:
            if cycle_trace.TRACE is not None:
                cycle_trace.TRACE.event("produce_done", required_offset)
            if not fut.done():  # (a cancelled request's future is done)
                fut.set_result(error)

        self.park_produce(hosted, required_offset, timeout_ms, done)
        return fut

    # ------------------------------------------------------------------ follower side
    def on_fetch_result(self, key: Key, result: FetchResult) -> bool:
        """A fetch response for a follower; False when the partition is not followed now."""
        core = self.cores.get(key)
        if core is None or core.follower is None:
            return False
        self._run(key, None, core.follower.on_fetch_result(result, self.now_ms()))
        if result.records is not None and self.throttles.follower_throttled(key):
            self.throttles.follower_received(key, self._in_isr(key), len(result.records))
        return True

    def _in_isr(self, key: Key) -> bool:
        hosted = self.partitions.get(*key)
        return hosted is not None and self.node_id in hosted.registration.isr

    def log_end(self, key: Key) -> int:
        """The hosted replica's log end offset (-1: not hosted)."""
        core = self.cores.get(key)
        return -1 if core is None else core.log.log_end_offset

    def fetch_position(self, key: Key) -> FetchPosition | None:
        core = self.cores.get(key)
        if core is None or core.follower is None:
            return None
        th = self.throttles
        if th.follower_throttled(key) and th.follower_holds_back(key, self._in_isr(key)):
            return None  # follower.replication.throttled.rate spent: this one waits
        return core.follower.fetch_position(self.now_ms())

    # ------------------------------------------------------------------ loops
    def tick(self) -> None:
        """One timer step of the leader cores whose due time has come (ISR shrink,
        produce timeouts, resends; ``PartitionLeader.next_tick_ms``), each rescheduled."""
        now = self.now_ms()
        timer, due = self._timer, self._due
        while timer and timer[0][0] <= now:
            at, key = heapq.heappop(timer)
            if due.get(key) != at:
                continue  # stale: rescheduled earlier, or removed
            del due[key]
            core = self.cores.get(key)
            if core is not None and core.leader is not None:
                self._run(key, None, core.leader.tick(now))
                self._reschedule(key)

    def _reschedule(self, key: Key) -> None:
        """Put the leader of ``key`` in the timer at its next due time (if any)."""
        core = self.cores.get(key)
        if core is None or core.leader is None:
            self._on_append.discard(key)
            return
        at, on_append = core.leader.next_tick_ms(self.now_ms())
        if on_append:
            self._on_append.add(key)
        else:
            self._on_append.discard(key)
        self._schedule(key, at)

    def _schedule(self, key: Key, at: int) -> None:
        """Tick ``key`` at ``at`` unless it is due earlier already."""
        if at >= NEVER_MS or self._due.get(key, NEVER_MS) <= at:
            return
        self._due[key] = at
        heapq.heappush(self._timer, (at, key))
        if len(self._timer) > 2 * len(self._due) + TIMER_SLACK_ENTRIES:
            self._timer = [(when, k) for k, when in self._due.items()]  # drop stale entries
            heapq.heapify(self._timer)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            self.tick()  # a core's error is a fault (supervised): no ISR rule may stop

    def take_alter_batch(self) -> AlterBatch | None:
        """The next AlterPartition request: the pending proposals of up to
        ``ALTER_PARTITION_ITEMS_MAX`` partitions, taken off the queue (None: none)."""
        batch = list(self._alter_queue.items())[:ALTER_PARTITION_ITEMS_MAX]
        for key, _ in batch:
            del self._alter_queue[key]
        if not batch:
            return None
        items: list[Item] = [(tid, key[1], req) for key, (tid, req) in batch]
        request = alter_partition_request(self.node_id, self.broker_epoch(), items)
        return AlterBatch([key for key, _ in batch], items, request)

    def alter_partition_answered(
        self, batch: AlterBatch, response: AlterPartitionResponse | None, error: ErrorCode
    ) -> None:
        """The controller's answer to ``batch`` (or ``error`` for all of it) to each core."""
        results = alter_partition_results(batch.items, response, error)
        now = self.now_ms()
        for key, result in zip(batch.keys, results, strict=True):
            core = self.cores.get(key)
            if core is not None and core.leader is not None:
                self._run(key, None, core.leader.on_alter_partition_response(result, now))
                self._reschedule(key)  # a retry is timed, or the ISR may shrink again

    async def _alter_loop(self) -> None:
        """Send the cores' ISR proposals, one request at a time (Kafka's
        ``AlterPartitionManager``)."""
        while True:
            await self._alter_wakeup.wait()
            self._alter_wakeup.clear()
            batch = self.take_alter_batch()
            if self._alter_queue:
                self._alter_wakeup.set()
            if batch is not None:
                await self._send_alter_partition(batch)

    async def _send_alter_partition(self, batch: AlterBatch) -> None:
        response: AlterPartitionResponse | None = None
        error = ErrorCode.NONE
        try:
            response = await self._alter_partition(batch.request)
        except TimeoutError:
            error = ErrorCode.REQUEST_TIMED_OUT
        except ControllerError as exc:
            error = exc.code
        except (NotLeaderError, OSError) as exc:  # no controller reachable right now
            log.info("AlterPartition not accepted (%r): the cores retry", exc)
            error = ErrorCode.NOT_CONTROLLER
        # anything else escapes to the supervisor: a sender that stops is a wedged broker
        self.alter_partition_answered(batch, response, error)
