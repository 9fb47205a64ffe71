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

The parts: `group_sim_world` (topics, configuration, the consumers' state, the plumbing
to the shard and the model log), `group_sim_client` (what the consumers do, heartbeats as
Kafka's consumer sends them), `group_sim_checks` (the invariants and the settling
check); this module drives the writes, the coordinator moves, the steps and the phases.

Replay one seed or soak many (``make soak`` runs this too)::

    .venv/bin/python -m riverbed.testing.group_sim --seed 12 -v
    .venv/bin/python -m riverbed.testing.group_sim --seeds 10000

A failure raises ``SimulationFailure`` whose message starts with the replay command.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from riverbed.testing.group_harness import (
    commit_req,
    offset_delete_req,
    pending_state,
    replay_log,
    write_entries,
)
from riverbed.testing.group_sim_checks import Checks
from riverbed.testing.group_sim_client import ClientActions
from riverbed.testing.group_sim_world import (
    ADMIN,
    CONFIG,
    GROUPS,
    REFUSED,
    U_PARTITIONS_MAX,
    E,
    InvariantError,
    SimParams,
)
from riverbed.testing.sim_seeds import add_seed_options, chosen_seeds

__all__ = ["GroupSim", "SimParams", "SimulationFailure", "main", "run_seed"]

#: Rounds of the calm phase (every write commits, every consumer keeps up).
CALM_ROUNDS = 15
#: Time per calm round: the rounds outlast a session and a rebalance timeout, so that
#: crashed members are gone by the end.
CALM_STEP_MS = 500
#: A soak prints how far it got every this many seeds.
PROGRESS_EVERY = 1000
#: Rounds of the teardown (leave, then DeleteGroups until done).
TEARDOWN_ROUNDS = 20


class SimulationFailure(AssertionError):
    pass


class GroupSim(ClientActions, Checks):
    """One seed (see the module docstring)."""

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

    def grow_topic(self) -> None:
        tid, n = self.topics.topics["u"]
        if n < U_PARTITIONS_MAX:
            self.topics.topics["u"] = (tid, n + 1)
            self.stats["topic grown"] += 1
            self.note(f"topic u has {n + 1} partitions")

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
    add_seed_options(ap)
    ap.add_argument("--steps", type=int, default=SimParams.steps)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = chosen_seeds(args)
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
