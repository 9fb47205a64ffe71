"""The transaction coordinator's handlers, transitions and errors (Kafka 4.x's
``TransactionCoordinator``), one test per rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.txn_harness import Harness
from riverbed.transaction.api import PartitionsResult, TxnConfig, TxnResult
from riverbed.transaction.records import TxnMetadata, TxnState
from riverbed.transaction.transitions import IllegalTransition, complete

E = ErrorCode
S = TxnState
T1 = ("t", 0)
T2 = ("t", 1)


def ok(pid: int, epoch: int) -> TxnResult:
    return TxnResult(E.NONE, pid, epoch)


def parts(error: ErrorCode, *tps: tuple[str, int]) -> PartitionsResult:
    return PartitionsResult.of(tps, error)


def started(h: Harness, tid: str = "a", *tps: tuple[str, int]) -> tuple[int, int]:
    """An Ongoing transaction of ``tid`` over ``tps`` (T1 when none)."""
    r = h.init(tid)
    assert isinstance(r, TxnResult) and r.error is E.NONE
    assert h.add(tid, r.producer_id, r.producer_epoch, *(tps or (T1,))) == parts(
        E.NONE, *(tps or (T1,))
    )
    return r.producer_id, r.producer_epoch


def write_markers(h: Harness, error: ErrorCode = E.NONE) -> list[tuple[int, object]]:
    """Plan the markers (leader of partition p: broker p % 2) and answer them all."""
    requests, step = h.c.plan_markers(lambda tp: tp[1] % 2, h.now_ms)
    h.take(step)
    for req in requests:
        errors = {(m.producer_id, tp): error for m in req.markers for tp in m.partitions}
        h.take(h.c.on_markers_response(req, errors, h.now_ms))
    h.commit()
    return [(r.broker_id, r.markers) for r in requests]


# ---------------------------------------------------------------- InitProducerId
def test_init_new_id_is_answered_once_its_record_commits() -> None:
    h = Harness()
    assert h.init("a", commit=False) is None  # "a request is answered only once committed"
    assert "a" not in h.shard.txns and len(h.writes) == 1
    h.commit()
    assert h.answers[1] == ok(1000, 0)
    m = h.meta("a")
    assert (m.state, m.producer_id, m.producer_epoch, m.start_ms) == (S.EMPTY, 1000, 0, -1)


def test_init_failed_write_leaves_no_trace_and_maps_the_append_error() -> None:
    h = Harness()
    h.init("a", commit=False)
    h.commit(E.NOT_ENOUGH_REPLICAS)
    assert h.answers[1] == TxnResult(E.COORDINATOR_NOT_AVAILABLE)
    assert h.shard.txns == {}
    h.init("a", commit=False)
    h.commit(E.NOT_LEADER_OR_FOLLOWER)
    assert h.answers[2] == TxnResult(E.NOT_COORDINATOR)
    h.init("b", commit=False)
    h.commit(E.MESSAGE_TOO_LARGE)
    assert h.answers[3] == TxnResult(E.UNKNOWN_SERVER_ERROR)
    assert h.shard.txns == {}


def test_init_bumps_the_epoch_and_a_concurrent_init_waits() -> None:
    h = Harness()
    h.init("a")
    assert h.init("a", commit=False) is None
    assert h.init("a", commit=False) == TxnResult(E.CONCURRENT_TRANSACTIONS)
    h.commit()
    assert h.answers[2] == ok(1000, 1)


def test_init_request_checks() -> None:
    h = Harness(config=TxnConfig(num_partitions=1, max_timeout_ms=10_000))
    assert h.init("a", timeout_ms=10_001) == TxnResult(E.INVALID_TRANSACTION_TIMEOUT)
    assert h.init("a", timeout_ms=0) == TxnResult(E.INVALID_TRANSACTION_TIMEOUT)
    assert h.init("", timeout_ms=1000) == TxnResult(E.INVALID_REQUEST)
    # no transactional id: the idempotent producer, a producer id at epoch 0, no record
    assert h.init(None) == ok(1000, 0) and not h.log
    h.alloc.available = False
    assert h.init("b", timeout_ms=1000) == TxnResult(E.COORDINATOR_LOAD_IN_PROGRESS)


def test_init_fences_an_ongoing_transaction_then_aborts_it() -> None:
    """ "Abort the ongoing transaction and then return CONCURRENT_TRANSACTIONS"; the
    client's retry bumps the epoch a second time."""
    h = Harness()
    pid, epoch = started(h, "a", T1, T2)
    assert h.init("a") == TxnResult(E.CONCURRENT_TRANSACTIONS)
    m = h.meta("a")
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.PREPARE_ABORT, epoch + 1, -1)
    # the zombie (old epoch) is fenced while the abort completes
    assert h.add("a", pid, epoch, ("u", 0)) == parts(E.PRODUCER_FENCED, ("u", 0))
    assert h.add("a", pid, epoch, ("u", 0), version=1) == parts(E.INVALID_PRODUCER_EPOCH, ("u", 0))
    assert h.init("a") == TxnResult(E.CONCURRENT_TRANSACTIONS)  # PrepareAbort
    sent = write_markers(h)
    assert {b for b, _ in sent} == {0, 1}  # one request per partition leader
    for _, markers in sent:
        (marker,) = markers  # type: ignore[misc]
        assert (marker.committed, marker.producer_epoch) == (False, epoch + 1)
    assert h.meta("a").state is S.COMPLETE_ABORT
    assert h.init("a") == ok(pid, epoch + 2)


