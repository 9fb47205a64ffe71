"""The group simulation's model KIP-848 consumers: they join, heartbeat as Kafka's
consumer does (every field again after a failed heartbeat), consume, commit, revoke,
restart as static members and commit inside transactions. See
`riverbed.testing.group_sim`."""

from __future__ import annotations

import uuid
from typing import Any

from riverbed.testing.group_harness import (
    TxnMarker,
    commit_req,
    heartbeat_req,
    txn_commit_req,
    write_entries,
)
from riverbed.testing.group_sim_world import (
    CLIENTS_PER_GROUP_MAX,
    GROUPS,
    NAMES,
    PRODUCER_ID_BASE,
    RETRIABLE,
    TOPICS,
    UNKNOWN_POSITION,
    Client,
    E,
    InvariantError,
    SimWorld,
    Tp,
)


def _tps(assignment: Any) -> set[Tp]:
    return {(NAMES[r.topic_id], p) for r in assignment.topic_partitions for p in r.partitions}


def _by_id(tps: set[Tp]) -> dict[uuid.UUID, set[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for name, p in tps:
        out.setdefault(TOPICS[name][0], set()).add(p)
    return out


class ClientActions(SimWorld):
    """What the model consumers do (one method per action of a step)."""

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
