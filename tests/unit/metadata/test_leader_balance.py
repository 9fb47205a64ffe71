"""Preferred-leader balancing: which partitions go back to their preferred replica."""

from __future__ import annotations

import uuid
from dataclasses import replace
from types import MappingProxyType

from riverbed.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from riverbed.metadata.leader_balance import imbalanced_partitions


def image(
    parts: dict[int, PartitionRegistration], fenced: frozenset[int] = frozenset()
) -> MetadataImage:
    topic = TopicImage(name="t", topic_id=uuid.uuid4(), partitions=MappingProxyType(parts))
    brokers = {
        b: BrokerRegistration(
            broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=b, fenced=b in fenced
        )
        for b in (1, 2, 3)
    }
    return replace(
        MetadataImage.EMPTY,
        brokers=MappingProxyType(brokers),
        topics_by_id=MappingProxyType({topic.topic_id: topic}),
        topics_by_name=MappingProxyType({"t": topic}),
    )


def part(
    replicas: tuple[int, ...], leader: int, isr: tuple[int, ...] = (1, 2, 3)
) -> PartitionRegistration:
    return PartitionRegistration(replicas=replicas, isr=isr, leader=leader)


def test_only_brokers_above_the_percentage_and_in_sync_preferred_replicas() -> None:
    parts = {i: part((1, 2, 3), 1) for i in range(10)}  # broker 1 leads all 10 it prefers
    parts[10] = part((2, 3, 1), 3)  # broker 2 leads none of its 2: 100 % imbalance
    parts[11] = part((2, 1, 3), 1, isr=(1, 3))  # ... but this one lacks 2 in the ISR
    assert imbalanced_partitions(image(parts), 10) == [("t", 10)]
    assert imbalanced_partitions(image(parts, fenced=frozenset({2})), 10) == []
    # broker 1: 1 of 10 led elsewhere = 10 %, not above 10 %
    parts[0] = part((1, 2, 3), 2)
    assert ("t", 0) not in imbalanced_partitions(image(parts), 10)
    assert ("t", 0) in imbalanced_partitions(image(parts), 5)
