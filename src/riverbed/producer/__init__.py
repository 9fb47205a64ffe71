"""riverbed.producer: idempotent producer state per partition, producer snapshots, and the
producer-id ledger (Bloom-filtered files + a bounded write-through cache).

See :mod:`riverbed.producer.state` (the sans-I/O state machine),
:mod:`riverbed.producer.snapshot` (Kafka's snapshot file format) and
:mod:`riverbed.producer.manager` (snapshots beside a partition log).
"""
