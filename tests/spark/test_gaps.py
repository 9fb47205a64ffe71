"""Offsets that hold no record (transaction markers, aborted records) never stall a task.

riverbed has no transactions yet, so this runs against Tansu, which does: the data source
must work against any Kafka-compatible cluster.
"""

from __future__ import annotations

import uuid

from riverbed.spark.fetch import read_range
from riverbed.spark.offsets import OffsetRange


def test_range_ending_in_transaction_markers_completes(tansu_bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"tx-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": tansu_bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(30)
    producer = Producer({"bootstrap.servers": tansu_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"c{i}".encode())
    producer.commit_transaction(30)  # offsets 0-2, commit marker at 3
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(30)  # offset 4, abort marker at 5
    # (Ranges over the aborted part are not checked: Tansu reports the high watermark of
    # that part wrongly, which would be reported as data loss.)

    for isolation, end, expected in (
        # The range ends on the commit marker: no record ever has offset 3.
        ("read_committed", 4, [b"c0", b"c1", b"c2"]),
        ("read_uncommitted", 4, [b"c0", b"c1", b"c2"]),
    ):
        batches = read_range(
            {"bootstrap.servers": tansu_bootstrap, "isolation.level": isolation},
            OffsetRange(topic, 0, 0, end),
            include_headers=False,
            fail_on_data_loss=True,
            # A stall would end in RiverbedSourceError after this long, failing the test.
            poll_timeout_ms=30_000,
        )
        values = [v for b in batches for v in b.column("value").to_pylist()]
        assert values == expected, (isolation, end)
