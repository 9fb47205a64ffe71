"""A broker applies a metadata delta in O(changed partitions), with the same outcome as a
walk of the whole image (`PartitionManager.apply_image` with and without the delta)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from riverbed.metadata.image import (
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
    replay_all,
)
from riverbed.metadata.records import ResourceType
from riverbed.protocol.messages import (
    ConfigRecord,
    Message,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.fault_handler import RecordingFaultHandler
from riverbed.server.purgatory import Purgatory
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager

NODE = 1
NOW_MS = 1_700_000_000_000


def manager(path: Path) -> PartitionManager:
    logs = LogManager([path], ManualClock(NOW_MS))
    return PartitionManager(logs, NODE, {}, Purgatory(), fault_handler=RecordingFaultHandler())


def hosted_state(pm: PartitionManager) -> dict[tuple[str, int], Any]:
    return {
        key: (h.topic_id, h.registration, h.config, h.log.config)
        for key, h in pm.partitions.items()
    }


def partition(topic_id: uuid.UUID, index: int, replicas: list[int]) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=replicas,
        isr=replicas,
        leader=replicas[0],
        leader_epoch=0,
        partition_epoch=0,
    )


class Workload:
    """Random metadata operations over a few topics, some hosted on NODE, some not."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ids = (uuid.UUID(int=rng.getrandbits(128)) for _ in iter(int, 1))

    def replicas(self) -> list[int]:
        return self.rng.choice([[1], [1, 2], [2, 1], [2], [2, 3]])

    def step(self, image: MetadataImage) -> list[Message]:
        rng, topics = self.rng, list(image.topics_by_name.values())
        kind = rng.choice(["create", "create", "change", "change", "add", "delete", "config"])
        if kind == "create" or not topics:
            name = rng.choice("abcdef")
            old = image.topics_by_name.get(name)
            out: list[Message] = [] if old is None else [RemoveTopicRecord(topic_id=old.topic_id)]
            tid = next(self.ids)
            out.append(TopicRecord(name=name, topic_id=tid))
            out += [partition(tid, i, self.replicas()) for i in range(rng.randint(1, 3))]
            return out
        topic = rng.choice(topics)
        if kind == "delete":
            return [RemoveTopicRecord(topic_id=topic.topic_id)]
        if kind == "add":
            return [partition(topic.topic_id, len(topic.partitions), self.replicas())]
        if kind == "config":
            name, value = ("retention.ms", str(rng.randint(1, 9) * 1000))
            if rng.random() < 0.3:  # a cluster-wide default: every topic's effective config
                return [ConfigRecord(resource_type=ResourceType.BROKER, resource_name="",
                                     name="log.retention.ms", value=value)]  # fmt: skip
            return [ConfigRecord(resource_type=ResourceType.TOPIC, resource_name=topic.name,
                                 name=name, value=value)]  # fmt: skip
        index = rng.choice(list(topic.partitions))
        new_replicas = self.replicas()
        return [
            PartitionChangeRecord(
                partition_id=index,
                topic_id=topic.topic_id,
                replicas=new_replicas,
                isr=new_replicas,
                leader=new_replicas[0],
            )
        ]


def test_a_delta_applies_as_the_whole_image_does(tmp_path: Path) -> None:
    """Creations, re-creations under a new id, leader / replica moves (onto this node and
    away), added partitions, deletions and topic or cluster-wide config changes: the
    hosted partitions after each delta equal those of a walk of the whole image."""
    for seed in range(12):
        rng = random.Random(seed)
        by_delta, by_walk = manager(tmp_path / f"d{seed}"), manager(tmp_path / f"w{seed}")
        image, work = MetadataImage.EMPTY, Workload(rng)
        for step in range(25):
            delta, records = MetadataDelta(image), []
            for _ in range(rng.randint(1, 2)):  # one or two operations in one delta
                for record in work.step(replay_all(image, records)):
                    records.append(record)
                    delta.replay(record)
            image = delta.apply(step)
            by_delta.apply_image(image, delta)
            by_walk.apply_image(image)
            assert hosted_state(by_delta) == hosted_state(by_walk), f"seed {seed} step {step}"
        for pm in (by_delta, by_walk):
            pm.close()
            pm.log_manager.shutdown()


class CountingPartitions(Mapping[int, PartitionRegistration]):
    """A topic's partitions that count how often they are walked."""

    def __init__(self, parts: Mapping[int, PartitionRegistration]) -> None:
        self.parts = dict(parts)
        self.walks = 0

    def __getitem__(self, index: int) -> PartitionRegistration:
        return self.parts[index]

    def __iter__(self) -> Iterator[int]:
        self.walks += 1
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def items(self) -> Any:
        self.walks += 1
        return self.parts.items()


def test_a_delta_of_one_partition_does_not_walk_the_other_topics(tmp_path: Path) -> None:
    """A broker walked every partition of the image on every metadata change (10,000
    partitions: milliseconds per change, a second for a CreateTopics of 10,000)."""
    big, small = uuid.UUID(int=1), uuid.UUID(int=2)
    image = replay_all(
        MetadataImage.EMPTY,
        [
            TopicRecord(name="big", topic_id=big),
            *[partition(big, i, [1]) for i in range(50)],
            TopicRecord(name="small", topic_id=small),
            partition(small, 0, [1]),
        ],
    )
    counted = CountingPartitions(image.topics_by_id[big].partitions)
    topic = replace(image.topics_by_id[big], partitions=counted)
    image = replace(
        image,
        topics_by_id={**image.topics_by_id, big: topic},
        topics_by_name={**image.topics_by_name, "big": topic},
    )
    pm = manager(tmp_path)
    pm.apply_image(image)
    assert len(pm.partitions) == 51
    walks = counted.walks
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(partition_id=0, topic_id=small, isr=[1], leader=1))
    new = delta.apply(1)
    pm.apply_image(new, delta)
    assert pm.partitions[("small", 0)].registration.leader_epoch == 1
    assert counted.walks == walks  # the big topic was not looked at
    # a delta that moves one partition of the big topic away looks at that one only
    delta = MetadataDelta(new)
    delta.replay(PartitionChangeRecord(partition_id=7, topic_id=big, replicas=[2], isr=[2],
                                       leader=2))  # fmt: skip
    assert delta.changed_partition_ids(big) == {7}
    pm.apply_image(delta.apply(2), delta)
    assert ("big", 7) not in pm.partitions and len(pm.partitions) == 50
    pm.close()
    pm.log_manager.shutdown()


def test_a_delta_names_the_partitions_it_changed() -> None:
    old, new = uuid.UUID(int=1), uuid.UUID(int=2)
    image = replay_all(
        MetadataImage.EMPTY,
        [TopicRecord(name="old", topic_id=old), *[partition(old, i, [1]) for i in range(4)]],
    )
    delta = MetadataDelta(image)
    delta.replay(TopicRecord(name="new", topic_id=new))
    delta.replay(partition(new, 0, [1]))
    delta.replay(partition(old, 4, [1]))  # an added partition
    delta.replay(PartitionChangeRecord(partition_id=2, topic_id=old, leader=1))
    assert delta.changed_topics == {old, new}
    assert delta.changed_partition_ids(new) is None  # created here: every partition is new
    assert delta.changed_partition_ids(old) == {2, 4}
    delta.replay(RemoveTopicRecord(topic_id=old))
    assert delta.changed_topics == {new} and set(delta.deleted_topics) == {old}
