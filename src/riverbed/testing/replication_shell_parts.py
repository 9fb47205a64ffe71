"""Pieces of the shell replication simulation (``replication_shell_sim``): one broker's
process (the real storage and replication shells over a ``SimDisk``), its crashes, the
leader side of a replica Fetch, and the view of a real log that the checker reads."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AlterPartitionResponse, FetchRequest, FetchResponse
from riverbed.protocol.record_batch import LOG_OVERHEAD, iter_batches
from riverbed.protocol.records import SimpleRecord, build_batch, iter_records
from riverbed.replication.actions import FetchPosition
from riverbed.replication.partition import Partition
from riverbed.server.broker.fetch import follower_position, replica_of
from riverbed.server.broker.hosted import NotServed
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.purgatory import Purgatory
from riverbed.server.replication.manager import AlterBatch, ReplicaManager
from riverbed.storage.clock import Clock
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_manager import LogManager
from riverbed.testing.replication_sim_brokers import TOPIC, Heartbeat, Register, SimBroker
from riverbed.testing.replication_sim_parts import Record
from riverbed.testing.sim_disk import SimDisk

LISTENER = "PLAINTEXT"
Key = tuple[str, int]
FetcherKey = tuple[int, int]  # (leader, fetcher index)
#: Crash kinds (stats keys): the page cache survives / is lost / the disk is new.
PROCESS_CRASH = "process crashes"
POWER_LOSS = "power losses"
DISK_REPLACED = "disk replaced"


def record_batch(value: str, now_ms: int) -> bytes:
    """One record, as a producer without idempotence sends it."""
    return build_batch([SimpleRecord(value=value.encode())], now_ms=now_ms)


# ---------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class FetchReq:
    request_id: int
    request: FetchRequest
    parked_until: int = -1  # set while the leader holds it (nothing to return yet)

    def park(self, until_ms: int) -> FetchReq:
        return replace(self, parked_until=until_ms)


@dataclass(frozen=True)
class FetchResp:
    request_id: int
    response: FetchResponse


@dataclass(frozen=True)
class InFlightFetch:
    request_id: int
    positions: dict[Key, FetchPosition]
    sent_ms: int
    leader: int
    msg: FetchReq


@dataclass(frozen=True)
class ShellAlterReq:
    batch: AlterBatch


@dataclass(frozen=True)
class ShellAlterAnswer:
    batch: AlterBatch
    response: AlterPartitionResponse | None
    error: ErrorCode


# ---------------------------------------------------------------------------- the log view
class LogView:
    """The records of a broker's real partition log as the checker reads them: (leader
    epoch, value) per offset, decoded from the log's batches (cached; a truncation or a
    new process reads again)."""

    def __init__(self) -> None:
        self.plog: PartitionLog | None = None
        self.verified = 0
        self._cache: list[Record] = []
        self._seen: tuple[int, int] = (-1, -1)  # (id of the log, its truncations)

    def attach(self, plog: PartitionLog | None) -> None:
        if plog is not self.plog:
            self.plog = plog
            self.verified = 0
            self._cache = []
            self._seen = (-1, -1)

    @property
    def log_end_offset(self) -> int:
        return 0 if self.plog is None else self.plog.log_end_offset

    @property
    def records(self) -> list[Record]:
        plog = self.plog
        if plog is None:
            return []
        seen = (id(plog), plog.truncations)
        if seen != self._seen:
            self._seen, self._cache = seen, []
        end = plog.log_end_offset
        del self._cache[end:]
        while len(self._cache) < end:
            result = plog.read(len(self._cache), 1 << 16)
            try:
                data = result.read_bytes()
            finally:
                for r in result.ranges:
                    r.close()
            for pos, h in iter_batches(data):
                batch = data[pos : pos + LOG_OVERHEAD + h.batch_length]
                for rec in iter_records(batch):
                    value = (rec.value or b"").decode()
                    self._cache.append((h.partition_leader_epoch, value))
        return self._cache


# ---------------------------------------------------------------------------- a process
class WatchedPurgatory(Purgatory):
    """The real purgatory that also tells the simulation whenever a partition changed
    (every high watermark move wakes it): the checker sees each high watermark a leader
    exposes, even one it exposes and then loses within one simulated step."""

    def __init__(self, changed: Callable[[], None]) -> None:
        super().__init__()
        self._changed = changed

    def notify(self, key: Hashable) -> None:
        super().notify(key)
        self._changed()


async def _no_alter_partition(request: object) -> AlterPartitionResponse:
    raise AssertionError("the simulation sends AlterPartition itself")


class BrokerProcess:
    """One incarnation of a broker: storage recovery on start, then the shells."""

    def __init__(
        self,
        broker_id: int,
        disk: SimDisk,
        clock: Clock,
        rng: random.Random,
        config: dict[str, str],
        changed: Callable[[], None],
    ) -> None:
        self.log_manager = LogManager(
            [disk.root], clock, io=disk, rng=rng, flush_threads_max=1, recovery_threads_per_dir=1
        )
        self.purgatory = WatchedPurgatory(changed)
        self.partitions = PartitionManager(self.log_manager, broker_id, config, self.purgatory)
        self.image = MetadataImage.EMPTY
        self.replicas = ReplicaManager(
            broker_id,
            config,
            self.partitions,
            self.purgatory,
            clock.now_ms,
            _no_alter_partition,
            lambda: self.image,
            LISTENER,
            rng=random.Random(rng.getrandbits(64)),
            run_fetchers=False,
        )
        self.partitions.replicas = self.replicas
        self.alter: AlterBatch | None = None
        self.alter_sent_ms = 0
        self.fetches: dict[FetcherKey, InFlightFetch] = {}
        self.next_fetch_ms: dict[FetcherKey, int] = {}
        self.parked: list[tuple[int, FetchReq]] = []
        self.next_tick_ms = 0
        self.next_checkpoint_ms = 0

    def plog(self) -> PartitionLog | None:
        hosted = self.partitions.get(TOPIC, 0)
        return None if hosted is None else hosted.log

    def flush_due(self, now_ms: int) -> None:
        """flush.messages / rolled segments: fsync now (the log manager's flusher)."""
        for plog in self.log_manager.all_logs().values():
            if plog.flush_due(now_ms):
                plog.flush()

    def abandon(self) -> None:
        """The process is gone: nothing more is written, file descriptors close."""
        for plog in self.log_manager.all_logs().values():
            plog.abandon()
        self.partitions.close()

    def shutdown(self, broker_epoch: int) -> None:
        """A clean shutdown: logs flushed and closed, checkpoints and the marker written
        (with ``broker_epoch``, the registration the next start reports as previous)."""
        self.log_manager.shutdown(broker_epoch)
        self.partitions.close()


def leader_fetch_response(
    proc: BrokerProcess, request: FetchRequest, reread: bool = False
) -> tuple[FetchResponse, bool]:
    """The leader's answer to a replica Fetch (``server/broker/fetch.py``'s follower path
    without quotas and tiers), and whether it has anything to say now (records, an
    error or a divergence) rather than being parked; ``reread``: a parked fetch read
    again, its progress not recorded twice (as the purgatory's check does)."""
    topics = []
    urgent = False
    for t in request.topics:
        out = FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=[])
        for p in t.partitions:
            part = _follower_read(proc, t.topic, p, replica_of(request), reread)
            urgent = urgent or bool(part.records) or bool(part.error_code)
            urgent = urgent or part.diverging_epoch is not None
            out.partitions.append(part)
        topics.append(out)
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    return response, urgent


