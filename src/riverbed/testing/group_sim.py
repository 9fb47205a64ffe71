"""Seeded simulation of the group coordinator at its persistence seam.

The real `GroupShard` (KIP-848 heartbeats, leaves, session and rebalance timers, offset
commits, OffsetDelete, DeleteGroups, offset expiry, admin commits) serves model
consumers of two groups. Every write it asks for is held: the simulation commits it to
the ``__consumer_offsets`` model log, fails it (REQUEST_TIMED_OUT,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: never appended), lets it commit *in doubt* (appended, answered
REQUEST_TIMED_OUT, then the groups are reloaded, as the shell does), delays it and
completes writes out of order, and moves the coordinator (a new shard replays the log;
each write in flight was appended or not) in the middle of them. Heartbeat responses
are lost now and then; consumers revoke late, crash, leave and rejoin. Consumers also
commit inside transactions (TxnOffsetCommit v0-4 with their member id and epoch, a
producer id each): the transaction ends with the producer's COMMIT or ABORT marker in the
log, sent once its answers are in, or (as the transaction coordinator's timeout abort)
while its writes are still in flight; the coordinator also moves between a commit and its
marker. One ``random.Random(seed)`` drives it all.

Invariants after every step (`check`), the guarantees Kafka's coordinator gives:

- no partition is held by two members of a group (the coordinator's `owners`);
- the memory equals a replay of the committed records, for every group without a write
  in flight (a failed write leaves no trace; KIP-848 state changes only as its records
  commit);
- no partition is consumed by two live consumers, and what a consumer uses is what the
  committed records give its member (it was never told an assignment no record holds);
- a committed offset never goes backwards, unless an admin commit to an empty group set
  it (or it was deleted or expired); consumers start a partition at its *stable*
  committed offset (OffsetFetch with require_stable, as read_committed consumers do since
  KIP-447: starting from the offset before a pending transaction's would go back);
- a committed offset never comes from an aborted transaction (each transaction's commits
  carry its own metadata), in memory or in a replay of the log;
- the pending transactional offsets equal a replay of the log (what a reload gives), and
  OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT exactly for them.

Replay one seed or soak many (``make soak`` runs this too)::

    .venv/bin/python -m riverbed.testing.group_sim --seed 12 -v
    .venv/bin/python -m riverbed.testing.group_sim --seeds 10000

A failure raises ``SimulationFailure`` whose message starts with the replay command.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from riverbed.coordinator.consumer_membership import StaticTopics
from riverbed.coordinator.group import Reply
from riverbed.coordinator.shard import GroupConfig, GroupShard, Write
from riverbed.protocol.errors import ErrorCode
from riverbed.testing.group_harness import (
    LogEntry,
    TxnMarker,
    commit_req,
    group_state,
    heartbeat_req,
    offset_delete_req,
    pending_state,
    replay_into,
    replay_log,
    txn_commit_req,
    write_entries,
)

E = ErrorCode
Record = tuple[bytes, bytes | None]
TOPICS = {"t": (uuid.UUID(int=1), 6), "u": (uuid.UUID(int=2), 4)}
#: Topic ``u`` gains partitions now and then, up to this many.
U_PARTITIONS_MAX = 8
NAMES = {tid: name for name, (tid, _n) in TOPICS.items()}
GROUPS = ("g0", "g1")
CLIENTS_PER_GROUP_MAX = 5
#: Rounds of the calm phase (every write commits, every consumer keeps up).
CALM_ROUNDS = 15
#: Time per calm round: the rounds outlast a session and a rebalance timeout, so that
#: crashed members are gone by the end.
CALM_STEP_MS = 500
#: A soak prints how far it got every this many seeds.
PROGRESS_EVERY = 1000
#: Rounds of the teardown (leave, then DeleteGroups until done).
TEARDOWN_ROUNDS = 20
CONFIG = GroupConfig(
    initial_rebalance_delay_ms=0,
    consumer_session_timeout_ms=3000,
    consumer_heartbeat_interval_ms=100,
    offsets_retention_ms=4000,
)
#: Errors of writes that never reached the log, as the shell reports them (append_error:
#: NOT_ENOUGH_REPLICAS is COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER NOT_COORDINATOR).
REFUSED = (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR)
RETRIABLE = (
    E.UNRELEASED_INSTANCE_ID,  # a static instance whose previous member is still in
    E.REQUEST_TIMED_OUT,
    E.NOT_ENOUGH_REPLICAS,
    E.NOT_COORDINATOR,
    E.COORDINATOR_NOT_AVAILABLE,
)
Tp = tuple[str, int]
#: The metadata of the admin commits (offset resets of an empty group).
ADMIN = "admin reset"
#: A consumer's position in a partition whose committed offset is unstable (KIP-447).
UNKNOWN_POSITION = -1
#: Producer ids of the consumers' transactions: this plus the consumer's number.
PRODUCER_ID_BASE = 5000


class SimulationFailure(AssertionError):
    pass


class InvariantError(AssertionError):
    pass


@dataclass(frozen=True)
class SimParams:
    seed: int
    steps: int = 200
    verbose: bool = False

    def replay_command(self) -> str:
        return (
            f".venv/bin/python -m riverbed.testing.group_sim --seed {self.seed} "
            f"--steps {self.steps} -v"
        )


@dataclass
class Client:
    """A KIP-848 consumer: what it was told, what it consumes, where it is."""

    name: str
    group: str
    member: str
    topics: list[str]
    epoch: int = 0
    told: set[Tp] = field(default_factory=set)
    owned: set[Tp] = field(default_factory=set)
    positions: dict[Tp, int] = field(default_factory=dict)
    heartbeat_in_flight: bool = False
    #: group.instance.id of a static member (None: dynamic)
    instance: str | None = None
    #: fenced by the coordinator (its member is gone) and does not know it yet
    zombie: bool = False
    #: its transactional producer's id, and TxnOffsetCommits not answered yet
    producer_id: int = -1
    txn_outstanding: int = 0
    #: the next heartbeat sends every field: Kafka's consumer resets its HeartbeatState
    #: after a failed heartbeat (an error, a lost response, a coordinator gone)
    full: bool = False
    #: what its last heartbeat listed as owned (Kafka's SentFields.localAssignment)
    sent: tuple[frozenset[Tp], frozenset[Tp]] | None = None


def _tps(assignment: Any) -> set[Tp]:
    return {(NAMES[r.topic_id], p) for r in assignment.topic_partitions for p in r.partitions}


def _by_id(tps: set[Tp]) -> dict[uuid.UUID, set[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for name, p in tps:
        out.setdefault(TOPICS[name][0], set()).add(p)
    return out


class GroupSim:
    """One seed (see the module docstring)."""

    def __init__(self, params: SimParams) -> None:
        self.params = params
        self.rng = random.Random(params.seed)
        self.now = 1_000_000
        self.log: list[LogEntry] = []
        #: the committed records replayed as they commit: what a reload would give
        self.mirror = GroupShard(0, CONFIG, random.Random(0))
        self.shard = replay_log([], CONFIG, self.now)
        self.pending: list[Write] = []
        self.handlers: dict[int, Callable[[Any], None]] = {}
        self.clients: dict[str, Client] = {}
        self.floors: dict[tuple[str, Tp], int] = {}
        self.stats: Counter[str] = Counter()
        self.trace: deque[str] = deque(maxlen=40)
        self.topics = StaticTopics(dict(TOPICS))
        self._next_reply = 0
        self._names = 0
        #: producer id -> the number of its current transaction (its commits' metadata)
        self.txn_number: dict[int, int] = {}
        #: metadata of the transactions that ended with ABORT
        self.aborted: set[str] = set()
        #: producers that sent a TxnOffsetCommit in their current transaction
        self.txn_open: set[int] = set()
        #: token -> first offset of a write appended while it was still in flight (a
        #: marker followed it): it commits or is in doubt, never refused
        self.appended: dict[int, int] = {}

    def note(self, line: str) -> None:
        self.trace.append(f"t={self.now} {line}")
        if self.params.verbose:
            print(self.trace[-1])

    # ------------------------------------------------------------------ plumbing
    def send(self, op: Callable[[Reply], None], handle: Callable[[Any], None], v: int) -> None:
        self._next_reply += 1
        reply = Reply(self._next_reply, v)
        self.handlers[reply.id] = handle
        op(reply)
        self.pump()

    def pump(self, refuse_writes: bool = False) -> None:
        """Deliver the shard's answers and collect its writes (or refuse them, as the
        shell does for a shard it is about to reload)."""
        while True:
            out, writes = self.shard.take_output()
            if not out and not writes:
                return
            for write in writes:
                if refuse_writes:
                    self.shard.complete_write(write.token, E.NOT_COORDINATOR)
                else:
                    self.pending.append(write)
            for reply, response in out:
                handle = self.handlers.pop(reply.id, None)
                if handle is None:
                    raise InvariantError(f"reply {reply.id} answered twice or unknown")
                handle(response)

    def append(self, entries: list[LogEntry]) -> int:
        """Append to the model log (and its replay); returns the first entry's offset."""
        base = len(self.log)
        self.log.extend(entries)
        replay_into(self.mirror, entries, base)
        return base

    # ------------------------------------------------------------------ writes
    def resolve_write(self) -> None:
        """Complete one write in flight (any of them: out of order)."""
        write = self.pending.pop(self.rng.randrange(len(self.pending)))
        roll = self.rng.random()
        appended = self.appended.pop(write.token, None)
        if appended is not None and 0.7 <= roll < 0.93:
            roll = 0.0  # appended before a marker: it commits (or is in doubt)
        if roll < 0.7:
            base = self.append(write_entries(write)) if appended is None else appended
            self.stats["write committed"] += 1
            self.note(f"write {write.token} committed ({len(write.records)} records)")
            self.shard.complete_write(write.token, E.NONE, base)
        elif roll < 0.93:
            code = self.rng.choice(REFUSED)
            self.stats[f"write failed {code.name}"] += 1
            self.note(f"write {write.token} failed {code.name}")
            self.shard.complete_write(write.token, code)
        else:
            if appended is None:
                self.append(write_entries(write))
            self.stats["write in doubt"] += 1
            self.note(f"write {write.token} in doubt: answered REQUEST_TIMED_OUT, reloading")
            self.shard.complete_write(write.token, E.REQUEST_TIMED_OUT)
            self.pump(refuse_writes=True)  # as the shell: nothing written on that state
            self.move_coordinator("in doubt")
            return
        self.pump()

    def move_coordinator(self, why: str) -> None:
        """A new coordinator loads the log; each write in flight made it or not."""
        for write in self.pending:
            if write.token in self.appended:
                self.stats["fail-over write kept (before a marker)"] += 1
            elif self.rng.random() < 0.5:
                self.append(write_entries(write))
                self.stats["fail-over write kept"] += 1
            else:
                self.stats["fail-over write lost"] += 1
        self.pending.clear()
        self.appended.clear()
        self.handlers.clear()  # the old coordinator's answers never arrive
        for c in self.clients.values():
            c.full = c.full or c.heartbeat_in_flight  # its request failed
            c.heartbeat_in_flight = False
            c.txn_outstanding = 0
        self.shard = replay_log(self.log, CONFIG, self.now)
        self.stats[f"coordinator moved ({why})"] += 1
        self.note(f"coordinator moved ({why}), {len(self.log)} records")

    # ------------------------------------------------------------------ consumers
    def new_client(self) -> None:
        group = self.rng.choice(GROUPS)
        if sum(c.group == group for c in self.clients.values()) >= CLIENTS_PER_GROUP_MAX:
            return
        self._names += 1
        member = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        topics = ["t"] if self.rng.random() < 0.7 else ["t", "u"]
        c = Client(f"c{self._names}", group, member, topics)
        c.producer_id = PRODUCER_ID_BASE + self._names
        if self.rng.random() < 0.3:
            c.instance = f"i{self._names}"
        self.clients[c.name] = c
        self.note(f"{c.name} joins {group} ({member[:8]}) subscribing {topics}")
        self.heartbeat(c)

    def heartbeat(self, c: Client, leave: bool = False) -> None:
        if c.heartbeat_in_flight:
            return  # one heartbeat at a time, as the consumer sends them
        if self.shard.busy(c.group):
            self.stats["queued behind a write"] += 1
        full = c.full and c.epoch > 0 and not leave
        if full:
            self.stats["full heartbeat"] += 1
        # as Kafka's consumer: the owned partitions when they changed since it last listed
        # them (a reconciled assignment) or in a full heartbeat; others list them anyway
        local = (frozenset(c.owned), frozenset(c.told))
        redundant = self.rng.random() >= 0.2
        listed = _by_id(c.owned) if full or local != c.sent or redundant else None
        req = heartbeat_req(
            c.member,
            -1 if leave else c.epoch,
            group=c.group,
            topics=c.topics if c.epoch == 0 or full else None,
            owned=None if c.epoch == 0 else listed,
            instance=c.instance if c.epoch == 0 or leave or full else None,
            full=full,
        )
        c.full, c.sent = False, (local if listed is not None else c.sent)
        lost = not leave and self.rng.random() < 0.08
        c.heartbeat_in_flight = not leave
        shard, now = self.shard, self.now

        def handle(resp: Any) -> None:
            c.heartbeat_in_flight = False
            self.stats[f"heartbeat {E(resp.error_code).name}"] += 1
            if leave or lost:
                if lost:
                    self.stats["heartbeat response lost"] += 1
                    c.full = True  # the request timed out: the next one sends every field
                return
            self.on_heartbeat(c, resp)

        self.send(
            lambda r: shard.consumer_group_heartbeat(r, req, c.name, "/sim", self.topics, now),
            handle,
            1,
        )

    def on_heartbeat(self, c: Client, resp: Any) -> None:
        code = E(resp.error_code)
        c.full = code != E.NONE  # any error: the next heartbeat sends every field
        if code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID, E.GROUP_ID_NOT_FOUND):
            self.note(f"{c.name} fenced ({code.name}): drops {sorted(c.owned)}, rejoins")
            c.epoch, c.told, c.owned, c.positions, c.zombie = 0, set(), set(), {}, False
            return
        if code == E.REQUEST_TIMED_OUT:  # what Kafka never answers a heartbeat
            raise InvariantError(f"{c.name}: heartbeat answered REQUEST_TIMED_OUT (fatal)")
        if code in RETRIABLE:
            return
        if code != E.NONE:
            raise InvariantError(f"{c.name}: heartbeat answered {code.name}")
        if c.epoch == 0 and c.instance is not None and resp.member_epoch > 1:
            self.stats["static member took its place back"] += 1
        c.epoch = resp.member_epoch
        if resp.assignment is None:
            return
        told = _tps(resp.assignment)
        self.note(f"{c.name} told {sorted(told)} in {c.group} at epoch {c.epoch}")
        for tp in sorted(told - c.owned):  # new partitions are used at once
            c.positions[tp] = self.start_position(c.group, tp)
        c.owned |= told
        c.told = told

    def restart(self, c: Client) -> None:
        """A static member's process restarts: it commits, leaves for now (epoch -2:
        its partitions wait for it) and comes back with a new member id and the same
        group.instance.id, which takes the old member's place and assignment."""
        if c.instance is None or c.epoch <= 0 or c.heartbeat_in_flight:
            return
        self.commit(c, set(c.owned))
        req = heartbeat_req(c.member, -2, group=c.group, instance=c.instance)
        shard, now = self.shard, self.now

        def handle(resp: Any) -> None:
            self.stats[f"static leave {E(resp.error_code).name}"] += 1

        self.send(
            lambda r: shard.consumer_group_heartbeat(r, req, c.name, "/sim", self.topics, now),
            handle,
            1,
        )
        old = c.member
        c.member = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        c.epoch, c.told, c.owned, c.positions, c.zombie = 0, set(), set(), {}, False
        self.note(f"{c.name} restarts: {old[:8]} -> {c.member[:8]} ({c.instance})")

    def grow_topic(self) -> None:
        tid, n = self.topics.topics["u"]
        if n < U_PARTITIONS_MAX:
            self.topics.topics["u"] = (tid, n + 1)
            self.stats["topic grown"] += 1
            self.note(f"topic u has {n + 1} partitions")

    def committed(self, group: str, tp: Tp) -> int:
        got = self.shard.offset_fetch(group, [(tp[0], [tp[1]])])
        return int(got.topics[0].partitions[0].committed_offset)

    def start_position(self, group: str, tp: Tp) -> int:
        """Where a read_committed consumer starts a new partition (KIP-447): its stable
        committed offset; UNKNOWN_POSITION while a transaction's offsets are pending
        (UNSTABLE_OFFSET_COMMIT: it asks again before using the partition)."""
        got = self.shard.offset_fetch(group, [(tp[0], [tp[1]])], require_stable=True)
        part = got.topics[0].partitions[0]
        if part.error_code == E.UNSTABLE_OFFSET_COMMIT:
            self.stats["position unstable"] += 1
            return UNKNOWN_POSITION
        return max(int(part.committed_offset), 0)

    def positioned(self, c: Client, tps: set[Tp]) -> set[Tp]:
        """The partitions of ``tps`` whose position the consumer knows (asked again)."""
        for tp in tps:
            if c.positions[tp] == UNKNOWN_POSITION:
                c.positions[tp] = self.start_position(c.group, tp)
        return {tp for tp in tps if c.positions[tp] != UNKNOWN_POSITION}

    def revoke(self, c: Client) -> None:
        """The consumer catches up: commits what it gives up, then drops it."""
        gone = c.owned - c.told
        if not gone:
            return
        self.commit(c, gone)
        c.owned -= gone
        for tp in gone:
            c.positions.pop(tp, None)
        self.note(f"{c.name} revoked {sorted(gone)}")

    def consume(self, c: Client) -> None:
        for tp in self.positioned(c, c.owned):
            c.positions[tp] += self.rng.randrange(0, 30)
        if c.owned and self.rng.random() < 0.6:
            self.commit(c, set(c.owned))

    def commit(self, c: Client, tps: set[Tp]) -> None:
        tps = self.positioned(c, tps)
        if c.epoch <= 0 or not tps:
            return
        offsets = {tp: c.positions[tp] for tp in tps}
        self.note(f"{c.name} commits {sorted(offsets.items())} to {c.group} at epoch {c.epoch}")
        req = commit_req(c.member, c.epoch, offsets, group=c.group)
        shard, now = self.shard, self.now

        def handle(resp: Any) -> None:
            for t in resp.topics:
                for p in t.partitions:
                    self.stats[f"commit {E(p.error_code).name}"] += 1

        self.send(lambda r: shard.offset_commit(r, req, now), handle, 9)

    # ------------------------------------------------------------------ transactions
    def txn_tag(self, pid: int) -> str:
        return f"txn {pid}.{self.txn_number.setdefault(pid, 0)}"

    def txn_commit(self, c: Client) -> None:
        """A consume-transform-produce step: the positions go in the transaction."""
        owned = self.positioned(c, c.owned)
        if c.epoch <= 0 or not owned:
            return
        pid = c.producer_id
        offsets = {tp: c.positions[tp] for tp in owned}
        version = self.rng.choice([0, 3, 3, 4, 4, 4])
        tag = self.txn_tag(pid)
        req = txn_commit_req(pid, offsets, c.group, c.member, c.epoch, c.instance, metadata=tag)
        self.note(f"{c.name} txn-commits {sorted(offsets.items())} ({tag}, v{version})")
        shard, now = self.shard, self.now
        c.txn_outstanding += 1
        self.txn_open.add(pid)

        def handle(resp: Any) -> None:
            c.txn_outstanding -= 1
            for t in resp.topics:
                for p in t.partitions:
                    self.stats[f"txn commit v{min(version, 3)}+ {E(p.error_code).name}"] += 1

        self.send(lambda r: shard.txn_offset_commit(r, req, now), handle, version)

    def end_txn(self, c: Client, timed_out: bool = False, commit_rate: float = 0.6) -> None:
        """The producer's marker: once its commits are answered, or (the transaction
        coordinator aborting a timed-out transaction) while their writes are in flight:
        those were appended before the marker."""
        pid = c.producer_id
        if pid not in self.txn_open:
            return  # nothing to end (the transaction coordinator sends no marker)
        in_flight = [w for w in self.pending if w.producer_id == pid]
        if c.txn_outstanding and not (timed_out and c.txn_outstanding == len(in_flight)):
            return  # a request still queued would land after the marker: wait for it
        for w in in_flight:
            if w.token not in self.appended:
                self.appended[w.token] = self.append(write_entries(w))
                self.stats["txn write appended before its marker"] += 1
        commit = not timed_out and self.rng.random() < commit_rate
        self.txn_open.discard(pid)
        tag = self.txn_tag(pid)
        if not commit:
            self.aborted.add(tag)
        self.txn_number[pid] += 1
        self.append([TxnMarker(pid, commit)])
        self.note(f"marker {'COMMIT' if commit else 'ABORT'} of {tag}")
        self.stats[f"marker {'commit' if commit else 'abort'}"] += 1
        self.shard.apply_marker(pid, commit)
        self.pump()
        for gid in GROUPS:
            holder: Any = self.mirror.consumer_groups.get(gid) or self.mirror.groups.get(gid)
            made = sum(om.metadata == tag for om in (holder.offsets if holder else {}).values())
            self.stats["txn offsets committed by a marker"] += made

    # ------------------------------------------------------------------ admin
    def admin(self) -> None:
        group = self.rng.choice(GROUPS)
        roll = self.rng.random()
        shard, now = self.shard, self.now
        if roll < 0.35:
            delete = offset_delete_req(group, [("u", p) for p in range(2)])

            def deleted(resp: Any) -> None:
                self.stats[f"offset delete {E(resp.error_code).name}"] += 1

            self.send(lambda r: shard.offset_delete(r, delete), deleted, 0)
        elif roll < 0.6:
            self.delete_group(group)
        else:
            tp = ("t", self.rng.randrange(6))
            value = self.rng.randrange(0, 200)
            req = commit_req("", -1, {tp: value}, group=group, metadata=ADMIN)
            self.note(f"admin commits {tp}={value} to {group}")

            def reset(resp: Any) -> None:
                code = E(resp.topics[0].partitions[0].error_code)
                self.stats[f"admin commit {code.name}"] += 1

            self.send(lambda r: shard.offset_commit(r, req, now), reset, 9)

    def delete_group(self, group: str) -> None:
        shard, now = self.shard, self.now

        def gone(code: Any) -> None:
            self.stats[f"delete group {E(code).name}"] += 1

        self.send(lambda r: shard.delete_group(r, group, now), gone, 2)

    # ------------------------------------------------------------------ steps
    def step(self) -> None:
        live = list(self.clients.values())
        roll = self.rng.random()
        if roll < 0.07:
            self.new_client()
        elif roll < 0.37 and live:
            self.heartbeat(self.rng.choice(live))
        elif roll < 0.40 and live:
            c = self.rng.choice(live)
            self.txn_commit(c)
            if self.rng.random() < 0.15:  # aborted by its timeout while being written
                self.end_txn(c, timed_out=True)
        elif roll < 0.42 and live:
            open_txns = [c for c in live if c.producer_id in self.txn_open] or live
            self.end_txn(self.rng.choice(open_txns), timed_out=self.rng.random() < 0.3)
        elif roll < 0.52 and live:
            self.revoke(self.rng.choice(live))
        elif roll < 0.62 and live:
            self.consume(self.rng.choice(live))
        elif roll < 0.645 and live:
            c = self.rng.choice(live)
            del self.clients[c.name]
            self.note(f"{c.name} leaves")
            self.revoke(c)
            self.heartbeat(c, leave=True)
        elif roll < 0.66 and live:
            c = self.rng.choice(live)
            del self.clients[c.name]  # crashed: its session runs out
            self.note(f"{c.name} crashes")
        elif roll < 0.685 and live:
            self.restart(self.rng.choice(live))
        elif roll < 0.688:
            self.grow_topic()
        elif roll < 0.7:
            self.admin()
        elif roll < 0.715:
            self.move_coordinator("fail-over")
        elif roll < 0.9 and self.pending:
            self.resolve_write()
        else:
            self.now += self.rng.choice([5, 50, 400, 1200])
            self.shard.tick(self.now)
            if self.rng.random() < 0.3:
                self.stats["offsets expired"] += self.shard.expire_offsets(self.now)
            self.pump()

    def run(self) -> None:
        for _ in range(self.params.steps):
            self.step()
            self.check()
        self.calm()
        self.check()
        self.teardown()

    def teardown(self) -> None:
        """Everyone leaves and an operator deletes both groups while writes still fail
        now and then: in the end nothing of them is left, in memory or in the records."""
        for c in list(self.clients.values()):
            del self.clients[c.name]
            self.end_txn(c, timed_out=True)
            self.revoke(c)
            c.heartbeat_in_flight = False
            self.heartbeat(c, leave=True)
        for _ in range(TEARDOWN_ROUNDS):
            while self.pending:
                self.resolve_write()
            self.check()
            self.now += 1000  # sessions of members whose leave failed run out
            self.shard.tick(self.now)
            self.pump()
            for gid in GROUPS:
                if gid in self.shard.consumer_groups or gid in self.shard.groups:
                    self.delete_group(gid)
            self.check()
        for view in (self.shard, self.mirror):
            left = [g for g in GROUPS if g in view.consumer_groups or g in view.groups]
            if left:
                raise InvariantError(f"groups {left} survived their deletion")
            if view.pending_count():
                raise InvariantError(f"pending offsets survived: {pending_state(view)}")

    def calm(self) -> None:
        """Writes commit again and everyone keeps up: the groups settle."""
        for _ in range(CALM_ROUNDS):
            while self.pending:
                write = self.pending.pop(0)
                base = self.appended.pop(write.token, None)
                if base is None:
                    base = self.append(write_entries(write))
                self.shard.complete_write(write.token, E.NONE, base)
                self.pump()
            self.check()
            for c in list(self.clients.values()):
                self.revoke(c)
                self.heartbeat(c)
                if c.producer_id in self.txn_open:
                    self.end_txn(c, commit_rate=0.8)
            self.check()
            self.now += CALM_STEP_MS
            self.shard.tick(self.now)
            self.pump()
        for gid, group in self.shard.consumer_groups.items():
            self.check_settled(gid, group)

    def check_settled(self, gid: str, group: Any) -> None:
        """After the calm phase a group of live consumers is Stable, and they consume
        every partition they subscribe to, each exactly what it was told."""
        live = {c.member: c for c in self.clients.values() if c.group == gid}
        if set(group.members) != set(live):
            self.stats["settled with members gone"] += 1
            return
        self.stats[f"settled {group.state.value}"] += 1
        if group.state.value not in ("Stable", "Empty"):
            raise InvariantError(f"group {gid} did not settle: {group.state.value}")
        wanted = {
            (name, p)
            for c in live.values()
            for name in c.topics
            for p in range(self.topics.topics[name][1])
        }
        used: set[Tp] = set()
        for c in live.values():
            if c.owned != c.told:
                raise InvariantError(f"{c.name} settled owning {c.owned}, told {c.told}")
            used |= c.owned
        if used != wanted:
            raise InvariantError(f"group {gid} settled consuming {used}, not {wanted}")

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        for group in self.shard.consumer_groups.values():
            group.check_invariants()
            self.stats.update(f"seen {m.state.name}" for m in group.members.values())
        self.check_memory_is_the_records()
        self.check_consumers()
        self.check_offsets()
        self.check_transactions()

    def check_memory_is_the_records(self) -> None:
        memory, records = group_state(self.shard), group_state(self.mirror)
        for gid in set(memory) | set(records):
            if self.shard.busy(gid):
                continue  # its write is in flight: memory is ahead of the log for now
            if memory.get(gid) != records.get(gid):
                raise InvariantError(
                    f"group {gid}: memory differs from its committed records\n"
                    f"  memory:  {memory.get(gid)}\n  records: {records.get(gid)}"
                )

    def check_consumers(self) -> None:
        users: dict[tuple[str, Tp], str] = {}
        for c in self.clients.values():
            group = self.mirror.consumer_groups.get(c.group)
            member = group.members.get(c.member) if group is not None else None
            if c.owned and member is None:
                c.zombie = True  # fenced by a timer; it learns it on its next heartbeat
                self.stats["consumer fenced by a timer"] += 1
            if c.zombie:
                continue
            if member is not None and c.owned:
                held = {
                    (NAMES[t], p)
                    for a in (member.assigned, member.pending_revocation)
                    for t, ps in a.items()
                    for p in ps
                }
                if not c.owned <= held:
                    raise InvariantError(
                        f"{c.name} consumes {sorted(c.owned - held)} that no committed "
                        f"record gives member {c.member[:8]} (it holds {sorted(held)})"
                    )
            for tp in c.owned:
                other = users.get((c.group, tp))
                if other is not None:
                    raise InvariantError(f"{tp} of {c.group} consumed by {other} and {c.name}")
                users[(c.group, tp)] = c.name

    def check_offsets(self) -> None:
        seen = set()
        for gid in GROUPS:
            holder: Any = self.mirror.consumer_groups.get(gid) or self.mirror.groups.get(gid)
            offsets = holder.offsets if holder is not None else {}
            for tp, om in offsets.items():
                key = (gid, tp)
                seen.add(key)
                floor = self.floors.get(key, -1)
                # an operator's reset of an empty group may go back (marked by its metadata)
                if om.offset < floor and om.metadata != ADMIN:
                    raise InvariantError(
                        f"committed offset of {tp} in {gid} went back from {floor} to {om.offset}"
                    )
                self.floors[key] = om.offset
        for key in list(self.floors):
            if key not in seen:
                del self.floors[key]  # deleted or expired: a new commit may start lower

    def check_transactions(self) -> None:
        """No committed offset of an aborted transaction; pending offsets are what the
        log says, and exactly they are unstable to OffsetFetch(require_stable)."""
        for view in (self.shard, self.mirror):
            for gid in GROUPS:
                holder: Any = view.consumer_groups.get(gid) or view.groups.get(gid)
                for tp, om in (holder.offsets if holder is not None else {}).items():
                    if om.metadata in self.aborted:
                        raise InvariantError(
                            f"{gid} {tp} committed {om.offset} of an aborted transaction "
                            f"({om.metadata})"
                        )

        def settled(state: dict[int, dict[tuple[str, str, int], Any]]) -> dict[Any, Any]:
            return {
                (pid, key): om
                for pid, offsets in state.items()
                for key, om in offsets.items()
                if not self.shard.busy(key[0])
            }

        memory, records = settled(pending_state(self.shard)), settled(pending_state(self.mirror))
        if memory != records:
            raise InvariantError(
                f"pending offsets differ from the log\n  memory:  {memory}\n  records: {records}"
            )
        self.stats["pending offsets seen"] += len(records)
        for gid in GROUPS:
            if self.shard.busy(gid):
                continue
            parts = list(range(TOPICS["t"][1]))
            got = self.shard.offset_fetch(gid, [("t", parts)], require_stable=True)
            unstable = {
                ("t", p.partition_index)
                for t in got.topics
                for p in t.partitions
                if p.error_code == E.UNSTABLE_OFFSET_COMMIT
            }
            wanted = {(k[1], k[2]) for _pid, k in records if k[0] == gid and k[1] == "t"}
            if unstable != wanted:
                raise InvariantError(f"{gid}: unstable {sorted(unstable)}, pending {wanted}")

    def describe(self) -> str:
        lines = []
        for gid, g in self.shard.consumer_groups.items():
            lines.append(f"{gid}: epoch {g.group_epoch}/{g.assignment_epoch} {g.state.value}")
            for m in g.members.values():
                lines.append(
                    f"  {m.member_id[:8]} e{m.member_epoch} {m.state.name} "
                    f"assigned={dict(m.assigned)} revoking={dict(m.pending_revocation)}"
                )
        for c in self.clients.values():
            lines.append(
                f"{c.name} {c.group} {c.member[:8]} e{c.epoch} owned={sorted(c.owned)} "
                f"told={sorted(c.told)} zombie={c.zombie}"
            )
        return "\n".join(lines)


