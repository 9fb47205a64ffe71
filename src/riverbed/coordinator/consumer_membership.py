"""KIP-848 membership: ConsumerGroupHeartbeat and the consumer groups' timers.

A mixin of `GroupShard` (which owns the outbox, the writes and the timers). One
heartbeat, as Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``:

1. validate (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION: a
   ``SubscribedTopicRegex`` is RE2, matched against whole topic names as Kafka's RE2/J,
   in linear time, internal topics excluded); epoch
   -1 leaves (-2 with ``group.instance.id``: a static member leaves for now and keeps its
   assignment until its session expires or its instance rejoins with epoch 0);
2. find the group (epoch 0 creates it; GROUP_ID_NOT_FOUND otherwise, or when the id
   belongs to a classic group with members) and the member (UNKNOWN_MEMBER_ID;
   GROUP_MAX_SIZE_REACHED for one member too many; UNRELEASED_INSTANCE_ID when a static
   instance is still in use); fence a stale epoch with FENCED_MEMBER_EPOCH (a member
   one epoch behind is accepted if it owns no more than it is assigned: the response
   that bumped it was lost);
3. a new member, a changed subscription or a changed partition count of a subscribed
   topic bumps the group epoch, and the target assignment is recomputed by the group's
   assignor (the one most members ask for, else the first of
   ``group.consumer.assignors``);
4. reconcile the member towards its target (`consumer_group.reconcile`); the response
   carries the member epoch, ``group.consumer.heartbeat.interval.ms`` and, when it
   changed (or on a join, a full request, or when the member reports owning something
   else), the partitions it may use now.

Records for every change are written (`consumer_records`) and the heartbeat is answered
once they are durable. A member silent for ``group.consumer.session.timeout.ms``, or
holding revoked partitions longer than its rebalance timeout, is removed and its
partitions go back to the assignor.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import re2

from riverbed.coordinator.assignors import ASSIGNORS, Assignment, to_partitions
from riverbed.coordinator.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
)
from riverbed.coordinator.consumer_records import (
    Record,
    current_assignment_record,
    group_epoch_record,
    member_metadata_record,
    member_tombstones,
    partition_metadata_record,
    target_member_record,
    target_metadata_record,
)
from riverbed.coordinator.group import ClassicGroup, Reply
from riverbed.coordinator.records import group_metadata_key
from riverbed.coordinator.writes import TIMER_RETRY_BACKOFF_MS, GroupSnapshot, answer_error
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import ConsumerGroupHeartbeatResponse

log = logging.getLogger(__name__)
E = ErrorCode
#: Compiled subscription regexes kept per shard (members usually share a few).
REGEX_CACHE_MAX = 1024


class TopicView(Protocol):
    """The cluster's topics as the coordinator sees them (the shell's metadata image)."""

    def get(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of ``name``; None when it does not exist."""

    def names(self) -> Iterable[str]:
        """Every topic a regex may match (internal topics excluded)."""


class StaticTopics:
    """A `TopicView` over a fixed mapping (tests, simulations)."""

    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]]) -> None:
        self.topics = topics

    def get(self, name: str) -> tuple[uuid.UUID, int] | None:
        return self.topics.get(name)

    def names(self) -> Iterable[str]:
        return [n for n in self.topics if not n.startswith("__")]


@dataclass(frozen=True, slots=True)
class _Beat:
    """One ConsumerGroupHeartbeat, as it waits for its group's write in flight."""

    reply: Reply
    req: Any
    regex: str | None
    client: tuple[str, str]
    topics: TopicView
    now_ms: int


def owned_partitions(rows: list[Any] | None) -> Assignment | None:
    if rows is None:
        return None
    return {r.topic_id: frozenset(r.partitions) for r in rows if r.partitions}


def _full_request(req: Any, regex: str | None) -> bool:
    """Every field set, as Kafka's consumer sends after a failed heartbeat: Kafka's
    coordinator then answers with the assignment, changed or not ("We use all the
    non-optional fields (rebalanceTimeoutMs, subscribedTopicNames and ownedTopicPartitions)
    to detect a full request"), so that a member whose response was lost learns it."""
    subscribed = req.subscribed_topic_names is not None or regex is not None
    return req.rebalance_timeout_ms != -1 and subscribed and req.topic_partitions is not None


