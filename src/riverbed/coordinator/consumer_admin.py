"""KIP-848 consumer groups beside the classic ones: loading, offsets, admin views.

A mixin of `GroupShard`:

- `replay_consumer` rebuilds the groups from their records (`consumer_records`) when a
  coordinator loads its ``__consumer_offsets`` partition; offsets committed before the
  group's first record (a group that was empty, or classic and empty) move over to it;
- OffsetCommit (Kafka's ``ConsumerGroup.validateOffsetCommit``): member epoch -1 with no
  members is an admin commit; otherwise the member must exist (UNKNOWN_MEMBER_ID), use
  OffsetCommit v9+ (UNSUPPORTED_VERSION) and send its current epoch as the generation
  (STALE_MEMBER_EPOCH); OffsetFetch v9+ with a member id checks the same way;
- ConsumerGroupDescribe (GROUP_ID_NOT_FOUND for unknown ids and classic groups), and the
  classic views: ListGroups (type ``consumer``) and DescribeGroups (protocol type
  ``consumer``, the assignor as protocol, members' subscriptions and assignments in the
  consumer embedded protocol so classic tools can read them); DeleteGroups of an empty
  group (NON_EMPTY_GROUP otherwise).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from riverbed.coordinator.assignors import Assignment
from riverbed.coordinator.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from riverbed.coordinator.consumer_protocol import encode_assignment, encode_subscription
from riverbed.coordinator.consumer_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    ConsumerRecord,
    Record,
    group_tombstones,
    read_assignment,
)
from riverbed.coordinator.group import ClassicGroup, GroupState, Reply
from riverbed.coordinator.records import offset_commit_key
from riverbed.coordinator.writes import answer_error
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import ConsumerGroupDescribeResponse, DescribeGroupsResponse

E = ErrorCode
#: "authorized operations not requested".
_OPERATIONS_OMITTED = -(2**31)
#: The OffsetCommit / OffsetFetch version that carries member epochs (KIP-848).
MEMBER_EPOCH_VERSION = 9
#: ConsumerGroupDescribe v1's MemberType (KIP-1099) of a member on the consumer protocol:
#: every member of a consumer group here (a classic member cannot join one).
CONSUMER_MEMBER = 1


class ConsumerAdmin:
    """Loading, offsets and admin views of KIP-848 groups (see the module docstring)."""

    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    config: Any
    _respond: Callable[[Reply, Any], None]
    _write_gated: Callable[..., int]
    has_pending: Callable[[str, tuple[str, int]], bool]
    has_open_txns: Callable[[str], bool]
    pending_keys: Callable[[str], list[tuple[str, int]]]
    drop_pending: Callable[[str, list[tuple[str, int]]], None]
    busy: Callable[[str], bool]
    _gated: Callable[..., None]
    _schedule: Callable[[Any], None]
    _assignor_name: Callable[[ConsumerGroup], str]
    _session_timeout_ms: Callable[[str], int]

    # ------------------------------------------------------------------ loading
    def _replayed_group(self, group_id: str) -> ConsumerGroup:
        group = self.consumer_groups.get(group_id)
        if group is None:
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
            classic = self.groups.get(group_id)
            if classic is not None and not classic.members:
                group.offsets = classic.offsets
                del self.groups[group_id]
        return group

    def replay_consumer(self, rec: ConsumerRecord) -> None:
        """Apply one KIP-848 record of the partition, in log order."""
        v = rec.value
        if v is None:
            group = self.consumer_groups.get(rec.group)
            if group is None:
                return
            if rec.kind == GROUP_METADATA:
                del self.consumer_groups[rec.group]
                if group.offsets:  # offsets outlive the group record until deleted
                    keep = ClassicGroup(rec.group)
                    keep.offsets = group.offsets
                    self.groups[rec.group] = keep
            elif rec.kind == MEMBER_METADATA:
                group.remove(rec.member)
            elif rec.kind == TARGET_MEMBER:
                group.target.pop(rec.member, None)
            elif rec.kind == CURRENT_ASSIGNMENT and rec.member in group.members:
                group.set_assignment(group.members[rec.member], {}, {})
            elif rec.kind == PARTITION_METADATA:
                group.subscription_metadata = {}
            return
        group = self._replayed_group(rec.group)
        if rec.kind == GROUP_METADATA:
            group.group_epoch = v.epoch
        elif rec.kind == PARTITION_METADATA:
            group.subscription_metadata = {
                t.topic_name: (t.topic_id, t.num_partitions) for t in v.topics
            }
        elif rec.kind == TARGET_METADATA:
            group.assignment_epoch = v.assignment_epoch
        elif rec.kind == TARGET_MEMBER:
            group.target[rec.member] = read_assignment(v.topic_partitions)
        else:
            member = group.members.get(rec.member)
            if member is None:
                member = ConsumerMember(member_id=rec.member)
                group.add(member)
            if rec.kind == MEMBER_METADATA:
                member.instance_id = v.instance_id
                member.rack_id = v.rack_id
                member.client_id = v.client_id
                member.client_host = v.client_host
                member.subscribed_topic_names = list(v.subscribed_topic_names)
                member.subscribed_topic_regex = v.subscribed_topic_regex
                member.rebalance_timeout_ms = v.rebalance_timeout_ms
                member.server_assignor = v.server_assignor
                if member.instance_id is not None:
                    group.static_members[member.instance_id] = member.member_id
            elif rec.kind == CURRENT_ASSIGNMENT:
                member.member_epoch = v.member_epoch
                member.previous_member_epoch = v.previous_member_epoch
                member.state = MemberState(v.state)
                group.set_assignment(
                    member,
                    read_assignment(v.assigned_partitions),
                    read_assignment(v.partitions_pending_revocation),
                )

    def finish_consumer_load(self, now_ms: int) -> None:
        for group in self.consumer_groups.values():
            for m in group.members.values():
                m.session_deadline_ms = now_ms + self._session_timeout_ms(group.group_id)
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    m.revocation_deadline_ms = now_ms + max(m.rebalance_timeout_ms, 0)
            self._schedule(group)

    def convert_to_classic(
        self, group_id: str, then: Callable[[], None], fail: Callable[[ErrorCode], None]
    ) -> None:
        """A classic JoinGroup for a consumer group's id: refused while the group has
        members (INCONSISTENT_GROUP_PROTOCOL); an empty one gives way once its
        tombstones are written (its offsets stay with the classic group that replaces
        it), and ``then`` runs the join again."""

        def run() -> None:
            group = self.consumer_groups.get(group_id)
            if group is None:
                return then()
            if group.members:
                return fail(E.INCONSISTENT_GROUP_PROTOCOL)

            def done(code: ErrorCode) -> None:
                if code != E.NONE:
                    return fail(code)
                if self.consumer_groups.get(group_id) is group:
                    del self.consumer_groups[group_id]
                    if group.offsets:
                        self.groups[group_id] = ClassicGroup(group_id, state=GroupState.EMPTY)
                        self.groups[group_id].offsets = group.offsets
                return then()

            self._write_gated(group_id, group_tombstones(group_id), done)
            return None

        self._gated(group_id, run, fail)

    # ------------------------------------------------------------------ offsets
    def consumer_commit_check(
        self, group: ConsumerGroup, member_id: str, epoch: int, version: int, now: int
    ) -> ErrorCode:
        if epoch < 0 and not group.members:
            return E.NONE  # an admin / manual-assignment commit
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if version < MEMBER_EPOCH_VERSION:
            return E.UNSUPPORTED_VERSION
        if epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def consumer_fetch_check(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """OffsetFetch v9+ of a member (``member_id`` given): it must be current."""
        group = self.consumer_groups.get(group_id)
        if group is None or member_id is None or (epoch < 0 and not member_id):
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def expire_consumer_offsets(self, now: int, retention_ms: int) -> int:
        """Kafka's rule for consumer groups: an offset of a topic the group does not
        subscribe to expires ``retention_ms`` after its commit; an empty group left with
        no offsets is deleted. One write per group (a group with a write in flight waits
        for the next check), applied when it commits; returns the offsets it expires."""
        expired = 0
        for group in list(self.consumer_groups.values()):
            if self.busy(group.group_id):
                continue
            subscribed = group.subscribed_names() if group.members else set()
            gone = [
                key
                for key, om in group.offsets.items()
                if key[0] not in subscribed
                and not self.has_pending(group.group_id, key)
                and (
                    om.expire_timestamp_ms
                    if om.expire_timestamp_ms >= 0
                    else om.commit_timestamp_ms + retention_ms
                )
                <= now
            ]
            expired += len(gone)
            records: list[Record] = [
                (offset_commit_key(group.group_id, *key), None) for key in gone
            ]
            forget = (
                not group.members
                and len(gone) == len(group.offsets)
                and not self.has_open_txns(group.group_id)
            )
            if forget:
                records.extend(group_tombstones(group.group_id))
            self._write_gated(group.group_id, records, self._forgetting(group, gone, forget))
        return expired

    def _forgetting(
        self, group: ConsumerGroup, gone: list[tuple[str, int]], forget: bool
    ) -> Callable[[ErrorCode], None]:
        """What a committed deletion of offsets (and of the group) changes."""

        def done(code: ErrorCode) -> None:
            if code != E.NONE:
                return
            for key in gone:
                group.offsets.pop(key, None)
            self.drop_pending(group.group_id, gone)
            if forget and self.consumer_groups.get(group.group_id) is group:
                del self.consumer_groups[group.group_id]

        return done

    # ------------------------------------------------------------------ admin views
    def list_consumer_groups(self, states: set[str] | None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state), filtered by state (case-insensitive)."""
        wanted = {s.lower() for s in states} if states else None
        out = []
        for g in self.consumer_groups.values():
            state = g.state.value
            if wanted is None or state.lower() in wanted:
                out.append((g.group_id, "consumer", state))
        return out

    @staticmethod
    def _names(group: ConsumerGroup) -> dict[uuid.UUID, str]:
        return {tid: name for name, (tid, _n) in group.subscription_metadata.items()}

    def describe_consumer_group(
        self, group_id: str
    ) -> ConsumerGroupDescribeResponse.DescribedGroup:
        D = ConsumerGroupDescribeResponse
        group = self.consumer_groups.get(group_id)
        if group is None:
            kind = "is not a consumer group" if group_id in self.groups else "not found"
            return D.DescribedGroup(
                error_code=int(E.GROUP_ID_NOT_FOUND),
                error_message=f"Group {group_id} {kind}.",
                group_id=group_id,
                group_state="Dead",
                group_epoch=-1,
                assignment_epoch=-1,
                assignor_name="",
                members=[],
                authorized_operations=_OPERATIONS_OMITTED,
            )
        names = self._names(group)

        def rows(a: Assignment) -> Any:
            return D.Assignment(
                topic_partitions=[
                    D.TopicPartitions(
                        topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps)
                    )
                    for t, ps in sorted(a.items(), key=lambda kv: names.get(kv[0], ""))
                ]
            )

        members = [
            D.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=rows(m.assigned),
                target_assignment=rows(group.target.get(m.member_id, {})),
                member_type=CONSUMER_MEMBER,
            )
            for m in group.members.values()
        ]
        return D.DescribedGroup(
            error_code=0,
            error_message=None,
            group_id=group_id,
            group_state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self._assignor_name(group),
            members=members,
            authorized_operations=_OPERATIONS_OMITTED,
        )

    def describe_consumer_group_classic(
        self, group_id: str
    ) -> DescribeGroupsResponse.DescribedGroup:
        """DescribeGroups of a consumer group, readable by classic tools."""
        group = self.consumer_groups[group_id]
        names = self._names(group)
        members = [
            DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=encode_subscription(list(m.subscribed_topic_names)),
                member_assignment=encode_assignment(
                    {names.get(t, str(t)): sorted(ps) for t, ps in m.assigned.items()}
                ),
            )
            for m in group.members.values()
        ]
        return DescribeGroupsResponse.DescribedGroup(
            error_code=0,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type="consumer",
            protocol_data=self._assignor_name(group) if group.members else "",
            members=members,
            authorized_operations=_OPERATIONS_OMITTED,
        )

    def delete_consumer_group(self, reply: Reply, group_id: str) -> None:
        """DeleteGroups of an empty consumer group (its offsets too), once written."""
        group = self.consumer_groups[group_id]
        if group.members:
            self._respond(reply, E.NON_EMPTY_GROUP)
            return
        # pending transactional offsets go too (a tombstone each, as Kafka)
        keys = list(group.offsets)
        keys += [k for k in self.pending_keys(group_id) if k not in group.offsets]
        records: list[Record] = [(offset_commit_key(group_id, t, p), None) for t, p in keys]
        records.extend(group_tombstones(group_id))
        forget = self._forgetting(group, keys, True)

        def done(code: ErrorCode) -> None:
            forget(code)
            self._respond(reply, answer_error(code))

        self._write_gated(group_id, records, done)
