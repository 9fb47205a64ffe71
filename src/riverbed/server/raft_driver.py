"""RaftDriver: the thin asyncio shell that runs one ``RaftNode`` on real files and a clock.

It owns, in the metadata partition directory ``<metadata.log.dir>/__cluster_metadata-0``:
the log (``StorageRaftLog`` over ``riverbed.storage``), the snapshots
(``FileSnapshotStore``: ``.part`` files are removed at start), and the ``quorum-state``
file. It executes the node's actions in order:

- ``PersistQuorumState``: written (temp + fsync + rename) on a worker thread *before* the
  actions after it run;
- ``FlushLog``: fsync on a worker thread, in the background; then ``on_log_flushed``;
- ``CommitEntries`` / ``LoadSnapshot``: the registered ``StateMachine``
  (``raft.state_machine.run_state_machine_actions``), on the event loop; ``applied_offset``
  moves only after the machine returned;
- ``CreateSnapshot``: ``machine.snapshot_records()`` is taken at once, encoded and written
  (``.part`` + fsync + rename) on a worker thread, then ``on_snapshot_written``;
- ``SendRequest``: ``await transport.send(dest, request)`` in a task, the reply fed back;
  a failed send is fed back as ``request_failed`` (refused or not, ``is_refusal``);
- ``SendResponse``: resolves the ``handle_request`` call waiting for it (a Fetch may be
  parked by the leader for up to ``fetch_max_wait_ms``).

No sockets here: the ``Transport`` (core requests in, core responses out; the network shell
translates with ``raft.wire``) and the server's RPC handlers (``await
driver.handle_request(src, request)``) are the network layer's. Every input is serialized
by one lock, so the node sees one event at a time.

Crash-only: an unexpected exception while the node handles an event or its actions run
(a state-machine apply or snapshot load included), in the flush loop or in the timer loop
goes to the injected ``FaultHandler`` (in production: FATAL line, exit 1). Nothing catches
it and carries on: the in-memory node may be half-way through an event, and a node that
keeps running must be correct. A restart recovers from the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from riverbed.raft.actions import (
    Action,
    CompleteSnapshotDownload,
    CreateSnapshot,
    DeleteSnapshots,
    FlushLog,
    LeaderChanged,
    PersistQuorumState,
    SendRequest,
    SendResponse,
)
from riverbed.raft.config import RaftConfig
from riverbed.raft.messages import (
    Entry,
    Errors,
    FetchRequest,
    FetchResponse,
    Request,
    Response,
    SnapshotId,
)
from riverbed.raft.node import NotLeaderError, RaftNode
from riverbed.raft.quorum_state import read_quorum_state_file, write_quorum_state_file
from riverbed.raft.roles import Role
from riverbed.raft.snapshot_files import FileSnapshotStore
from riverbed.raft.snapshot_format import iter_snapshot_chunks
from riverbed.raft.snapshots import finish_download
from riverbed.raft.state_machine import StateMachine, run_state_machine_actions
from riverbed.raft.storage_log import StorageRaftLog
from riverbed.raft.wire import RaftWireError
from riverbed.server.clock import SystemClock
from riverbed.server.fault_handler import (
    FaultHalt,
    FaultHandler,
    ProcessTerminatingFaultHandler,
)
from riverbed.server.supervise import Work, supervise
from riverbed.storage.config import LogConfig
from riverbed.storage.layout import METADATA_PARTITION, METADATA_PARTITION_DIR, METADATA_TOPIC
from riverbed.storage.log import PartitionLog

log = logging.getLogger(__name__)

INBOUND_WAIT_MAX_S = 10.0  # a request waits at most this long for the node's answer
RESIGN_WAIT_MAX_S = 0.5  # close(graceful=True) waits this long for EndQuorumEpoch sends
FILE_CLEANUP_INTERVAL_S = 30.0  # how often segment files deleted below the LBO are removed


class Transport(Protocol):
    async def send(self, dest: int, request: Request) -> Response:
        """Deliver ``request`` to node ``dest`` and return its reply; raise on failure."""
        ...


def is_refusal(exc: BaseException) -> bool:
    """The peer's host refused the connection: nothing listens at its endpoint
    (ECONNREFUSED, only ever from connecting: a reset, a timeout, an unreachable network or
    a garbled reply is not one; ``riverbed.raft.refusals`` says what it proves). A host
    name with several addresses that all refused fails as a plain OSError (asyncio's
    "Multiple exceptions") and does not count: the shortcut is lost, not the safety."""
    return isinstance(exc, ConnectionRefusedError)  # OSError(ECONNREFUSED, ...) is one


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class GuardedMachine:
    """A state machine as a Raft shell runs it (the driver, and the simulation): its
    ``applied_offset`` moves only past what the machine returned from, and an exception it
    raises goes to the fault handler, which never returns (crash-only: the process halts
    and its restart replays from the log and the snapshot)."""

    def __init__(self, machine: StateMachine, fault_handler: FaultHandler) -> None:
        self.machine = machine
        self.fault_handler = fault_handler
        #: The next offset the machine has not applied (it returned from every entry below).
        self.applied_offset = 0

    def apply(self, entries: tuple[Entry, ...]) -> None:
        if not entries:
            return
        try:
            self.machine.apply(entries)
        except Exception as exc:
            self.fault_handler.handle_fault(
                f"state machine apply of offsets {entries[0].offset}..{entries[-1].offset} failed",
                exc,
            )
        self.applied_offset = entries[-1].offset + 1

    def snapshot_records(self) -> Iterable[bytes]:
        return self.machine.snapshot_records()

    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        try:
            self.machine.load_snapshot(snapshot_id, records)
        except Exception as exc:
            self.fault_handler.handle_fault(
                f"state machine load of snapshot {snapshot_id.file_stem()} failed", exc
            )
        self.applied_offset = snapshot_id.end_offset


class CommitLatency:
    """Kafka's raft-metrics commit-latency-avg / -max: milliseconds from a leader's append
    to its commit (high watermark past it), over every append since the node started
    (Kafka's are over a 30 s sample window)."""

    __slots__ = ("count", "max_ms", "sum_ms")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ms = 0
        self.max_ms = 0

    def observe(self, ms: int) -> None:
        self.count += 1
        self.sum_ms += ms
        self.max_ms = max(self.max_ms, ms)

    @property
    def avg_ms(self) -> float:
        return self.sum_ms / self.count if self.count else 0.0


class RaftDriver:
    def __init__(
        self,
        node_id: int,
        config: RaftConfig,
        metadata_log_dir: str | Path,
        transport: Transport,
        machine: StateMachine | None = None,
        *,
        fault_handler: FaultHandler | None = None,
        directory_id: str = "",
        clock_ms: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
    ) -> None:
        """``machine`` may instead be registered before ``start`` (``register``, Kafka's
        ``RaftClient.register``): the metadata machine needs the service that appends
        through this driver. ``fault_handler``: where unexpected exceptions go (default:
        halt the process)."""
        self.node_id = node_id
        self.config = config
        self.directory = Path(metadata_log_dir) / METADATA_PARTITION_DIR
        self.transport = transport
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self._machine: GuardedMachine | None = None
        if machine is not None:
            self.register(machine)
        self.clock_ms = clock_ms
        self.snapshots = FileSnapshotStore(self.directory)
        for name in self.snapshots.remove_partial_files():
            log.info("removed partial snapshot %s", name)
        partition = PartitionLog(
            self.directory,
            METADATA_TOPIC,
            METADATA_PARTITION,
            LogConfig(segment_bytes=config.log_segment_bytes),
            SystemClock(),
        )
        snaps = self.snapshots.list()
        start_epoch = next(
            (s.epoch for s in snaps if s.end_offset == partition.log_start_offset), 0
        )
        self.log = StorageRaftLog(partition, start_epoch)
        if snaps and self.log.start_offset < snaps[-1].end_offset <= self.log.end_offset:
            # the log below the newest snapshot is redundant; start the log there
            self.log.delete_before(snaps[-1].end_offset, snaps[-1].epoch)
        self.node = RaftNode(
            node_id,
            config,
            self.log,
            self.snapshots,
            rng or random.Random(),
            quorum_state=read_quorum_state_file(self.directory),
            directory_id=directory_id,
        )
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        #: Appends waiting for their commit: (last offset, epoch, future, appended at ms);
        #: settled after every step (``_settle_appends``).
        self._appends: list[tuple[int, int, asyncio.Future[int], int]] = []
        self.commit_latency = CommitLatency()
        self._replies: dict[int, asyncio.Future[Response]] = {}
        self._next_inbound = 1
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._closed = False
        self._flush_wanted = 0
        self._flushing = False

    # --- lifecycle ---------------------------------------------------------------------------
    def register(self, machine: StateMachine) -> None:
        """The state machine committed entries and snapshots go to (once, before start)."""
        if self._machine is not None:
            raise RuntimeError("a state machine is already registered")
        self._machine = GuardedMachine(machine, self.fault_handler)

    @property
    def applied_offset(self) -> int:
        """The next offset the state machine has not applied (it returned from every entry
        below; the node's own ``applied_offset`` moves when it hands entries out)."""
        return self._machine.applied_offset if self._machine is not None else 0

    @property
    def machine(self) -> StateMachine:
        if self._machine is None:
            raise RuntimeError("no state machine registered (RaftDriver.register)")
        return self._machine.machine

    async def start(self) -> None:
        if self._machine is None:
            raise RuntimeError("no state machine registered (RaftDriver.register)")
        await self._feed(lambda now: self.node.start(now), "start-up (log and snapshot load)")
        self._timer = supervise("raft driver timer loop", self._timer_loop(), self.fault_handler)

    async def close(self, graceful: bool = True) -> None:
        if self._closed:
            return
        if graceful:
            await self._feed(lambda now: self.node.resign(now), "resigning")
            if self._tasks:  # let EndQuorumEpoch go out (bounded wait)
                await asyncio.wait(list(self._tasks), timeout=RESIGN_WAIT_MAX_S)
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        for task in [*self._tasks, *([self._timer] if self._timer else [])]:
            # a task that halted (FaultHalt, tests only) has reported its fault already
            with contextlib.suppress(asyncio.CancelledError, Exception, FaultHalt):
                await task
        for fut in self._replies.values():
            fut.cancel()
        for _, _, append, _ in self._appends:
            append.cancel()
        self.log.close()

    # --- inputs ------------------------------------------------------------------------------
    async def handle_request(self, src: int, request: Request) -> Response:
        """For the server's RPC handler: the node's reply (may wait for a parked fetch)."""
        corr = self._next_inbound
        self._next_inbound += 1
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._replies[corr] = fut
        try:
            await self._feed(
                lambda now: self.node.handle_request(src, corr, request, now),
                f"handling {type(request).__name__}",
            )
            return await asyncio.wait_for(fut, INBOUND_WAIT_MAX_S)
        except TimeoutError:
            if isinstance(request, FetchRequest):
                return FetchResponse(Errors.REQUEST_TIMED_OUT, self.node.leader_id, self.node.epoch)
            raise
        finally:
            self._replies.pop(corr, None)

    async def append(self, values: list[bytes], timeout_s: float = 30.0) -> int:
        """Leader only: append one operation's records as one batch and wait until the
        whole batch is committed; returns its last offset.

        NotLeaderError when this node is not the leader, or stops being the leader of this
        epoch before the records commit (their fate is then unknown, as in Kafka)."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        async with self._lock:
            now = self.clock_ms()
            last, actions = self.node.append(values, now)
            self._appends.append((last, self.node.epoch, fut, now))
            await self._run(actions, now)
        self._wake.set()
        return await asyncio.wait_for(fut, timeout_s)

    def _settle_appends(self) -> None:
        """Answer the appends this step decided, under the lock, after every step: the
        batch ending at (last, epoch) is committed once the high watermark is past
        ``last`` AND the committed entry there has the append's epoch (another leader's
        entry may have taken the offset); it is lost to the caller (NotLeaderError) once
        the node left that epoch's leadership first. No waiter has to observe the steps
        in between, so asyncio's scheduling order does not matter."""
        node = self.node
        waiting: list[tuple[int, int, asyncio.Future[int], int]] = []
        for last, epoch, fut, appended_ms in self._appends:
            if fut.done():  # timed out (cancelled)
                continue
            if node.high_watermark > last:
                if self._committed_epoch(last, epoch) == epoch:
                    fut.set_result(last)
                    self.commit_latency.observe(self.clock_ms() - appended_ms)
                else:
                    fut.set_exception(NotLeaderError(node.leader_id, node.epoch))
            elif node.epoch != epoch or node.role is not Role.LEADER:
                fut.set_exception(NotLeaderError(node.leader_id, node.epoch))
            else:
                waiting.append((last, epoch, fut, appended_ms))
        self._appends = waiting

    def _committed_epoch(self, offset: int, epoch: int) -> int:
        """The epoch of the committed entry at ``offset`` (-1: not knowable as ``epoch``)."""
        log = self.log
        if offset >= log.start_offset:
            return log.epoch_at(offset)
        # below a snapshot: the record before it has our epoch, so every record from our
        # epoch's start (at or below ``offset``, which we appended as its leader) has too
        return epoch if log.start_epoch == epoch else -1

    # --- plumbing ----------------------------------------------------------------------------
    async def _feed(self, step: Callable[[int], list[Action]], what: str) -> None:
        async with self._lock:
            if self._closed:
                return
            now = self.clock_ms()
            try:
                actions = step(now)
            except Exception as exc:
                self.fault_handler.handle_fault(f"raft node failed {what}", exc)
            await self._run(actions, now, what)
        self._wake.set()

    async def _run(self, actions: list[Action], now: int, what: str = "appending") -> None:
        """Execute actions in order (the lock is held); a failure is a fault."""
        try:
            await self._run_actions(actions, now)
        except Exception as exc:
            self.fault_handler.handle_fault(
                f"raft driver failed running the actions of {what}", exc
            )

    async def _run_actions(self, actions: list[Action], now: int) -> None:
        assert self._machine is not None
        rest = run_state_machine_actions(
            self.node, self._machine, actions, now, defer_snapshots=True
        )
        for action in rest:
            if isinstance(action, CreateSnapshot):
                # the records are taken now (the machine is at the snapshot's offset);
                # encoding and writing them happens on a worker thread
                records = self._machine.snapshot_records()
                self._spawn("snapshot write", self._write_snapshot(action.snapshot_id, records))
            elif isinstance(action, DeleteSnapshots):
                self._spawn("snapshot delete", self._delete_snapshots(action.snapshot_ids))
            elif isinstance(action, CompleteSnapshotDownload):
                self._spawn("snapshot download", self._complete_download(action.snapshot_id))
            elif isinstance(action, PersistQuorumState):
                await asyncio.to_thread(write_quorum_state_file, self.directory, action.state)
            elif isinstance(action, FlushLog):
                # group commit: one fsync at a time; requests meanwhile are folded into
                # the next one
                self._flush_wanted = max(self._flush_wanted, action.end_offset)
                if not self._flushing:
                    self._flushing = True
                    self._spawn("flush loop", self._flush_loop())
            elif isinstance(action, SendRequest):
                self._spawn("send", self._send(action))
            elif isinstance(action, SendResponse):
                fut = self._replies.get(action.correlation_id)
                if fut is not None and not fut.done():
                    fut.set_result(action.response)
            elif isinstance(action, LeaderChanged):
                log.info(
                    "node %d: epoch %d leader %d", self.node_id, action.epoch, action.leader_id
                )
        self._settle_appends()

    def _spawn(self, what: str, coro: Work) -> asyncio.Task[None]:
        # an exception escaping a driver task is a fault (no wedged loop)
        task = supervise(f"raft driver {what}", coro, self.fault_handler)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _flush_loop(self) -> None:
        try:
            while not self._closed:
                end_offset = self._flush_wanted
                durable = await asyncio.to_thread(self.log.flush_storage, end_offset)
                async with self._lock:
                    if self._closed:
                        return
                    self.log.mark_flushed(durable)
                    now = self.clock_ms()
                    await self._run(self.node.on_log_flushed(durable, now), now, "a log flush")
                    if self._flush_wanted <= end_offset:
                        self._flushing = False
                        break
                self._wake.set()
        finally:
            self._wake.set()

    async def _write_snapshot(self, snapshot_id: SnapshotId, records: Iterable[bytes]) -> None:
        chunks = iter_snapshot_chunks(snapshot_id, records, now_ms=int(time.time() * 1000))
        try:
            await asyncio.to_thread(self.snapshots.write_chunks, snapshot_id, chunks)
        except OSError:
            log.exception("node %d: writing snapshot %s failed", self.node_id, snapshot_id)
            await self._feed(
                lambda now: self.node.on_snapshot_failed(snapshot_id, now), "a failed snapshot"
            )
            return
        await self._feed(
            lambda now: self.node.on_snapshot_written(snapshot_id, now), "a written snapshot"
        )

    async def _delete_snapshots(self, snapshot_ids: tuple[SnapshotId, ...]) -> None:
        """Unlink snapshots below the log start on a worker thread (the node no longer
        serves them); a disk error halts the node."""

        def delete() -> None:
            for sid in snapshot_ids:
                self.snapshots.delete(sid)

        await asyncio.to_thread(delete)

    async def _complete_download(self, snapshot_id: SnapshotId) -> None:
        """Validate, fsync and rename a downloaded snapshot on a worker thread, outside the
        lock (the node sends no fetch meanwhile); a disk error halts the node."""
        problem = await asyncio.to_thread(finish_download, self.snapshots, snapshot_id)
        await self._feed(
            lambda now: self.node.on_snapshot_downloaded(snapshot_id, problem, now),
            "a downloaded snapshot",
        )

    async def _send(self, action: SendRequest) -> None:
        try:
            response = await asyncio.wait_for(
                self.transport.send(action.dest, action.request),
                self.config.request_timeout_ms / 1000,
            )
        except (OSError, TimeoutError, ConnectionError, RaftWireError) as exc:
            # a peer that is down, unreachable or answers garbage: the node decides when
            # to ask again, and whether a refusal proves its leader gone
            log.debug("node %d: request to %d failed: %r", self.node_id, action.dest, exc)
            await self._request_failed(action, is_refusal(exc))
            return
        await self._feed(
            lambda now: self.node.handle_response(
                action.dest, action.correlation_id, response, now
            ),
            f"handling {type(response).__name__} from {action.dest}",
        )

    async def _request_failed(self, action: SendRequest, refused: bool) -> None:
        shortcuts = self.node.refusal_shortcuts
        await self._feed(
            lambda now: self.node.request_failed(action.dest, action.correlation_id, refused, now),
            f"a failed request to {action.dest}",
        )
        if self.node.refusal_shortcuts != shortcuts:
            log.info(
                "node %d: quorum leader %d refused a connection (its process is gone): "
                "pre-vote at once",
                self.node_id,
                action.dest,
            )

    async def _delete_expired_files(self) -> None:
        await asyncio.to_thread(self.log.delete_expired_files, int(time.time() * 1000))

    async def _timer_loop(self) -> None:
        next_cleanup = 0.0
        cleanup: asyncio.Task[None] | None = None
        while not self._closed:
            if time.monotonic() >= next_cleanup and (cleanup is None or cleanup.done()):
                next_cleanup = time.monotonic() + FILE_CLEANUP_INTERVAL_S
                # unlinks wait for the disk: a worker thread, beside the ticks and outside
                # the driver's lock (the partition log's lock guards its pending deletes);
                # one sweep at a time
                cleanup = self._spawn("file cleanup", self._delete_expired_files())
            delay = max(0, self.node.next_deadline_ms() - self.clock_ms()) / 1000
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            if self.clock_ms() >= self.node.next_deadline_ms():
                await self._feed(lambda now: self.node.tick(now), "a timer tick")
