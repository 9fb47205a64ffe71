"""KIP-939 in the transaction coordinator: InitProducerId v6 with Enable2Pc (a transaction
no timeout aborts) and KeepPreparedTxn (a different client completes the transaction of a
transactional id, given its producer id and epoch), one test per rule."""

from __future__ import annotations

from dataclasses import replace

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.txn_harness import Harness
from riverbed.transaction.api import PartitionsResult, TxnConfig, TxnResult
from riverbed.transaction.records import TWO_PHASE_TIMEOUT_MS, TxnState

E = ErrorCode
S = TxnState
T1 = ("t", 0)
T2 = ("t", 1)
TWO_PC = TxnConfig(num_partitions=1, two_phase_commit_enable=True)


def prepared(h: Harness, tid: str = "a", *tps: tuple[str, int]) -> tuple[int, int]:
    """A task's prepared transaction: InitProducerId(Enable2Pc), partitions added."""
    r = h.init(tid, enable_2pc=True)
    assert isinstance(r, TxnResult) and r.error is E.NONE, r
    added = tps or (T1,)
    assert h.add(tid, r.producer_id, r.producer_epoch, *added) == PartitionsResult.of(added, E.NONE)
    return r.producer_id, r.producer_epoch


def keep(h: Harness, tid: str = "a") -> TxnResult:
    r = h.init(tid, enable_2pc=True, keep=True, version=6)
    assert isinstance(r, TxnResult)
    return r


def write_markers(h: Harness) -> list[tuple[int, int, bool]]:
    """Answer every marker request; (producer id, epoch, commit) of each marker."""
    requests, step = h.c.plan_markers(lambda tp: 0, h.now_ms)
    h.take(step)
    seen = []
    for req in requests:
        errors = {(m.producer_id, tp): E.NONE for m in req.markers for tp in m.partitions}
        seen += [(m.producer_id, m.producer_epoch, m.committed) for m in req.markers]
        h.take(h.c.on_markers_response(req, errors, h.now_ms))
    h.commit()
    return seen


