"""One KIP-848 consumer group: epochs, members, target assignment, reconciliation.

The group epoch moves whenever what the assignment depends on changes (a member joins
or leaves, a subscription changes, a subscribed topic gains partitions). The target
assignment is then recomputed by the server-side assignor and stamped with that epoch
(the assignment epoch). Each member converges to its target on its own heartbeats
(Kafka's ``CurrentAssignmentBuilder``), never by stopping the group:

- ``Stable`` member behind the target: it keeps ``assigned & target``; partitions it
  must give up go to *pending revocation* (state ``UnrevokedPartitions``, epoch
  unchanged) until a heartbeat's owned partitions show they are gone; then its epoch
  advances and it takes the new partitions that no other member still holds.
- Partitions of its target still held by another member (assigned or pending
  revocation) are withheld (state ``UnreleasedPartitions``, at the target epoch) and
  handed over on a later heartbeat once released.

So a partition is never held by two members at once (`check_invariants`), and members
whose partitions do not move are never revoked.

Group states (ConsumerGroupDescribe, ListGroups): Empty (no members), Assigning (group
epoch ahead of the assignment epoch), Reconciling (a member not yet Stable at the
assignment epoch), Stable, Dead.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from riverbed.coordinator.assignors import Assignment, TopicPartition, to_partitions
from riverbed.coordinator.records import OffsetAndMetadata


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` (the int8 ``State`` of the current assignment record)."""

    UNREVOKED_PARTITIONS = 0
    UNRELEASED_PARTITIONS = 1
    STABLE = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


#: Epochs a heartbeat carries to join, leave, or (static members) leave temporarily.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # not persisted: timers restart when a coordinator loads the group
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None

    def metadata_key(self) -> tuple[object, ...]:
        """What the member metadata record holds (a change rewrites it)."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            tuple(self.subscribed_topic_names),
            self.subscribed_topic_regex,
            self.server_assignor,
            self.rebalance_timeout_ms,
        )


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: group.instance.id -> member id.
    static_members: dict[str, str] = field(default_factory=dict)
    #: member id -> target assignment (at ``assignment_epoch``).
    target: dict[str, Assignment] = field(default_factory=dict)
    #: subscribed topic name -> (topic id, partition count), as of ``group_epoch``.
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    #: partition -> member holding it (assigned or pending revocation).
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    #: not persisted: a timer's failed write is tried again from then on
    timer_retry_ms: int = 0

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def set_assignment(
        self, member: ConsumerMember, assigned: Assignment, pending: Assignment
    ) -> None:
        """Replace what ``member`` holds, keeping `owners` in step."""
        for tp in to_partitions(member.assigned) | to_partitions(member.pending_revocation):
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]
        member.assigned = {t: ps for t, ps in assigned.items() if ps}
        member.pending_revocation = {t: ps for t, ps in pending.items() if ps}
        for tp in to_partitions(member.assigned) | to_partitions(member.pending_revocation):
            self.owners[tp] = member.member_id

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.get(member_id)
        if member is None:
            return None
        self.set_assignment(member, {}, {})
        del self.members[member_id]
        self.target.pop(member_id, None)
        instance = member.instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        return member

    def subscribed_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
        return names

    def check_invariants(self) -> None:
        """No partition held by two members; `owners` matches the members (tests)."""
        seen: dict[TopicPartition, str] = {}
        for m in self.members.values():
            held = to_partitions(m.assigned) | to_partitions(m.pending_revocation)
            overlap = to_partitions(m.assigned) & to_partitions(m.pending_revocation)
            assert not overlap, f"{m.member_id} has {overlap} both assigned and revoking"
            for tp in held:
                other = seen.get(tp)
                assert other is None, f"{tp} held by {other} and {m.member_id}"
                seen[tp] = m.member_id
        assert seen == self.owners, f"owners {self.owners} != held {seen}"


@dataclass(frozen=True, slots=True)
class Reconciled:
    epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


def _next(
    member: ConsumerMember,
    epoch: int,
    current: Assignment,
    target_epoch: int,
    target: Mapping[uuid.UUID, frozenset[int]],
    owned: Assignment | None,
    owners: Mapping[TopicPartition, str],
) -> Reconciled:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    gain: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic in set(current) | set(target):
        have = current.get(topic, frozenset())
        want = target.get(topic, frozenset())
        keep[topic] = have & want
        revoke[topic] = have - want
        free = frozenset(
            p for p in want - have if owners.get((topic, p), member.member_id) == member.member_id
        )
        gain[topic] = free
        unreleased = unreleased or len(free) < len(want - have)
    revoke = {t: ps for t, ps in revoke.items() if ps}
    if revoke and _still_owns(owned, revoke):
        return Reconciled(epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
    assigned = {
        t: keep.get(t, frozenset()) | gain.get(t, frozenset()) for t in set(keep) | set(gain)
    }
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return Reconciled(target_epoch, state, assigned, {})


def _still_owns(owned: Assignment | None, revoke: Mapping[uuid.UUID, frozenset[int]]) -> bool:
    """Whether the member may still hold some of ``revoke``: unknown (``owned`` None, the
    heartbeat did not list its partitions) counts as yes."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in revoke.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Mapping[uuid.UUID, frozenset[int]],
    owned: Assignment | None,
    owners: Mapping[TopicPartition, str],
) -> Reconciled:
    """The member's next state towards ``target`` (Kafka's CurrentAssignmentBuilder).

    ``owned`` is what the member's heartbeat says it holds (None: not said); ``owners``
    maps every held partition of the group to its holder."""
    state = member.state
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.pending_revocation):
            return Reconciled(
                member.member_epoch, state, member.assigned, member.pending_revocation
            )
        epoch = min(member.member_epoch + 1, target_epoch)
        return _next(member, epoch, member.assigned, target_epoch, target, owned, owners)
    if state is MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _next(
            member, member.member_epoch, member.assigned, target_epoch, target, owned, owners
        )
    return Reconciled(member.member_epoch, state, member.assigned, member.pending_revocation)
