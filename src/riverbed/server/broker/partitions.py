"""The broker's partitions: metadata image -> partition logs, appends, reads, watermarks.

The metadata image says which partitions exist and who leads them; this module keeps one
storage `PartitionLog` per partition this node hosts (created on the image change that
adds the partition, deleted on the one that removes its topic), applies the topic's
effective config (`riverbed.metadata.effective_config`) as the log's `LogConfig`, and
wakes the fetch purgatory after every append.

Leadership: the image names each partition's leader and leader epoch. Client requests
are served by the leader only (`leader_partition`): a partition this node hosts as a
follower, or knows from the image without hosting it, answers NOT_LEADER_OR_FOLLOWER with
the current leader (Kafka's ``getPartitionOrError`` + ``localLogWithEpochOrThrow``). A
follower's log is written by its replica fetcher only, never by client produces.

High watermark: with a replica manager attached (``replicas``, the node always attaches
one: `riverbed.server.replication.manager`) each hosted partition has a partition core
that becomes leader or follower with every registration change and owns the high
watermark (the min log end over the ISR on a leader). Without one (unit tests of this
module) the leader's high watermark is its log end offset after each append.

Creating a partition log costs milliseconds of file creation (and a become-leader its
leader-epoch checkpoint); 10,000 new partitions stalled the event loop (every client) for
seconds.  Once serving (`create_logs_off_loop`, called by the broker), logs are created
and deleted in worker threads (`riverbed.server.broker.log_work`: ``LOG_WORK_THREADS`` at
once, in order per partition) while the loop keeps serving, as Kafka's request threads
serve while its metadata thread creates logs:

- a partition becomes visible to produce and fetch when its log exists; until then it
  answers NOT_LEADER_OR_FOLLOWER (Kafka's answer for a partition in the image that the
  broker does not host yet); CreateTopics / CreatePartitions / auto-creation answer only
  once every queued log job is done (`settled`);
- the new log of a partition this node leads gets its leader epoch in the worker too (the
  checkpoint write of the become-leader that follows; the core's own assignment of the
  same epoch then writes nothing);
- a deleted partition stops being served at once; its log is closed and renamed by a
  worker, before any creation of the same partition queued after it (a re-created topic);
- a log whose topic was deleted or re-created, or whose replica moved away, while it was
  being created is deleted again; one whose leadership changed meanwhile takes the
  registration current when it is installed;
- a creation that fails on the disk (ENOSPC, EIO) takes the log dir offline (Kafka's
  ``LogManager.getOrCreateLog``; the node halts when it was the last one online) and the
  partition answers KAFKA_STORAGE_ERROR (Kafka's offline partition) until a restart.

At start-up (before serving) logs are created inline, so `delete_orphans` sees every
hosted partition; a log a crash left half-created is loaded (recovered) there.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Final

from riverbed.metadata.effective_config import PerTopicConfigs, topic_config_for
from riverbed.metadata.image import (
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from riverbed.metadata.records import ResourceType
from riverbed.metadata.storage_format import uuid_to_str
from riverbed.producer.ledger import LedgerConfig
from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.protocol.errors import ErrorCode
from riverbed.server.broker.hosted import (
    ClaimsLeaderEpoch,
    HostedPartition,
    NotServed,
    leader_epoch_error,
    log_offline,
    producer_state_of,
)
from riverbed.server.broker.log_work import Job, LogWork
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.purgatory import Purgatory
from riverbed.server.supervise import guarded
from riverbed.storage.config import LogConfig
from riverbed.storage.errors import StorageError
from riverbed.storage.layout import METADATA_TOPIC
from riverbed.storage.log import ORIGIN_CLIENT, AppendInfo, PartitionLog
from riverbed.storage.log_manager import LogManager

if TYPE_CHECKING:
    from riverbed.server.replication.manager import ReplicaManager

log = logging.getLogger(__name__)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


#: Worker threads sealing producer ledger files (the fsyncs of a flush), for all partitions.
LEDGER_FLUSH_THREADS: Final = 2


def producer_state_config(props: Mapping[str, str]) -> ProducerStateConfig:
    """Producer state and ledger settings from the broker's static config."""
    base = ProducerStateConfig()

    def get(key: str, default: object) -> str:
        return str(props.get(key, default))

    return ProducerStateConfig(
        producer_id_expiration_ms=int(
            get("producer.id.expiration.ms", base.producer_id_expiration_ms)
        ),
        cache_max_entries=int(get("producer.id.cache.max.entries", base.cache_max_entries)),
        ledger=LedgerConfig(
            fpp=float(get("riverbed.producer.id.ledger.fpp", base.ledger.fpp)),
            file_bytes=int(get("riverbed.producer.id.ledger.file.bytes", base.ledger.file_bytes)),
            flush_interval_ms=int(
                get("riverbed.producer.id.ledger.flush.interval.ms", base.ledger.flush_interval_ms)
            ),
        ),
    )


