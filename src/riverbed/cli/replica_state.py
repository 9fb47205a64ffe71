"""Replica state for `riverbed topics describe`: what librdkafka's metadata does not carry.

- leader epoch of each partition (Metadata v7+ ``leader_epoch``);
- adding/removing replicas of an ongoing reassignment (ListPartitionReassignments);
- each replica's lag: DescribeLogDirs ``offset_lag`` asked of every broker hosting one of
  the partitions (a follower reports the leader's HW minus its own log end, Kafka's
  fetcher lag; the leader 0). A broker that does not answer within
  ``BROKER_TIMEOUT_S`` leaves its replicas' lag unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from riverbed.cli.wire import WireClient, WireError

#: How long one broker may take to answer DescribeLogDirs before its lag is unknown.
BROKER_TIMEOUT_S = 5.0

Key = tuple[str, int]


@dataclass
class ReplicaState:
    leader_epoch: dict[Key, int] = field(default_factory=dict)
    adding: dict[Key, list[int]] = field(default_factory=dict)
    removing: dict[Key, list[int]] = field(default_factory=dict)
    #: (topic, partition) -> broker id -> offset lag (None: the broker did not say)
    lag: dict[Key, dict[int, int | None]] = field(default_factory=dict)


def replica_state(bootstrap: str, topics: list[str]) -> ReplicaState:
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import (
        ListPartitionReassignmentsRequest,
        MetadataRequest,
    )

    out = ReplicaState()
    if not topics:
        return out
    with WireClient(bootstrap) as client:
        md: Any = client.request(
            ApiKey.METADATA,
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=False,
            ),
        )
        try:
            moves: Any = client.request(
                ApiKey.LIST_PARTITION_REASSIGNMENTS, ListPartitionReassignmentsRequest(topics=None)
            )
        except WireError:
            moves = None
    addresses = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    hosts: dict[int, list[Key]] = {}
    for t in md.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            out.leader_epoch[key] = p.leader_epoch
            out.lag[key] = {r: None for r in p.replica_nodes}
            for r in p.replica_nodes:
                hosts.setdefault(r, []).append(key)
    if moves is not None and not moves.error_code:
        for t in moves.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                out.adding[key] = list(p.adding_replicas)
                out.removing[key] = list(p.removing_replicas)
    for broker, keys in sorted(hosts.items()):
        address = addresses.get(broker)
        if address is not None:
            _ask_lag(address, broker, keys, out)
    return out


def _ask_lag(address: str, broker: int, keys: list[Key], out: ReplicaState) -> None:
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import DescribeLogDirsRequest as R

    per_topic: dict[str, list[int]] = {}
    for topic, index in keys:
        per_topic.setdefault(topic, []).append(index)
    request = R(
        topics=[R.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in per_topic.items()]
    )
    try:
        with WireClient(address, timeout_s=BROKER_TIMEOUT_S) as client:
            reply: Any = client.request(ApiKey.DESCRIBE_LOG_DIRS, request)
    except WireError:
        return
    for d in reply.results:
        for t in d.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if not p.is_future_key and broker in out.lag.get(key, {}):
                    out.lag[key][broker] = p.offset_lag