def _follower_read(
    proc: BrokerProcess,
    topic: str,
    p: FetchRequest.FetchPartition,
    replica: tuple[int, int],
    reread: bool,
) -> FetchResponse.PartitionData:
    def data(error: ErrorCode, hw: int = -1, start: int = -1) -> FetchResponse.PartitionData:
        return FetchResponse.PartitionData(
            partition_index=p.partition,
            error_code=int(error),
            high_watermark=hw,
            last_stable_offset=hw,
            log_start_offset=start,
            preferred_read_replica=-1,
            records=b"",
        )

    hosted = proc.partitions.leader_partition(topic, p.partition, p)
    if isinstance(hosted, NotServed):
        return data(hosted.error)
    plog = hosted.log
    position = follower_position(replica, p)
    if reread:
        verdict = proc.replicas.follower_reread(hosted, position)
    else:
        verdict = proc.replicas.follower_fetch(hosted, position)
    hw, start, end = verdict.high_watermark, plog.log_start_offset, plog.log_end_offset
    if verdict.error or verdict.diverging_epoch is not None:
        part = data(verdict.error, hw, start)
        if verdict.diverging_epoch is not None:
            epoch, end_offset = verdict.diverging_epoch
            part.diverging_epoch = FetchResponse.EpochEndOffset(epoch=epoch, end_offset=end_offset)
        return part
    if p.fetch_offset < start or p.fetch_offset > end:
        return data(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start)
    part = data(ErrorCode.NONE, hw, start)
    if p.fetch_offset < end:
        result = plog.read(p.fetch_offset, p.partition_max_bytes, end)
        try:
            part.records = result.read_bytes()
        finally:
            for r in result.ranges:
                r.close()
    return part


