"""The transactions of one ``__transaction_state`` partition: a sans-I/O coordinator shard.

Inputs: requests with a ``request_id`` and ``now_ms``; `complete_write` once a record is
committed (acks=all) or will never be; `tick` for the timers; marker answers; `replay`
of the partition's records at load. Outputs (`Step`): answers for request ids and
`TxnWrite` s, one record each, that the shell appends to the partition. A request that
changes state is answered only once its record is committed, and the state changes only
then, by applying the record written (`_apply`, the same path as `replay`): a failed
write leaves no trace. One write is in flight per transactional id (Kafka's
``pendingState``): while it is, other requests for that id answer as Kafka's
``pendingTransitionInProgress`` does (mostly CONCURRENT_TRANSACTIONS).

A write whose acknowledgement timed out after its append is in doubt (it may still
commit): the shell answers it through `complete_write` with REQUEST_TIMED_OUT (the client
gets COORDINATOR_NOT_AVAILABLE and retries) and then reloads the partition, as the group
coordinator's shell does; Kafka keeps its memory then, which a later commit contradicts.

The handlers follow Kafka 4.x's ``TransactionCoordinator`` (quoted per handler); the
transitions are `riverbed.transaction.transitions`. Marker sending is
`riverbed.transaction.markers`; the Complete record follows the last marker written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, auto

from riverbed.protocol.errors import ErrorCode
from riverbed.transaction import transitions as T
from riverbed.transaction.api import (
    Answer,
    Described,
    Listed,
    ListFilter,
    Matcher,
    PartitionsResult,
    ProducerIdAllocator,
    Result,
    Step,
    TxnConfig,
    TxnResult,
    TxnWrite,
    append_error,
)
from riverbed.transaction.markers import LeaderOf, MarkerBook, MarkerRequest
from riverbed.transaction.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
    as_recorded,
    key_bytes,
    parse_record,
    value_bytes,
)

E = ErrorCode
S = TxnState
#: Timed-out transactions one cleanup tick aborts (the rest at the next tick).
ABORTS_PER_TICK_MAX = 1000
#: Expired transactional ids one cleanup tick tombstones.
EXPIRATIONS_PER_TICK_MAX = 1000
#: Partitions one AddPartitionsToTxn may add to a transaction.
PARTITIONS_PER_ADD_MAX = 10_000
#: A Complete record whose write failed is written again this much later.
COMPLETE_RETRY_BACKOFF_MS = 500


class _Why(Enum):
    INIT = auto()
    KEEP = auto()
    ADD = auto()
    ADD_OFFSETS = auto()
    END = auto()
    FENCE_FOR_INIT = auto()
    TIMEOUT = auto()
    COMPLETE = auto()
    EXPIRE = auto()


@dataclass(frozen=True, slots=True)
class _Pending:
    write: TxnWrite
    why: _Why
    target: TxnMetadata | None  # None: the tombstone of an expired id
    request_id: int | None = None
    partitions: frozenset[TopicPartition] = frozenset()


@dataclass(slots=True)
class _Timers:
    next_abort_ms: int
    next_expiry_ms: int
    complete_retry_ms: dict[str, int] = field(default_factory=dict)


class TransactionShard:
    """The transactional ids of one ``__transaction_state`` partition at one coordinator
    epoch (the partition's leader epoch); a new epoch is a new shard."""

    def __init__(
        self,
        partition: int,
        coordinator_epoch: int,
        config: TxnConfig,
        allocator: ProducerIdAllocator,
        now_ms: int,
        marking: set[int] | None = None,
    ) -> None:
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.config = config
        self.allocator = allocator
        #: the committed state of every transactional id (what a replay gives, plus the
        #: in-memory-only last producer epoch)
        self.txns: dict[str, TxnMetadata] = {}
        self.markers = MarkerBook(partition, coordinator_epoch, marking)
        self._pending: dict[str, _Pending] = {}
        self._tokens: dict[int, str] = {}
        self._next_token = 0
        self._timers = _Timers(
            now_ms + config.abort_cleanup_interval_ms, now_ms + config.expiry_cleanup_interval_ms
        )

    # ------------------------------------------------------------------ load / replay
    def replay(self, key: bytes, value: bytes | None) -> None:
        """One record of the partition, in log order (the load)."""
        record = parse_record(key, value)
        if record is not None:
            self._apply(record.transactional_id, record.value)

    def _apply(self, tid: str, meta: TxnMetadata | None) -> None:
        if meta is None:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = meta

    def loaded(self) -> None:
        """The load is complete: "if state is PrepareCommit or PrepareAbort we need to
        complete the transaction" (markers sent again, then the Complete record)."""
        for meta in self.txns.values():
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self.markers.start(meta)

    def pending_requests(self) -> list[int]:
        """Request ids waiting for a write (answered NOT_COORDINATOR when unloaded)."""
        return [p.request_id for p in self._pending.values() if p.request_id is not None]

    # ------------------------------------------------------------------ writes
    def _write(
        self,
        why: _Why,
        tid: str,
        target: TxnMetadata | None,
        request_id: int | None = None,
        partitions: frozenset[TopicPartition] = frozenset(),
    ) -> Step:
        """The one write in flight for ``tid``; ``target`` is applied when it commits,
        as the record says (`as_recorded`: what a replay of these bytes gives, without
        decoding them back; memory equals a replay)."""
        assert tid not in self._pending, f"two writes in flight for {tid}"
        self._next_token += 1
        value = None
        if target is not None:
            assert target.transactional_id == tid, (tid, target)
            level = self.config.transaction_version_level
            value = value_bytes(target, level)
            target = as_recorded(target, level)
        write = TxnWrite(
            self._next_token, self.partition, self.coordinator_epoch, key_bytes(tid), value
        )
        self._pending[tid] = _Pending(write, why, target, request_id, partitions)
        self._tokens[write.token] = tid
        return Step(writes=(write,))

    def complete_write(self, token: int, code: ErrorCode, now_ms: int) -> Step:
        """The write ``token`` committed (NONE) or will never commit (an append error)."""
        tid = self._tokens.pop(token, None)
        if tid is None:
            return Step()
        p = self._pending.pop(tid)
        if code is not E.NONE:
            return self._failed(p, append_error(code), now_ms)
        self._apply(tid, p.target)
        return self._committed(p) + self._completes_due(now_ms)

    def _failed(self, p: _Pending, code: ErrorCode, now_ms: int) -> Step:
        """ "Aborting state transition and returning the error": nothing changed."""
        if p.why is _Why.COMPLETE and p.target is not None:
            # Kafka retries the Complete record ("txnLogAppendRetryQueue")
            retry_at = now_ms + COMPLETE_RETRY_BACKOFF_MS
            self._timers.complete_retry_ms[p.target.transactional_id] = retry_at
        return self._answer(p, code)

    def _answer(self, p: _Pending, code: ErrorCode) -> Step:
        if p.request_id is None:
            return Step()
        result: Result
        if p.why is _Why.ADD:
            result = PartitionsResult.of(p.partitions, code)
        else:
            result = TxnResult(code)
        return Step(answers=(Answer(p.request_id, result),))

    def _committed(self, p: _Pending) -> Step:
        meta = p.target
        if meta is None or p.why is _Why.COMPLETE:
            if meta is not None:
                self.markers.forget(meta.transactional_id)
            return Step()
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self.markers.start(meta)
        if p.request_id is None:
            return Step()
        if p.why is _Why.INIT:
            result: Result = TxnResult(E.NONE, meta.producer_id, meta.producer_epoch)
        elif p.why is _Why.KEEP:  # v6: the client's identity and the kept transaction's
            pid, epoch = meta.client_id_epoch
            result = TxnResult(E.NONE, pid, epoch, meta.producer_id, meta.producer_epoch)
        elif p.why is _Why.ADD:
            result = PartitionsResult.of(p.partitions, E.NONE)
        elif p.why is _Why.ADD_OFFSETS:
            result = TxnResult(E.NONE)
        elif p.why is _Why.FENCE_FOR_INIT:
            # "abort the ongoing transaction and then return CONCURRENT_TRANSACTIONS to
            # let client wait and retry"
            result = TxnResult(E.CONCURRENT_TRANSACTIONS)
        else:  # END: the producer id/epoch the client goes on with (TV2: bumped or new)
            done = T.complete(meta, meta.last_update_ms)
            result = TxnResult(E.NONE, done.producer_id, done.producer_epoch)
        return Step(answers=(Answer(p.request_id, result),))

    # ------------------------------------------------------------------ InitProducerId
    def init_producer_id(
        self,
        request_id: int,
        tid: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        keep_prepared: bool = False,
    ) -> Step:
        """``handleInitProducerId`` with a transactional id (validated by the router):
        a new id gets a producer id from the allocator; Empty / Complete* bump the epoch
        (a new producer id once the epoch is exhausted); "Ongoing: indicate to abort the
        current ongoing txn first ... and return CONCURRENT_TRANSACTIONS to the client.
        This forces the client to retry, which will ensure that the epoch is bumped a
        second time"; Prepare*: CONCURRENT_TRANSACTIONS. ``expected`` (v3+, KIP-360):
        (producer id, epoch) the client had. ``keep_prepared`` (KIP-939): an Ongoing
        transaction is kept for this client (`T.keep_prepared`) instead."""
        if tid in self._pending:
            return self._reply(request_id, TxnResult(E.CONCURRENT_TRANSACTIONS))
        cur = self.txns.get(tid)
        if cur is None:
            pid = self.allocator.allocate()
            if pid is None:
                return self._reply(request_id, TxnResult(E.COORDINATOR_LOAD_IN_PROGRESS))
            cur = T.new_metadata(tid, pid, timeout_ms, now_ms)
        if expected is not None and not _valid_expected(cur, expected):
            return self._reply(request_id, TxnResult(E.PRODUCER_FENCED))
        if cur.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return self._reply(request_id, TxnResult(E.CONCURRENT_TRANSACTIONS))
        if cur.state is S.ONGOING and keep_prepared:
            return self._keep(request_id, cur, timeout_ms, now_ms)
        if cur.state is S.ONGOING:
            return self._write(_Why.FENCE_FOR_INIT, tid, T.fence_and_abort(cur, now_ms), request_id)
        if cur.state not in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            raise T.IllegalTransition(f"{tid} found in state {cur.state.kafka_name}")
        bumped = self._bump_or_rotate(cur, timeout_ms, expected, now_ms)
        if isinstance(bumped, ErrorCode):
            return self._reply(request_id, TxnResult(bumped))
        return self._write(_Why.INIT, tid, bumped, request_id)

    def _keep(self, request_id: int, cur: TxnMetadata, timeout_ms: int, now_ms: int) -> Step:
        """KeepPreparedTxn on an Ongoing transaction: a new client epoch (or producer id)
        fences the previous client; the transaction and its partitions stay, its timeout
        becomes the request's."""
        new_pid = None
        if T.kept_needs_new_id(cur):
            new_pid = self.allocator.allocate()
            if new_pid is None:
                return self._reply(request_id, TxnResult(E.COORDINATOR_LOAD_IN_PROGRESS))
        target = T.keep_prepared(cur, T.kept_client(cur, new_pid), timeout_ms, now_ms)
        return self._write(_Why.KEEP, cur.transactional_id, target, request_id)

    def _bump_or_rotate(
        self, cur: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None, now_ms: int
    ) -> TxnMetadata | ErrorCode:
        """ "If the epoch is exhausted and the expected epoch (if provided) matches it,
        generate a new producer ID"; else bump the epoch."""
        if cur.epoch_exhausted and (expected is None or expected[1] == cur.producer_epoch):
            pid = self.allocator.allocate()
            if pid is None:
                return E.COORDINATOR_LOAD_IN_PROGRESS
            return T.rotate_producer_id(cur, pid, timeout_ms, now_ms, expected is not None)
        return T.increment_epoch(cur, timeout_ms, None if expected is None else expected[1], now_ms)

    # ------------------------------------------------------------------ AddPartitionsToTxn
    def add_partitions(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
        now_ms: int,
        client_tv: int = 0,
        offsets: bool = False,
    ) -> Step:
        """``handleAddPartitionsToTransaction`` (AddPartitionsToTxn v0-3, AddOffsetsToTxn
        with the group's ``__consumer_offsets`` partition, and v4+ adds from brokers
        under TV2 with ``client_tv`` 2): INVALID_PRODUCER_ID_MAPPING for an unknown id or
        another producer id, PRODUCER_FENCED for another epoch (and for Short.MaxValue:
        "we do not allow the client to use an epoch equal to Short.MaxValue to ensure that
        the coordinator will always be able to fence an existing producer"; only a fence
        reaches it), CONCURRENT_TRANSACTIONS
        while a transition is pending or the previous transaction completes; "if the
        partitions are already in the metadata reply OK immediately"."""
        why = _Why.ADD_OFFSETS if offsets else _Why.ADD
        cur = self.txns.get(tid)
        error = E.NONE
        if cur is None or cur.client_id_epoch[0] != producer_id:
            error = E.INVALID_PRODUCER_ID_MAPPING
        elif cur.client_id_epoch[1] != producer_epoch or producer_epoch >= T.SHORT_MAX:
            error = E.PRODUCER_FENCED
        elif tid in self._pending or cur.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            error = E.CONCURRENT_TRANSACTIONS
        elif cur.kept:
            # KIP-939: the client of a kept transaction "is only allowed to call
            # .commitTransaction, .abortTransaction, or .completeTransaction"
            error = E.INVALID_TXN_STATE
        elif len(partitions) > PARTITIONS_PER_ADD_MAX:
            error = E.INVALID_REQUEST
        elif cur.state is S.ONGOING and partitions <= cur.partitions:
            error = E.NONE
        else:
            target = T.add_partitions(cur, partitions, now_ms, client_tv)
            return self._write(why, tid, target, request_id, partitions)
        if offsets:
            return self._reply(request_id, TxnResult(error))
        return self._reply(request_id, PartitionsResult.of(partitions, error))

    def verify_partitions(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> Step:
        """``handleVerifyPartitionsInTransaction`` (AddPartitionsToTxn v4+ VerifyOnly,
        KIP-890): "pending state is not checked since there is a final validation on the
        append to the log"; a partition not in the transaction is TRANSACTION_ABORTABLE. A
        kept transaction (KIP-939) takes no more records: its producer's epoch is fenced."""
        cur = self.txns.get(tid)
        if cur is None or cur.producer_id != producer_id:
            error = E.INVALID_PRODUCER_ID_MAPPING
        elif cur.producer_epoch != producer_epoch or cur.kept:
            error = E.PRODUCER_FENCED
        elif cur.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            error = E.CONCURRENT_TRANSACTIONS
        else:
            errors = tuple(
                (tp, E.NONE if tp in cur.partitions else E.TRANSACTION_ABORTABLE)
                for tp in sorted(partitions)
            )
            return self._reply(request_id, PartitionsResult(errors))
        return self._reply(request_id, PartitionsResult.of(partitions, error))

    # ------------------------------------------------------------------ EndTxn
    def end_txn(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_tv: int,
        now_ms: int,
    ) -> Step:
        """``handleEndTransaction`` from a client (``client_tv`` 2 for EndTxn v5+)."""
        cur = self.txns.get(tid)
        if cur is None:
            return self._reply(request_id, TxnResult(E.INVALID_PRODUCER_ID_MAPPING))
        if cur.kept:
            return self._end_kept(request_id, cur, producer_id, producer_epoch, commit, now_ms)
        checked = _check_end(cur, producer_id, producer_epoch, commit, tid in self._pending)
        if checked is None and producer_epoch >= T.SHORT_MAX:
            checked = E.PRODUCER_FENCED  # only a fence reaches Short.MaxValue
        if checked is not None:
            ok = checked is E.NONE  # a retry of a completed EndTxn: the current id/epoch
            pid, epoch = (cur.producer_id, cur.producer_epoch) if ok else (-1, -1)
            return self._reply(request_id, TxnResult(checked, pid, epoch))
        next_pid = NO_PRODUCER_ID
        if client_tv >= 2 and cur.epoch_exhausted:
            # "Maybe allocate new producer ID if we are bumping epoch and epoch is exhausted"
            allocated = self.allocator.allocate()
            if allocated is None:
                return self._reply(request_id, TxnResult(E.COORDINATOR_LOAD_IN_PROGRESS))
            next_pid = allocated
        target = T.prepare_end(cur, commit, client_tv, next_pid, now_ms)
        return self._write(_Why.END, tid, target, request_id)

    def _end_kept(
        self,
        request_id: int,
        cur: TxnMetadata,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Step:
        """EndTxn on a kept transaction: only its new client completes it (any EndTxn
        version: the Prepare record bumps the epoch as TV2 does, `T.prepare_end_kept`)."""
        client_pid, client_epoch = cur.client_id_epoch
        if producer_id not in (client_pid, cur.producer_id):
            error = E.INVALID_PRODUCER_ID_MAPPING
        elif (producer_id, producer_epoch) != (client_pid, client_epoch):
            error = E.PRODUCER_FENCED
        elif cur.transactional_id in self._pending:
            error = E.CONCURRENT_TRANSACTIONS
        else:
            target = T.prepare_end_kept(cur, commit, now_ms)
            return self._write(_Why.END, cur.transactional_id, target, request_id)
        return self._reply(request_id, TxnResult(error))

    # ------------------------------------------------------------------ timers
    def tick(self, now_ms: int) -> Step:
        """Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: abort the
        transactions older than their timeout (fence, then abort); every
        ``transaction.remove.expired.transaction.cleanup.interval.ms``: tombstone the ids
        idle for ``transactional.id.expiration.ms``; Complete records whose write failed
        are written again."""
        step = self._retry_completes(now_ms)
        t = self._timers
        if now_ms >= t.next_abort_ms:
            t.next_abort_ms = now_ms + self.config.abort_cleanup_interval_ms
            step += self.abort_timed_out(now_ms)
        if now_ms >= t.next_expiry_ms:
            t.next_expiry_ms = now_ms + self.config.expiry_cleanup_interval_ms
            step += self.expire_ids(now_ms)
        return step

    def timed_out(self, now_ms: int) -> list[str]:
        """``timedOutTransactions``: Ongoing, no pending transition, "do not apply timeout
        to distributed two phase commit transactions" (KIP-939), and
        "txnStartTimestamp + txnTimeoutMs < now"."""
        return [
            tid
            for tid, m in self.txns.items()
            if m.state is S.ONGOING
            and not m.two_phase
            and tid not in self._pending
            and m.start_ms + m.timeout_ms < now_ms
        ]

    def abort_timed_out(self, now_ms: int) -> Step:
        step = Step()
        for tid in self.timed_out(now_ms)[:ABORTS_PER_TICK_MAX]:
            step += self._write(_Why.TIMEOUT, tid, T.fence_and_abort(self.txns[tid], now_ms))
        return step

    def expirable(self, now_ms: int) -> list[str]:
        """``shouldExpire``: "isExpirationAllowed && txnLastUpdateTimestamp <= currentTimeMs
        - transactionalIdExpirationMs", with no pending transition."""
        limit = now_ms - self.config.id_expiration_ms
        return [
            tid
            for tid, m in self.txns.items()
            if m.state.expiration_allowed and tid not in self._pending and m.last_update_ms <= limit
        ]

    def expire_ids(self, now_ms: int) -> Step:
        step = Step()
        for tid in self.expirable(now_ms)[:EXPIRATIONS_PER_TICK_MAX]:
            T.dead(self.txns[tid])  # checks the transition
            step += self._write(_Why.EXPIRE, tid, None)
        return step

    # ------------------------------------------------------------------ markers
    def plan_markers(self, leader_of: LeaderOf, now_ms: int) -> tuple[list[MarkerRequest], Step]:
        """The WriteTxnMarkers to send now, and the Complete records now due (a
        transaction whose partitions were all deleted needs no marker)."""
        requests = self.markers.plan(leader_of)
        return requests, self._completes_due(now_ms)

    def on_markers_response(
        self,
        token: int,
        errors: Mapping[tuple[int, TopicPartition], ErrorCode],
        now_ms: int,
    ) -> Step:
        self.markers.on_response(token, errors)
        return self._completes_due(now_ms)

    def on_markers_failed(self, token: int) -> None:
        self.markers.on_failed(token)

    def _completes_due(self, now_ms: int) -> Step:
        """``maybeWriteTxnCompletion``: CompleteCommit / CompleteAbort once all written."""
        step = Step()
        for tid in self.markers.done():
            if tid in self._pending or tid in self._timers.complete_retry_ms:
                continue
            step += self._write(_Why.COMPLETE, tid, T.complete(self.txns[tid], now_ms))
        return step

    def _retry_completes(self, now_ms: int) -> Step:
        retry = self._timers.complete_retry_ms
        for tid in [t for t, at in retry.items() if at <= now_ms]:
            del retry[tid]
        return self._completes_due(now_ms)

    # ------------------------------------------------------------------ admin
    def describe(self, tid: str) -> Described:
        """``handleDescribeTransactions``: TRANSACTIONAL_ID_NOT_FOUND for an unknown id."""
        m = self.txns.get(tid)
        if m is None or m.state is S.DEAD:
            return Described(tid, E.TRANSACTIONAL_ID_NOT_FOUND)
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(m.partitions):
            topics.setdefault(topic, []).append(partition)
        return Described(
            tid,
            E.NONE,
            m.state.kafka_name,
            m.producer_id,
            m.producer_epoch,
            m.timeout_ms,
            m.start_ms,
            tuple((t, tuple(ps)) for t, ps in topics.items()),
        )

    def list(self, f: ListFilter, pattern: Matcher | None, now_ms: int) -> list[Listed]:
        """``listTransactionStates``' ``shouldInclude`` (Dead is never listed)."""
        states = {s for s in (S.from_name(n) for n in f.states) if s is not None}
        return [
            Listed(tid, m.producer_id, m.state.kafka_name)
            for tid, m in sorted(self.txns.items())
            if m.state is not S.DEAD
            and (not f.producer_ids or m.producer_id in f.producer_ids)
            and (not f.states or m.state in states)
            and (f.duration_ms < 0 or now_ms - m.start_ms > f.duration_ms)
            and (pattern is None or pattern.fullmatch(tid) is not None)
        ]

    def _reply(self, request_id: int, result: Result) -> Step:
        return Step(answers=(Answer(request_id, result),))


def _valid_expected(cur: TxnMetadata, expected: tuple[int, int]) -> bool:
    """``isValidProducerId``: the metadata was just created, or the expected producer id
    is the current one (the epoch is checked when bumping), or "the expected producer ID
    matches the previous one and the expected epoch is exhausted"."""
    pid, epoch = expected
    return (
        cur.producer_epoch == NO_PRODUCER_EPOCH
        or pid == cur.producer_id
        or (pid == cur.previous_producer_id and epoch >= T.SHORT_MAX - 1)
    )


def _check_end(
    cur: TxnMetadata, producer_id: int, epoch: int, commit: bool, pending: bool
) -> ErrorCode | None:
    """``endTransaction``'s checks before a write; None: write the Prepare record."""
    v2 = cur.supports_epoch_bump
    # "the client used TV_2 and retried a request that had overflowed the epoch"
    retry_on_overflow = (
        v2
        and cur.previous_producer_id == producer_id
        and epoch == T.SHORT_MAX - 1
        and cur.producer_epoch == 0
    )
    # "the client used TV_2 and retried an endTxn request, and the bumped producer epoch
    # is stored in the txnMetadata"
    retry_on_bump = v2 and cur.producer_epoch == epoch + 1
    if not v2 or cur.state in (S.ONGOING, S.EMPTY, S.DEAD, S.PREPARE_EPOCH_FENCE):
        valid_epoch = epoch == cur.producer_epoch
    elif cur.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        valid_epoch = retry_on_bump
    else:
        valid_epoch = retry_on_bump or retry_on_overflow
    if cur.producer_id != producer_id and not retry_on_overflow:
        return E.INVALID_PRODUCER_ID_MAPPING
    if not valid_epoch:
        return E.PRODUCER_FENCED
    if pending:
        return E.CONCURRENT_TRANSACTIONS
    return _end_by_state(cur.state, commit)


def _end_by_state(state: TxnState, commit: bool) -> ErrorCode | None:
    """EndTxn by state: Ongoing prepares; a retry of the same decision after it completed
    is NONE, while it completes CONCURRENT_TRANSACTIONS; the other decision, or no
    transaction (Empty), INVALID_TXN_STATE."""
    if state is S.ONGOING:
        return None
    if state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        raise T.IllegalTransition(f"EndTxn found state {state.kafka_name}")
    same = {
        S.COMPLETE_COMMIT: (commit, E.NONE),
        S.COMPLETE_ABORT: (not commit, E.NONE),
        S.PREPARE_COMMIT: (commit, E.CONCURRENT_TRANSACTIONS),
        S.PREPARE_ABORT: (not commit, E.CONCURRENT_TRANSACTIONS),
    }.get(state)
    if same is not None and same[0]:
        return same[1]
    return E.INVALID_TXN_STATE