def test_kip360_resume_with_the_expected_epoch() -> None:
    h = Harness()
    h.init("a")  # (1000, 0)
    # "the producer is attempting to continue after an error": bump, last = current
    assert h.init("a", expected=(1000, 0)) == ok(1000, 1)
    assert h.meta("a").last_producer_epoch == 0
    # a retry of that successful call (its answer was lost): the same epoch, no bump
    assert h.init("a", expected=(1000, 0)) == ok(1000, 1)
    # a fenced epoch
    assert h.init("a", expected=(1000, 5)) == TxnResult(E.PRODUCER_FENCED)
    # another producer id: fenced (INVALID_PRODUCER_EPOCH before v4)
    assert h.init("a", expected=(77, 1), version=3) == TxnResult(E.INVALID_PRODUCER_EPOCH)
    assert h.init("a", expected=(77, 1), version=4) == TxnResult(E.PRODUCER_FENCED)


def test_kip360_last_epoch_is_lost_on_reload_as_in_kafka() -> None:
    h = Harness()
    h.init("a")
    h.init("a", expected=(1000, 0))
    h.reload()
    # "a retry that spans a coordinator change will fail"
    assert h.init("a", expected=(1000, 0)) == TxnResult(E.PRODUCER_FENCED)


def test_init_with_an_exhausted_epoch_rotates_the_producer_id() -> None:
    h = Harness()
    h.init("a")
    h.seed(replace(h.meta("a"), producer_epoch=32766))
    assert h.init("a") == ok(1001, 0)
    m = h.meta("a")
    assert (m.previous_producer_id, m.last_producer_epoch) == (1000, -1)
    # KIP-360: the expected epoch is the exhausted one: new id, last epoch recorded
    h.seed(replace(h.meta("a"), producer_epoch=32766))
    assert h.init("a", expected=(1001, 32766)) == ok(1002, 0)
    assert h.meta("a").last_producer_epoch == 32766
    # a retry of it with the previous id and the exhausted epoch is not fenced
    assert h.init("a", expected=(1001, 32766)) == ok(1002, 0)


