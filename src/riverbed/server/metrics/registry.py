"""One Prometheus registry per node, holding every riverbed collector.

Several nodes may share a process (tests, simulations), so nothing here touches
prometheus_client's global ``REGISTRY``. The node builds a `NodeMetrics` before its
listeners (the request counters wrap the handler), then `watch` hands it the state the
scrape-time collectors read once that state exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry

from riverbed.metadata.image import MetadataDelta, MetadataImage
from riverbed.server.metrics.cleaner import CleanerCollector, CleanerView
from riverbed.server.metrics.exposition import render_text
from riverbed.server.metrics.loop_idle import LoopIdleCollector, loop_idle_here
from riverbed.server.metrics.metadata_events import MetadataEvents
from riverbed.server.metrics.remote import RemoteLogCollector, RemoteLogStats
from riverbed.server.metrics.stalls import StallCollector, StallStats
from riverbed.server.metrics.state import (
    CommitLatencyView,
    ControllerCollector,
    FollowerLag,
    GroupLagCollector,
    GroupShards,
    HostedPartitions,
    LedgerCollector,
    ListenerConnections,
    NetworkCollector,
    OfflineDirs,
    Parked,
    QuorumView,
    RaftView,
    ReplicaCollector,
)
from riverbed.server.metrics.traffic import TrafficCollector, TrafficStats
from riverbed.server.metrics.transactions import TransactionCollector, TxnShards
from riverbed.server.supervise import Work


class NodeMetrics:
    """The node's registry, its hot-path counters and its metadata-event counters."""

    def __init__(
        self,
        node_id: int,
        *,
        is_controller: bool,
        topic_name: Callable[[uuid.UUID], str | None],
    ) -> None:
        self.node_id = node_id
        self.is_controller = is_controller
        self.registry = CollectorRegistry(auto_describe=False)
        self.traffic = TrafficStats(topic_name)
        self.events = MetadataEvents(node_id, is_controller)
        self.stalls = StallStats()
        self.registry.register(self.events)
        self._watching = False

    def watch_network(
        self,
        queue_size: Callable[[], int],
        quotas: Iterable[ListenerConnections],
        fetch_purgatory: Parked,
    ) -> None:
        self.registry.register(TrafficCollector(self.traffic, queue_size))
        self.registry.register(NetworkCollector(quotas, fetch_purgatory))

    def watch_loop(self, window_ms: int) -> Work:
        """The idle ratios of the calling thread's event loop: registers their collector
        and returns the sampler to run in that loop."""
        idle = loop_idle_here(window_ms)
        self.registry.register(LoopIdleCollector(idle))
        return idle.run()

    def watch_stalls(self) -> Work:
        """Loop stalls and collector pauses (`riverbed.server.metrics.stalls`): registers
        their collector and returns the sampler to run in the node's loop."""
        self.registry.register(StallCollector(self.stalls))
        return self.stalls.run()

    def watch(
        self,
        *,
        quorum: QuorumView,
        raft: Callable[[], RaftView],
        raft_log_end: Callable[[], int],
        hosted: HostedPartitions,
        lag: Callable[[], FollowerLag | None],
        log_dirs: Callable[[], OfflineDirs | None],
        groups: Callable[[], GroupShards | None],
        remote: Callable[[], RemoteLogStats | None],
        raft_commit: Callable[[], CommitLatencyView] | None = None,
        cleaner: Callable[[], CleanerView | None] | None = None,
    ) -> None:
        """Register the scrape-time collectors (once; a second call changes nothing)."""
        if self._watching:
            return
        self._watching = True
        self.registry.register(
            ControllerCollector(quorum, raft, raft_log_end, self.is_controller, raft_commit)
        )
        self.registry.register(ReplicaCollector(self.node_id, hosted, lag, log_dirs))
        self.registry.register(GroupLagCollector(groups, hosted))
        self.registry.register(LedgerCollector(hosted))
        self.registry.register(RemoteLogCollector(remote))
        if cleaner is not None:
            self.registry.register(CleanerCollector(cleaner))

    def watch_transactions(
        self,
        hosted: HostedPartitions,
        coordinator: Callable[[], TxnShards | None],
        max_timeout_ms: Callable[[], int],
        now_ms: Callable[[], int],
    ) -> None:
        """Register the transaction gauges (`riverbed.server.metrics.transactions`)."""
        self.registry.register(
            TransactionCollector(self.node_id, hosted, coordinator, max_timeout_ms, now_ms)
        )

    def on_image(self, old: MetadataImage, new: MetadataImage, delta: MetadataDelta) -> None:
        """Image listener: metadata-event counters; a deleted topic's series go away."""
        self.events.on_image(old, new, delta)
        for topic in delta.deleted_topics.values():
            self.traffic.forget_topic(topic.name)

    def render(self) -> bytes:
        """The Prometheus text exposition of everything registered."""
        return render_text(self.registry)
