"""A transactional id's state transitions: Kafka's ``TransactionMetadata.prepare*``.

Each function takes the committed `TxnMetadata` and returns the metadata the transition
leads to (Kafka's ``TxnTransitMetadata``), to be written as one record; nothing changes
until that record is committed (`riverbed.transaction.shard`). "Check that the new state
transition is valid": a target state whose ``validPreviousStates`` do not contain the
current state is a bug (Kafka throws IllegalStateException), `IllegalTransition` here,
which halts the node (crash-only).

Differences from Kafka's in-memory object, each one toward "memory equals a replay":
Kafka mutates the cached metadata before an epoch fence is written and then remembers
``hasFailedEpochFence`` so that a failed write does not bump twice; here a failed write
changes nothing, so the next fence bumps once from the committed epoch, the same epoch
Kafka ends with. Kafka's ``completeTransitionTo(Empty)`` keeps the previous
``txnStartTimestamp`` in memory while the record says -1; here the record wins (as after
any Kafka coordinator reload).
"""

from __future__ import annotations

from dataclasses import replace

from riverbed.protocol.errors import ErrorCode
from riverbed.transaction.records import (
    EPOCH_EXHAUSTED_AT,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
)

S = TxnState
E = ErrorCode
SHORT_MAX = 2**15 - 1


class IllegalTransition(Exception):
    """Kafka's IllegalStateException in ``prepareTransitionTo``: a coordinator bug."""


def _transit(cur: TxnMetadata, state: TxnState, **changes: object) -> TxnMetadata:
    """``prepareTransitionTo``: "check that the new state transition is valid"."""
    if cur.state not in state.valid_previous:
        raise IllegalTransition(
            f"{cur.transactional_id}: {state.kafka_name} is not reachable from "
            f"{cur.state.kafka_name}"
        )
    new = replace(cur, state=state, **changes)  # type: ignore[arg-type]
    if new.producer_id < 0:
        raise IllegalTransition(f"illegal new producer id {new.producer_id}")
    if state is not S.DEAD and new.producer_epoch < 0:
        raise IllegalTransition(f"illegal new producer epoch {new.producer_epoch}")
    return new


def new_metadata(tid: str, producer_id: int, timeout_ms: int, now_ms: int) -> TxnMetadata:
    """A transactional id seen for the first time: Empty, epoch -1 ("the epoch is
    initialized to NO_PRODUCER_EPOCH when the TransactionMetadata is created")."""
    return TxnMetadata(
        transactional_id=tid,
        producer_id=producer_id,
        producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=S.EMPTY,
        partitions=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
    )


def increment_epoch(
    cur: TxnMetadata, timeout_ms: int, expected_epoch: int | None, now_ms: int
) -> TxnMetadata | ErrorCode:
    """``prepareIncrementProducerEpoch`` (InitProducerId; KIP-360 with an expected epoch).

    No expected epoch: bump, last epoch -1. Expected epoch equal to the current one (or no
    current epoch): "the producer is attempting to continue after an error": bump, last =
    current. Expected epoch equal to the last one: "a retry of a successful call, so just
    return the current epoch without bumping". Otherwise PRODUCER_FENCED.

    Kafka checks "cannot allocate any more producer epochs" first and throws, which a
    client reaches with an expected epoch that is not the current, exhausted one (its
    answer: UNKNOWN_SERVER_ERROR); here that client gets the answer of its expected epoch
    (the retry, or PRODUCER_FENCED). The caller rotates the producer id in every case that
    bumps an exhausted epoch.
    """
    bumped = cur.producer_epoch + 1
    if expected_epoch is None:
        epoch, last = bumped, NO_PRODUCER_EPOCH
    elif cur.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == cur.producer_epoch:
        epoch, last = bumped, cur.producer_epoch
    elif expected_epoch == cur.last_producer_epoch:
        epoch, last = cur.producer_epoch, cur.last_producer_epoch
    else:
        return E.PRODUCER_FENCED
    if epoch != cur.producer_epoch and cur.epoch_exhausted:
        raise IllegalTransition(f"no more epochs for producer id {cur.producer_id}")
    return _to_empty(cur, cur.producer_id, epoch, last, timeout_ms, now_ms)


