"""What ``riverbed groups`` asks the brokers, over riverbed's own wire client.

- the coordinator of a group: FindCoordinator (key type 0) to the bootstrap broker,
  retried while it answers COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS;
- ListGroups to every broker of the cluster (each lists the groups it coordinates);
- DescribeGroups and OffsetFetch (all partitions) to the coordinator; members'
  assignments decoded from the consumer protocol;
- log start / end offsets and offsets for a timestamp: ListOffsets to each leader;
- offset resets: OffsetCommit with generation -1 (an admin commit, accepted only while
  the group is Empty, as Kafka's kafka-consumer-groups requires);
- DeleteGroups to the coordinator;
- OffsetDelete to the coordinator: a group's committed offsets of some partitions
  (GROUP_SUBSCRIBED_TO_TOPIC for a topic an active member still subscribes to).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from riverbed.cli.common import CliError
from riverbed.cli.wire import WireClient, WireError
from riverbed.coordinator.consumer_protocol import assignment_partitions
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)

#: How long the coordinator lookup retries a retriable error, seconds.
COORDINATOR_WAIT_S = 15.0
COORDINATOR_RETRY_S = 0.2
#: ListOffsets special timestamps.
LATEST = -1
EARLIEST = -2
#: A coordinator that is loading its partition or moving: ask again.
COORDINATOR_RETRIABLE = frozenset(
    {int(ErrorCode.COORDINATOR_NOT_AVAILABLE), int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}
)

TopicPartition = tuple[str, int]
T = TypeVar("T")


@contextmanager
def connect(address: str) -> Iterator[WireClient]:
    try:
        with WireClient(address) as client:
            yield client
    except WireError as exc:
        raise CliError(str(exc)) from None


def _error(code: int) -> str:
    return ErrorCode.of(code).name


def cluster(bootstrap: str, topics: list[str] | None = None) -> tuple[dict[int, str], Any]:
    """(broker id -> host:port, Metadata response) for ``topics`` (None: every topic)."""
    with connect(bootstrap) as client:
        req = MetadataRequest(
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        md: Any = client.request(ApiKey.METADATA, req)
    return {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}, md


def until_coordinator_ready(ask: Callable[[], T], code_of: Callable[[T], int]) -> T:
    """``ask()``, asked again while its answer's error (``code_of``) says that a
    coordinator loads or moves, for at most `COORDINATOR_WAIT_S`; the last answer."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        answer = ask()
        if code_of(answer) not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(COORDINATOR_RETRY_S)


def coordinator(bootstrap: str, group: str) -> str:
    """host:port of ``group``'s coordinator."""
    with connect(bootstrap) as client:

        def find() -> Any:
            version = client.version(ApiKey.FIND_COORDINATOR)
            if version >= 4:
                req = FindCoordinatorRequest(key_type=0, coordinator_keys=[group])
            else:
                req = FindCoordinatorRequest(key=group, key_type=0)
            resp: Any = client.request(ApiKey.FIND_COORDINATOR, req)
            return resp.coordinators[0] if version >= 4 else resp

        found = until_coordinator_ready(find, lambda f: int(f.error_code))
    if found.error_code:
        raise CliError(f"no coordinator for group {group}: {_error(found.error_code)}")
    return f"{found.host}:{found.port}"


def list_groups(bootstrap: str, states: list[str] | None) -> list[dict[str, str]]:
    brokers, _md = cluster(bootstrap, [])
    out: dict[str, dict[str, str]] = {}
    for address in brokers.values():
        with connect(address) as client:
            resp: Any = client.request(
                ApiKey.LIST_GROUPS, ListGroupsRequest(states_filter=states or [])
            )
        if resp.error_code:
            raise CliError(f"ListGroups to {address}: {_error(resp.error_code)}")
        for g in resp.groups:
            out[g.group_id] = {
                "group": g.group_id,
                "protocol_type": g.protocol_type,
                "state": g.group_state or "",
                # ListGroups v5+: "classic" or "consumer" (KIP-848)
                "type": g.group_type or "classic",
            }
    return [out[k] for k in sorted(out)]


def describe_group(address: str, group: str) -> Any:
    with connect(address) as client:
        resp: Any = client.request(
            ApiKey.DESCRIBE_GROUPS,
            DescribeGroupsRequest(groups=[group], include_authorized_operations=False),
        )
    described = resp.groups[0]
    if described.error_code:
        raise CliError(f"group {group}: {_error(described.error_code)}")
    return described