# ---------------------------------------------------------------- AddPartitionsToTxn
def test_add_partitions_errors_and_the_already_added_shortcut() -> None:
    h = Harness()
    assert h.add("x", 1, 0, T1) == parts(E.INVALID_PRODUCER_ID_MAPPING, T1)
    assert h.add("", 1, 0, T1) == parts(E.INVALID_REQUEST, T1)
    pid, epoch = started(h, "a", T1)
    assert h.add("a", pid + 1, epoch, T1) == parts(E.INVALID_PRODUCER_ID_MAPPING, T1)
    assert h.add("a", pid, epoch + 1, T1) == parts(E.PRODUCER_FENCED, T1)
    n = len(h.log)
    assert h.add("a", pid, epoch, T1) == parts(E.NONE, T1)  # "reply OK immediately"
    assert len(h.log) == n
    h.now_ms += 50
    assert h.add("a", pid, epoch, T2) == parts(E.NONE, T2)
    m = h.meta("a")
    assert (m.state, m.partitions, m.start_ms) == (S.ONGOING, {T1, T2}, h.now_ms - 50)
    # a second add while the first one's write is in flight
    h.add("a", pid, epoch, ("u", 0), commit=False)
    assert h.add("a", pid, epoch, ("u", 1)) == parts(E.CONCURRENT_TRANSACTIONS, ("u", 1))


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness()
    pid, epoch = started(h)
    r = h.rid()
    h.take(h.c.add_offsets(r, "a", pid, epoch, "a", version=1, now_ms=h.now_ms))
    h.commit()
    assert h.answers[r] == TxnResult(E.NONE)
    assert ("__consumer_offsets", 97 % 50) in h.meta("a").partitions  # "a".hashCode() 97
    r = h.rid()
    h.take(h.c.add_offsets(r, "a", pid, epoch + 1, "g", version=1, now_ms=h.now_ms))
    assert h.answers[r] == TxnResult(E.INVALID_PRODUCER_EPOCH)


def test_verify_only_reports_partitions_outside_the_transaction() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1)
    step = h.c.verify_partitions(99, "a", pid, epoch, frozenset({T1, T2}))
    assert step.answers[0].result == PartitionsResult(((T1, E.NONE), (T2, E.TRANSACTION_ABORTABLE)))
    assert not step.writes
    step = h.c.verify_partitions(99, "a", pid, epoch - 1, frozenset({T1}))
    assert step.answers[0].result == parts(E.PRODUCER_FENCED, T1)
    h.end("a", pid, epoch)
    step = h.c.verify_partitions(99, "a", pid, epoch, frozenset({T1}))
    assert step.answers[0].result == parts(E.CONCURRENT_TRANSACTIONS, T1)  # PrepareCommit


# ---------------------------------------------------------------- EndTxn
def test_commit_prepares_sends_markers_then_completes() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1, T2)
    assert h.end("a", pid, epoch) == ok(pid, epoch)
    assert h.meta("a").state is S.PREPARE_COMMIT
    # while the markers are written
    assert h.end("a", pid, epoch) == TxnResult(E.CONCURRENT_TRANSACTIONS)
    assert h.end("a", pid, epoch, commit_txn=False) == TxnResult(E.INVALID_TXN_STATE)
    assert h.add("a", pid, epoch, T1) == parts(E.CONCURRENT_TRANSACTIONS, T1)
    sent = write_markers(h)
    assert sorted((b, m[0].partitions) for b, m in sent) == [(0, (T1,)), (1, (T2,))]  # type: ignore[index]
    m = h.meta("a")
    assert (m.state, m.partitions, m.producer_epoch) == (S.COMPLETE_COMMIT, frozenset(), epoch)
    # a retried EndTxn of the completed decision: NONE; the other one: INVALID_TXN_STATE
    assert h.end("a", pid, epoch) == ok(pid, epoch)
    assert h.end("a", pid, epoch, commit_txn=False) == TxnResult(E.INVALID_TXN_STATE)


def test_end_errors() -> None:
    h = Harness()
    assert h.end("nope", 1, 0) == TxnResult(E.INVALID_PRODUCER_ID_MAPPING)
    r = h.init("a")
    assert isinstance(r, TxnResult)
    assert h.end("a", r.producer_id, r.producer_epoch) == TxnResult(E.INVALID_TXN_STATE)  # Empty
    assert h.end("a", r.producer_id, 9, version=1) == TxnResult(E.INVALID_PRODUCER_EPOCH)
    assert h.end("a", r.producer_id, 9, version=2) == TxnResult(E.PRODUCER_FENCED)