def test_enable_2pc_needs_the_broker_config_and_a_transactional_id() -> None:
    h = Harness()  # transaction.two.phase.commit.enable defaults to false
    assert h.init("a", enable_2pc=True) == TxnResult(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert not h.log
    h = Harness(config=TWO_PC)
    assert h.init(None, enable_2pc=True) == TxnResult(E.INVALID_REQUEST)
    assert h.init(None, keep=True) == TxnResult(E.INVALID_REQUEST)
    assert h.init("", enable_2pc=True) == TxnResult(E.INVALID_REQUEST)
    # "keepPreparedTxn can only be specified in the initial call"
    assert h.init("a", keep=True, expected=(1, 0)) == TxnResult(E.INVALID_REQUEST)
    tv1 = Harness(config=replace(TWO_PC, transaction_version_level=1))
    assert tv1.init("a", enable_2pc=True, keep=True) == TxnResult(E.UNSUPPORTED_VERSION)


def test_a_two_phase_transaction_has_no_timeout_and_is_never_aborted_by_one() -> None:
    h = Harness(config=replace(TWO_PC, max_timeout_ms=10_000))
    # the timeout asked for is not checked against transaction.max.timeout.ms
    assert h.init("a", timeout_ms=10_000_000, enable_2pc=True) == TxnResult(E.NONE, 1000, 0)
    assert h.meta("a").timeout_ms == TWO_PHASE_TIMEOUT_MS
    prepared(h, "a")
    r = h.init("b", timeout_ms=1_000)
    assert isinstance(r, TxnResult)
    h.add("b", r.producer_id, r.producer_epoch, T2)
    h.take(h.c.tick(h.now_ms + 30 * 24 * 3_600_000))  # a month later
    h.commit()
    assert h.meta("b").state is S.PREPARE_ABORT  # the ordinary one timed out
    assert h.meta("a").state is S.ONGOING  # the two-phase one waits for its decision
    assert h.replayed()["a"].timeout_ms == TWO_PHASE_TIMEOUT_MS  # survives a reload


def test_keep_prepared_keeps_the_transaction_for_a_new_client() -> None:
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a", T1, T2)
    r = keep(h)
    # the client's (bumped) identity, and the kept transaction's
    assert r == TxnResult(E.NONE, pid, epoch + 1, pid, epoch)
    m = h.meta("a")
    assert (m.state, m.partitions, m.producer_id, m.producer_epoch) == (
        S.ONGOING,
        {T1, T2},
        pid,
        epoch,
    )
    assert (m.next_producer_id, m.next_producer_epoch) == (pid, epoch + 1)
    assert h.replayed()["a"] == m.persisted()  # the record holds both identities


def test_the_kept_transactions_old_producer_is_fenced_everywhere() -> None:
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a")
    keep(h)
    assert h.add("a", pid, epoch, T2) == PartitionsResult.of([T2], E.PRODUCER_FENCED)
    step = h.c.verify_partitions(99, "a", pid, epoch, frozenset({T1}))  # a late produce
    assert step.answers[0].result == PartitionsResult.of([T1], E.PRODUCER_FENCED)
    assert h.end("a", pid, epoch, version=5) == TxnResult(E.PRODUCER_FENCED)
    # the new client may only complete it, not add to it
    assert h.add("a", pid, epoch + 1, T2) == PartitionsResult.of([T2], E.INVALID_TXN_STATE)
    assert h.meta("a").state is S.ONGOING


def test_the_new_client_commits_the_kept_transaction() -> None:
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a", T1, T2)
    keep(h)
    assert h.end("a", pid, epoch + 1, version=5, commit=False) is None
    assert h.meta("a").state is S.ONGOING  # until the Prepare record commits
    h.commit(count=1)
    m = h.meta("a")
    assert (m.state, m.producer_epoch, m.next_producer_epoch) == (S.PREPARE_COMMIT, epoch + 2, -1)
    # the markers carry the transaction's producer id at an epoch above both identities
    assert write_markers(h) == [(pid, epoch + 2, True)]
    assert h.answers[max(h.answers)] == TxnResult(E.NONE, pid, epoch + 2)
    m = h.meta("a")
    assert (m.state, m.producer_epoch, m.partitions) == (S.COMPLETE_COMMIT, epoch + 2, set())
    # the next task's InitProducerId starts a fresh transaction
    assert h.init("a", enable_2pc=True) == TxnResult(E.NONE, pid, epoch + 3)


def test_the_new_client_aborts_the_kept_transaction() -> None:
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a")
    r = keep(h)
    h.end("a", r.producer_id, r.producer_epoch, commit_txn=False, version=5)
    assert write_markers(h) == [(pid, epoch + 2, False)]
    assert h.meta("a").state is S.COMPLETE_ABORT


def test_a_second_keep_fences_the_first_recovering_client() -> None:
    """A driver that crashed after keeping the transaction and a restarted one."""
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a")
    first = keep(h)
    second = keep(h)
    assert second == TxnResult(E.NONE, pid, epoch + 2, pid, epoch)
    assert h.end("a", pid, first.producer_epoch, version=5) == TxnResult(E.PRODUCER_FENCED)
    h.end("a", pid, second.producer_epoch, version=5)
    assert write_markers(h) == [(pid, epoch + 3, True)]
    assert h.meta("a").state is S.COMPLETE_COMMIT


def test_keep_without_an_ongoing_transaction_is_an_ordinary_init() -> None:
    """A recovering client finds its transaction already completed: no ongoing id."""
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a")
    r = keep(h)
    h.end("a", r.producer_id, r.producer_epoch, version=5)
    write_markers(h)
    assert keep(h) == TxnResult(E.NONE, pid, epoch + 3)  # ongoing -1 / -1
    assert h.meta("a").state is S.EMPTY


def test_an_init_without_keep_fences_and_aborts_a_kept_transaction() -> None:
    """A task's retry (a new attempt under the same transactional id) aborts it."""
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a")
    r = keep(h)
    assert h.init("a", enable_2pc=True) == TxnResult(E.CONCURRENT_TRANSACTIONS)
    assert write_markers(h) == [(pid, epoch + 2, False)]  # above the kept client's epoch
    assert h.end("a", pid, r.producer_epoch, version=5) == TxnResult(E.PRODUCER_FENCED)
    assert h.init("a", enable_2pc=True) == TxnResult(E.NONE, pid, epoch + 3)


def test_a_kept_transaction_survives_a_coordinator_move() -> None:
    h = Harness(config=TWO_PC)
    pid, epoch = prepared(h, "a")
    r = keep(h)
    h.reload()
    assert h.meta("a").client_id_epoch == (pid, epoch + 1)
    h.end("a", r.producer_id, r.producer_epoch, version=5)
    assert write_markers(h) == [(pid, epoch + 2, True)]
    assert h.meta("a").state is S.COMPLETE_COMMIT


def test_keep_with_an_exhausted_client_epoch_moves_the_client_to_a_new_producer_id() -> None:
    h = Harness(config=TWO_PC)
    pid, _ = prepared(h, "a")
    h.seed(replace(h.meta("a"), producer_epoch=32766))
    r = keep(h)
    assert r == TxnResult(E.NONE, 1001, 0, pid, 32766)
    h.end("a", 1001, 0, version=5)
    # markers: the transaction's producer id at Short.MaxValue; then the new id
    assert write_markers(h) == [(pid, 32767, True)]
    m = h.meta("a")
    assert (m.state, m.producer_id, m.producer_epoch) == (S.COMPLETE_COMMIT, 1001, 0)


def test_keep_with_enable_2pc_prepares_an_ordinary_transaction() -> None:
    """A writer that began with an ordinary timeout (aborted if it dies while writing)
    prepares its transaction by keeping it with Enable2Pc: from then on no timeout
    aborts it."""
    h = Harness(config=TWO_PC)
    r = h.init("a", timeout_ms=1_000)
    assert isinstance(r, TxnResult)
    h.add("a", r.producer_id, r.producer_epoch, T1)
    assert keep(h) == TxnResult(E.NONE, r.producer_id, r.producer_epoch + 1, r.producer_id, 0)
    assert h.meta("a").timeout_ms == TWO_PHASE_TIMEOUT_MS
    h.take(h.c.tick(h.now_ms + 3_600_000))
    assert h.meta("a").state is S.ONGOING and not h.writes
    # without the prepare, the same transaction times out
    h2 = Harness(config=TWO_PC)
    r = h2.init("a", timeout_ms=1_000)
    assert isinstance(r, TxnResult)
    h2.add("a", r.producer_id, r.producer_epoch, T1)
    h2.take(h2.c.tick(h2.now_ms + 3_600_000))
    h2.commit()
    assert h2.meta("a").state is S.PREPARE_ABORT