def committed_offsets(address: str, group: str) -> dict[TopicPartition, int]:
    with connect(address) as client:
        if client.version(ApiKey.OFFSET_FETCH) >= 8:
            req = OffsetFetchRequest(
                groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]
            )
            resp: Any = client.request(ApiKey.OFFSET_FETCH, req)
            answer = resp.groups[0]
        else:
            resp = client.request(
                ApiKey.OFFSET_FETCH, OffsetFetchRequest(group_id=group, topics=None)
            )
            answer = resp
    if answer.error_code:
        raise CliError(f"group {group}: {_error(answer.error_code)}")
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in answer.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def list_offsets(
    bootstrap: str, partitions: list[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    """The offset of each partition for ``timestamp`` (LATEST, EARLIEST or a time in ms;
    -1 where no record is that recent)."""
    topics = sorted({t for t, _ in partitions})
    if not topics:
        return {}
    brokers, md = cluster(bootstrap, topics)
    leaders = {(t.name, p.partition_index): p.leader_id for t in md.topics for p in t.partitions}
    by_leader: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        if tp not in leaders:
            raise CliError(f"unknown partition {tp[0]}-{tp[1]}")
        by_leader.setdefault(leaders[tp], []).append(tp)
    out: dict[TopicPartition, int] = {}
    for leader, tps in by_leader.items():
        if leader not in brokers:
            raise CliError(f"no leader for {', '.join(f'{t}-{p}' for t, p in tps)}")
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=t,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=p, current_leader_epoch=-1, timestamp=timestamp
                        )
                        for p in ps
                    ],
                )
                for t, ps in by_topic.items()
            ],
        )
        with connect(brokers[leader]) as client:
            resp: Any = client.request(ApiKey.LIST_OFFSETS, req)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise CliError(
                        f"ListOffsets {t.name}-{p.partition_index}: {_error(p.error_code)}"
                    )
                out[(t.name, p.partition_index)] = p.offset
    return out


def topic_partitions(bootstrap: str, topics: list[str]) -> list[TopicPartition]:
    _brokers, md = cluster(bootstrap, topics)
    out = []
    for t in md.topics:
        if t.error_code:
            raise CliError(f"topic {t.name}: {_error(t.error_code)}")
        out += [(t.name, p.partition_index) for p in t.partitions]
    return sorted(out)


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    """Everything ``groups describe`` shows: state, members with their assignment, and per
    partition the committed offset, log end offset and lag."""
    address = coordinator(bootstrap, group)
    described = describe_group(address, group)
    committed = committed_offsets(address, group)
    members = []
    owner: dict[TopicPartition, dict[str, Any]] = {}
    for m in described.members:
        assigned = assignment_partitions(bytes(m.member_assignment)) or {}
        member = {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "assignment": {t: sorted(ps) for t, ps in sorted(assigned.items())},
        }
        members.append(member)
        for t, ps in assigned.items():
            for p in ps:
                owner[(t, p)] = member
    partitions = sorted(set(committed) | set(owner))
    ends = list_offsets(bootstrap, partitions, LATEST) if partitions else {}
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        m = owner.get(tp)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": end - current if current is not None and end is not None else None,
                "member_id": m["member_id"] if m else None,
                "host": m["host"] if m else None,
                "client_id": m["client_id"] if m else None,
            }
        )
    return {
        "group": group,
        "coordinator": address,
        "state": described.group_state,
        "protocol_type": described.protocol_type,
        "protocol": described.protocol_data,
        "members": members,
        "offsets": rows,
    }


def delete_groups(bootstrap: str, groups: list[str]) -> dict[str, str | None]:
    """group -> None when deleted, else the error name."""
    out: dict[str, str | None] = {}
    for group in groups:
        address = coordinator(bootstrap, group)
        with connect(address) as client:
            resp: Any = client.request(
                ApiKey.DELETE_GROUPS, DeleteGroupsRequest(groups_names=[group])
            )
        code = resp.results[0].error_code
        out[group] = None if code == 0 else _error(code)
    return out


def commit_offsets(
    address: str, group: str, offsets: dict[TopicPartition, int]
) -> dict[TopicPartition, str | None]:
    by_topic: dict[str, list[Any]] = {}
    for (t, p), off in sorted(offsets.items()):
        by_topic.setdefault(t, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p,
                committed_offset=off,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
        )
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
    with connect(address) as client:
        resp: Any = client.request(ApiKey.OFFSET_COMMIT, req)
    return _partition_errors(resp)


def _partition_errors(resp: Any) -> dict[TopicPartition, str | None]:
    """partition -> None when it succeeded, else its error name, from a response's topics."""
    return {
        (t.name, p.partition_index): None if p.error_code == 0 else _error(p.error_code)
        for t in resp.topics
        for p in t.partitions
    }


def delete_offsets(
    address: str, group: str, partitions: list[TopicPartition]
) -> tuple[str | None, dict[TopicPartition, str | None]]:
    """(the group's error or None, partition -> None when deleted, else the error name)."""
    by_topic: dict[str, list[Any]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
        )
    req = OffsetDeleteRequest(
        group_id=group,
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
    with connect(address) as client:
        resp: Any = client.request(ApiKey.OFFSET_DELETE, req)
    if resp.error_code:
        return _error(resp.error_code), {}
    return None, _partition_errors(resp)
