"""Controller mutation quotas (KIP-599): Kafka's token bucket, strict and permissive."""

from __future__ import annotations

import uuid

from riverbed.metadata.image import MetadataImage, TopicImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest
from riverbed.security.client_quotas import (
    CLIENT_ID,
    CONTROLLER_MUTATION_RATE,
    QuotaBook,
    QuotaWindows,
    quota_entity,
)
from riverbed.security.mutation_quotas import MutationQuotaManager, TokenBucket
from riverbed.server import mutation_quota as mq

T0 = 1_000_000


def _book(rate: float, client_id: str = "c") -> QuotaBook:
    entity = quota_entity({CLIENT_ID: client_id})
    return QuotaBook.of(CONTROLLER_MUTATION_RATE, {entity: {CONTROLLER_MUTATION_RATE: rate}})


def test_token_bucket_starts_full_refills_at_the_rate_and_caps_at_the_burst() -> None:
    bucket = TokenBucket()
    assert bucket.measure(2.0, 20.0, T0) == 20.0
    bucket.record(25, 2.0, 20.0, T0)
    assert bucket.tokens == -5.0
    assert bucket.measure(2.0, 20.0, T0 + 1000) == -3.0
    assert bucket.measure(2.0, 20.0, T0 + 100_000) == 20.0


def test_strict_accepts_an_overdraft_then_refuses_until_the_bucket_is_back() -> None:
    # Kafka's burst: quota.window.num (10) * window (1 s) * rate (1/s) = 10 tokens
    manager = MutationQuotaManager(QuotaWindows(10, 1000))
    book = _book(1.0)
    assert manager.try_record(book, "u", "c", 30, T0) == 0  # 10 -> -20: accepted whole
    # -20 tokens at 1/s: 20 s (Kafka's round(-tokens / rate * 1000))
    assert manager.try_record(book, "u", "c", 1, T0) == 20_000
    assert manager.try_record(book, "u", "c", 1, T0 + 5_000) == 15_000  # refused: not recorded
    assert manager.try_record(book, "u", "c", 1, T0 + 20_000) == 0


def test_permissive_records_everything_and_reports_the_throttle() -> None:
    manager = MutationQuotaManager(QuotaWindows(10, 1000))
    book = _book(2.0)
    assert manager.record(book, "u", "c", 20, T0) == 0  # 20 -> 0
    assert manager.record(book, "u", "c", 4, T0) == 2000  # -4 at 2/s
    assert manager.record(book, "u", "c", -4, T0) == 0  # given back


def test_no_quota_for_another_client() -> None:
    manager = MutationQuotaManager(QuotaWindows(1, 1000))
    book = _book(1.0)
    manager.try_record(book, "u", "c", 100, T0)
    assert manager.try_record(book, "u", "other", 100, T0) == 0
    assert manager.sensor_count == 1


def test_buckets_are_bounded() -> None:
    manager = MutationQuotaManager(QuotaWindows(1, 1000), sensors_max=3)
    book = QuotaBook.of(
        CONTROLLER_MUTATION_RATE,
        {quota_entity({CLIENT_ID: None}): {CONTROLLER_MUTATION_RATE: 1.0}},
    )
    for i in range(10):
        manager.record(book, "u", f"c{i}", 1, T0)
    assert manager.sensor_count <= 3


def _image(**topics: int) -> MetadataImage:
    images = {
        n: TopicImage(n, uuid.uuid4(), {i: None for i in range(p)}) for n, p in topics.items()
    }  # type: ignore[misc]
    return MetadataImage(
        topics_by_name=images, topics_by_id={t.topic_id: t for t in images.values()}
    )


def test_create_topics_strict_refuses_the_topics_over_the_quota_in_request_order() -> None:
    manager = MutationQuotaManager(QuotaWindows(1, 1000))
    quota = mq.RequestMutationQuota(manager, _book(2.0), "u", "c", strict=True)
    Topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            Topic(name="exists", num_partitions=5),
            Topic(name="a", num_partitions=3),  # 2 tokens -> -1: accepted
            Topic(name="b", num_partitions=-1),  # the default (1): refused
            Topic(name="c", num_partitions=1),  # refused
        ]
    )
    permits = mq.create_topics_permits(_image(exists=1), request, default_partitions=1)
    assert permits == [("exists", 0), ("a", 3), ("b", 1), ("c", 1)]
    admitted = mq.admit_all(permits, quota, T0)
    assert admitted == [True, True, False, False]
    forwarded, refused = mq.split_create_topics(request, admitted)
    assert [t.name for t in forwarded.topics] == ["exists", "a"]
    assert [(r.name, r.error_code) for r in refused] == [
        ("b", ErrorCode.THROTTLING_QUOTA_EXCEEDED),
        ("c", ErrorCode.THROTTLING_QUOTA_EXCEEDED),
    ]
    assert quota.throttle_time_ms(T0 + 100) == 400  # -1 token at 2/s = 500 ms, 100 ago
    quota.give_back(["a"], T0)  # the controller refused "a": its 3 permits come back
    assert manager.try_record(_book(2.0), "u", "c", 1, T0) == 0


def test_delete_topics_counts_the_partitions_of_names_and_ids() -> None:
    image = _image(x=4, y=2)
    y_id = image.topics_by_name["y"].topic_id
    request = DeleteTopicsRequest(
        topics=[
            DeleteTopicsRequest.DeleteTopicState(name="x"),
            DeleteTopicsRequest.DeleteTopicState(topic_id=y_id),
            DeleteTopicsRequest.DeleteTopicState(name="unknown"),
        ]
    )
    assert mq.delete_topics_permits(image, request) == [("x", 4), (y_id, 2), ("unknown", 0)]
    forwarded, refused = mq.split_delete_topics(image, request, [True, False, True])
    assert [s.name for s in forwarded.topics] == ["x", "unknown"]
    assert [(r.name, r.topic_id) for r in refused] == [("y", y_id)]