# ---------------------------------------------------------------------------- a broker
@dataclass
class ShellBroker(SimBroker):
    """A simulated broker whose replication runs in a ``BrokerProcess`` over its disk."""

    disk: SimDisk | None = None
    proc: BrokerProcess | None = None
    view: LogView = field(default_factory=LogView)
    config: dict[str, str] = field(default_factory=dict)
    clock: Clock | None = None
    process_rng: random.Random = field(default_factory=random.Random)
    orphans: list[InFlightFetch] = field(default_factory=list)
    #: called when a partition of this broker changed (the simulation's leader checks)
    on_change: Callable[[ShellBroker], None] | None = None

    def attach(self, root: Path, config: dict[str, str], clock: Clock) -> None:
        self.disk, self.config, self.clock = SimDisk(root), config, clock

    def start(self, rng: random.Random) -> None:
        assert self.disk is not None and self.clock is not None
        self.process_rng = rng
        self.view.attach(None)
        self.proc = BrokerProcess(
            self.broker_id, self.disk, self.clock, rng, self.config, self._changed
        )

    def _changed(self) -> None:
        if self.proc is not None:
            self.view.attach(self.proc.plog())
            if self.on_change is not None:
                self.on_change(self)

    def stop_process(self) -> None:
        if self.proc is not None:
            self.proc.abandon()
            self.proc = None
        self.view.attach(None)

    def crash(self) -> None:
        """SIGKILL (the base simulation's crash): the page cache keeps every write. The
        fetches it had in flight stay on the wire (``orphans``: the kernel still sends
        what a dead process wrote)."""
        if self.proc is not None:
            self.orphans += self.proc.fetches.values()
        self.stop_process()
        assert self.disk is not None
        self.disk.process_crash()
        super().crash()

    def crash_as(self, kind: str, rng: random.Random) -> None:
        self.crash()
        assert self.disk is not None
        if kind == POWER_LOSS:
            self.disk.power_loss(rng)
        elif kind == DISK_REPLACED:
            self.disk.replace_disk()

    def clean_shutdown(self) -> None:
        assert self.proc is not None
        self.proc.shutdown(self.broker_epoch)
        self.proc = None
        self.view.attach(None)
        super().crash()

    def restart(self, now_ms: int) -> None:
        super().restart(now_ms)
        self.start(random.Random(self.process_rng.getrandbits(64)))

    # ---- lifecycle messages ----------------------------------------------------------
    def register_message(self) -> Register:
        assert self.proc is not None
        return Register(self.incarnation, self.proc.log_manager.previous_broker_epoch)

    def heartbeat_message(self) -> Heartbeat:
        offset = self.proc.image.offset if self.proc is not None else -1
        return Heartbeat(self.broker_epoch, offset)

    def apply_image(self, image: MetadataImage) -> None:
        proc = self.proc
        assert proc is not None
        if image.offset <= proc.image.offset:
            return
        proc.image = image
        proc.partitions.apply_image(image)
        self.view.attach(proc.plog())

    # ---- what the checks read --------------------------------------------------------
    def incarnation_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.broker_id << 32 | self.incarnation)

    def holds_seat(self, image: MetadataImage) -> bool:
        """Is this process registered (so an ISR seat in ``image`` is its own)?"""
        reg = image.brokers.get(self.broker_id)
        return (
            self.alive
            and self.broker_epoch >= 0
            and self.view.plog is not None
            and reg is not None
            and reg.incarnation_id == self.incarnation_id()
        )

    def leader_core(self) -> Partition | None:
        return None if self.proc is None else self.proc.replicas.cores.get((TOPIC, 0))

    def truncations(self) -> int:
        plog = self.view.plog
        return 0 if plog is None else plog.truncations

    def describe(self) -> str:
        core = self.leader_core()
        role = core.role.value if core is not None else "-"
        hw = core.high_watermark if core is not None else -1
        last = self.view.records[-3:] if self.view.plog is not None else []
        return (
            f"alive={self.alive} epoch={self.broker_epoch} role={role} "
            f"leo={self.view.log_end_offset} hw={hw} last={last}"
        )
