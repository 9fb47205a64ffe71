"""Whatever the clients send (any producer id and epoch, Short.MaxValue included, any
version, empty and odd partitions, bad patterns) and however the partitions answer the
markers, the coordinator answers and never halts, and its memory stays a replay of its
records ("bad input is a typed error back to the client, never a crash"). Seeded; a
failure names its seed."""

from __future__ import annotations

import random
from dataclasses import replace

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.txn_harness import Harness
from riverbed.transaction.api import ListFilter, TxnConfig

E = ErrorCode
EPOCHS = (-1, 0, 1, 2, 5, 32765, 32766, 32767)
PIDS = (-1, 0, 1000, 1001, 1002, 2**63 - 1)
MARKER_ANSWERS = (
    E.NONE,
    E.NOT_LEADER_OR_FOLLOWER,
    E.UNKNOWN_TOPIC_OR_PARTITION,
    E.INVALID_PRODUCER_EPOCH,
)
SEEDS = 60
STEPS = 80


def _request(h: Harness, rng: random.Random, tid: str) -> None:
    pid, epoch, version = rng.choice(PIDS), rng.choice(EPOCHS), rng.randint(0, 5)
    k = rng.randrange(5)
    if k == 0:
        expected = (pid, epoch) if rng.random() < 0.5 else None
        timeout = rng.choice((0, 1, 1000, 900_001))
        h.take(h.c.init_producer_id(h.rid(), tid, timeout, expected, version, h.now_ms))
    elif k == 1:
        parts = frozenset(
            (rng.choice(("t", "u", "")), rng.choice((0, 1, 2**31 - 1)))
            for _ in range(rng.randint(0, 3))
        )
        tv = rng.choice((0, 2))
        h.take(h.c.add_partitions(h.rid(), tid, pid, epoch, parts, version, h.now_ms, tv))
    elif k == 2:
        h.take(h.c.add_offsets(h.rid(), tid, pid, epoch, "g", version, h.now_ms))
    elif k == 3:
        commit = rng.random() < 0.5
        h.take(h.c.end_txn(h.rid(), tid, pid, epoch, commit, version, h.now_ms))
    else:
        h.take(h.c.verify_partitions(h.rid(), tid, pid, epoch, frozenset({("t", 0)})))


def _markers(h: Harness, rng: random.Random) -> None:
    batches, step = h.c.plan_broker_markers(lambda tp: rng.choice((0, 1, -1, None)), h.now_ms)
    h.take(step)
    for b in batches:
        errors = {
            (m.producer_id, tp): rng.choice(MARKER_ANSWERS)
            for m in b.markers
            for tp in m.partitions
        }
        h.take(h.c.on_broker_markers_response(b, errors, h.now_ms))


def _step(h: Harness, rng: random.Random) -> None:
    tid = rng.choice(("a", "b", "é", "x" * 300))
    k = rng.random()
    if k < 0.6:
        _request(h, rng, tid)
        if rng.random() < 0.7:
            h.commit(rng.choice((E.NONE, E.NONE, E.NOT_ENOUGH_REPLICAS)))
    elif k < 0.75:
        _markers(h, rng)
    elif k < 0.85:
        h.now_ms += rng.randint(0, 2000)
        h.take(h.c.tick(h.now_ms))
    elif k < 0.9:
        m = h.shard.txns.get(tid)
        if m is not None and not h.writes and not m.state.name.startswith("PREPARE"):
            h.seed(replace(m, producer_epoch=rng.choice((32765, 32766, 32767))))
    elif k < 0.95:
        h.reload()
    else:
        h.c.describe([tid])
        h.c.list(ListFilter(id_pattern=rng.choice((None, "a.*", "(", ""))), h.now_ms)


def test_any_input_is_answered_and_the_state_stays_a_replay() -> None:
    cfg = TxnConfig(
        num_partitions=1,
        abort_cleanup_interval_ms=500,
        id_expiration_ms=3_000,
        expiry_cleanup_interval_ms=700,
    )
    for seed in range(SEEDS):
        rng = random.Random(seed)
        h = Harness(config=cfg)
        for i in range(STEPS):
            try:
                _step(h, rng)
            except Exception as e:
                raise AssertionError(f"seed {seed}, step {i}: {type(e).__name__}: {e}") from e
            memory = {t: m.persisted() for t, m in h.shard.txns.items()}
            assert memory == h.replayed(), f"seed {seed}, step {i}"
