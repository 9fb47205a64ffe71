"""A node's Prometheus metrics: Kafka's names as jmx_exporter renders them.

Names follow Strimzi's ``kafka-metrics.yaml`` rule file (packaging/examples/metrics in
strimzi-kafka-operator) with ``lowercaseOutputName: true``: ``kafka.server<type=
ReplicaManager, name=UnderReplicatedPartitions><>Value`` becomes
``kafka_server_replicamanager_underreplicatedpartitions``, a ``...PerSec`` meter's Count
becomes ``<name>_total`` (``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``).
Two departures: Strimzi drops ``RequestMetrics`` (too many series for its dashboards);
riverbed keeps them under the same generic rules, and its timers are Prometheus
histograms (``_bucket``/``_sum``/``_count``) instead of the exporter's percentile gauges
(the ``_count`` series has the same name). Consumer-group lag uses kafka_exporter's names.

Layout:

- `traffic`: the hot-path counters (requests, errors, times, bytes and messages per
  topic): plain integers in the event loop, rendered at scrape time;
- `state`: scrape-time collectors reading the node's state through Protocols
  (replica manager, controller, logs, raft, groups, network);
- `metadata_events`: counters derived from metadata deltas (ISR shrinks/expands, leader
  and unclean elections), as Kafka's KRaft controller metrics publisher does;
- `registry`: one `prometheus_client.CollectorRegistry` per node with all of the above.
"""
