"""Counters derived from metadata deltas: ISR shrinks/expands, leader elections.

Kafka's KRaft nodes count these as they replay the metadata log (the controller's
``ControllerMetricsChanges``: an unclean election is a leader change whose partition is
left in ``LeaderRecoveryState.RECOVERING``), so every node that replays the log counts
the same elections. The ISR meters are the broker's own (``IsrShrinksPerSec`` /
``IsrExpandsPerSec``): an ISR change of a partition this broker leads, at the same
leader epoch (a new leader epoch is an election, not a shrink).

`MetadataEvents.on_image` is an image listener: it looks at the changed topics only
(``MetadataDelta.changed_topics``), and at the partitions whose registration object was
replaced, so its cost is the size of the change, not of the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, UnknownMetricFamily
from prometheus_client.registry import Collector

from riverbed.metadata.image import NO_LEADER, MetadataDelta, MetadataImage, PartitionRegistration

#: Kafka's LeaderRecoveryState.RECOVERING: the leader was elected outside the ISR.
LEADER_RECOVERING = 1


class MetadataEvents(Collector):
    """Counts of what the metadata log did (see the module docstring)."""

    def __init__(self, node_id: int, is_controller: bool) -> None:
        self.node_id = node_id
        self.is_controller = is_controller
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leader_elections = 0
        self.unclean_elections = 0

    def on_image(self, old: MetadataImage, new: MetadataImage, delta: MetadataDelta) -> None:
        for topic_id in delta.changed_topics:
            before = old.topics_by_id.get(topic_id)
            after = new.topics_by_id.get(topic_id)
            if before is None or after is None:
                continue  # created (its first leaders are not elections) or deleted
            for index, reg in after.partitions.items():
                prev = before.partitions.get(index)
                if prev is not None and prev is not reg:
                    self._changed(prev, reg)

    def _changed(self, prev: PartitionRegistration, reg: PartitionRegistration) -> None:
        if reg.leader != prev.leader and reg.leader != NO_LEADER:
            self.leader_elections += 1
            if reg.leader_recovery_state == LEADER_RECOVERING:
                self.unclean_elections += 1
        if reg.leader != self.node_id or prev.leader != self.node_id:
            return
        if reg.leader_epoch != prev.leader_epoch:
            return
        if len(reg.isr) < len(prev.isr):
            self.isr_shrinks += 1
        elif len(reg.isr) > len(prev.isr):
            self.isr_expands += 1

    def collect(self) -> Iterator[CounterMetricFamily | UnknownMetricFamily]:
        p = "kafka_server_replicamanager_"
        yield CounterMetricFamily(
            p + "isrshrinks", "ISR shrinks of partitions led here", value=self.isr_shrinks
        )
        yield CounterMetricFamily(
            p + "isrexpands", "ISR expansions of partitions led here", value=self.isr_expands
        )
        if not self.is_controller:
            return
        c = "kafka_controller_controllerstats_"
        # a Kafka timer's Count renders as <name>_count (untyped, as the exporter's rule)
        yield UnknownMetricFamily(
            c + "leaderelectionrateandtimems_count",
            "Partition leader changes to a live leader",
            value=self.leader_elections,
        )
        yield CounterMetricFamily(
            c + "uncleanleaderelections",
            "Leaders elected outside the ISR",
            value=self.unclean_elections,
        )