def rotate_producer_id(
    cur: TxnMetadata, producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
) -> TxnMetadata:
    """``prepareProducerIdRotation``: the epoch is exhausted, a new producer id at epoch 0
    ("cannot rotate producer ids while a transaction is still pending")."""
    if cur.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT):
        raise IllegalTransition(f"{cur.transactional_id}: rotation with a pending transaction")
    last = cur.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
    return _to_empty(cur, producer_id, 0, last, timeout_ms, now_ms)


def _to_empty(
    cur: TxnMetadata, producer_id: int, epoch: int, last: int, timeout_ms: int, now_ms: int
) -> TxnMetadata:
    return _transit(
        cur,
        S.EMPTY,
        producer_id=producer_id,
        previous_producer_id=cur.producer_id,
        next_producer_id=NO_PRODUCER_ID,
        producer_epoch=epoch,
        last_producer_epoch=last,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
        client_transaction_version=0,
        next_producer_epoch=NO_PRODUCER_EPOCH,
    )


def keep_prepared(
    cur: TxnMetadata, client: tuple[int, int], timeout_ms: int, now_ms: int
) -> TxnMetadata:
    """KIP-939 InitProducerId(KeepPreparedTxn) on an Ongoing transaction: it stays Ongoing
    with its partitions and its (producer id, epoch), which its markers will carry; the
    new client's (producer id, epoch) go to the next* fields ("we want to preserve the
    producerId and epoch of the ongoing transaction ... but update the producerId / epoch
    that's going to be used by client, so that we could fence stale client requests").
    The timeout becomes the request's: with Enable2Pc, Int.MaxValue, so a transaction that
    began with an ordinary timeout (aborted if its writer dies while writing) becomes a
    prepared participant that no timeout aborts."""
    return _transit(
        cur,
        S.ONGOING,
        next_producer_id=client[0],
        next_producer_epoch=client[1],
        timeout_ms=timeout_ms,
        last_update_ms=now_ms,
    )


def kept_client(cur: TxnMetadata, new_producer_id: int | None) -> tuple[int, int]:
    """The kept transaction's new client identity: the current client epoch bumped, or
    ``new_producer_id`` at epoch 0 when `kept_needs_new_id`."""
    if new_producer_id is not None:
        return new_producer_id, 0
    pid, epoch = cur.client_id_epoch
    return pid, epoch + 1


def kept_needs_new_id(cur: TxnMetadata) -> bool:
    """Keeping ``cur`` for a new client needs a new producer id: "cannot allocate any more
    producer epochs" for the current client (no client is given Short.MaxValue)."""
    return cur.client_id_epoch[1] >= EPOCH_EXHAUSTED_AT


def add_partitions(
    cur: TxnMetadata, added: frozenset[TopicPartition], now_ms: int, client_tv: int
) -> TxnMetadata:
    """``prepareAddPartitions``: Ongoing; the transaction starts now when it was not
    already ongoing."""
    start = now_ms if cur.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else cur.start_ms
    return _transit(
        cur,
        S.ONGOING,
        partitions=cur.partitions | added,
        start_ms=start,
        last_update_ms=now_ms,
        client_transaction_version=client_tv,
    )


def fence_epoch(cur: TxnMetadata) -> int:
    """``prepareFenceProducerEpoch``'s bumped epoch. Kafka: "cannot fence producer with
    epoch equal to Short.MaxValue since this would overflow" (it throws); no client is
    given that epoch and requests carrying it are fenced, so a transaction can only be
    Ongoing at it in a log written before that rule: its abort stays at Short.MaxValue."""
    if cur.state is not S.ONGOING:
        raise IllegalTransition(f"{cur.transactional_id}: fencing from {cur.state.kafka_name}")
    epoch = cur.producer_epoch
    if cur.kept and cur.next_producer_id == cur.producer_id:
        epoch = max(epoch, cur.next_producer_epoch)  # fence the kept client too
    return min(epoch + 1, SHORT_MAX)


