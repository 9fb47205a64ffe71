"""Scrape-time collectors: gauges computed from the node's state when /metrics is read.

Nothing here runs on the request path: each collector reads the state it is given
(through the Protocols below) when Prometheus scrapes, in the node's event loop, so what
it reads cannot change under it.

Kafka's definitions:

- ReplicaManager (every broker; the partitions this broker hosts): ``PartitionCount``,
  ``LeaderCount``, ``UnderReplicatedPartitions`` (led here, ISR smaller than the
  replica set: Kafka's ``Partition.isUnderReplicated``), ``UnderMinIsrPartitionCount`` /
  ``AtMinIsrPartitionCount`` (led here, ISR below / at the topic's
  ``min.insync.replicas``), ``OfflineReplicaCount`` (in an offline log dir);
  ReplicaFetcherManager ``MaxLag`` (largest follower lag, leader HW - own log end);
- Log (every hosted log): ``Size``, ``LogStartOffset``, ``LogEndOffset``,
  ``NumLogSegments`` per topic and partition; LogManager ``OfflineLogDirectoryCount``;
- KafkaController (controller nodes, from the metadata image, as KRaft's
  ``ControllerMetadataMetricsPublisher``): ``ActiveControllerCount`` (1 on the active
  controller), ``OfflinePartitionsCount`` (no leader), ``PreferredReplicaImbalanceCount``
  (leader is not the first replica), ``FencedBrokerCount``, ``ActiveBrokerCount``,
  ``GlobalTopicCount``, ``GlobalPartitionCount``;
- raft-metrics (every node): ``current-state``, ``current-leader``, ``current-epoch``,
  ``high-watermark``, ``log-end-offset``;
- socket-server-metrics ``connection-count`` per listener;
- consumer groups, kafka_exporter's names, for the groups this node coordinates:
  ``kafka_consumergroup_current_offset`` and ``kafka_consumergroup_lag`` (high watermark -
  committed offset, where this node hosts the partition's log) per group and partition,
  their per-topic ``_sum``, and ``kafka_consumergroup_members``;
- the producer-id ledgers (riverbed's own): ids, sealed files, filter memory, cached
  ids, reads, filter checks and false-positive checks, summed over the hosted partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from riverbed.coordinator.consumer_group import ConsumerGroup
from riverbed.coordinator.group import ClassicGroup
from riverbed.coordinator.shard import GroupShard
from riverbed.metadata.image import NO_LEADER, MetadataImage
from riverbed.raft.roles import Role
from riverbed.server.broker.hosted import HostedPartition, producer_state_of
from riverbed.server.metrics.exposition import RenderedFamily, labels_text

Families = Iterator[GaugeMetricFamily | CounterMetricFamily | RenderedFamily]


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


# ------------------------------------------------------------------ replica manager
class HostedPartitions(Protocol):
    """What the broker hosts (`PartitionManager`)."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], HostedPartition]: ...


class FollowerLag(Protocol):
    """Follower lag per hosted partition (`ReplicaManager.offset_lag`)."""

    def offset_lag(self, key: tuple[str, int]) -> int: ...


class OfflineDirs(Protocol):
    """The log manager's failed dirs (`LogManager.offline_dirs`)."""

    def offline_dirs(self) -> Mapping[Path, str]: ...


class ReplicaCollector(Collector):
    """kafka.server ReplicaManager / ReplicaFetcherManager and kafka.log Log gauges."""

    def __init__(
        self,
        node_id: int,
        hosted: HostedPartitions,
        lag: Callable[[], FollowerLag | None],
        log_dirs: Callable[[], OfflineDirs | None],
    ) -> None:
        self.node_id = node_id
        self.hosted = hosted
        self.lag = lag
        self.log_dirs = log_dirs

    def collect(self) -> Families:
        partitions = list(self.hosted.partitions.values())
        yield from self._replica_manager(partitions)
        yield from self._logs(partitions)
        dirs = self.log_dirs()
        yield _gauge(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs offline after a disk failure",
            len(dirs.offline_dirs()) if dirs is not None else 0,
        )

    def _replica_manager(self, partitions: list[HostedPartition]) -> Families:
        leaders = under = under_min = at_min = offline = 0
        max_lag = 0
        lag = self.lag()
        for hp in partitions:
            reg = hp.registration
            if hp.log.offline:
                offline += 1
            if reg.leader != self.node_id:
                if lag is not None and self.node_id in reg.replicas:
                    max_lag = max(max_lag, lag.offset_lag((hp.topic, hp.index)))
                continue
            leaders += 1
            isr = len(reg.isr)
            if isr < len(reg.replicas):
                under += 1
            min_isr = hp.config.min_insync_replicas
            if isr < min_isr:
                under_min += 1
            elif isr == min_isr:
                at_min += 1
        p = "kafka_server_replicamanager_"
        yield _gauge(p + "partitioncount", "Partitions hosted here", len(partitions))
        yield _gauge(p + "leadercount", "Partitions led here", leaders)
        yield _gauge(p + "underreplicatedpartitions", "Led here, ISR < replicas", under)
        yield _gauge(p + "underminisrpartitioncount", "Led here, ISR < min.insync", under_min)
        yield _gauge(p + "atminisrpartitioncount", "Led here, ISR = min.insync", at_min)
        yield _gauge(p + "offlinereplicacount", "Replicas in offline log dirs", offline)
        family = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "Largest follower lag in records (leader HW - own log end)",
            labels=["clientid"],
        )
        family.add_metric(["Replica"], max_lag)
        yield family

    def _logs(self, partitions: list[HostedPartition]) -> Iterator[RenderedFamily]:
        size = RenderedFamily("kafka_log_log_size", "Bytes of the local log")
        start = RenderedFamily("kafka_log_log_logstartoffset", "Log start offset")
        end = RenderedFamily("kafka_log_log_logendoffset", "Log end offset")
        segments = RenderedFamily("kafka_log_log_numlogsegments", "Local segments")
        for hp in partitions:
            plog = hp.log
            if plog.closed:
                continue
            key = labels_text(topic=hp.topic, partition=str(hp.index))
            size.add(key, plog.size_bytes)
            start.add(key, plog.log_start_offset)
            end.add(key, plog.log_end_offset)
            segments.add(key, len(plog.segments))
        yield from (size, start, end, segments)


