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

Control batches (transaction markers) update the epoch, end the open transaction and
keep the producer alive; riverbed has no transaction coordinator yet, but the replay of a
log written by one must not fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from riverbed.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from riverbed.storage.errors import StorageError
from riverbed.storage.producer_hook import DuplicateBatch

__all__ = [
    "BATCHES_RETAINED",
    "BatchMetadata",
    "DictStore",
    "InvalidProducerEpochError",
    "OutOfOrderSequenceError",
    "ProducerEntry",
    "ProducerStateTable",
    "ProducerStore",
    "in_sequence",
]

#: Batches remembered per producer (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
BATCHES_RETAINED: Final = 5
INT32_MAX: Final = 0x7FFFFFFF
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45
INVALID_PRODUCER_EPOCH: Final = 47


class OutOfOrderSequenceError(StorageError):
    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error_code = INVALID_PRODUCER_EPOCH


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

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    # ---- validation (leader, client batches) ---------------------------------------------

    def check(self, headers: Sequence[BatchHeader]) -> DuplicateBatch | None:
        """Validate a client's batches (offsets not assigned yet) in order.

        Returns the retained batch the first duplicate repeats, or None when every batch
        may be appended; raises OutOfOrderSequenceError / InvalidProducerEpochError.
        Batches of one request are checked against each other too.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq)
        for h in headers:
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
                if not h.is_control:
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
            if h.is_control:
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

    # ---- state changes (leader after append, follower, replay) ---------------------------

    def apply(self, h: BatchHeader) -> None:
        """Record an appended batch (offsets final). Never validates: a follower and the
        replay accept what the leader wrote (Kafka's REPLICATION origin)."""
        if h.next_offset > self.map_end_offset:
            self.map_end_offset = h.next_offset
        pid = h.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = ProducerEntry(pid)
        if h.is_control:
            # an end transaction marker: the transaction is over, the epoch may move on
            if h.producer_epoch > entry.epoch:
                entry.epoch = h.producer_epoch
                entry.batches.clear()
            entry.current_txn_first_offset = -1
            entry.last_timestamp = h.max_timestamp
        else:
            entry.add_batch(h.producer_epoch, _batch_metadata(h))
            if h.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = h.base_offset
        self.producers.put(entry)  # write-through: the ledger records it now

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Remove producers idle for ``producer.id.expiration.ms`` (not in a transaction);
        returns their ids. Idle is measured from the max timestamp of the last batch, as
        Kafka does."""
        return self.producers.expire(now_ms, expiration_ms)

    def clear(self, map_end_offset: int) -> None:
        self.producers.clear()
        self.map_end_offset = map_end_offset