def test_tv2_end_bumps_the_epoch_and_retries_are_recognised() -> None:
    h = Harness()
    pid, epoch = started(h)
    assert h.end("a", pid, epoch, version=5, commit=False) is None
    h.commit(count=1)  # the PrepareCommit record only
    assert h.answers[max(h.answers)] == ok(pid, epoch + 1)
    m = h.meta("a")
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (
        S.PREPARE_COMMIT,
        epoch + 1,
        epoch,
    )
    # the client retries with the epoch it sent: still completing
    assert h.end("a", pid, epoch, version=5) == TxnResult(E.CONCURRENT_TRANSACTIONS)
    assert h.end("a", pid, epoch - 1, version=5) == TxnResult(E.PRODUCER_FENCED)
    write_markers(h)
    assert h.end("a", pid, epoch, version=5) == ok(pid, epoch + 1)
    # the next transaction runs on the bumped epoch
    assert h.add("a", pid, epoch + 1, T2) == parts(E.NONE, T2)


def test_tv2_epoch_overflow_moves_to_the_next_producer_id() -> None:
    h = Harness()
    pid, _ = started(h)
    h.seed(replace(h.meta("a"), producer_epoch=32766))
    assert h.end("a", pid, 32766, version=5, commit=False) is None
    h.commit(count=1)
    assert h.meta("a").next_producer_id == 1001
    assert h.answers[max(h.answers)] == ok(1001, 0)  # the id/epoch the client goes on with
    write_markers(h)
    m = h.meta("a")
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (1001, 0, pid)
    # "the client used TV_2 and retried a request that had overflowed the epoch"
    assert h.end("a", pid, 32766, version=5) == ok(1001, 0)


def test_end_failed_write_changes_nothing() -> None:
    h = Harness()
    pid, epoch = started(h)
    before = h.meta("a")
    h.end("a", pid, epoch, version=5, commit=False)
    h.commit(E.REQUEST_TIMED_OUT)
    assert h.answers[max(h.answers)] == TxnResult(E.COORDINATOR_NOT_AVAILABLE)
    assert h.meta("a") == before and not h.shard.markers.pending()


# ---------------------------------------------------------------- markers
def test_marker_errors() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1, T2)
    h.end("a", pid, epoch)
    write_markers(h, E.NOT_LEADER_OR_FOLLOWER)  # retriable: sent again
    assert h.meta("a").state is S.PREPARE_COMMIT
    requests, _ = h.c.plan_markers(lambda tp: 5, h.now_ms)
    assert [r.broker_id for r in requests] == [5]
    h.c.on_markers_failed(requests[0])  # lost: sent again
    requests, _ = h.c.plan_markers(lambda tp: None if tp == T2 else -1, h.now_ms)
    assert requests == []  # T2 deleted (skipped), T1's leader unavailable (waits)
    write_markers(h)
    assert h.meta("a").state is S.COMPLETE_COMMIT


def test_marker_fenced_by_a_newer_coordinator_stops_sending() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1)
    h.end("a", pid, epoch)
    write_markers(h, E.TRANSACTION_COORDINATOR_FENCED)
    assert h.meta("a").state is S.PREPARE_COMMIT
    assert h.c.plan_markers(lambda tp: 0, h.now_ms)[0] == []


def test_unexpected_marker_error_halts() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1)
    h.end("a", pid, epoch)
    from riverbed.transaction.markers import MarkerError

    with pytest.raises(MarkerError):
        write_markers(h, E.CORRUPT_MESSAGE)


