"""Producer state of one partition: per producer id, its epoch and its last batches.

The sans-I/O core of idempotent production (Kafka's ``ProducerStateEntry`` and
``ProducerAppendInfo``). Everything is a function of record batch *headers*
(producerId, producerEpoch, baseSequence, lastOffsetDelta, baseOffset, maxTimestamp,
attributes), so a leader's append, a follower's append of replicated batches and the
replay of the log at start-up all run the same :meth:`ProducerStateTable.apply`.

Per producer: the metadata of its last ``BATCHES_RETAINED`` (5, Kafka's
``NUM_BATCHES_TO_RETAIN``, matching ``max.in.flight.requests.per.connection`` <= 5 of an
idempotent client) batches: first/last sequence, first/last offset, max timestamp.

Validation of a client's batch (``check``, Kafka's rules):

- epoch lower than the producer's -> INVALID_PRODUCER_EPOCH (Kafka >= 2.7 answers this,
  not PRODUCER_FENCED, on produce so the client can abort and retry);
- same epoch and the sequence range equals one of the retained batches -> a duplicate:
  acknowledged with the original offsets, not appended again;
- a new epoch must start at sequence 0 (unless the producer has no state at all);
- otherwise the first sequence must be last + 1, wrapping from INT32_MAX to 0, else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer id with no state accepts any sequence: since KIP-360 (Kafka 2.5) the broker
  no longer answers UNKNOWN_PRODUCER_ID on produce when the state of a producer was
  removed (expired, or its batches deleted by retention); the client keeps going.

Transactions (Kafka's ``ProducerAppendInfo``, KIP-98):

- a producer's first transactional batch opens its transaction at that batch's base
  offset (``current_txn_first_offset``, kept in the ledger and the snapshots); the table
  keeps the open ones (``ongoing``) so that the last stable offset is "the first offset
  of the earliest open transaction" (:meth:`ProducerStateTable.first_unstable_offset`);
- "Received a non-transactional message while a transaction is active": a
  non-transactional batch of a producer with an open transaction is INVALID_TXN_STATE;
- a COMMIT/ABORT marker (a transactional control batch) ends the transaction, moves the
  epoch on and records its coordinator epoch; a marker of an older coordinator epoch than
  the producer's last one is TRANSACTION_COORDINATOR_FENCED ("Invalid coordinator epoch
  ... (zombie)") on the leader, and applied anyway by a follower or the replay (Kafka's
  REPLICATION origin only logs it);
- an ABORT of a transaction with data yields the :class:`AbortedTxn` for the segment's
  ``.txnindex``, whose LSO is "the first offset of the next incomplete transaction, or the
  marker's offset + 1" (Kafka's ``lastStableOffset(completedTxn)``). A marker without data
  (an empty transaction) changes no index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from riverbed.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from riverbed.storage.errors import StorageError
from riverbed.storage.producer_hook import DuplicateBatch, TxnMarker
from riverbed.storage.txn_index import AbortedTxn

__all__ = [
    "BATCHES_RETAINED",
    "BatchMetadata",
    "DictStore",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerEntry",
    "ProducerStateTable",
    "ProducerStore",
    "TransactionCoordinatorFencedError",
    "in_sequence",
]

#: Batches remembered per producer (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
BATCHES_RETAINED: Final = 5
INT32_MAX: Final = 0x7FFFFFFF
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_TXN_STATE: Final = 48
TRANSACTION_COORDINATOR_FENCED: Final = 52


class OutOfOrderSequenceError(StorageError):
    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error_code = INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    error_code = INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    error_code = TRANSACTION_COORDINATOR_FENCED


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's ``inSequence``: next is last + 1, or 0 after INT32_MAX."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(slots=True)
class ProducerEntry:
    """One producer's state in one partition (the fields of a Kafka snapshot entry)."""

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)  # oldest first, <= 5
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def first_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.epoch:
            # a new epoch forgets the old one's batches (Kafka's addBatch)
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(meta)
        if len(self.batches) > BATCHES_RETAINED:
            del self.batches[0]
        self.last_timestamp = meta.timestamp


def _batch_metadata(h: BatchHeader) -> BatchMetadata:
    return BatchMetadata(
        first_seq=h.base_sequence,
        last_seq=h.last_sequence,
        first_offset=h.base_offset,
        last_offset=h.last_offset,
        timestamp=h.max_timestamp,
    )


class ProducerStore(Protocol):
    """Where the entries live: a dict (:class:`DictStore`) or the ledger behind a bounded
    write-through cache (:class:`riverbed.producer.cache.LedgerStore`)."""

    def get(self, producer_id: int) -> ProducerEntry | None: ...

    def put(self, entry: ProducerEntry) -> None: ...

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]: ...

    def clear(self) -> None: ...

    def entries(self) -> list[ProducerEntry]: ...


