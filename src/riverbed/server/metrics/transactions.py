"""Transaction gauges, read at scrape time: what the partition leaders hold open and
what the transaction coordinators here are doing.

- Kafka's KIP-664 ``kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount``:
  partitions led here whose earliest open transaction's producer last wrote more than
  ``transaction.max.timeout.ms`` + 5 minutes ago (``ProducerStateManager
  .hasLateTransaction``: no coordinator would leave a transaction open that long, so it
  is probably hanging; `riverbed transactions find-hanging` tells which);
- riverbed's own, over the partitions led here: ``riverbed_partition_open_transactions``
  (open transactions summed over the partitions) and ``riverbed_partition_lso_lag_max``
  (the largest high watermark - last stable offset: records a read_committed consumer
  cannot read yet because a transaction holds them);
- ``riverbed_transaction_coordinator_transactions{state}``: the transactional ids of the
  ``__transaction_state`` partitions coordinated here, by Kafka's state name (``Ongoing``,
  ``PrepareCommit``, ``CompleteAbort``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from riverbed.server.broker.hosted import last_stable_offset, producer_state_of
from riverbed.server.metrics.state import HostedPartitions
from riverbed.transaction.shard import TransactionShard

#: Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS.
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


class TxnShards(Protocol):
    """The loaded coordinator shards (`riverbed.transaction.coordinator.TransactionCoordinator`)."""

    @property
    def shards(self) -> Mapping[int, TransactionShard]: ...


class TransactionCollector(Collector):
    """The gauges of the module docstring."""

    def __init__(
        self,
        node_id: int,
        hosted: HostedPartitions,
        coordinator: Callable[[], TxnShards | None],
        max_timeout_ms: Callable[[], int],
        now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.hosted = hosted
        self.coordinator = coordinator
        self.max_timeout_ms = max_timeout_ms
        self.now_ms = now_ms

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.now_ms()
        late_after = self.max_timeout_ms() + LATE_TRANSACTION_BUFFER_MS
        late = open_txns = lso_lag = 0
        for hp in list(self.hosted.partitions.values()):
            state = producer_state_of(hp.log)
            if state is None:
                continue
            txns = state.open_transaction_count()
            if not txns or hp.registration.leader != self.node_id or hp.log.closed:
                continue
            open_txns += txns
            lso_lag = max(lso_lag, hp.log.high_watermark - last_stable_offset(hp.log))
            last = state.oldest_open_txn_last_timestamp()
            if last > 0 and now - last > late_after:
                late += 1
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitionswithlatetransactionscount",
            "Led here, the oldest open transaction's producer silent for longer than "
            "transaction.max.timeout.ms + 5 min",
            value=late,
        )
        yield GaugeMetricFamily(
            "riverbed_partition_open_transactions",
            "Open transactions summed over the partitions led here",
            value=open_txns,
        )
        yield GaugeMetricFamily(
            "riverbed_partition_lso_lag_max",
            "Largest high watermark - last stable offset of the partitions led here",
            value=lso_lag,
        )
        yield from self._coordinator()

    def _coordinator(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "riverbed_transaction_coordinator_transactions",
            "Transactional ids coordinated here, by state",
            labels=["state"],
        )
        core = self.coordinator()
        counts: dict[str, int] = {}
        for shard in list(core.shards.values()) if core is not None else []:
            for meta in list(shard.txns.values()):
                name = meta.state.kafka_name
                counts[name] = counts.get(name, 0) + 1
        for name, n in sorted(counts.items()):
            family.add_metric([name], n)
        yield family