def prepare_end(
    cur: TxnMetadata,
    commit: bool,
    client_tv: int,
    next_producer_id: int,
    now_ms: int,
    fenced_epoch: int | None = None,
) -> TxnMetadata:
    """``prepareAbortOrCommit``: PrepareCommit / PrepareAbort. With TV2 "every
    endTransaction call bumps the producer epoch" (last epoch = the current one); an epoch
    fence instead sets the fenced epoch with last epoch -1 (``endTransaction`` from
    PrepareEpochFence)."""
    if fenced_epoch is not None:
        cur = replace(cur, producer_epoch=fenced_epoch, last_producer_epoch=NO_PRODUCER_EPOCH)
    epoch, last = cur.producer_epoch, cur.last_producer_epoch
    if client_tv >= 2 and fenced_epoch is None:
        epoch, last = cur.producer_epoch + 1, cur.producer_epoch
    return _transit(
        cur,
        S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
        next_producer_id=next_producer_id,
        next_producer_epoch=NO_PRODUCER_EPOCH,
        producer_epoch=epoch,
        last_producer_epoch=last,
        last_update_ms=now_ms,
        client_transaction_version=client_tv,
    )


def prepare_end_kept(cur: TxnMetadata, commit: bool, now_ms: int) -> TxnMetadata:
    """EndTxn from the client of a kept transaction (KIP-939): the markers carry the
    transaction's producer id at an epoch above both identities (the client's bumped, as
    TV2 bumps every EndTxn; Short.MaxValue when the client moved to a new producer id,
    which the Complete record then moves to, at epoch 0)."""
    client_pid, client_epoch = cur.client_id_epoch
    if client_pid == cur.producer_id:
        epoch, last, next_pid = client_epoch + 1, client_epoch, NO_PRODUCER_ID
    else:
        epoch, last, next_pid = SHORT_MAX, NO_PRODUCER_EPOCH, client_pid
    return _transit(
        cur,
        S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
        next_producer_id=next_pid,
        next_producer_epoch=NO_PRODUCER_EPOCH,
        producer_epoch=epoch,
        last_producer_epoch=last,
        last_update_ms=now_ms,
        client_transaction_version=2,
    )


def fence_and_abort(cur: TxnMetadata, now_ms: int) -> TxnMetadata:
    """An Ongoing transaction fenced (InitProducerId of a new producer, or its timeout):
    ``prepareFenceProducerEpoch`` then ``endTransaction(ABORT)`` from PrepareEpochFence,
    written as one PrepareAbort record at the bumped epoch. The fence bumps once whatever
    the transaction version (the bumped epoch fences the old producer; a second, TV2 bump
    could overflow Short.MaxValue from an epoch of 32766)."""
    return prepare_end(
        cur,
        commit=False,
        client_tv=cur.client_transaction_version,
        next_producer_id=NO_PRODUCER_ID,
        now_ms=now_ms,
        fenced_epoch=fence_epoch(cur),
    )


def complete(cur: TxnMetadata, now_ms: int) -> TxnMetadata:
    """``prepareComplete``: every marker is written. "If we overflowed on epoch bump, we
    have to set it as the producer ID now": TV2 with a next producer id moves to it at
    epoch 0."""
    state = S.COMPLETE_COMMIT if cur.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    pid, epoch, prev = cur.producer_id, cur.producer_epoch, cur.previous_producer_id
    last = cur.last_producer_epoch  # before TV2 only the state and partitions change
    if cur.supports_epoch_bump:
        prev, last = cur.producer_id, cur.producer_epoch
        if cur.next_producer_id != NO_PRODUCER_ID:
            pid, epoch = cur.next_producer_id, 0
    return _transit(
        cur,
        state,
        producer_id=pid,
        previous_producer_id=prev,
        next_producer_id=NO_PRODUCER_ID,
        next_producer_epoch=NO_PRODUCER_EPOCH,
        producer_epoch=epoch,
        last_producer_epoch=last,
        partitions=frozenset(),
        last_update_ms=now_ms,
    )


def dead(cur: TxnMetadata) -> TxnMetadata:
    """``prepareDead``: the id expires (a tombstone follows)."""
    return _transit(cur, S.DEAD, partitions=frozenset())
