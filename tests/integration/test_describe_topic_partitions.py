"""DescribeTopicPartitions (KIP-966) spoken by a real client: kafka-python's
``KafkaAdminClient.describe_topic_partitions`` (librdkafka's DescribeTopics still uses
Metadata) pages through two topics with the cursor the broker hands back."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.cluster import BrokerProcess, scaled_s

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def test_kafka_python_pages_through_topics(admin: KafkaAdminClient, topic_name: str) -> None:
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    admin.create_topics(
        [NewTopic(first, 5, 1), NewTopic(second, 2, 1)], timeout_ms=int(scaled_s(20) * 1000)
    )
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    deadline = time.monotonic() + scaled_s(20)
    while True:
        page = admin.describe_topic_partitions(
            [second, first], response_partition_limit=3, cursor=cursor
        )
        if any(p["leader_id"] < 0 for t in page["topics"] for p in t["partitions"]):
            assert time.monotonic() < deadline, page  # the new partitions' leaders settle
            seen, cursor, pages = [], None, 0
            time.sleep(0.2)
            continue
        pages += 1
        for t in page["topics"]:
            assert t["error_code"] == 0 and not t["is_internal"], t
            assert len(t["partitions"]) <= 3
            seen += [(t["name"], p["partition_index"]) for p in t["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # in name order, each partition once, three to a page
    assert seen == [(first, p) for p in range(5)] + [(second, p) for p in range(2)]
    assert pages == 3

    missing = admin.describe_topic_partitions([f"{topic_name}-missing"])
    assert [t["error_code"] for t in missing["topics"]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
