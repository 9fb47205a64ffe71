"""Consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat and its reconciliation.

A mixin of `GroupShard`. The group has an epoch, bumped whenever a member joins, leaves,
changes its subscription or assignor, or a subscribed topic's partitions change; each
bump computes a new *target assignment* with the server-side assignor (`assignors`).
Each member then converges on its target one heartbeat at a time (Kafka's
CurrentAssignmentBuilder):

- partitions of its current assignment the target no longer gives it must be revoked
  first: the member is told its assignment without them (state ``unrevoked``) and keeps
  its epoch until a heartbeat reports it owns no more than that;
- then it moves to the target epoch and receives the target partitions no other member
  still holds; those still held elsewhere come in a later heartbeat (``unreleased``).

Heartbeats carry the member epoch: 0 joins (a member id is generated when the request has
none), -1 leaves, -2 leaves as a static member that will come back; an epoch newer than
the member's, or older without being the previous epoch with a subset of the current
assignment, is FENCED_MEMBER_EPOCH; an unknown member id UNKNOWN_MEMBER_ID. A member that
sends no heartbeat for ``group.consumer.session.timeout.ms`` is removed. Offsets commit
with the member epoch (STALE_MEMBER_EPOCH when it is not the member's).

Not done (yet): the group's state is kept in memory only (its membership records are
not written to ``__consumer_offsets``): after a coordinator change members rejoin with
epoch 0 and their committed offsets, which are written, are kept; a member slow to revoke
is not fenced after its rebalance timeout (only its session timeout removes it);
``SubscribedTopicRegex`` is not evaluated (such a member is assigned nothing); an
empty classic group becomes a consumer group on its first heartbeat, not the reverse.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from riverbed.coordinator.assignors import ASSIGNORS, UNIFORM, Assignment, TopicsMeta, assign
from riverbed.coordinator.group import ClassicGroup, GroupState, Reply
from riverbed.coordinator.records import OffsetAndMetadata
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse

log = logging.getLogger(__name__)
E = ErrorCode
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ASSIGNORS


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed: set[str] = field(default_factory=set)
    assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0
    #: the assignment the member was last told (None: tell it on the next heartbeat)
    sent: Assignment | None = None

    @property
    def state(self) -> str:
        if self.revoking:
            return "unrevoked"
        return "stable"


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    #: subscribed topics' (name, id, partitions) when the target was computed
    topics_seen: tuple[tuple[str, uuid.UUID, int], ...] = ()
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    state_timestamp_ms: int = -1

    def owners(self) -> dict[tuple[uuid.UUID, int], str]:
        """Who holds each partition now (assigned, or still being revoked)."""
        out: dict[tuple[uuid.UUID, int], str] = {}
        for m in self.members.values():
            for source in (m.assigned, m.revoking):
                for topic_id, parts in source.items():
                    for p in parts:
                        out[(topic_id, p)] = m.member_id
        return out

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState names."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch != self.epoch:
            return "Assigning"
        if any(m.member_epoch != self.epoch or m.revoking for m in self.members.values()):
            return "Reconciling"
        return "Stable"


def _copy(a: Assignment) -> Assignment:
    return {t: set(p) for t, p in a.items() if p}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return {t: p - b.get(t, set()) for t, p in a.items() if p - b.get(t, set())}


def _subset(a: Assignment, b: Assignment) -> bool:
    return all(p <= b.get(t, set()) for t, p in a.items())


class ConsumerProtocol:
    """The consumer-protocol half of `GroupShard` (see the module docstring)."""

    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    consumer_config: ConsumerGroupConfig
    _respond: Callable[[Reply, Any], None]
    _random: Any
    _schedule_id: Callable[[str, int | None], None]

    def _cg_response(
        self,
        reply: Reply,
        code: ErrorCode,
        message: str | None = None,
        *,
        member_id: str | None = None,
        epoch: int = -1,
        interval_ms: int = 0,
        assignment: Any = None,
    ) -> None:
        self._respond(
            reply,
            ConsumerGroupHeartbeatResponse(
                throttle_time_ms=0,
                error_code=int(code),
                error_message=message,
                member_id=member_id,
                member_epoch=epoch,
                heartbeat_interval_ms=interval_ms,
                assignment=assignment,
            ),
        )

    def consumer_heartbeat(
        self, reply: Reply, req: Any, client_id: str, host: str, topics: TopicsMeta, now: int
    ) -> None:
        cfg = self.consumer_config
        if not req.group_id:
            return self._cg_response(reply, E.INVALID_GROUP_ID)
        if req.server_assignor is not None and req.server_assignor not in cfg.assignors:
            return self._cg_response(reply, E.UNSUPPORTED_ASSIGNOR, req.server_assignor)
        group = self.consumer_groups.get(req.group_id)
        if group is None:
            classic = self.groups.get(req.group_id)
            if classic is not None and classic.members:
                return self._cg_response(
                    reply, E.GROUP_ID_NOT_FOUND, f"{req.group_id} is a classic group"
                )
            if req.member_epoch != JOIN_EPOCH:
                return self._cg_response(reply, E.UNKNOWN_MEMBER_ID)
            group = ConsumerGroup(req.group_id, state_timestamp_ms=now)
            if classic is not None:  # an empty classic group: its offsets carry over
                group.offsets = classic.offsets
                del self.groups[req.group_id]
            self.consumer_groups[req.group_id] = group
        epoch = req.member_epoch
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._consumer_leave(reply, group, req, topics, now)
        member = self._consumer_member(reply, group, req, client_id, host, now)
        if member is None:
            return None
        changed = False
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if (
            req.subscribed_topic_names is not None
            and set(req.subscribed_topic_names) != member.subscribed
        ):
            member.subscribed = set(req.subscribed_topic_names)
            changed = True
        if req.server_assignor is not None and req.server_assignor != member.assignor:
            member.assignor = req.server_assignor
            changed = True
        member.session_deadline_ms = now + cfg.session_timeout_ms
        seen = self._topics_seen(group, topics)
        if changed or seen != group.topics_seen:
            self._bump(group, topics, now)
        owned = None
        if req.topic_partitions is not None:
            owned = {tp.topic_id: set(tp.partitions) for tp in req.topic_partitions}
        self._reconcile(group, member, owned)
        self._schedule_id(group.group_id, self._consumer_deadline(group))
        assignment = None
        if member.sent is None or member.sent != member.assigned or epoch == JOIN_EPOCH:
            member.sent = _copy(member.assigned)
            assignment = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id=t, partitions=sorted(p))
                    for t, p in sorted(member.assigned.items(), key=lambda kv: str(kv[0]))
                ]
            )
        self._cg_response(
            reply,
            E.NONE,
            member_id=member.member_id,
            epoch=member.member_epoch,
            interval_ms=cfg.heartbeat_interval_ms,
            assignment=assignment,
        )
        return None

    def _consumer_member(
        self, reply: Reply, group: ConsumerGroup, req: Any, client_id: str, host: str, now: int
    ) -> ConsumerMember | None:
        epoch = req.member_epoch
        member = group.members.get(req.member_id) if req.member_id else None
        if epoch == JOIN_EPOCH:
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                self._cg_response(reply, E.INVALID_REQUEST, "SubscribedTopicNames must be set")
                return None
            if member is None:
                if len(group.members) >= self.consumer_config.max_size:
                    self._cg_response(reply, E.GROUP_MAX_SIZE_REACHED)
                    return None
                member_id = req.member_id or str(
                    uuid.UUID(int=self._random.getrandbits(128), version=4)
                )
                if req.instance_id is not None and req.instance_id in group.static:
                    # a static member back: it takes its old place (and assignment)
                    old = group.members.pop(group.static[req.instance_id])
                    old.member_id = member_id
                    member = old
                else:
                    member = ConsumerMember(member_id, instance_id=req.instance_id)
                group.members[member_id] = member
                if req.instance_id is not None:
                    group.static[req.instance_id] = member_id
            member.client_id, member.client_host = client_id, host
            member.sent = None
            return member
        if member is None:
            self._cg_response(reply, E.UNKNOWN_MEMBER_ID)
            return None
        if epoch > member.member_epoch or (
            epoch < member.member_epoch
            and (
                epoch != member.previous_epoch
                or not _subset(
                    {tp.topic_id: set(tp.partitions) for tp in req.topic_partitions or []},
                    member.assigned,
                )
            )
        ):
            self._cg_response(reply, E.FENCED_MEMBER_EPOCH)
            return None
        return member

    def _consumer_leave(
        self, reply: Reply, group: ConsumerGroup, req: Any, topics: TopicsMeta, now: int
    ) -> None:
        member = group.members.get(req.member_id)
        if member is None:
            return self._cg_response(reply, E.UNKNOWN_MEMBER_ID)
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # KIP-848 static leave: the member keeps its assignment for its session
            member.member_epoch = STATIC_LEAVE_EPOCH
        else:
            self._remove_consumer(group, member, topics, now)
        self._cg_response(reply, E.NONE, member_id=req.member_id, epoch=req.member_epoch)
        return None

    def _remove_consumer(
        self, group: ConsumerGroup, member: ConsumerMember, topics: TopicsMeta | None, now: int
    ) -> None:
        del group.members[member.member_id]
        if (
            member.instance_id is not None
            and group.static.get(member.instance_id) == member.member_id
        ):
            del group.static[member.instance_id]
        group.target.pop(member.member_id, None)
        self._bump(group, topics, now)

    def _topics_seen(
        self, group: ConsumerGroup, topics: TopicsMeta
    ) -> tuple[tuple[str, uuid.UUID, int], ...]:
        wanted = sorted({t for m in group.members.values() for t in m.subscribed})
        return tuple((t, *topics[t]) for t in wanted if t in topics)

    def _bump(self, group: ConsumerGroup, topics: TopicsMeta | None, now: int) -> None:
        """A new group epoch and its target assignment."""
        group.epoch += 1
        group.state_timestamp_ms = now
        meta: dict[str, tuple[uuid.UUID, int]] = {}
        if topics is not None:
            meta = dict(topics)
            group.topics_seen = self._topics_seen(group, topics)
        else:
            meta = {name: (tid, n) for name, tid, n in group.topics_seen}
        names = [m.assignor for m in group.members.values() if m.assignor]
        assignor = max(set(names), key=names.count) if names else UNIFORM
        group.target = assign(
            assignor,
            {m.member_id: m.subscribed for m in group.members.values()},
            {m.member_id: m.assigned for m in group.members.values()},
            meta,
        )
        group.assignment_epoch = group.epoch
        log.info(
            "consumer group %s epoch %d: %d members, assignor %s",
            group.group_id,
            group.epoch,
            len(group.members),
            assignor,
        )

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None
    ) -> None:
        """One step of the member towards its target (see the module docstring)."""
        if member.revoking:
            kept = member.assigned
            if owned is None or not _subset(owned, kept):
                return  # still revoking: nothing changes until the member confirms
            member.revoking = {}
        target = group.target.get(member.member_id, {})
        revoke = _minus(member.assigned, target)
        if revoke:
            member.revoking = revoke
            member.assigned = _minus(member.assigned, revoke)
            return
        owners = group.owners()
        grant: Assignment = {}
        for topic_id, parts in target.items():
            free = {
                p for p in parts if owners.get((topic_id, p), member.member_id) == member.member_id
            }
            if free:
                grant[topic_id] = free
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.assigned = grant

    def _consumer_deadline(self, group: ConsumerGroup) -> int | None:
        return min((m.session_deadline_ms for m in group.members.values()), default=None)

    def tick_consumer_group(self, group: ConsumerGroup, now: int) -> None:
        for m in list(group.members.values()):
            if m.session_deadline_ms <= now:
                log.info("consumer %s of group %s timed out", m.member_id, group.group_id)
                self._remove_consumer(group, m, None, now)
        self._schedule_id(group.group_id, self._consumer_deadline(group))

    # ------------------------------------------------------------------ offsets, admin
    def consumer_commit_check(self, group: ConsumerGroup, member_id: str, epoch: int) -> ErrorCode:
        if not member_id and epoch < 0:
            return E.NONE if not group.members else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def describe_consumer_group(
        self, group_id: str, names: dict[uuid.UUID, str]
    ) -> ConsumerGroupDescribeResponse.DescribedGroup:
        D = ConsumerGroupDescribeResponse
        group = self.consumer_groups.get(group_id)
        if group is None:
            return D.DescribedGroup(
                error_code=int(E.GROUP_ID_NOT_FOUND),
                group_id=group_id,
                group_state="Dead",
                group_epoch=-1,
                assignment_epoch=-1,
                assignor_name="",
                members=[],
            )

        def encode(a: Assignment) -> Any:
            return D.Assignment(
                topic_partitions=[
                    D.TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(p))
                    for t, p in sorted(a.items(), key=lambda kv: str(kv[0]))
                ]
            )

        return D.DescribedGroup(
            error_code=0,
            error_message=None,
            group_id=group_id,
            group_state=group.state,
            group_epoch=group.epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=UNIFORM,
            members=[
                D.Member(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=sorted(m.subscribed),
                    subscribed_topic_regex=None,
                    assignment=encode(m.assigned),
                    target_assignment=encode(group.target.get(m.member_id, {})),
                )
                for m in group.members.values()
            ],
        )


def classic_state(group: ConsumerGroup) -> GroupState:
    """The classic state name DescribeGroups shows for a consumer group."""
    if not group.members:
        return GroupState.EMPTY
    return GroupState.STABLE if group.state == "Stable" else GroupState.PREPARING_REBALANCE
