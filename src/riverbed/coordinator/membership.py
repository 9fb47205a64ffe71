"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Kafka's classic ``GroupCoordinator`` rules, as a mixin of `GroupShard` (which owns the
groups, the outbox of responses and the records to write):

- JoinGroup without a member id: v4+ clients get a fresh id with MEMBER_ID_REQUIRED
  (KIP-394; the id is pending for a session timeout) and join again with it; a
  ``group.instance.id`` (KIP-345) takes over its static member's place (the old id is
  fenced with FENCED_INSTANCE_ID) without a rebalance when its protocols did not change.
- A join parks its response until every member has joined or the rebalance deadline
  passes; then members that did not rejoin are removed (dynamic ones), the generation
  increases, a protocol is selected by vote and every member gets its response (the
  leader with everyone's metadata).
- SyncGroup from the leader writes the group metadata record with the assignment; every
  member's SyncGroup is answered with its assignment once that write is durable.
  Members whose SyncGroup does not come within the rebalance timeout are removed.
- Heartbeats keep a member alive for its session timeout; they answer
  REBALANCE_IN_PROGRESS while the group prepares a rebalance.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from riverbed.coordinator.group import ClassicGroup, GroupState, Member, Reply
from riverbed.coordinator.records import group_metadata_key, group_metadata_value
from riverbed.coordinator.writes import answer_error
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)

log = logging.getLogger(__name__)
E = ErrorCode
S = GroupState
#: How long a new member's parked JoinGroup keeps it (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


def _protocols(req: Any) -> list[tuple[str, bytes]]:
    return [(p.name, bytes(p.metadata)) for p in req.protocols or []]