def is_expired(e: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's ``isProducerExpired``: idle since the last batch's max timestamp, and no
    transaction open."""
    return e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms


class DictStore(dict[int, ProducerEntry]):
    """Every entry in memory (Kafka's way; the state machine's tests use it)."""

    def put(self, entry: ProducerEntry) -> None:
        self[entry.producer_id] = entry

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        gone = [pid for pid, e in self.items() if is_expired(e, now_ms, expiration_ms)]
        for pid in gone:
            del self[pid]
        return gone

    def entries(self) -> list[ProducerEntry]:
        return list(self.values())


class ProducerStateTable:
    """Producer id -> :class:`ProducerEntry` for one partition, plus the offset it covers.

    ``map_end_offset``: every batch below it has been applied (Kafka's ``lastMapOffset``).
    Not thread-safe by itself: the caller (the partition log's lock) serializes changes.
    """

    def __init__(self, map_end_offset: int = 0, store: ProducerStore | None = None) -> None:
        self.producers: ProducerStore = store if store is not None else DictStore()
        self.map_end_offset = map_end_offset
        #: producer id -> first offset of its open transaction (Kafka's ongoingTxns)
        self.ongoing: dict[int, int] = {}
        self._first_unstable: int | None = None
        self._first_unstable_stale = False
        #: producer id -> its verification guard (bounded by verifications in flight)
        self.verifying: dict[int, int] = {}
        self._guards = 0

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (None: none open)."""
        if self._first_unstable_stale:
            # computed once per change, not per fetch (every Fetch answers the LSO)
            self._first_unstable = min(self.ongoing.values()) if self.ongoing else None
            self._first_unstable_stale = False
        return self._first_unstable

    def add_open_transaction(self, producer_id: int, first_offset: int) -> None:
        self.ongoing[producer_id] = first_offset
        self._first_unstable_stale = True

    def _end_open_transaction(self, producer_id: int) -> None:
        if self.ongoing.pop(producer_id, None) is not None:
            self._first_unstable_stale = True

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's ``lastStableOffset``: the first unstable offset when it is below the
        high watermark, else the high watermark."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    # ---- KIP-890 verification guards ------------------------------------------------------
    # Before a producer's first transactional append to this partition the leader asks the
    # coordinator whether the transaction is ongoing (Kafka's VerificationGuard): the guard
    # is taken before asking and must still hold at the append; a marker of the producer
    # meanwhile (the transaction the answer was about ended) drops it, so a late produce
    # can never open a transaction that nothing will end.

    def has_open_transaction(self, producer_id: int, epoch: int | None = None) -> bool:
        """The producer's transaction is open here (at ``epoch`` when given: under
        transaction.version 2 every transaction has its own epoch, so a batch of a higher
        one starts the next transaction, KIP-890 part 2)."""
        if producer_id not in self.ongoing:
            return False
        entry = self.get(producer_id) if epoch is not None else None
        return entry is None or entry.epoch == epoch

    def begin_verification(self, producer_id: int) -> int:
        """The producer's guard: the current one when verifications of it are under way
        (concurrent produces share it, as Kafka's VerificationStateEntry), else a new one."""
        guard = self.verifying.get(producer_id)
        if guard is None:
            self._guards += 1
            guard = self.verifying[producer_id] = self._guards
        return guard

    def end_verification(self, producer_id: int, guard: int, verified: bool = True) -> bool:
        """True when the append may go ahead: ``guard`` still holds (no marker of the
        producer since it was taken), or the producer's transaction is open here now (a
        concurrent produce's verified append opened it). The guard goes with the
        producer's next transactional batch or marker; a failed verification
        (``verified`` False) drops it now."""
        current = self.verifying.get(producer_id) == guard
        if current and not verified:
            del self.verifying[producer_id]
        return current or producer_id in self.ongoing

    def seed_ongoing(self, open_txns: dict[int, int]) -> None:
        """The open transactions of the entries the replay starts from (the ledger's)."""
        self.ongoing = dict(open_txns)
        self._first_unstable_stale = True

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    # ---- validation (leader, client batches) ---------------------------------------------

    def check(
        self,
        headers: Sequence[BatchHeader],
        markers: Sequence[TxnMarker | None] = (),
        sequences: bool = True,
    ) -> DuplicateBatch | None:
        """Validate a client's batches (offsets not assigned yet) in order.

        ``sequences`` False: a coordinator's own batches (Kafka's AppendOrigin.COORDINATOR,
        the group coordinator's transactional offset commits): epochs and transactions
        are checked, sequences and duplicates are not (Kafka checks them for clients only).

        Returns the retained batch the first duplicate repeats, or None when every batch
        may be appended; raises OutOfOrderSequenceError / InvalidProducerEpochError /
        InvalidTxnStateError / TransactionCoordinatorFencedError (``markers[i]``: the
        marker of control batch ``headers[i]``). Batches of one request are checked
        against each other too.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq)
        in_txn: dict[int, bool] = {}  # producer id -> transaction open after the batch
        for i, h in enumerate(headers):
            pid = h.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
                known = True
            elif entry is not None:
                epoch, last_seq = entry.epoch, entry.last_seq
                known = epoch != NO_PRODUCER_EPOCH
                if not h.is_control and sequences:
                    dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                    if dup is not None:
                        return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp)
            else:
                epoch, last_seq, known = NO_PRODUCER_EPOCH, NO_SEQUENCE, False
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"epoch of producer {pid} is {h.producer_epoch}, which is smaller than "
                    f"the last seen epoch {epoch}"
                )
            self._check_txn(h, markers[i] if i < len(markers) else None, in_txn)
            if h.is_control or not sequences:
                pending[pid] = (h.producer_epoch, NO_SEQUENCE)
                continue
            seq = h.base_sequence
            if h.producer_epoch != epoch:
                if seq != 0 and known:
                    raise OutOfOrderSequenceError(
                        f"invalid sequence number for new epoch of producer {pid}: "
                        f"{h.producer_epoch} (request epoch), {seq} (seq. number), "
                        f"{epoch} (current producer epoch)"
                    )
            elif known and not in_sequence(last_seq, seq):
                raise OutOfOrderSequenceError(
                    f"out of order sequence number for producer {pid}: {seq} (incoming "
                    f"seq. number), {last_seq} (current end sequence number)"
                )
            pending[pid] = (h.producer_epoch, h.last_sequence)
        return None

    def _check_txn(self, h: BatchHeader, marker: TxnMarker | None, in_txn: dict[int, bool]) -> None:
        """The transactional rules of one batch (Kafka's appendDataBatch /
        appendEndTxnMarker on the leader)."""
        pid = h.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        open_txn = in_txn.get(pid, entry is not None and entry.current_txn_first_offset >= 0)
        if h.is_control:
            current = entry.coordinator_epoch if entry is not None else -1
            if marker is not None and marker.coordinator_epoch < current:
                raise TransactionCoordinatorFencedError(
                    f"Invalid coordinator epoch for producerId {pid}: "
                    f"{marker.coordinator_epoch} (zombie), {current} (current)"
                )
            in_txn[pid] = False
        elif h.is_transactional:
            in_txn[pid] = True
        elif open_txn:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {pid}: a non-transactional "
                "batch while its transaction is open"
            )

    # ---- state changes (leader after append, follower, replay) ---------------------------

    def apply(self, h: BatchHeader, marker: TxnMarker | None = None) -> AbortedTxn | None:
        """Record an appended batch (offsets final); the aborted transaction an ABORT
        marker ended (for the txn index), else None. Never validates: a follower and the
        replay accept what the leader wrote (Kafka's REPLICATION origin)."""
        if h.next_offset > self.map_end_offset:
            self.map_end_offset = h.next_offset
        pid = h.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = ProducerEntry(pid)
        aborted = None
        if h.is_control:
            aborted = self._end_txn(entry, h, marker)
        else:
            entry.add_batch(h.producer_epoch, _batch_metadata(h))
            if h.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = h.base_offset
                self.add_open_transaction(pid, h.base_offset)
                self.verifying.pop(pid, None)  # verified: the transaction is open now
        self.producers.put(entry)  # write-through: the ledger records it now
        return aborted

    def _end_txn(
        self, entry: ProducerEntry, h: BatchHeader, marker: TxnMarker | None
    ) -> AbortedTxn | None:
        """An end transaction marker: the transaction is over, the epoch may move on."""
        first = entry.current_txn_first_offset
        self._end_open_transaction(entry.producer_id)
        self.verifying.pop(entry.producer_id, None)
        aborted = None
        if first >= 0 and marker is not None and not marker.commit:
            marker_offset = h.base_offset
            lso = self.first_unstable_offset()
            aborted = AbortedTxn(
                entry.producer_id, first, marker_offset, marker_offset + 1 if lso is None else lso
            )
        if h.producer_epoch > entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.current_txn_first_offset = -1
        entry.last_timestamp = h.max_timestamp
        if marker is not None:
            entry.coordinator_epoch = marker.coordinator_epoch
        return aborted

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Remove producers idle for ``producer.id.expiration.ms`` (not in a transaction);
        returns their ids. Idle is measured from the max timestamp of the last batch, as
        Kafka does."""
        return self.producers.expire(now_ms, expiration_ms)

    def clear(self, map_end_offset: int) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self._first_unstable_stale = True
        self.map_end_offset = map_end_offset