def test_complete_write_failure_is_retried_after_backoff() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1)
    h.end("a", pid, epoch)
    requests, _ = h.c.plan_markers(lambda tp: 0, h.now_ms)
    h.take(h.c.on_markers_response(requests[0], {(pid, T1): E.NONE}, h.now_ms))
    h.commit(E.NOT_ENOUGH_REPLICAS)
    assert h.meta("a").state is S.PREPARE_COMMIT
    h.take(h.c.tick(h.now_ms + 100))
    assert not h.writes
    h.take(h.c.tick(h.now_ms + 500))
    h.commit()
    assert h.meta("a").state is S.COMPLETE_COMMIT


# ---------------------------------------------------------------- timers
def test_timed_out_transaction_is_fenced_and_aborted_at_the_cleanup_tick() -> None:
    h = Harness(config=TxnConfig(num_partitions=1, abort_cleanup_interval_ms=10_000))
    h.init("a", timeout_ms=5_000)
    t0 = h.now_ms
    pid, epoch = 1000, 0
    h.add("a", pid, epoch, T1)
    h.take(h.c.tick(t0 + 5_000))  # not yet a cleanup tick, nor timed out
    assert not h.writes
    h.take(h.c.tick(t0 + 10_000))  # "txnStartTimestamp + txnTimeoutMs < now"
    h.commit()
    m = h.meta("a")
    assert (m.state, m.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
    write_markers(h)
    assert h.meta("a").state is S.COMPLETE_ABORT
    assert h.end("a", pid, epoch) == TxnResult(E.PRODUCER_FENCED)


def test_idle_ids_are_tombstoned_after_the_expiration() -> None:
    cfg = TxnConfig(num_partitions=1, id_expiration_ms=1000, expiry_cleanup_interval_ms=500)
    h = Harness(config=cfg)
    h.init("idle")
    started(h, "busy", T1)
    h.take(h.c.tick(h.now_ms + 1000))
    h.commit()
    assert "idle" not in h.shard.txns and h.log[-1] == (h.log[0][0], None)
    assert h.meta("busy").state is S.ONGOING  # expiration is not allowed while Ongoing
    assert h.c.describe(["idle"])[0].error is E.TRANSACTIONAL_ID_NOT_FOUND


# ---------------------------------------------------------------- load / leadership
def test_load_finishes_prepared_transactions_and_routes_errors() -> None:
    h = Harness()
    pid, epoch = started(h, "a", T1)
    h.end("a", pid, epoch)  # PrepareCommit committed, markers not written
    h.take(h.c.begin_load(0, 2))
    assert h.init("b") == TxnResult(E.COORDINATOR_LOAD_IN_PROGRESS)
    assert h.c.load(0, 2, list(h.log), h.now_ms)
    assert h.shard.coordinator_epoch == 2
    requests, _ = h.c.plan_markers(lambda tp: 0, h.now_ms)
    (marker,) = requests[0].markers
    assert (marker.coordinator_epoch, marker.committed, marker.partitions) == (2, True, (T1,))
    h2 = Harness(config=TxnConfig(num_partitions=2))
    tid = "a"  # partition 97 % 2 == 1, not led here
    assert h2.init(tid) == TxnResult(E.NOT_COORDINATOR)


def test_unload_answers_waiting_requests_and_ignores_their_writes() -> None:
    h = Harness()
    h.init("a", commit=False)
    w = h.writes.pop()
    h.take(h.c.unload(0))
    assert h.answers[1] == TxnResult(E.NOT_COORDINATOR)
    assert h.c.complete_write(0, w.coordinator_epoch, w.token, E.NONE, h.now_ms).answers == ()


def test_a_stale_load_is_ignored() -> None:
    h = Harness()
    h.c.begin_load(0, 5)
    assert not h.c.load(0, 4, [], h.now_ms)
    assert h.c.load(0, 5, [], h.now_ms)


# ---------------------------------------------------------------- admin
def test_describe_and_list_with_filters() -> None:
    from riverbed.transaction.api import ListFilter

    h = Harness()
    started(h, "app-1", T1, T2)
    h.now_ms += 10_000
    started(h, "app-2", ("u", 3))
    h.init("other")
    d = h.c.describe(["app-1", "nope", ""])
    assert (d[0].state, d[0].producer_id, d[0].topics) == ("Ongoing", 1000, (("t", (0, 1)),))
    assert (d[1].error, d[2].error) == (E.TRANSACTIONAL_ID_NOT_FOUND, E.INVALID_REQUEST)

    def ids(**kw: object) -> list[str]:
        err, listed, _ = h.c.list(ListFilter(**kw), h.now_ms)  # type: ignore[arg-type]
        assert err is E.NONE
        return [x.transactional_id for x in listed]

    assert ids() == ["app-1", "app-2", "other"]
    assert ids(states=frozenset({"Ongoing"})) == ["app-1", "app-2"]
    assert ids(producer_ids=frozenset({1001})) == ["app-2"]
    assert ids(duration_ms=5_000) == ["app-1", "other"]  # other: start -1, "running" long
    assert ids(id_pattern="app-.") == ["app-1", "app-2"]
    assert ids(id_pattern="app") == []  # the whole id must match
    assert h.c.list(ListFilter(states=frozenset({"Bogus"})), h.now_ms)[2] == ["Bogus"]
    assert ids(id_pattern="") == ["app-1", "app-2", "other"]  # empty: all
    assert h.c.list(ListFilter(id_pattern="("), h.now_ms)[0] is E.INVALID_REGULAR_EXPRESSION
    h.c.begin_load(0, 9)
    assert h.c.list(ListFilter(), h.now_ms)[0] is E.COORDINATOR_LOAD_IN_PROGRESS


# ---------------------------------------------------------------- transitions
def test_valid_previous_states_are_kafkas() -> None:
    prev = {s: {p.kafka_name for p in s.valid_previous} for s in S}
    assert prev == {
        S.EMPTY: {"Empty", "CompleteCommit", "CompleteAbort"},
        S.ONGOING: {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
        S.PREPARE_COMMIT: {"Ongoing"},
        S.PREPARE_ABORT: {"Ongoing", "PrepareEpochFence"},
        S.COMPLETE_COMMIT: {"PrepareCommit"},
        S.COMPLETE_ABORT: {"PrepareAbort"},
        S.DEAD: {"Empty", "CompleteAbort", "CompleteCommit"},
        S.PREPARE_EPOCH_FENCE: {"Ongoing"},
    }


def test_an_invalid_transition_is_a_bug() -> None:
    m = TxnMetadata("a", 1, 0, 1000, S.ONGOING, frozenset({T1}), 0, 0)
    with pytest.raises(IllegalTransition):
        complete(m, 0)


def test_a_brokers_tv2_add_and_a_fence_of_a_tv2_transaction() -> None:
    """AddPartitionsToTxn v5 from a broker (KIP-890 part 2) records the client's TV2; a
    fence of that transaction bumps the epoch once."""
    h = Harness()
    h.init("a")
    r = h.rid()
    h.take(h.c.add_partitions(r, "a", 1000, 0, frozenset({T1}), 5, h.now_ms, client_tv=2))
    h.commit()
    assert h.answers[r] == parts(E.NONE, T1)
    assert h.meta("a").client_transaction_version == 2
    assert h.init("a") == TxnResult(E.CONCURRENT_TRANSACTIONS)
    m = h.meta("a")
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.PREPARE_ABORT, 1, -1)
    write_markers(h)
    assert h.init("a") == ok(1000, 2)


def test_kip360_expected_epoch_for_an_id_the_coordinator_no_longer_has() -> None:
    """ "The producer epoch is equal to -1, which implies that the metadata was just
    created": a producer whose id expired resumes with a new producer id."""
    h = Harness()
    assert h.init("gone", expected=(42, 7)) == ok(1000, 0)


def test_the_id_pattern_runs_in_linear_time() -> None:
    """KIP-1152's pattern is RE2 (Kafka: Re2j): a client's backtracking-heavy pattern
    cannot stall the coordinator (Python's re would take ~2**30 steps here)."""
    from riverbed.transaction.api import ListFilter

    h = Harness()
    h.init("a" * 30)
    err, listed, _ = h.c.list(ListFilter(id_pattern="(a+)+b"), h.now_ms)
    assert (err, listed) == (E.NONE, [])


def test_markers_of_every_shard_go_in_one_request_per_broker() -> None:
    h = Harness(config=TxnConfig(num_partitions=2))
    for p in (0, 1):  # "app-0" lives in partition 0, "app-1" in partition 1
        h.c.begin_load(p, 1)
        h.c.load(p, 1, [], h.now_ms)
    for tid in ("app-0", "app-1"):
        r = h.init(tid)
        assert isinstance(r, TxnResult)
        h.add(tid, r.producer_id, r.producer_epoch, T1, T2)
        h.end(tid, r.producer_id, r.producer_epoch)
    batches, _ = h.c.plan_broker_markers(lambda tp: tp[1], h.now_ms)
    assert [(b.broker_id, len(b.parts), len(b.markers)) for b in batches] == [(0, 2, 2), (1, 2, 2)]
    h.c.on_broker_markers_failed(batches[1])  # lost: broker 1's markers go again
    errors = {(m.producer_id, tp): E.NONE for m in batches[0].markers for tp in m.partitions}
    h.take(h.c.on_broker_markers_response(batches[0], errors, h.now_ms))
    again, _ = h.c.plan_broker_markers(lambda tp: tp[1], h.now_ms)
    assert [(b.broker_id, len(b.markers)) for b in again] == [(1, 2)]
    errors = {(m.producer_id, tp): E.NONE for m in again[0].markers for tp in m.partitions}
    h.take(h.c.on_broker_markers_response(again[0], errors, h.now_ms))
    h.commit()
    assert {h.c.shards[p].txns[t].state for p, t in ((0, "app-0"), (1, "app-1"))} == {
        S.COMPLETE_COMMIT
    }


def test_an_expected_epoch_that_is_not_the_exhausted_one_is_answered() -> None:
    """An InitProducerId whose expected epoch is not the current, exhausted one: Kafka's
    ``prepareIncrementProducerEpoch`` throws (the client gets UNKNOWN_SERVER_ERROR); here
    a stale epoch is PRODUCER_FENCED and the node does not halt."""
    h = Harness()
    h.init("a")
    h.seed(replace(h.meta("a"), producer_epoch=32766))
    assert h.init("a", expected=(1000, 5)) == TxnResult(E.PRODUCER_FENCED)
    assert h.meta("a").producer_epoch == 32766


def test_no_transaction_runs_at_epoch_short_max() -> None:
    """A fence from epoch 32766 leaves 32767, which no client is given ("we do not allow
    the client to use an epoch equal to Short.MaxValue to ensure that the coordinator will
    always be able to fence"): a request with it is fenced, so no transaction can start at
    an epoch the timeout could not fence (before: Ongoing at 32767, then the cleanup tick
    raised IllegalTransition and halted the node)."""
    cfg = TxnConfig(num_partitions=1, abort_cleanup_interval_ms=1_000)
    h = Harness(config=cfg)
    h.init("a", timeout_ms=1_000)
    h.seed(replace(h.meta("a"), producer_epoch=32767, state=S.COMPLETE_ABORT, start_ms=0))
    assert h.add("a", 1000, 32767, T1) == parts(E.PRODUCER_FENCED, T1)
    assert h.init("a") == ok(1001, 0)  # exhausted: a new producer id
    # an Ongoing transaction at 32767 (a log from before the rule): EndTxn is fenced
    # (TV2 would bump past Short.MaxValue) and the timeout aborts it at 32767
    h.seed(replace(h.meta("a"), producer_epoch=32767, state=S.ONGOING, partitions=frozenset({T1})))
    assert h.end("a", 1001, 32767, version=5) == TxnResult(E.PRODUCER_FENCED)
    h.take(h.c.tick(h.now_ms + 10_000))
    h.commit()
    assert (h.meta("a").state, h.meta("a").producer_epoch) == (S.PREPARE_ABORT, 32767)
