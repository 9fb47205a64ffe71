"""After any sequence of operations, committed writes, failed writes, marker answers,
timer ticks and reloads, the coordinator's memory is what a replay of the records it
wrote gives (Kafka's ``TransactionLog.readTxnRecordValue`` over the log), and a failed
write changes nothing."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.txn_harness import Harness
from riverbed.transaction.api import TxnConfig, TxnResult
from riverbed.transaction.records import TxnMetadata

E = ErrorCode
TIDS = ("a", "b", "c")
PARTS = (("t", 0), ("t", 1), ("u", 0))
KINDS = (
    *("init", "add", "end", "commit", "fail", "markers", "tick", "reload", "crash_in_doubt"),
    "old",
)
MARKER_CODES = (E.NONE, E.NONE, E.NOT_LEADER_OR_FOLLOWER, E.TRANSACTION_COORDINATOR_FENCED)
_op = st.tuples(st.sampled_from(KINDS), st.integers(0, 2), st.integers(0, 7), st.booleans())


def _memory(h: Harness) -> dict[str, TxnMetadata]:
    return {tid: m.persisted() for tid, m in h.shard.txns.items()}


class _Client:
    """What the clients were told: the producer id and epoch of each transactional id."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.known: dict[str, tuple[int, int]] = {}
        self.tid_of: dict[int, str] = {}
        self.seen = 0

    def rid(self, tid: str) -> int:
        r = self.h.rid()
        self.tid_of[r] = tid
        return r

    def learn(self) -> None:
        for r, result in self.h.answers.items():
            if r > self.seen and isinstance(result, TxnResult) and result.producer_id >= 0:
                self.known[self.tid_of[r]] = (result.producer_id, result.producer_epoch)
        self.seen = max(self.h.answers, default=0)


def _request(h: Harness, cl: _Client, tid: str, kind: str, n: int, flag: bool) -> None:
    if tid not in cl.known:
        kind = "init"
    pid, epoch = cl.known.get(tid, (1000, 0))
    if flag and n % 4 == 0:
        epoch += 1  # a stale or future epoch now and then
    if kind == "init":
        expected = (pid, epoch) if flag else None
        h.take(h.c.init_producer_id(cl.rid(tid), tid, 10_000, expected, 4, h.now_ms))
    elif kind == "add":
        parts = frozenset(PARTS[j] for j in range(3) if n >> j & 1) or frozenset(PARTS[:1])
        h.take(h.c.add_partitions(cl.rid(tid), tid, pid, epoch, parts, 3, h.now_ms))
    else:
        h.take(h.c.end_txn(cl.rid(tid), tid, pid, epoch, flag, 5 if n & 1 else 3, h.now_ms))


def _step(h: Harness, cl: _Client, kind: str, i: int, n: int, flag: bool) -> None:
    if kind in ("init", "add", "end"):
        _request(h, cl, TIDS[i], kind, n, flag)
        if n < 6:  # mostly committed at once; else left in flight for the later ops
            h.commit()
    elif kind == "commit":
        h.commit(count=1)
    elif kind == "fail":
        before = _memory(h)
        h.commit(E.NOT_ENOUGH_REPLICAS if flag else E.NOT_LEADER_OR_FOLLOWER, count=1)
        assert _memory(h) == before, "a failed write changed the state"
    elif kind == "markers":
        requests, step = h.c.plan_markers(lambda tp: tp[1], h.now_ms)
        h.take(step)
        for k, req in enumerate(requests):
            code = MARKER_CODES[(n + k) % len(MARKER_CODES)]
            errors = {(m.producer_id, tp): code for m in req.markers for tp in m.partitions}
            h.take(h.c.on_markers_response(req, errors, h.now_ms))
    elif kind == "tick":
        h.now_ms += n * 700
        h.take(h.c.tick(h.now_ms))
    elif kind == "old":  # a long-lived producer: its epoch near exhaustion
        _age(h, cl, TIDS[i])
    else:  # a crash: in-flight writes are lost, or the first one committed unacknowledged
        if kind == "crash_in_doubt" and h.writes:
            w = h.writes[0]
            h.log.append((w.key, w.value))
        h.reload()
        assert _memory(h) == h.replayed()


def _age(h: Harness, cl: _Client, tid: str) -> None:
    m = h.shard.txns.get(tid)
    if m is None or h.writes or m.producer_epoch >= 32765:
        return
    h.seed(replace(m, producer_epoch=32765))
    if tid in cl.known and cl.known[tid][0] == m.producer_id:
        cl.known[tid] = (m.producer_id, 32765)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=60))
def test_memory_equals_a_replay_of_the_committed_records(
    ops: list[tuple[str, int, int, bool]],
) -> None:
    cfg = TxnConfig(
        num_partitions=1,
        abort_cleanup_interval_ms=1_000,
        id_expiration_ms=6_000,
        expiry_cleanup_interval_ms=2_000,
    )
    h = Harness(config=cfg)
    cl = _Client(h)
    for kind, i, n, flag in ops:
        _step(h, cl, kind, i, n, flag)
        cl.learn()
        assert _memory(h) == h.replayed()
        for tid, m in h.shard.txns.items():  # one write in flight per id, pending or not
            assert m.producer_epoch >= 0, (tid, m)
