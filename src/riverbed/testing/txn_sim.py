"""Seeded simulation of the transaction coordinator, partition leaders and markers.

One ``random.Random(seed)`` drives transactional clients (InitProducerId, AddPartitionsToTxn,
appends, EndTxn v3 or v5, answers lost and retried, clients that die mid-transaction),
the ``__transaction_state`` writes (committed, failed, or in doubt at a crash), the
coordinator's crashes and moves (a reload at the next coordinator epoch from the committed
records only), partition leadership moves, partition leader crashes (the log keeps its
flushed prefix: a batch or a marker caught between its write and its flush is lost and
sent again; the producer state is rebuilt from the newest producer snapshot, in Kafka's
file format, and a replay of the batches after it, and must equal the state after the
last flushed write), and the WriteTxnMarkers traffic: one FIFO
connection per (coordinator epoch, broker) as TCP gives, connections dropped (a request
lost or processed with its answer lost), deliveries reordered across connections, and the
requests of a deposed coordinator delivered late. The partition leaders are riverbed's
own partition code (`riverbed.testing.txn_sim_leader.TxnLeader`: ``ProducerStateTable``
validating and applying real transactional batches and markers, its aborted
transactions as the ``.txnindex``): a marker from an older coordinator epoch is
TRANSACTION_COORDINATOR_FENCED, one below the producer's epoch INVALID_PRODUCER_EPOCH,
an append with an older producer epoch is refused.

Checked after every step: the coordinator's memory equals a replay of its committed
records; a transaction's records are all committed or all aborted on every partition (as
the log's markers decide them), the way its client was told; the last stable offset
never passes a record of an open transaction; a read_committed read (the txn index up to
the LSO) returns every committed record below the LSO and nothing else; the markers
applied to a partition for a producer never go back in coordinator epoch (a fenced
coordinator's marker is never applied); after a reload the state equals the state
before. Then a calm phase (no faults, every client stopped, time past every
timeout) must close every transaction on every partition and complete it at the
coordinator. A failure raises `SimulationFailure` whose message starts with the replay
command::

    .venv/bin/python -m riverbed.testing.txn_sim --seed 12 -v
    .venv/bin/python -m riverbed.testing.txn_sim --seeds 2000
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter, deque
from dataclasses import dataclass, field

from riverbed.protocol.errors import ErrorCode
from riverbed.transaction.api import Answer, PartitionsResult, Step, TxnConfig, TxnResult, TxnWrite
from riverbed.transaction.coordinator import TransactionCoordinator
from riverbed.transaction.markers import BrokerMarkers, TxnMarker
from riverbed.transaction.records import TopicPartition, TxnMetadata, replay_all

from .sim_seeds import add_seed_options, chosen_seeds
from .txn_sim_leader import LeaderState, TxnLeader

E = ErrorCode
TIDS = ("app-0", "app-1", "app-2", "app-3")
TOPIC_PARTITIONS: tuple[TopicPartition, ...] = tuple(("t", p) for p in range(4))
BROKERS = 3
TXN_PARTITIONS = 2  # __transaction_state partitions ("app-0", "app-2" in 0; the others in 1)
CHAOS_STEPS = 400
CALM_STEPS_MAX = 200
TXN_TIMEOUT_MS = 20_000
#: Chance that a partition leader crashes between a write and its flush (the write lost).
LEADER_CRASH_IN_WRITE = 0.03
TxnId = tuple[str, int]  # (transactional id, the client's transaction number)


class SimulationFailure(AssertionError):
    pass


class Allocator:
    def __init__(self) -> None:
        self.next_id = 5000

    def allocate(self) -> int | None:
        self.next_id += 1
        return self.next_id


@dataclass
class _Client:
    tid: str
    pid: int = -1
    epoch: int = -1
    txn_no: int = 0
    phase: str = "init"  # init, begin, end, dead
    parts: frozenset[TopicPartition] = frozenset()
    commit: bool = True
    version: int = 3
    waiting: int | None = None  # the request id of the request in flight
    zombie: bool = False  # an old incarnation still running after its restart


@dataclass
class _Conn:
    coordinator_epoch: int
    broker: int
    queue: deque[BrokerMarkers] = field(default_factory=deque)


class TxnSim:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 1_000_000
        self.config = TxnConfig(num_partitions=TXN_PARTITIONS, abort_cleanup_interval_ms=5_000)
        self.coord = TransactionCoordinator(self.config, Allocator())
        #: per __transaction_state partition: its coordinator epoch and committed records
        self.epochs = dict.fromkeys(range(TXN_PARTITIONS), 1)
        self.logs: dict[int, list[tuple[bytes, bytes | None]]] = {
            p: [] for p in range(TXN_PARTITIONS)
        }
        self.generation = 0  # the coordinator process: a crash starts a new one
        self.writes: list[TxnWrite] = []
        self.partitions = {tp: TxnLeader(tp) for tp in TOPIC_PARTITIONS}
        self.leaders = {tp: i % BROKERS for i, tp in enumerate(TOPIC_PARTITIONS)}
        self.conns: dict[tuple[int, int], _Conn] = {}
        self.clients = [_Client(tid) for tid in TIDS]
        self.told: dict[TxnId, bool] = {}  # EndTxn answered NONE: the client's decision
        self.requests: dict[int, _Client] = {}
        self.next_rid = 0
        self.next_txn = 0
        self.stats: Counter[str] = Counter()
        for p in range(TXN_PARTITIONS):
            self.coord.begin_load(p, 1)
            self.coord.load(p, 1, [], self.now_ms)

    @property
    def replay_command(self) -> str:
        return f".venv/bin/python -m riverbed.testing.txn_sim --seed {self.seed} -v"

    def fail(self, why: str) -> None:
        raise SimulationFailure(f"{self.replay_command}\n{why}")

    # ------------------------------------------------------------------ plumbing
    def take(self, step: Step) -> None:
        self.writes += step.writes
        for a in step.answers:
            self._answer(a)

    def _rid(self, client: _Client) -> int:
        self.next_rid += 1
        self.requests[self.next_rid] = client
        client.waiting = self.next_rid
        return self.next_rid

    def _answer(self, a: Answer) -> None:
        client = self.requests.pop(a.request_id, None)
        if client is None or client.waiting != a.request_id:
            return
        client.waiting = None
        if self.rng.random() < 0.05:
            self.stats["answer lost"] += 1
            return  # the client times out and sends it again
        r = a.result
        code = (
            r.error if isinstance(r, TxnResult) else max((e for _, e in r.errors), default=E.NONE)
        )
        self.stats[f"{client.phase} {code.name}"] += 1
        if client.phase == "init":
            self._on_init(client, r)
        elif client.phase == "begin":
            self._on_add(client, code)
        elif client.phase == "end" and isinstance(r, TxnResult):
            self._on_end(client, r)

    def _on_init(self, c: _Client, r: PartitionsResult | TxnResult) -> None:
        if isinstance(r, TxnResult) and r.error is E.NONE:
            c.pid, c.epoch, c.phase = r.producer_id, r.producer_epoch, "begin"
            c.parts = frozenset()

    def _on_add(self, c: _Client, code: ErrorCode) -> None:
        if code is E.NONE:
            txn = (c.tid, c.txn_no)
            for tp in sorted(c.parts):
                if self._append(tp, c.pid, c.epoch, txn) is not E.NONE:
                    self.stats["append fenced"] += 1
                    self._fenced(c)
                    return
            c.phase = "end"
        else:
            self._on_error(c, code)

    def _append(self, tp: TopicPartition, pid: int, epoch: int, txn: TxnId) -> ErrorCode:
        """The client's batch, acknowledged once flushed; a leader that crashes between
        the write and the flush loses it, and the client's retry appends it again."""
        leader = self.partitions[tp]
        before = leader.state()
        code = leader.append(pid, epoch, txn)
        if code is E.NONE and self.rng.random() < LEADER_CRASH_IN_WRITE:
            self.crash_leader(tp, before)
            code = leader.append(pid, epoch, txn)
        leader.flush()
        return code

    def crash_leader(self, tp: TopicPartition, before: LeaderState) -> None:
        """A partition leader crashes and recovers from its flushed log and producer
        snapshot (`TxnLeader.crash`): its producer state must be what it was after its
        last flushed write (`before`)."""
        lost = self.partitions[tp].crash()
        self.stats["leader crashes"] += 1
        self.stats["leader crash entries lost"] += lost
        after = self.partitions[tp].state()
        if after != before:
            self.fail(f"{tp}: producer state after recovery {after} != before {before}")

    def _on_error(self, c: _Client, code: ErrorCode) -> None:
        if code in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH):
            self._fenced(c)
        elif code is E.INVALID_PRODUCER_ID_MAPPING:
            c.phase = "init"  # KIP-360: InitProducerId again with the id/epoch it had

    def _fenced(self, c: _Client) -> None:
        """Fatal for a transactional producer: a zombie is gone; the application starts
        a new producer (InitProducerId without an expected epoch)."""
        if c.zombie:
            c.phase = "dead"
        else:
            c.pid, c.epoch, c.phase, c.parts = -1, -1, "init", frozenset()

    def _on_end(self, c: _Client, r: TxnResult) -> None:
        if r.error is E.NONE:
            self.told[(c.tid, c.txn_no)] = c.commit
            c.pid, c.epoch, c.phase = r.producer_id, r.producer_epoch, "begin"
            c.parts = frozenset()
            if c.zombie:
                c.phase = "dead"
        else:
            self._on_error(c, r.error)

    # ------------------------------------------------------------------ client actions
    def client_step(self, c: _Client) -> None:
        if c.phase == "dead" or (c.waiting is not None and self.rng.random() < 0.8):
            return
        if c.phase == "init":
            expected = (c.pid, c.epoch) if c.pid >= 0 else None
            rid = self._rid(c)
            self.take(
                self.coord.init_producer_id(rid, c.tid, TXN_TIMEOUT_MS, expected, 4, self.now_ms)
            )
        elif c.phase == "begin":
            if not c.parts:  # a new transaction
                self.next_txn += 1
                c.txn_no = self.next_txn
                k = self.rng.randint(1, 3)
                c.parts = frozenset(self.rng.sample(TOPIC_PARTITIONS, k))
                c.commit = self.rng.random() < 0.7
                c.version = self.rng.choice((3, 5))
            rid = self._rid(c)
            self.take(
                self.coord.add_partitions(rid, c.tid, c.pid, c.epoch, c.parts, 3, self.now_ms)
            )
        elif c.phase == "end":
            rid = self._rid(c)
            step = self.coord.end_txn(rid, c.tid, c.pid, c.epoch, c.commit, c.version, self.now_ms)
            self.take(step)

    def restart(self, c: _Client) -> None:
        """The application restarts with the same transactional id while the old
        instance, a zombie, goes on with its transaction: it must be fenced."""
        if c.zombie or c.phase not in ("begin", "end") or not c.parts:
            return
        zombie = _Client(c.tid, c.pid, c.epoch, c.txn_no, c.phase, c.parts, c.commit, c.version)
        zombie.zombie = True
        self.clients.append(zombie)
        c.pid, c.epoch, c.phase, c.parts, c.waiting = -1, -1, "init", frozenset(), None
        self.stats["restarts"] += 1

    # ------------------------------------------------------------------ coordinator writes
    def commit_write(self, ok: bool) -> None:
        if not self.writes:
            return
        w = self.writes.pop(self.rng.randrange(len(self.writes)) if ok else 0)
        if ok:
            self.logs[w.partition].append((w.key, w.value))
            self.stats["write committed"] += 1
        else:
            self.stats["write failed"] += 1
        code = E.NONE if ok else E.NOT_ENOUGH_REPLICAS
        self.take(
            self.coord.complete_write(w.partition, w.coordinator_epoch, w.token, code, self.now_ms)
        )

    def crash(self) -> None:
        """The leadership of one ``__transaction_state`` partition moves (its coordinator
        crashed): each of its writes in flight committed (unacknowledged) or lost; the new
        leader loads the committed records at the next epoch. The marker connections of
        the old process stay in the network, delivered late."""
        p = self.rng.randrange(TXN_PARTITIONS)
        kept = []
        for w in self.writes:
            if w.partition != p:
                kept.append(w)
            elif self.rng.random() < 0.5:
                self.logs[p].append((w.key, w.value))
                self.stats["write in doubt committed"] += 1
        self.writes = kept
        before = replay_all(self.logs[p])
        self.epochs[p] += 1
        self.generation += 1
        self.take(self.coord.begin_load(p, self.epochs[p]))
        self.coord.load(p, self.epochs[p], list(self.logs[p]), self.now_ms)
        self.stats["coordinator moves"] += 1
        if self.memory(p) != before:
            self.fail(f"state after reload differs: {self.memory(p)} != {before}")

    def memory(self, p: int) -> dict[str, TxnMetadata]:
        shard = self.coord.shards.get(p)
        return {} if shard is None else {t: m.persisted() for t, m in shard.txns.items()}

    # ------------------------------------------------------------------ markers
    def send_markers(self) -> None:
        batches, step = self.coord.plan_broker_markers(self.leaders.get, self.now_ms)
        self.take(step)
        for batch in batches:
            key = (self.generation, batch.broker_id)
            self.conns.setdefault(key, _Conn(*key)).queue.append(batch)
            self.stats["marker requests"] += 1
            self.stats["marker requests of 2 shards"] += len(batch.parts) > 1

    def deliver(self) -> None:
        """The head of one connection (reordering across connections)."""
        live = [c for c in self.conns.values() if c.queue]
        if not live:
            return
        conn = self.rng.choice(live)
        req = conn.queue.popleft()
        errors = self._serve(req)
        if self.rng.random() < 0.1:
            self.stats["marker answer lost"] += 1
            self.coord.on_broker_markers_failed(req)
            return
        self.take(self.coord.on_broker_markers_response(req, errors, self.now_ms))

    def _serve(self, req: BrokerMarkers) -> dict[tuple[int, TopicPartition], ErrorCode]:
        errors = {}
        for m in req.markers:
            for tp in m.partitions:
                if self.leaders[tp] != req.broker_id:
                    code = E.NOT_LEADER_OR_FOLLOWER
                else:
                    code = self._write_marker(tp, m)
                errors[(m.producer_id, tp)] = code
                self.stats[f"marker {code.name}"] += 1
        return errors

    def _write_marker(self, tp: TopicPartition, m: TxnMarker) -> ErrorCode:
        """A marker, answered once flushed; lost with its answer if the leader crashes
        between the write and the flush (the coordinator sends it again)."""
        leader = self.partitions[tp]
        before = leader.state()
        code = leader.write_marker(m)
        if code is E.NONE and self.rng.random() < LEADER_CRASH_IN_WRITE:
            self.crash_leader(tp, before)
            return E.NOT_LEADER_OR_FOLLOWER
        leader.flush()
        return code

    def disconnect(self) -> None:
        """A connection drops: each request in it processed (answer lost) or never."""
        live = [c for c in self.conns.values() if c.queue]
        if not live:
            return
        conn = self.rng.choice(live)
        while conn.queue:
            req = conn.queue.popleft()
            if self.rng.random() < 0.5:
                self._serve(req)
            self.coord.on_broker_markers_failed(req)
        self.stats["disconnects"] += 1

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        for p, log in self.logs.items():
            if self.memory(p) != replay_all(log):
                self.fail(f"partition {p}: memory differs from a replay of the committed records")
        decided: dict[TxnId, bool] = {}
        for part in self.partitions.values():
            for txn, committed in part.outcomes.items():
                if decided.setdefault(txn, committed) != committed:
                    self.fail(
                        f"transaction {txn} is committed on one partition, aborted on another"
                    )
                told = self.told.get(txn)
                if told is not None and told != committed:
                    self.fail(f"transaction {txn}: the client was told commit={told}")
            for why in part.violations():
                self.fail(why)

    # ------------------------------------------------------------------ run
    def chaos_step(self) -> None:
        r = self.rng.random()
        if r < 0.30:
            self.client_step(self.rng.choice(self.clients))
        elif r < 0.45:
            self.commit_write(ok=True)
        elif r < 0.48:
            self.commit_write(ok=False)
        elif r < 0.58:
            self.send_markers()
        elif r < 0.75:
            self.deliver()
        elif r < 0.78:
            self.disconnect()
        elif r < 0.80:
            self.crash()
        elif r < 0.82:
            tp = self.rng.choice(TOPIC_PARTITIONS)
            self.leaders[tp] = self.rng.randrange(BROKERS)
            self.stats["leader moves"] += 1
        elif r < 0.83:
            c = self.rng.choice(self.clients)
            if c.phase == "end" and not c.zombie:
                c.phase = "dead"  # dies mid-transaction: the timeout must abort it
                self.stats["clients died"] += 1
        elif r < 0.84:
            self.restart(self.rng.choice(self.clients))
        elif r < 0.85:
            tp = self.rng.choice(TOPIC_PARTITIONS)
            self.crash_leader(tp, self.partitions[tp].state())
        elif r < 0.87:
            self.partitions[self.rng.choice(TOPIC_PARTITIONS)].take_snapshot()
            self.stats["producer snapshots"] += 1
        else:
            self.now_ms += self.rng.randint(1, 1500)
            self.take(self.coord.tick(self.now_ms))

    def calm(self) -> None:
        """No faults, clients stopped: every transaction must close everywhere."""
        for c in self.clients:
            c.phase = "dead"
        for _ in range(CALM_STEPS_MAX):
            if self.quiet():
                return
            self.now_ms += 1000
            self.take(self.coord.tick(self.now_ms))
            while self.writes:
                self.commit_write(ok=True)
            self.send_markers()
            while any(c.queue for c in self.conns.values()):
                self.deliver_reliably()
            self.check()
        self.fail("the calm phase did not close every transaction: " + self.open_report())

    def deliver_reliably(self) -> None:
        for conn in self.conns.values():
            while conn.queue:
                req = conn.queue.popleft()
                errors = self._serve(req)
                self.take(self.coord.on_broker_markers_response(req, errors, self.now_ms))

    def quiet(self) -> bool:
        open_txns = any(part.has_open() for part in self.partitions.values())
        busy = any(
            m.state.name.startswith(("PREPARE", "ONGOING"))
            for shard in self.coord.shards.values()
            for m in shard.txns.values()
        )
        return not open_txns and not busy and not self.writes

    def open_report(self) -> str:
        txns = [s.txns for s in self.coord.shards.values()]
        return f"{[(p.tp, p.table.ongoing) for p in self.partitions.values()]} {txns}"


def run_seed(seed: int, steps: int = CHAOS_STEPS) -> TxnSim:
    sim = TxnSim(seed)
    try:
        for _ in range(steps):
            sim.chaos_step()
            sim.check()
        sim.calm()
    except SimulationFailure:
        raise
    except Exception as e:  # a crash of the core is a failure of the seed too
        raise SimulationFailure(f"{sim.replay_command}\n{type(e).__name__}: {e}") from e
    return sim


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="riverbed.testing.txn_sim")
    add_seed_options(ap, seeds_default=1)
    ap.add_argument("--steps", type=int, default=CHAOS_STEPS)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args(argv)
    stats: Counter[str] = Counter()
    seeds = chosen_seeds(args)
    failed = 0
    for seed in seeds:
        try:
            stats.update(run_seed(seed, args.steps).stats)
        except SimulationFailure as err:  # its message starts with the replay command
            failed += 1
            print(f"FAILED seed {seed}:\n{err}\n", file=sys.stderr, flush=True)
    if args.v:
        for k, v in sorted(stats.items()):
            print(f"{k}: {v}")
    print(f"{len(seeds) - failed}/{len(seeds)} seeds passed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