def run_seed(params: SimParams) -> GroupSim:
    sim = GroupSim(params)
    try:
        sim.run()
    except AssertionError as err:
        trace = "\n".join(sim.trace)
        raise SimulationFailure(
            f"replay: {params.replay_command()}\n{err}\n{sim.describe()}\nlast events:\n{trace}"
        ) from err
    return sim


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, help="run one seed")
    ap.add_argument("--seeds", type=int, default=100, help="run seeds START..START+N-1")
    ap.add_argument("--start", type=int, default=0, help="the first seed of --seeds")
    ap.add_argument("--steps", type=int, default=SimParams.steps)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        seeds = list(range(args.start, args.start + args.seeds))
    failed, stats = 0, Counter[str]()
    started = time.monotonic()
    for seed in seeds:
        params = SimParams(seed, args.steps, verbose=args.verbose)
        try:
            stats.update(run_seed(params).stats)
        except SimulationFailure as err:
            failed += 1
            print(f"FAILED seed {seed}:\n{err}\n", file=sys.stderr, flush=True)
        done = seed - seeds[0] + 1
        if done % PROGRESS_EVERY == 0 and done < len(seeds):
            took = time.monotonic() - started
            print(f"{done - failed}/{done} seeds passed so far ({took:.0f} s)", flush=True)
    took = time.monotonic() - started
    print(f"{len(seeds) - failed}/{len(seeds)} seeds passed in {took:.1f} s")
    if args.verbose or len(seeds) > 1:
        for key, count in sorted(stats.items()):
            print(f"  {key}: {count}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
