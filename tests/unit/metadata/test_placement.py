"""Replica placement (Kafka's AdminUtils): seeded random start, replica shift, spread."""

import random
from collections import Counter

from riverbed.metadata.control_common import ControllerConfig
from riverbed.metadata.controller import Controller
from riverbed.metadata.image import replay_all
from riverbed.metadata.placement import assign_replicas
from riverbed.protocol.messages import CreatePartitionsRequest, CreateTopicsRequest

from .conftest import SeqUuids, cluster_image

CT = CreateTopicsRequest
BROKERS = 5


def test_kafka_documented_layout_with_start_0_and_shift_0():
    # AdminUtils' example: 5 brokers, 10 partitions, RF 3; the second round's followers
    # move one broker further (the replica shift)
    got = assign_replicas(
        [0, 1, 2, 3, 4], {}, 10, 3, start_partition=0, start_index=0, replica_shift=0
    )
    assert got[:5] == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1]]
    assert got[5:] == [[0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def _many_topics(seed: int, topics: int = 300) -> list[list[int]]:
    c = Controller(ControllerConfig(node_id=1), uuid_factory=SeqUuids(), rng=random.Random(seed))
    image = cluster_image(c, BROKERS)
    req = CT(
        topics=[
            CT.CreatableTopic(name=f"t{i}", num_partitions=1, replication_factor=3)
            for i in range(topics)
        ]
    )
    image = replay_all(image, c.create_topics(image, req, now_ms=0).records)
    return [list(image.topic(f"t{i}").partitions[0].replicas) for i in range(topics)]


def test_single_partition_topics_spread_leaders_and_followers_reproducibly():
    placed = _many_topics(7)
    assert placed == _many_topics(7)  # the seed decides everything
    assert placed != _many_topics(8)
    leaders = Counter(r[0] for r in placed)
    # 300 one-partition topics on 5 brokers: without a random start every one would lead
    # on broker 1; binomial(300, 1/5) stays within 60 +- 25 for any sane seed
    assert sorted(leaders) == [1, 2, 3, 4, 5] and all(35 <= n <= 85 for n in leaders.values())
    followers = Counter(b for r in placed for b in r[1:])
    assert all(80 <= n <= 160 for n in followers.values()), followers
    assert all(len(set(r)) == 3 for r in placed)


def test_added_partitions_continue_from_partition_0s_leader():
    c = Controller(ControllerConfig(node_id=1), uuid_factory=SeqUuids(), rng=random.Random(3))
    image = cluster_image(c, BROKERS)
    req = CT(topics=[CT.CreatableTopic(name="t", num_partitions=2, replication_factor=2)])
    image = replay_all(image, c.create_topics(image, req, now_ms=0).records)
    leader0 = image.topic("t").partitions[0].replicas[0]
    more = CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=BROKERS + 2)],
        timeout_ms=1000,
    )
    image = replay_all(image, c.create_partitions(image, more, now_ms=0).records)
    parts = image.topic("t").partitions
    leaders = [parts[p].replicas[0] for p in range(2, BROKERS + 2)]
    # Kafka: start index = partition 0's leader, so partition p leads on leader0 + p
    assert leaders == [(leader0 - 1 + p) % BROKERS + 1 for p in range(2, BROKERS + 2)]