# ------------------------------------------------------------------ controller + raft
class RaftView(Protocol):
    """What the raft metrics read (`riverbed.raft.node.RaftNode`)."""

    @property
    def role(self) -> Role: ...
    @property
    def leader_id(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def voted_id(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def is_voter(self) -> bool: ...


class CommitLatencyView(Protocol):
    """Raft commit latency (`riverbed.server.raft_driver.CommitLatency`)."""

    @property
    def avg_ms(self) -> float: ...
    @property
    def max_ms(self) -> int: ...


class QuorumView(Protocol):
    """The node's metadata quorum (`QuorumMetadata`)."""

    @property
    def image(self) -> MetadataImage: ...

    def is_active(self) -> bool: ...


class ControllerCollector(Collector):
    """kafka.controller KafkaController gauges from the image, and raft-metrics."""

    def __init__(
        self,
        quorum: QuorumView,
        raft: Callable[[], RaftView],
        raft_log_end: Callable[[], int],
        is_controller: bool,
        raft_commit: Callable[[], CommitLatencyView] | None = None,
    ) -> None:
        self.quorum = quorum
        self.raft = raft
        self.raft_log_end = raft_log_end
        self.raft_commit = raft_commit
        self.is_controller = is_controller

    def collect(self) -> Families:
        if self.is_controller:
            yield from self._controller(self.quorum.image)
        yield from self._raft()

    def _controller(self, image: MetadataImage) -> Families:
        offline = imbalance = partitions = 0
        for topic in image.topics_by_id.values():
            for reg in topic.partitions.values():
                partitions += 1
                if reg.leader == NO_LEADER:
                    offline += 1
                elif reg.replicas and reg.leader != reg.replicas[0]:
                    imbalance += 1
        fenced = sum(1 for b in image.brokers.values() if b.fenced)
        p = "kafka_controller_kafkacontroller_"
        active = 1 if self.quorum.is_active() else 0
        yield _gauge(p + "activecontrollercount", "1 on the active controller", active)
        yield _gauge(p + "offlinepartitionscount", "Partitions without a leader", offline)
        yield _gauge(
            p + "preferredreplicaimbalancecount", "Leader is not the first replica", imbalance
        )
        yield _gauge(p + "fencedbrokercount", "Registered brokers that are fenced", fenced)
        yield _gauge(
            p + "activebrokercount", "Registered unfenced brokers", len(image.brokers) - fenced
        )
        yield _gauge(p + "globaltopiccount", "Topics in the cluster", len(image.topics_by_id))
        yield _gauge(p + "globalpartitioncount", "Partitions in the cluster", partitions)

    def _raft(self) -> Families:
        node = self.raft()
        state = node.role.value.lower()
        if not node.is_voter and node.role is not Role.LEADER:
            state = "observer"
        p = "kafka_server_raftmetrics_"
        family = GaugeMetricFamily(
            p + "current_state", "This node's raft role", labels=["current_state"]
        )
        family.add_metric([state], 1)
        yield family
        yield _gauge(p + "current_leader", "The quorum leader's id (-1: none)", node.leader_id)
        yield _gauge(p + "current_epoch", "The quorum epoch", node.epoch)
        yield _gauge(p + "current_vote", "The voted-for id (-1: none)", node.voted_id)
        yield _gauge(p + "high_watermark", "The metadata log's high watermark", node.high_watermark)
        yield _gauge(p + "log_end_offset", "The metadata log's end offset", self.raft_log_end())
        if self.raft_commit is not None:
            commit = self.raft_commit()
            yield _gauge(p + "commit_latency_avg", "Append -> commit, ms (avg)", commit.avg_ms)
            yield _gauge(p + "commit_latency_max", "Append -> commit, ms (max)", commit.max_ms)


# ------------------------------------------------------------------ network
class ListenerConnections(Protocol):
    """Connection counts per listener (`ConnectionQuotas`)."""

    def listeners(self) -> Iterable[str]: ...

    def listener_count(self, listener: str) -> int: ...


class Parked(Protocol):
    """Requests waiting in a purgatory (`Purgatory.parked`)."""

    @property
    def parked(self) -> int: ...


class NetworkCollector(Collector):
    """socket-server-metrics ``connection-count`` per listener, and the fetch purgatory's
    size (DelayedOperationPurgatory ``PurgatorySize``: parked long-poll fetches)."""

    def __init__(self, quotas: Iterable[ListenerConnections], fetches: Parked) -> None:
        self.quotas = list(quotas)
        self.fetches = fetches

    def collect(self) -> Families:
        family = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open connections per listener",
            labels=["listener", "networkProcessor"],
        )
        for q in self.quotas:
            for name in sorted(q.listeners()):
                family.add_metric([name, "0"], q.listener_count(name))
        yield family
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests parked in a purgatory",
            labels=["delayedOperation"],
        )
        purgatory.add_metric(["Fetch"], self.fetches.parked)
        yield purgatory