def config_changed_topics(old: MetadataImage, new: MetadataImage) -> set[str] | None:
    """The topics whose config overrides differ between two images; None when a config
    of another resource (a broker's, the cluster default) differs: any topic's effective
    config may have changed."""
    if new.configs is old.configs:
        return set()  # no config record in between (the image shares the map)
    topics: set[str] = set()
    for key in old.configs.keys() | new.configs.keys():
        if old.configs.get(key) != new.configs.get(key):
            if key[0] != ResourceType.TOPIC:
                return None
            topics.add(key[1])
    return topics


def log_config_for(
    image: MetadataImage, topic: str, node_id: int, static_broker_config: Mapping[str, str]
) -> LogConfig:
    """The storage config of ``topic`` on broker ``node_id``
    (``riverbed.metadata.effective_config``: topic override <- dynamic broker <- dynamic
    default <- static <- default)."""
    return LogConfig.from_props(topic_config_for(image, topic, node_id, static_broker_config))


class PartitionManager:
    """Keeps the set of open partition logs in step with the metadata image."""

    def __init__(
        self,
        log_manager: LogManager,
        node_id: int,
        static_broker_config: Mapping[str, str],
        purgatory: Purgatory,
        *,
        fault_handler: FaultHandler | None = None,
    ) -> None:
        self.log_manager = log_manager
        #: the log creator's unexpected errors halt the node (``supervise``)
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self._guarded_notify = guarded("fetch wake-up", purgatory.notify, self.fault_handler)
        self.node_id = node_id
        self.static_broker_config = dict(static_broker_config)
        self.purgatory = purgatory
        self.partitions: dict[tuple[str, int], HostedPartition] = {}
        self.producer_state_config = producer_state_config(static_broker_config)
        #: ledger flush steps 4-8 (two fsyncs each) run here, off the event loop and the
        #: log locks; at most one pending flush per partition queues
        self.ledger_flusher = ThreadPoolExecutor(
            LEDGER_FLUSH_THREADS, thread_name_prefix="producer-ledger-flush"
        )
        self.image: MetadataImage = MetadataImage.EMPTY
        #: attached by the node (None: no replication, this module's unit tests)
        self.replicas: ReplicaManager | None = None
        # Off-loop log work (see the module docstring); both maps are bounded by the
        # partitions the image holds for this node.
        self._off_loop = False
        self._work = LogWork(self.fault_handler)
        #: the topic id of the latest creation queued or running per partition
        self._creating: dict[tuple[str, int], uuid.UUID] = {}
        #: partitions whose log creation failed on the disk (-> topic id): offline here
        self._offline: dict[tuple[str, int], uuid.UUID] = {}
        self._configs = PerTopicConfigs(
            lambda image, topic: log_config_for(image, topic, node_id, self.static_broker_config)
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        # A replica moved to another log dir (AlterReplicaLogDirs) reopens there: its
        # producer state is attached again and the hosted partition takes the new log.
        log_manager.log_attach = self._attach_producer_state
        log_manager.on_log_replaced = self._log_replaced

    def create_logs_off_loop(self) -> None:
        """From now on create new partition logs in a worker thread (see the docstring)."""
        self._off_loop = True
        self._loop = asyncio.get_running_loop() if _loop_running() else None

    async def settled(self) -> None:
        """Wait until every partition log the image asks for exists (or failed)."""
        await self._work.idle()

    async def stop_log_work(self) -> None:
        """Stop creating and deleting logs (the node stops; before the log manager)."""
        await self._work.close()

    # -- image changes -------------------------------------------------------------
    def log_config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        return self._configs.get(image, topic)

    def apply_image(self, image: MetadataImage, delta: MetadataDelta | None = None) -> None:
        """Open logs for new partitions, close+delete removed ones, refresh configs. Given
        the ``delta`` that made ``image`` from the image applied last, only the partitions
        it created, changed or deleted are looked at (Kafka's broker applies a
        ``MetadataDelta`` the same way): a change of one partition costs O(1), not a walk
        of every partition. Without one (start-up, a snapshot), every partition is."""
        old = self.image
        self.image = image
        if delta is None or delta.base is not old:
            self._apply_all(image)
        else:
            self._apply_delta(image, delta)
            self._refresh_configs(old, image)
        for key, topic_id in list(self._offline.items()):
            if not self._wanted(key, topic_id):
                del self._offline[key]  # deleted or re-created: a new creation may work
        if self.replicas is not None:
            self.replicas.refresh_configs(image)  # dynamic configs bind at once
            self.replicas.refresh_brokers(image)  # re-registrations reach the leaders

    def _apply_all(self, image: MetadataImage) -> None:
        for topic in image.topics_by_name.values():
            config = self.log_config_for(image, topic.name)
            for index, reg in topic.partitions.items():
                self._apply_partition(topic, index, reg, config)
        for key in list(self.partitions):
            name, index = key
            topic_img: TopicImage | None = image.topics_by_name.get(name)
            if topic_img is None or index not in topic_img.partitions:
                self._delete(key)

    def _apply_delta(self, image: MetadataImage, delta: MetadataDelta) -> None:
        for topic_id, gone in delta.deleted_topics.items():
            for index in gone.partitions:
                hosted = self.partitions.get((gone.name, index))
                if hosted is not None and hosted.topic_id == topic_id:
                    self._delete((gone.name, index))
        for topic_id in delta.changed_topics:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                continue
            config = self.log_config_for(image, topic.name)
            changed = delta.changed_partition_ids(topic_id)
            for index in topic.partitions if changed is None else changed:
                reg = topic.partitions.get(index)
                if reg is not None:
                    self._apply_partition(topic, index, reg, config)

    def _refresh_configs(self, old: MetadataImage, image: MetadataImage) -> None:
        """Hosted partitions whose topic's effective config changed take it."""
        topics = config_changed_topics(old, image)
        if topics is None:  # a broker-level config: any topic's effective config
            hosted_now: Iterable[HostedPartition] = list(self.partitions.values())
        else:
            hosted_now = [
                hosted
                for name in topics
                if (topic := image.topics_by_name.get(name)) is not None
                for index in topic.partitions
                if (hosted := self.partitions.get((name, index))) is not None
            ]
        for hosted in hosted_now:
            config = self.log_config_for(image, hosted.topic)
            if config != hosted.config:
                hosted.config = config
                self._update_config(hosted)

    def _apply_partition(
        self, topic: TopicImage, index: int, reg: PartitionRegistration, config: LogConfig
    ) -> None:
        """One partition of the image: host it, follow its registration, or let it go."""
        name = topic.name
        key = (name, index)
        if self.node_id not in reg.replicas:
            if key in self.partitions:
                # reassigned away (the move completed): the replica stops and its
                # log goes, as Kafka's StopReplica with delete
                self._delete(key)
            return
        hosted = self.partitions.get(key)
        if hosted is None or hosted.topic_id != topic.topic_id:
            if hosted is not None:  # same name, new topic id: the old log is gone
                self._delete(key)
            if self._off_loop and _loop_running():
                self._queue_creation(key, topic.topic_id)
                return
            plog = self._open_log(name, index, config, uuid_to_str(topic.topic_id))
            hosted = HostedPartition(name, topic.topic_id, index, reg, plog, config)
            self.partitions[key] = hosted
            self._sync_high_watermark(hosted)
            return
        previous = hosted.registration
        hosted.registration = reg
        if (reg.leader, reg.leader_epoch) != (previous.leader, previous.leader_epoch):
            # A leadership change: the HW's owner learns it; parked fetches
            # wake up to answer the change.
            self._sync_high_watermark(hosted)
            self.purgatory.notify(key)
        elif self.replicas is not None and reg != previous:
            self.replicas.apply(hosted)  # ISR / replicas / partition epoch
        if config != hosted.config:
            hosted.config = config
            self._update_config(hosted)

    def _wanted(self, key: tuple[str, int], topic_id: uuid.UUID) -> bool:
        """Does the current image still want a log for ``key`` of topic ``topic_id`` here?"""
        topic = self.image.topics_by_name.get(key[0])
        if topic is None or topic.topic_id != topic_id:
            return False
        reg = topic.partitions.get(key[1])
        return reg is not None and self.node_id in reg.replicas and key not in self.partitions

    def _queue_creation(self, key: tuple[str, int], topic_id: uuid.UUID) -> None:
        if topic_id in (self._creating.get(key), self._offline.get(key)):
            return  # queued or running already, or failed on the disk (until a restart)
        self._creating[key] = topic_id
        job = Job(
            partial(self._prepare_creation, key, topic_id),
            partial(self._finish_creation, key, topic_id),
        )
        self._work.submit(key, job)

    def _prepare_creation(
        self, key: tuple[str, int], topic_id: uuid.UUID
    ) -> Callable[[], object] | None:
        """On the loop when the creation's turn comes: the file work, or None when the
        image no longer wants this log here."""
        if not self._wanted(key, topic_id):
            if self._creating.get(key) == topic_id:
                del self._creating[key]
            return None
        name, index = key
        reg = self.image.topics_by_name[name].partitions[index]
        lead_epoch = reg.leader_epoch if reg.leader == self.node_id else None
        config = self.log_config_for(self.image, name)
        return partial(self._create_log, name, index, config, uuid_to_str(topic_id), lead_epoch)

    def _create_log(
        self, name: str, index: int, config: LogConfig, topic_id: str, lead_epoch: int | None
    ) -> PartitionLog:
        """In a worker thread: the log, and for a new log this node leads, the leader
        epoch its become-leader is about to assign (its checkpoint write)."""
        plog = self._open_log(name, index, config, topic_id)
        if lead_epoch is not None and plog.log_end_offset == 0 and not plog.epoch_entries():
            plog.assign_epoch_start(lead_epoch, 0)
        return plog

    def _finish_creation(
        self, key: tuple[str, int], topic_id: uuid.UUID, plog: object, error: BaseException | None
    ) -> None:
        """On the loop: serve the new log, or delete it when no longer wanted."""
        name, index = key
        if self._creating.get(key) == topic_id:
            del self._creating[key]
        if error is not None:
            if not isinstance(error, (StorageError, OSError)):
                raise error  # not a disk's failure: a fault (the supervisor halts the node)
            log.error("cannot create the log of partition %s-%d: %s", name, index, error)
            if self._wanted(key, topic_id):
                self._offline[key] = topic_id  # KAFKA_STORAGE_ERROR until a restart
            return
        assert isinstance(plog, PartitionLog)
        hosted = self.partitions.get(key)
        if hosted is not None and hosted.log is plog:
            return  # (created inline meanwhile: nothing to do)
        if not self._wanted(key, topic_id):
            # Deleted, re-created under a new id or moved away while being created: the
            # deletion goes before any creation queued for the partition since.
            log.info("deleting partition log %s-%d: not wanted here any more", name, index)
            self._work.submit(key, self._deletion_job(name, index), first=True)
            return
        reg = self.image.topics_by_name[name].partitions[index]
        config = self.log_config_for(self.image, name)
        hosted = HostedPartition(name, topic_id, index, reg, plog, config)
        if config != plog.config:  # a config change arrived meanwhile
            self._update_config(hosted)
        self.partitions[key] = hosted
        self._sync_high_watermark(hosted)
        self.purgatory.notify(key)

    def _deletion_job(self, name: str, index: int) -> Job:
        def work() -> Callable[[], object]:
            return partial(self.log_manager.delete, name, index)

        def done(_deleted: object, error: BaseException | None) -> None:
            if error is None:
                return
            if not isinstance(error, (StorageError, OSError)):
                raise error  # a fault (the supervisor halts the node)
            # the rename failed: the dir is offline; its next start deletes the orphan
            log.error("cannot delete the log of partition %s-%d: %s", name, index, error)

        return Job(work, done)

    def _open_log(self, name: str, index: int, config: LogConfig, topic_id: str) -> PartitionLog:
        """The partition's log, with its producer state rebuilt and attached (snapshots +
        replay of the batch headers after the latest one)."""
        plog = self.log_manager.get_or_create(name, index, config, topic_id=topic_id)
        self._attach_producer_state(plog)
        return plog

    def _attach_producer_state(self, plog: PartitionLog) -> None:
        if plog.producer_state is None:
            ProducerStateManager(
                plog.directory,
                plog.clock.now_ms,
                self.producer_state_config,
                plog.name,
                flush_executor=self.ledger_flusher,
            ).attach(plog)

    def _log_replaced(self, key: tuple[str, int], plog: PartitionLog) -> None:
        # in a log manager thread, under the old log's lock (the partition's appends wait)
        hosted = self.partitions.get(key)
        if hosted is not None:
            hosted.log = plog
        if self.replicas is not None:
            self.replicas.replace_log(key, plog)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._guarded_notify, key)

    def delete_orphans(self) -> None:
        """Delete logs found on disk whose topic the image no longer has (deleted while down)."""
        for topic, index in list(self.log_manager.all_logs()):
            if topic == METADATA_TOPIC:
                continue  # the metadata log is never a broker partition
            if (topic, index) not in self.partitions and (topic, index) not in self._creating:
                # (one queued for creation is being opened off the loop: the image has it)
                log.info("deleting log %s-%d: not in the metadata image", topic, index)
                self.log_manager.delete(topic, index)

    def _update_config(self, hosted: HostedPartition) -> None:
        hosted.log.update_config(hosted.config)

    def _delete(self, key: tuple[str, int]) -> None:
        """Stop serving the partition now; its log goes (off the loop once serving)."""
        hosted = self.partitions.pop(key)
        if self.replicas is not None:
            self.replicas.remove(key)
        log.info("deleting partition log %s-%d", hosted.topic, hosted.index)
        if self._off_loop and _loop_running():
            self._work.submit(key, self._deletion_job(hosted.topic, hosted.index))
        else:
            self.log_manager.delete(hosted.topic, hosted.index)
        self.purgatory.notify(key)

    # -- data path -----------------------------------------------------------------
    def get(self, topic: str, index: int) -> HostedPartition | None:
        return self.partitions.get((topic, index))

    def leader_partition(
        self,
        topic: str,
        index: int,
        requested: ClaimsLeaderEpoch | None = None,
        *,
        require_leader: bool = True,
    ) -> HostedPartition | NotServed:
        """The partition when this node may serve a client request for it (as its leader
        at the current epoch), else why not: UNKNOWN_TOPIC_OR_PARTITION (not in the image),
        NOT_LEADER_OR_FOLLOWER (hosted as a follower, or not hosted here),
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (``requested.current_leader_epoch``),
        KAFKA_STORAGE_ERROR (its log dir is offline). ``require_leader=False`` (Kafka's
        debugging replica) skips the leader check."""
        hosted = self.partitions.get((topic, index))
        reg = hosted.registration if hosted is not None else self.image.partition(topic, index)
        if reg is None:
            return NotServed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if hosted is None:
            if (topic, index) in self._offline:
                return NotServed(ErrorCode.KAFKA_STORAGE_ERROR)  # its creation failed here
            # in the image but not here (another node's, or its log is still being created)
            return NotServed(ErrorCode.NOT_LEADER_OR_FOLLOWER, reg.leader, reg.leader_epoch)
        if requested is not None:
            fenced = leader_epoch_error(requested, reg.leader_epoch)
            if fenced is not None:
                return NotServed(fenced, reg.leader, reg.leader_epoch)
        if log_offline(hosted.log):
            return NotServed(ErrorCode.KAFKA_STORAGE_ERROR)
        if require_leader and reg.leader != self.node_id:
            return NotServed(ErrorCode.NOT_LEADER_OR_FOLLOWER, reg.leader, reg.leader_epoch)
        return hosted

    def append(
        self, hosted: HostedPartition, batches: bytearray, *, origin: str = ORIGIN_CLIENT
    ) -> AppendInfo:
        """Append as leader (raises storage's typed errors); advances the HW, wakes fetches.
        ``origin=ORIGIN_COORDINATOR``: control batches allowed (transaction markers), and
        a coordinator's own transactional batches are not checked for sequences."""
        info = hosted.log.append_as_leader(batches, hosted.registration.leader_epoch, origin=origin)
        if self.replicas is not None:
            self.replicas.on_local_append(hosted)
        else:
            self._sync_high_watermark(hosted)
        self.purgatory.notify((hosted.topic, hosted.index))
        return info

    def _sync_high_watermark(self, hosted: HostedPartition) -> None:
        if self.replicas is not None:
            self.replicas.apply(hosted)  # the partition core owns the high watermark
            return
        # No replication (this module's unit tests): the leader's ISR is itself alone.
        if hosted.registration.leader != self.node_id:
            return
        plog = hosted.log
        leo = plog.log_end_offset
        if plog.high_watermark < leo:
            plog.update_high_watermark(leo)

    def flush_producer_ledgers(self) -> int:
        """Seal every partition's active ledger file whose timer ran out or filter is full."""
        flushed = 0
        for hosted in list(self.partitions.values()):
            state = producer_state_of(hosted.log)
            if state is not None and state.flush_if_due():
                flushed += 1
        return flushed

    def remove_expired_producers(self) -> int:
        """Forget producers idle for producer.id.expiration.ms in every hosted partition
        (each measured on its log's injected clock)."""
        gone = 0
        for hosted in list(self.partitions.values()):
            state = producer_state_of(hosted.log)
            if state is not None:
                gone += state.remove_expired()
        return gone

    def close(self) -> None:
        """The node stops (after `stop_log_work` and the log manager's shutdown closed
        every log): forget the hosted partitions and join the ledger flush threads."""
        self.partitions.clear()
        self.ledger_flusher.shutdown(wait=True)  # a log's close waits for its flush anyway