class ConsumerMembership:
    """The KIP-848 half of `GroupShard` (see the module docstring)."""

    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    config: Any
    _respond: Callable[[Reply, Any], None]
    _write_gated: Callable[..., int]
    _gated: Callable[..., None]
    _snapshot: Callable[[str, set[str] | None], GroupSnapshot]
    _restore: Callable[[GroupSnapshot], None]
    _schedule: Callable[[Any], None]
    _random: Any
    _regexes: dict[str, Any]
    #: group id -> its GROUP configs from the metadata image (the shell keeps it current)
    group_overrides: Mapping[str, Mapping[str, str]]

    # ------------------------------------------------------------------ helpers
    def _session_timeout_ms(self, group_id: str) -> int:
        """The group's ``consumer.session.timeout.ms`` GROUP config, else the broker's
        ``group.consumer.session.timeout.ms`` (Kafka's consumerGroupSessionTimeoutMs)."""
        value = self._group_int(group_id, "consumer.session.timeout.ms")
        return int(self.config.consumer_session_timeout_ms) if value is None else value

    def _heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's ``consumer.heartbeat.interval.ms``, else the broker's."""
        value = self._group_int(group_id, "consumer.heartbeat.interval.ms")
        return int(self.config.consumer_heartbeat_interval_ms) if value is None else value

    def _group_int(self, group_id: str, name: str) -> int | None:
        value = self.group_overrides.get(group_id, {}).get(name)
        if value is not None and value.strip().isdigit():  # validated when it was set
            return int(value)
        return None

    def _regex(self, pattern: str) -> Any:
        """RE2 (linear time, as Kafka's RE2/J): a member's regex cannot stall the loop."""
        compiled = self._regexes.get(pattern)
        if compiled is None:
            if len(self._regexes) >= REGEX_CACHE_MAX:
                self._regexes.clear()
            compiled = self._regexes[pattern] = re2.compile(pattern)
        return compiled

    def _member_topics(self, member: ConsumerMember, candidates: Iterable[str]) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            regex = self._regex(member.subscribed_topic_regex)
            names.update(n for n in candidates if regex.fullmatch(n))
        return names

    def _subscription_metadata(
        self,
        group: ConsumerGroup,
        lookup: Callable[[str], tuple[uuid.UUID, int] | None],
        candidates: Callable[[], Iterable[str]],
    ) -> dict[str, tuple[uuid.UUID, int]]:
        """The subscribed topics that exist; ``candidates`` (every topic name a regex may
        match) is only listed when some member subscribes with a regex."""
        wanted: set[str] = set()
        regex = any(m.subscribed_topic_regex for m in group.members.values())
        pool = list(candidates()) if regex else []
        for m in group.members.values():
            wanted |= self._member_topics(m, pool)
        out = {}
        for name in sorted(wanted):
            found = lookup(name)
            if found is not None and found[1] > 0:
                out[name] = found
        return out

    def _assignor_name(self, group: ConsumerGroup) -> str:
        configured = self.config.consumer_assignors
        votes = Counter(
            m.server_assignor for m in group.members.values() if m.server_assignor in configured
        )
        if votes:
            best = max(votes.values())
            return str(next(a for a in configured if votes.get(a) == best))
        return str(configured[0])

    def _compute_target(self, group: ConsumerGroup, records: list[Record]) -> None:
        """A new target assignment at the group epoch (records for what changed)."""
        meta = group.subscription_metadata
        subs = {
            mid: frozenset(meta[n][0] for n in self._member_topics(m, meta) if n in meta)
            for mid, m in group.members.items()
        }
        topics = {tid: n for tid, n in meta.values()}
        target = ASSIGNORS[self._assignor_name(group)](subs, topics, group.target)
        for mid, assignment in target.items():
            if assignment != group.target.get(mid, {}):
                records.append(target_member_record(group.group_id, mid, assignment))
        group.target = target
        group.assignment_epoch = group.group_epoch
        records.append(target_metadata_record(group.group_id, group.assignment_epoch))

    def _bump(self, group: ConsumerGroup, records: list[Record]) -> None:
        group.group_epoch += 1
        records.append(group_epoch_record(group.group_id, group.group_epoch))

    def _apply(
        self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None, now: int
    ) -> bool:
        """Reconcile ``member``; True when its assignment or epoch changed."""
        r = reconcile(
            member,
            group.assignment_epoch,
            group.target.get(member.member_id, {}),
            owned,
            group.owners,
        )
        if (r.epoch, r.state, r.assigned, r.pending_revocation) == (
            member.member_epoch,
            member.state,
            member.assigned,
            member.pending_revocation,
        ):
            return False
        if r.epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = r.epoch
        if r.state is MemberState.UNREVOKED_PARTITIONS:
            if member.state is not MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline_ms = now + max(member.rebalance_timeout_ms, 0)
        else:
            member.revocation_deadline_ms = None
        member.state = r.state
        group.set_assignment(member, r.assigned, r.pending_revocation)
        return True

    def _hb_response(
        self,
        reply: Reply,
        code: ErrorCode,
        message: str | None = None,
        member_id: str | None = None,
        epoch: int = 0,
        assignment: Assignment | None = None,
        group_id: str = "",
    ) -> None:
        body = None
        if assignment is not None:
            body = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    ConsumerGroupHeartbeatResponse.TopicPartitions(
                        topic_id=t, partitions=sorted(ps)
                    )
                    for t, ps in sorted(assignment.items())
                ]
            )
        interval = self._heartbeat_interval_ms(group_id) if code == E.NONE else 0
        self._respond(
            reply,
            ConsumerGroupHeartbeatResponse(
                throttle_time_ms=0,
                error_code=int(code),
                error_message=message,
                member_id=member_id,
                member_epoch=epoch if code == E.NONE else -1,
                heartbeat_interval_ms=interval,
                assignment=body,
            ),
        )

    # ------------------------------------------------------------------ heartbeat
    def consumer_group_heartbeat(
        self,
        reply: Reply,
        req: Any,
        client_id: str,
        client_host: str,
        topics: TopicView,
        now_ms: int,
    ) -> None:
        epoch = req.member_epoch
        regex = req.subscribed_topic_regex if reply.version >= 1 else None
        error = self._validate(req, epoch, regex)
        if error is not None:
            return self._hb_response(reply, error[0], error[1])
        beat = _Beat(reply, req, regex, (client_id, client_host), topics, now_ms)
        self._gated(req.group_id, lambda: self._heartbeat(beat), self._hb_refused(reply))
        return None

    def _hb_refused(self, reply: Reply) -> Callable[[ErrorCode], None]:
        return lambda code: self._hb_response(reply, answer_error(code))

    def _heartbeat(self, beat: _Beat) -> None:
        """Changes the group in place after a snapshot; the snapshot goes back when the
        heartbeat is refused or its write fails (`writes`)."""
        reply, req, now_ms = beat.reply, beat.req, beat.now_ms
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(reply, req, req.member_epoch, now_ms)
        touched = {req.member_id or ""}
        group = self.consumer_groups.get(req.group_id)
        if group is not None and req.instance_id is not None:
            touched.add(group.static_members.get(req.instance_id, ""))
        snap = self._snapshot(req.group_id, touched)
        outcome = self._heartbeat_changes(beat)
        if outcome is None:  # refused: answered already, nothing may stay
            return self._restore(snap)
        records, answer = outcome
        self._write_gated(req.group_id, records, answer, snap)
        return None

    def _heartbeat_changes(
        self, beat: _Beat
    ) -> tuple[list[Record], Callable[[ErrorCode], None]] | None:
        reply, req, topics, now_ms = beat.reply, beat.req, beat.topics, beat.now_ms
        epoch = req.member_epoch
        group = self.consumer_groups.get(req.group_id)
        records: list[Record] = []
        if group is None:
            classic = self.groups.get(req.group_id)
            if classic is not None and classic.members:
                msg = f"Group {req.group_id} is not a consumer group."
                self._hb_response(reply, E.GROUP_ID_NOT_FOUND, msg)
                return None
            if epoch != JOIN_EPOCH:
                msg = f"Consumer group {req.group_id} not found."
                self._hb_response(reply, E.GROUP_ID_NOT_FOUND, msg)
                return None
            group = ConsumerGroup(req.group_id, state_timestamp_ms=now_ms)
            if classic is not None:  # an empty classic group (offsets only) converts
                group.offsets = classic.offsets
                del self.groups[req.group_id]
                records.append((group_metadata_key(req.group_id), None))
            self.consumer_groups[req.group_id] = group
        found = self._find_member(reply, group, req, epoch, records)
        if found is None:
            return None
        member, is_new = found
        before = member.metadata_key()
        bump = self._update_member(member, req, beat.regex, beat.client, now_ms) or is_new
        if is_new:
            group.add(member)
        if is_new or member.metadata_key() != before:
            records.append(member_metadata_record(group.group_id, member))
        meta = self._subscription_metadata(group, topics.get, topics.names)
        if meta != group.subscription_metadata:
            group.subscription_metadata = meta
            records.append(partition_metadata_record(group.group_id, meta))
            bump = True
        if bump:
            self._bump(group, records)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)
        owned = owned_partitions(req.topic_partitions)
        changed = self._apply(group, member, owned, now_ms)
        if changed:
            records.append(current_assignment_record(group.group_id, member))
        send = (
            epoch == JOIN_EPOCH
            or changed
            or _full_request(req, beat.regex)
            or (owned is not None and to_partitions(owned) != to_partitions(member.assigned))
        )
        self._schedule(group)
        member_id, member_epoch = member.member_id, member.member_epoch
        assignment = dict(member.assigned) if send else None

        def answer(code: ErrorCode) -> None:
            if code != E.NONE:
                return self._hb_response(reply, answer_error(code))
            return self._hb_response(
                reply, E.NONE, None, member_id, member_epoch, assignment, req.group_id
            )

        return records, answer

    def _update_member(
        self,
        member: ConsumerMember,
        req: Any,
        regex: str | None,
        client: tuple[str, str],
        now_ms: int,
    ) -> bool:
        """Take what the heartbeat says; True when the subscription changed (what the
        target assignment depends on: a new group epoch)."""
        subscription = (
            tuple(member.subscribed_topic_names),
            member.subscribed_topic_regex,
            member.server_assignor,
        )
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = client
        if req.subscribed_topic_names is not None:
            member.subscribed_topic_names = sorted(set(req.subscribed_topic_names))
        if regex is not None:
            member.subscribed_topic_regex = regex or None
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_deadline_ms = now_ms + self._session_timeout_ms(req.group_id)
        return subscription != (
            tuple(member.subscribed_topic_names),
            member.subscribed_topic_regex,
            member.server_assignor,
        )

    def _validate(self, req: Any, epoch: int, regex: str | None) -> tuple[ErrorCode, str] | None:
        bad = E.INVALID_REQUEST
        if not req.group_id:
            return bad, "GroupId can't be empty."
        if epoch < STATIC_LEAVE_EPOCH:
            return bad, f"MemberEpoch is {epoch}, but must be greater than or equal to -2."
        if epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                return bad, "RebalanceTimeoutMs must be provided in first request."
            if req.topic_partitions:
                return bad, "TopicPartitions must be empty when (re-)joining."
            if req.subscribed_topic_names is None and regex is None:
                return (
                    bad,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif not req.member_id:
            return bad, "MemberId can't be empty."
        if epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return bad, "InstanceId can't be null."
        assignor = req.server_assignor
        if assignor is not None and assignor not in self.config.consumer_assignors:
            return E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported."
        if regex:
            try:
                self._regex(regex)
            except re2.error as exc:
                return (
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex {regex} is invalid: {exc}",
                )
        return None

    def _find_member(
        self, reply: Reply, group: ConsumerGroup, req: Any, epoch: int, records: list[Record]
    ) -> tuple[ConsumerMember, bool] | None:
        member_id = req.member_id or ""
        if epoch == JOIN_EPOCH:
            instance = req.instance_id
            old_id = group.static_members.get(instance) if instance is not None else None
            if old_id is not None and old_id != member_id:
                old = group.members[old_id]
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    msg = f"Static member {old_id} with instance id {instance} is not released."
                    self._hb_response(reply, E.UNRELEASED_INSTANCE_ID, msg)
                    return None
                new_id = member_id or self._new_id(group)
                return self._replace_static(group, old, new_id, records), False
            member = group.members.get(member_id) if member_id else None
            if member is not None:
                # a rejoin: the member gave up everything it held (TopicPartitions is empty)
                group.set_assignment(member, {}, {})
                member.member_epoch, member.state = 0, MemberState.STABLE
                return member, False
            if len(group.members) >= self.config.consumer_max_size:
                msg = f"The consumer group has reached its maximum capacity of {len(group.members)} members."
                self._hb_response(reply, E.GROUP_MAX_SIZE_REACHED, msg)
                return None
            return ConsumerMember(member_id=member_id or self._new_id(group)), True
        member = group.members.get(member_id)
        if member is None:
            msg = f"Member {member_id} is not a member of group {group.group_id}."
            self._hb_response(reply, E.UNKNOWN_MEMBER_ID, msg)
            return None
        if epoch != member.member_epoch:
            owned = owned_partitions(req.topic_partitions)
            lost_bump = (
                epoch == member.previous_member_epoch
                and owned is not None
                and to_partitions(owned) <= to_partitions(member.assigned)
            )
            if epoch > member.member_epoch or not lost_bump:
                which = "smaller" if epoch < member.member_epoch else "greater"
                msg = (
                    f"The consumer group member has a {which} member epoch ({epoch}) than "
                    f"the one known by the group coordinator ({member.member_epoch})."
                )
                self._hb_response(reply, E.FENCED_MEMBER_EPOCH, msg)
                return None
        return member, False

    def _new_id(self, group: ConsumerGroup) -> str:
        """A member id for a v0 client (v1 clients bring their own), never one in use."""
        while True:
            new = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
            if new not in group.members:
                return new

    def _replace_static(
        self, group: ConsumerGroup, old: ConsumerMember, new_id: str, records: list[Record]
    ) -> ConsumerMember:
        """A static instance rejoining under a new member id takes over its assignment
        and epoch: no rebalance (KIP-345 for the new protocol). The old id's records
        go, the new id's are written whole."""
        assigned, pending, target = (
            old.assigned,
            old.pending_revocation,
            group.target.get(old.member_id),
        )
        old_id = old.member_id
        group.remove(old_id)
        old.member_id = new_id
        old.member_epoch = max(old.previous_member_epoch, 0)
        group.add(old)
        records.extend(member_tombstones(group.group_id, old_id))
        group.set_assignment(old, assigned, pending)
        records.append(member_metadata_record(group.group_id, old))
        if target is not None:
            group.target[new_id] = target
            records.append(target_member_record(group.group_id, new_id, target))
        records.append(current_assignment_record(group.group_id, old))
        return old

    # ------------------------------------------------------------------ leaving
    def _leave(self, reply: Reply, req: Any, epoch: int, now: int) -> None:
        group = self.consumer_groups.get(req.group_id)
        if group is None:
            msg = f"Consumer group {req.group_id} not found."
            return self._hb_response(reply, E.GROUP_ID_NOT_FOUND, msg)
        member_id = req.member_id
        if req.instance_id is not None and req.instance_id in group.static_members:
            member_id = group.static_members[req.instance_id]
        member = group.members.get(member_id)
        if member is None:
            msg = f"Member {member_id} is not a member of group {group.group_id}."
            return self._hb_response(reply, E.UNKNOWN_MEMBER_ID, msg)
        records: list[Record] = []
        snap = self._snapshot(group.group_id, {member_id})
        if epoch == STATIC_LEAVE_EPOCH:
            # keeps its partitions for its session: the same instance may come back
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            records.append(current_assignment_record(group.group_id, member))
        else:
            self._remove(group, member_id, records, now)
        self._schedule(group)

        def answer(code: ErrorCode) -> None:
            if code != E.NONE:
                return self._hb_response(reply, answer_error(code))
            return self._hb_response(reply, E.NONE, None, req.member_id, epoch, None, req.group_id)

        self._write_gated(group.group_id, records, answer, snap)
        return None

    def _remove(
        self, group: ConsumerGroup, member_id: str, records: list[Record], now: int
    ) -> None:
        """Fence a member out: tombstones, a new group epoch and a new target."""
        group.remove(member_id)
        records.extend(member_tombstones(group.group_id, member_id))
        meta = group.subscription_metadata
        kept = self._subscription_metadata(group, meta.get, lambda: meta)
        if kept != meta:
            group.subscription_metadata = kept
            records.append(partition_metadata_record(group.group_id, kept))
        self._bump(group, records)
        if group.members:
            self._compute_target(group, records)
        else:
            group.assignment_epoch = group.group_epoch
            group.target.clear()
            records.append(target_metadata_record(group.group_id, group.assignment_epoch))
            group.state_timestamp_ms = now

    # ------------------------------------------------------------------ timers
    def consumer_group_deadline(self, group: ConsumerGroup) -> int | None:
        times = [m.session_deadline_ms for m in group.members.values()]
        times.extend(
            m.revocation_deadline_ms
            for m in group.members.values()
            if m.revocation_deadline_ms is not None
        )
        if not times:
            return None
        return max(min(times), group.timer_retry_ms)

    def tick_consumer_group(self, group: ConsumerGroup, now: int) -> None:
        """Fence members whose session expired or who sat on revoked partitions past
        their rebalance timeout: one write; if it fails the members stay (as the records
        say) and the timer tries again after ``TIMER_RETRY_BACKOFF_MS``."""
        snap = self._snapshot(group.group_id, None)
        records: list[Record] = []
        for m in list(group.members.values()):
            expired = m.session_deadline_ms <= now
            stuck = m.revocation_deadline_ms is not None and m.revocation_deadline_ms <= now
            if expired or stuck:
                why = (
                    "session timed out"
                    if expired
                    else "did not revoke within its rebalance timeout"
                )
                log.info("member %s of consumer group %s %s", m.member_id, group.group_id, why)
                self._remove(group, m.member_id, records, now)
        gid = group.group_id

        def done(code: ErrorCode) -> None:
            restored = self.consumer_groups.get(gid)
            if code != E.NONE and restored is not None:
                log.info("fencing members of consumer group %s failed: %s", gid, code.name)
                restored.timer_retry_ms = now + TIMER_RETRY_BACKOFF_MS

        self._write_gated(gid, records, done, snap)