# ------------------------------------------------------------------ consumer groups
class GroupShards(Protocol):
    """The groups this node coordinates (`GroupCoordinator.shards`)."""

    @property
    def shards(self) -> Mapping[int, GroupShard]: ...


class GroupLagCollector(Collector):
    """kafka_exporter's consumer-group gauges for the groups coordinated here."""

    def __init__(self, groups: Callable[[], GroupShards | None], hosted: HostedPartitions):
        self.groups = groups
        self.hosted = hosted

    def collect(self) -> Families:
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "High watermark - committed offset", labels=labels
        )
        current_sum = GaugeMetricFamily(
            "kafka_consumergroup_current_offset_sum",
            "Committed offsets summed per topic",
            labels=labels[:2],
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum", "Lag summed per topic", labels=labels[:2]
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group", labels=labels[:1]
        )
        source = self.groups()
        hosted = self.hosted.partitions
        for shard in list(source.shards.values()) if source is not None else []:
            groups: list[ClassicGroup | ConsumerGroup] = [
                *shard.groups.values(),
                *shard.consumer_groups.values(),
            ]
            for group in sorted(groups, key=lambda g: g.group_id):
                members.add_metric([group.group_id], len(group.members))
                sums: dict[str, tuple[int, int]] = {}
                for (topic, index), committed in sorted(group.offsets.items()):
                    key = [group.group_id, topic, str(index)]
                    current.add_metric(key, committed.offset)
                    cur_sum, lag_total = sums.get(topic, (0, 0))
                    hp = hosted.get((topic, index))
                    behind = 0
                    if hp is not None and not hp.log.closed:
                        behind = max(0, hp.log.high_watermark - committed.offset)
                        lag.add_metric(key, behind)
                    sums[topic] = (cur_sum + committed.offset, lag_total + behind)
                for topic, (cur_sum, lag_total) in sorted(sums.items()):
                    current_sum.add_metric([group.group_id, topic], cur_sum)
                    lag_sum.add_metric([group.group_id, topic], lag_total)
        yield from (current, lag, current_sum, lag_sum, members)


# ------------------------------------------------------------------ producer-id ledger
class LedgerCollector(Collector):
    """The producer-id ledgers of the hosted partitions, summed (riverbed's own names:
    Kafka keeps producer state in memory and has no such metrics)."""

    def __init__(self, hosted: HostedPartitions) -> None:
        self.hosted = hosted

    def collect(self) -> Families:
        ids = files = filter_bytes = cached = reads = false_positives = checks = 0
        for hp in list(self.hosted.partitions.values()):
            state = producer_state_of(hp.log)
            if state is None or hp.log.closed:
                continue
            (n_ids, n_files, n_bytes, n_reads, n_fp, n_checks), in_cache = state.ledger_totals()
            ids += n_ids
            files += n_files
            filter_bytes += n_bytes
            cached += in_cache
            reads += n_reads
            false_positives += n_fp
            checks += n_checks
        p = "riverbed_producer_ledger_"
        yield _gauge(p + "ids", "Producer ids in the ledgers", ids)
        yield _gauge(p + "files", "Sealed ledger files", files)
        yield _gauge(p + "filter_bytes", "Bloom filter bytes in memory", filter_bytes)
        yield _gauge(p + "cached_ids", "Producer ids in the write-through caches", cached)
        yield CounterMetricFamily(p + "reads", "Ledger reads (cache misses)", value=reads)
        yield CounterMetricFamily(
            p + "filter_checks", "Sealed-file filter checks by reads", value=checks
        )
        yield CounterMetricFamily(
            p + "false_positive_checks",
            "Sealed files read because a filter said maybe, in vain",
            value=false_positives,
        )