class Membership:
    """The membership half of `GroupShard` (see the module docstring)."""

    groups: dict[str, ClassicGroup]
    config: Any
    _respond: Callable[[Reply, Any], None]
    _write: Callable[..., int]
    _schedule: Callable[[ClassicGroup], None]
    _random: Any
    consumer_groups: dict[str, Any]
    convert_to_classic: Callable[..., None]

    # ------------------------------------------------------------------ responses
    def _join_response(
        self,
        reply: Reply,
        code: ErrorCode,
        group: ClassicGroup | None = None,
        member_id: str = "",
        *,
        with_members: bool = False,
        skip_assignment: bool = False,
    ) -> None:
        v = reply.version
        name = group.protocol_name if group is not None and code == E.NONE else None
        ptype = group.protocol_type if group is not None and code == E.NONE else None
        members = []
        if group is not None and with_members:
            members = [
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata_for(group.protocol_name),
                )
                for m in group.members.values()
            ]
        self._respond(
            reply,
            JoinGroupResponse(
                throttle_time_ms=0,
                error_code=int(code),
                generation_id=group.generation if group is not None and code == E.NONE else -1,
                protocol_type=ptype,
                protocol_name=name if (name is not None or v >= 7) else "",
                leader=(group.leader_id or "") if group is not None and code == E.NONE else "",
                skip_assignment=skip_assignment,
                member_id=member_id,
                members=members,
            ),
        )

    def _sync_response(
        self, reply: Reply, code: ErrorCode, group: ClassicGroup | None, assignment: bytes
    ) -> None:
        ok = code == E.NONE and group is not None
        self._respond(
            reply,
            SyncGroupResponse(
                throttle_time_ms=0,
                error_code=int(code),
                protocol_type=group.protocol_type if ok and group is not None else None,
                protocol_name=group.protocol_name if ok and group is not None else None,
                assignment=assignment,
            ),
        )

    # ------------------------------------------------------------------ JoinGroup
    def join_group(
        self, reply: Reply, req: Any, client_id: str, client_host: str, now_ms: int
    ) -> None:
        cfg = self.config
        group_id = req.group_id
        member_id = req.member_id or ""
        if not group_id:
            return self._join_response(reply, E.INVALID_GROUP_ID, member_id=member_id)
        session = req.session_timeout_ms
        if not cfg.min_session_timeout_ms <= session <= cfg.max_session_timeout_ms:
            return self._join_response(reply, E.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if group_id in self.consumer_groups:  # refused, or joins once converted
            return self.convert_to_classic(
                group_id,
                lambda: self.join_group(reply, req, client_id, client_host, now_ms),
                lambda code: self._join_response(reply, answer_error(code), member_id=member_id),
            )
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return self._join_response(reply, E.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        known = member_id in group.members or member_id in group.pending_members
        if not known and group.size + len(group.pending_members) >= cfg.max_size:
            return self._join_response(reply, E.GROUP_MAX_SIZE_REACHED, member_id=member_id)
        if member_id:
            self._join_known(reply, group, req, member_id, client_id, client_host, now_ms)
        else:
            self._join_new(reply, group, req, client_id, client_host, now_ms)
        self._schedule(group)
        return None

    def _new_member(
        self, group: ClassicGroup, req: Any, member_id: str, client_id: str, host: str
    ) -> Member:
        rebalance = req.rebalance_timeout_ms
        return Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=client_id,
            client_host=host,
            rebalance_timeout_ms=rebalance if rebalance > 0 else req.session_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=_protocols(req),
        )

    def _join_new(
        self, reply: Reply, group: ClassicGroup, req: Any, client_id: str, host: str, now: int
    ) -> None:
        if group.state is S.DEAD:
            return self._join_response(reply, E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports(req.protocol_type, _protocols(req)):
            return self._join_response(reply, E.INCONSISTENT_GROUP_PROTOCOL)
        new_id = f"{client_id}-{uuid.UUID(int=self._random.getrandbits(128), version=4)}"
        instance = req.group_instance_id
        if instance is not None:
            return self._join_static(reply, group, req, new_id, client_id, host, now)
        if reply.version >= 4:
            group.pending_members[new_id] = now + req.session_timeout_ms
            return self._join_response(reply, E.MEMBER_ID_REQUIRED, member_id=new_id)
        member = self._new_member(group, req, new_id, client_id, host)
        self._add_and_rebalance(reply, group, member, now)
        return None

    def _join_static(
        self,
        reply: Reply,
        group: ClassicGroup,
        req: Any,
        new_id: str,
        client_id: str,
        host: str,
        now: int,
    ) -> None:
        instance = req.group_instance_id
        old_id = group.static_members.get(instance)
        if old_id is None or old_id not in group.members:
            member = self._new_member(group, req, new_id, client_id, host)
            return self._add_and_rebalance(reply, group, member, now)
        old = group.members[old_id]
        if old.awaiting_join is not None:
            self._join_response(old.awaiting_join, E.FENCED_INSTANCE_ID, member_id=old_id)
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            self._sync_response(old.awaiting_sync, E.FENCED_INSTANCE_ID, None, b"")
            old.awaiting_sync = None
        member = group.replace_static(instance, old_id, new_id)
        member.client_id, member.client_host = client_id, host
        member.session_timeout_ms = req.session_timeout_ms
        rebalance = req.rebalance_timeout_ms
        member.rebalance_timeout_ms = rebalance if rebalance > 0 else req.session_timeout_ms
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        protocols = _protocols(req)
        unchanged = member.matches(protocols)
        is_leader = group.leader_id == new_id
        if group.state is S.STABLE and unchanged:
            # KIP-345: the same instance came back; persist its new id, no rebalance. A
            # returning leader gets the members with skipAssignment (KIP-814); before v9
            # it assigns again and its SyncGroup gets the stored assignment (Stable).
            def written(code: ErrorCode) -> None:
                self._join_response(
                    reply,
                    code,
                    group,
                    new_id,
                    with_members=is_leader,
                    skip_assignment=is_leader,
                )

            self._write_group(group, written)
            return None
        member.protocols = protocols
        self._update_and_rebalance(reply, group, member, now)
        return None

    def _join_known(
        self,
        reply: Reply,
        group: ClassicGroup,
        req: Any,
        member_id: str,
        client_id: str,
        host: str,
        now: int,
    ) -> None:
        protocols = _protocols(req)
        if group.state is S.DEAD:
            return self._join_response(reply, E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(req.protocol_type, protocols):
            return self._join_response(reply, E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            joining = self._new_member(group, req, member_id, client_id, host)
            return self._add_and_rebalance(reply, group, joining, now)
        if group.static_member_fenced(member_id, req.group_instance_id):
            return self._join_response(reply, E.FENCED_INSTANCE_ID, member_id=member_id)
        member = group.members.get(member_id)
        if member is None or group.state is S.EMPTY:
            return self._join_response(reply, E.UNKNOWN_MEMBER_ID, member_id=member_id)
        if group.state is S.PREPARING_REBALANCE:
            member.protocols = protocols
            return self._update_and_rebalance(reply, group, member, now)
        resend = member.matches(protocols) and (
            group.state is S.COMPLETING_REBALANCE or group.leader_id != member_id
        )
        if resend:
            # A retried join of the current generation: the same answer again.
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            is_leader = group.leader_id == member_id
            return self._join_response(reply, E.NONE, group, member_id, with_members=is_leader)
        member.protocols = protocols
        return self._update_and_rebalance(reply, group, member, now)

    def _add_and_rebalance(
        self, reply: Reply, group: ClassicGroup, member: Member, now: int
    ) -> None:
        member.awaiting_join = reply
        member.is_new = True
        member.heartbeat_deadline_ms = now + NEW_MEMBER_JOIN_TIMEOUT_MS
        group.add(member)
        group.new_member_added = True
        self._maybe_prepare_rebalance(group, now)

    def _update_and_rebalance(
        self, reply: Reply, group: ClassicGroup, member: Member, now: int
    ) -> None:
        if member.awaiting_join is not None and member.awaiting_join != reply:
            # a retried join replaces the parked one; the old request is answered
            self._join_response(member.awaiting_join, E.REBALANCE_IN_PROGRESS, group)
        member.awaiting_join = reply
        self._maybe_prepare_rebalance(group, now)

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now: int) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, now)
        elif self._join_ready(group):
            self._complete_join(group, now)

    @staticmethod
    def _join_ready(group: ClassicGroup) -> bool:
        preparing = group.state is S.PREPARING_REBALANCE
        return preparing and not group.initial_delay_active and group.all_joined()

    def _prepare_rebalance(self, group: ClassicGroup, now: int) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.awaiting_sync is not None:
                    self._sync_response(m.awaiting_sync, E.REBALANCE_IN_PROGRESS, None, b"")
                    m.awaiting_sync = None
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        delay = self.config.initial_rebalance_delay_ms
        if group.state is S.EMPTY and delay > 0:
            # Kafka's InitialDelayedJoin: wait for more members before the first generation
            group.initial_delay_active = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_deadline_ms = now + delay
        else:
            group.initial_delay_active = False
            group.join_deadline_ms = now + group.rebalance_timeout_ms()
        group.transition(S.PREPARING_REBALANCE, now)
        log.info(
            "preparing to rebalance group %s (generation %d, %d members)",
            group.group_id,
            group.generation,
            group.size,
        )
        if not group.initial_delay_active and group.all_joined():
            self._complete_join(group, now)

    def _complete_join(self, group: ClassicGroup, now: int) -> None:
        group.join_deadline_ms = None
        group.initial_delay_active = False
        for m in list(group.members.values()):
            if m.awaiting_join is None and m.group_instance_id is None:
                group.remove(m.member_id)
        group.pending_members.clear()
        if group.members and not group.elect_joined_leader():
            # nobody rejoined (static members only): wait another rebalance timeout
            group.join_deadline_ms = now + group.rebalance_timeout_ms()
            return
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(S.EMPTY, now)
            self._write_group(group, lambda _code: None)
            return
        group.protocol_name = group.select_protocol()
        group.transition(S.COMPLETING_REBALANCE, now)
        log.info(
            "group %s generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation,
            group.size,
            group.protocol_name,
            group.leader_id,
        )
        for m in group.members.values():
            if m.awaiting_join is not None:
                is_leader = m.member_id == group.leader_id
                self._join_response(
                    m.awaiting_join, E.NONE, group, m.member_id, with_members=is_leader
                )
                m.awaiting_join = None
            m.is_new = False
            m.heartbeat_deadline_ms = now + m.session_timeout_ms
            group.pending_sync.add(m.member_id)
        group.sync_deadline_ms = now + group.rebalance_timeout_ms()

    # ------------------------------------------------------------------ SyncGroup
    def sync_group(self, reply: Reply, req: Any, now_ms: int) -> None:
        group = self.groups.get(req.group_id)
        member_id = req.member_id
        code = self._member_check(group, member_id, req.group_instance_id, req.generation_id)
        if code is not None or group is None:
            return self._sync_response(reply, code or E.UNKNOWN_MEMBER_ID, None, b"")
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return self._sync_response(reply, E.INCONSISTENT_GROUP_PROTOCOL, None, b"")
        member = group.members[member_id]
        if group.state is S.EMPTY:
            return self._sync_response(reply, E.UNKNOWN_MEMBER_ID, None, b"")
        if group.state is S.PREPARING_REBALANCE:
            return self._sync_response(reply, E.REBALANCE_IN_PROGRESS, None, b"")
        group.pending_sync.discard(member_id)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is S.STABLE:
            return self._sync_response(reply, E.NONE, group, member.assignment)
        # CompletingRebalance
        member.awaiting_sync = reply
        if member_id == group.leader_id:
            assignments = {a.member_id: bytes(a.assignment) for a in req.assignments or []}
            generation = group.generation
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")

            def written(code: ErrorCode) -> None:
                self._sync_written(group, generation, code, now_ms)

            self._write_group(group, written)
        self._schedule(group)
        return None

    def _sync_written(
        self, group: ClassicGroup, generation: int, code: ErrorCode, now: int
    ) -> None:
        if group.generation != generation or group.state is not S.COMPLETING_REBALANCE:
            return
        if code != E.NONE:
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    self._sync_response(m.awaiting_sync, code, None, b"")
                    m.awaiting_sync = None
            self._prepare_rebalance(group, now)
            return
        for m in group.members.values():
            if m.awaiting_sync is not None:
                self._sync_response(m.awaiting_sync, E.NONE, group, m.assignment)
                m.awaiting_sync = None
        group.transition(S.STABLE, now)
        self._schedule(group)

    # ------------------------------------------------------------------ Heartbeat
    def _member_check(
        self, group: ClassicGroup | None, member_id: str, instance: str | None, generation: int
    ) -> ErrorCode | None:
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.static_member_fenced(member_id, instance):
            return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        return None

    def heartbeat(self, reply: Reply, req: Any, now_ms: int) -> None:
        group = self.groups.get(req.group_id)
        code = self._member_check(group, req.member_id, req.group_instance_id, req.generation_id)
        if code is None and group is not None:
            if group.state is S.EMPTY:
                code = E.UNKNOWN_MEMBER_ID
            else:
                member = group.members[req.member_id]
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                self._schedule(group)
                rebalancing = group.state is S.PREPARING_REBALANCE
                code = E.REBALANCE_IN_PROGRESS if rebalancing else E.NONE
        final = code if code is not None else E.NONE
        self._respond(reply, HeartbeatResponse(throttle_time_ms=0, error_code=int(final)))

    # ------------------------------------------------------------------ LeaveGroup
    def leave_group(self, reply: Reply, req: Any, now_ms: int) -> None:
        if reply.version < 3:
            leaving = [(req.member_id, None)]
        else:
            leaving = [(m.member_id, m.group_instance_id) for m in req.members or []]
        group = self.groups.get(req.group_id)
        if group is not None and group.state is S.DEAD:
            self._respond(
                reply,
                LeaveGroupResponse(error_code=int(E.COORDINATOR_NOT_AVAILABLE), members=[]),
            )
            return
        results = []
        for member_id, instance in leaving:
            code = self._leave_one(group, member_id, instance, now_ms)
            results.append(
                LeaveGroupResponse.MemberResponse(
                    member_id=member_id, group_instance_id=instance, error_code=int(code)
                )
            )
        top = E.NONE
        if reply.version < 3 and results:
            top = E(results[0].error_code)
        self._respond(
            reply, LeaveGroupResponse(throttle_time_ms=0, error_code=int(top), members=results)
        )

    def _leave_one(
        self, group: ClassicGroup | None, member_id: str, instance: str | None, now: int
    ) -> ErrorCode:
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if instance is not None:
            bound = group.static_members.get(instance)
            if bound is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != bound:
                return E.FENCED_INSTANCE_ID
            member_id = bound
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_prepare_rebalance_after_removal(group, now)
            return E.NONE
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        self._remove_member(group, member_id, now)
        return E.NONE

    def _remove_member(self, group: ClassicGroup, member_id: str, now: int) -> None:
        member = group.remove(member_id)
        if member is not None and member.awaiting_join is not None:
            self._join_response(member.awaiting_join, E.UNKNOWN_MEMBER_ID, member_id=member_id)
        if member is not None and member.awaiting_sync is not None:
            self._sync_response(member.awaiting_sync, E.UNKNOWN_MEMBER_ID, None, b"")
        self._maybe_prepare_rebalance_after_removal(group, now)

    def _maybe_prepare_rebalance_after_removal(self, group: ClassicGroup, now: int) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        elif self._join_ready(group):
            self._complete_join(group, now)
        self._schedule(group)

    # ------------------------------------------------------------------ timers
    def group_deadline(self, group: ClassicGroup) -> int | None:
        """The earliest time ``tick_group`` has something to do for ``group``."""
        times = [t for t in (group.join_deadline_ms, group.sync_deadline_ms) if t is not None]
        times.extend(group.pending_members.values())
        for m in group.members.values():
            if m.awaiting_sync is not None:
                continue  # kept alive: the sync deadline governs
            if m.awaiting_join is not None and not m.is_new:
                continue  # kept alive: the join deadline governs
            times.append(m.heartbeat_deadline_ms)
        return min(times, default=None)

    def tick_group(self, group: ClassicGroup, now: int) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
                self._maybe_prepare_rebalance_after_removal(group, now)
        for m in list(group.members.values()):
            if m.member_id not in group.members or m.awaiting_sync is not None:
                continue
            if m.awaiting_join is not None and not m.is_new:
                continue
            if m.heartbeat_deadline_ms <= now:
                # session timeout (or a new member's join timeout): the member is gone
                log.info("member %s of group %s timed out", m.member_id, group.group_id)
                self._remove_member(group, m.member_id, now)
        if group.join_deadline_ms is not None and group.join_deadline_ms <= now:
            if group.initial_delay_active and group.new_member_added:
                remaining = group.initial_delay_remaining_ms
                if remaining > 0:
                    step = min(self.config.initial_rebalance_delay_ms, remaining)
                    group.initial_delay_remaining_ms = remaining - step
                    group.new_member_added = False
                    group.join_deadline_ms = now + step
                    return
            if group.state is S.PREPARING_REBALANCE:
                self._complete_join(group, now)
            else:
                group.join_deadline_ms = None
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now:
            group.sync_deadline_ms = None
            if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
                for member_id in list(group.pending_sync):
                    group.remove(member_id)
                self._prepare_rebalance(group, now)

    # ------------------------------------------------------------------ writes
    def _write_group(self, group: ClassicGroup, done: Callable[[ErrorCode], None]) -> None:
        key = group_metadata_key(group.group_id)
        self._write([(key, group_metadata_value(group.stored()))], done)
