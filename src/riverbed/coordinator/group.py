"""One classic consumer group: members, generation, protocol and committed offsets.

States (Kafka's ``GroupState``) and what moves between them:

- ``Empty``: no members (offsets may remain). A JoinGroup -> PreparingRebalance.
- ``PreparingRebalance``: waiting for every member to (re)join, up to the rebalance
  timeout (the largest of the members'); from Empty the first wait is
  ``group.initial.rebalance.delay.ms``, extended while new members keep arriving.
  All joined (or the deadline) -> CompletingRebalance (or Empty without members).
- ``CompletingRebalance``: join responses sent; waiting for the leader's SyncGroup with
  the assignment -> Stable once its group metadata record is written.
- ``Stable``: members heartbeat. A join with new metadata, a member leaving or a
  session timing out -> PreparingRebalance.
- ``Dead``: deleted or expired; the group is about to be forgotten.

This module holds data and pure helpers only; the transitions live in
`riverbed.coordinator.membership`.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from riverbed.coordinator.records import OffsetAndMetadata, StoredGroup, StoredMember


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class Reply:
    """Where a (possibly delayed) response goes: the shell's request id and the version
    the response must be built for."""

    id: int
    version: int


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (protocol name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Reply | None = None
    awaiting_sync: Reply | None = None
    heartbeat_deadline_ms: int = 0
    #: Joined for the first time and not yet through a rebalance (Kafka's isNew).
    is_new: bool = False

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def stored(self, protocol: str | None) -> StoredMember:
        return StoredMember(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            session_timeout_ms=self.session_timeout_ms,
            subscription=self.metadata_for(protocol),
            assignment=self.assignment,
        )


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    #: member id -> member, in join order (the first joiner leads a new generation).
    members: dict[str, Member] = field(default_factory=dict)
    #: group.instance.id -> member id (KIP-345 static members).
    static_members: dict[str, str] = field(default_factory=dict)
    #: KIP-394: member ids handed out with MEMBER_ID_REQUIRED -> expiry deadline.
    pending_members: dict[str, int] = field(default_factory=dict)
    #: Members whose SyncGroup of this generation has not arrived yet.
    pending_sync: set[str] = field(default_factory=set)
    join_deadline_ms: int | None = None
    #: Initial delay still available to extend (group.initial.rebalance.delay.ms steps).
    initial_delay_remaining_ms: int = 0
    initial_delay_active: bool = False
    new_member_added: bool = False
    sync_deadline_ms: int | None = None
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)

    # -- queries ---------------------------------------------------------------------
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    @property
    def size(self) -> int:
        return len(self.members)

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values()
        )

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Kafka's isStaticMemberFenced: a known instance id bound to another member id."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def select_protocol(self) -> str | None:
        """Each member votes for its most preferred candidate; most votes wins (ties go
        to the first member's preference order, so the choice is deterministic)."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        first = next(iter(self.members.values()))
        order = [name for name, _ in first.protocols if name in candidates]
        best = max(votes.values())
        return next(name for name in order if votes[name] == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None when unknown."""
        from riverbed.coordinator.consumer_protocol import subscription_topics

        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            found = subscription_topics(m.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def stored(self) -> StoredGroup:
        return StoredGroup(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=[m.stored(self.protocol_name) for m in self.members.values()],
        )

    # -- changes ---------------------------------------------------------------------
    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Hand a static member's place to a new member id (KIP-345), keeping its place
        in the join order and its leadership."""
        member = self.members[old_id]
        member.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def elect_joined_leader(self) -> bool:
        """The leader must be among the joined members; False when none joined."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in self.members.values():
            if m.awaiting_join is not None:
                self.leader_id = m.member_id
                return True
        return False
