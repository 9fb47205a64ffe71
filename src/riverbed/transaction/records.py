"""``__transaction_state`` record formats, transaction states and the id -> partition map.

Every record's key and value are an int16 version followed by the struct of that version
(Kafka's ``MessageUtil.toVersionPrefixedBytes``; the structs come from Kafka's JSON specs
in ``kafka-reference/transaction-coordinator``):

- key ``TransactionLogKey`` v0: (transactionalId);
- value ``TransactionLogValue`` v0 (not flexible) or v1 (flexible, tagged fields 0
  PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion, 3 NextProducerEpoch
  of KIP-939): producerId,
  producerEpoch, transactionTimeoutMs, transactionStatus (the state's id), the
  partitions (null for Empty), lastUpdate and start timestamps. Kafka writes v0 "until
  transaction.version 1 is enabled which enables flexible fields in records"
  (``TransactionVersion.transactionLogValueVersion``: level 0 -> v0, else v1);
- a null value (tombstone) deletes the transactional id (expiration).

Kafka's ``TransactionLog.readTxnRecordValue`` rebuilds the metadata from the value alone
("lastProducerEpoch = RecordBatch.NO_PRODUCER_EPOCH"; the partitions ignored for Empty):
`TxnMetadata.persisted` is that part, which a replay of the log reproduces exactly.

A transactional id lives in partition ``abs(javaStringHash(id)) % transaction.state.log
.num.partitions`` (``TransactionStateManager.partitionFor``: ``Utils.abs(id.hashCode) %
transactionTopicPartitionCount``), the same hash as the group coordinator's.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import IntEnum
from functools import lru_cache

from riverbed.coordinator.records import TRANSACTION_STATE_TOPIC, partition_for
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import TransactionLogKey, TransactionLogValue, decode, encode

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TRANSACTION_STATE_TOPIC",
    "TWO_PHASE_TIMEOUT_MS",
    "TopicPartition",
    "TxnMetadata",
    "TxnRecord",
    "TxnState",
    "as_recorded",
    "key_bytes",
    "parse_record",
    "partition_for",
    "replay_all",
    "value_bytes",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's ``TransactionMetadata.isEpochExhausted``: epoch >= Short.MaxValue - 1.
EPOCH_EXHAUSTED_AT = 2**15 - 2
#: KIP-939: an Enable2Pc transaction's timeout (Int.MaxValue), which no timer aborts.
TWO_PHASE_TIMEOUT_MS = 2**31 - 1
TRANSACTION_LOG_KEY_VERSION = 0
#: Transactional ids whose record key `key_bytes` keeps encoded (least recently used go).
KEY_BYTES_CACHED_MAX = 4096
_INT16 = struct.Struct(">h")
TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    """Kafka's ``TransactionState`` with its ids (``transactionStatus`` in the value)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions / ListTransactions show ("PrepareCommit")."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)

    @property
    def valid_previous(self) -> frozenset[TxnState]:
        """``validPreviousStates``: a transition into this state from any other is a bug."""
        return _VALID_PREVIOUS[self]

    @property
    def expiration_allowed(self) -> bool:
        """``isExpirationAllowed``: Empty, CompleteCommit, CompleteAbort."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


S = TxnState
_NAMES = {
    S.EMPTY: "Empty",
    S.ONGOING: "Ongoing",
    S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort",
    S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort",
    S.DEAD: "Dead",
    S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's committed state (Kafka's ``TransactionMetadata``).

    ``last_producer_epoch`` is not in the record (Kafka reloads it as -1; "a retry that
    spans a coordinator change will fail"), so it lives in memory only; `persisted` is
    everything a replay restores.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    #: KIP-939: set while an Ongoing transaction is kept by InitProducerId(KeepPreparedTxn):
    #: (producer_id, producer_epoch) stay the transaction's (its markers), (next_producer_id,
    #: next_producer_epoch) are the client's that may complete it
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    @property
    def epoch_exhausted(self) -> bool:
        """No epoch Short.MaxValue for clients, "to ensure that the coordinator will
        always be able to fence an existing producer"."""
        return self.producer_epoch >= EPOCH_EXHAUSTED_AT

    @property
    def kept(self) -> bool:
        """A prepared transaction kept for a new client (``hasNextProducerEpoch``)."""
        return self.next_producer_epoch != NO_PRODUCER_EPOCH

    @property
    def client_id_epoch(self) -> tuple[int, int]:
        """The producer id and epoch a client must present (``clientProducerId`` /
        ``clientProducerEpoch``): the kept transaction's new client, else the producer's."""
        if self.kept:
            return self.next_producer_id, self.next_producer_epoch
        return self.producer_id, self.producer_epoch

    @property
    def two_phase(self) -> bool:
        """KIP-939 ``isDistributedTwoPhaseCommitTxn``: "such transactions have no timeout
        (identified by maximum value for timeout)"."""
        return self.timeout_ms == TWO_PHASE_TIMEOUT_MS

    @property
    def supports_epoch_bump(self) -> bool:
        """TV2 (``TransactionVersion.supportsEpochBump``: level >= 2)."""
        return self.client_transaction_version >= 2

    def persisted(self) -> TxnMetadata:
        """What the record holds: the in-memory-only ``last_producer_epoch`` reset."""
        return replace(self, last_producer_epoch=NO_PRODUCER_EPOCH)


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A replayed record: ``value`` None is a tombstone (the id expired)."""

    transactional_id: str
    value: TxnMetadata | None


@lru_cache(maxsize=KEY_BYTES_CACHED_MAX)
def key_bytes(transactional_id: str) -> bytes:
    """The record key of ``transactional_id`` (cached: every write of an id has it)."""
    msg = TransactionLogKey(transactional_id=transactional_id)
    return _INT16.pack(TRANSACTION_LOG_KEY_VERSION) + encode(msg, TRANSACTION_LOG_KEY_VERSION)


def value_version(transaction_version_level: int) -> int:
    """``TransactionVersion.transactionLogValueVersion``: v0 at level 0, else v1."""
    return 0 if transaction_version_level <= 0 else 1


def value_bytes(meta: TxnMetadata, transaction_version_level: int) -> bytes:
    """Kafka's ``TransactionLog.valueToBytes``: partitions grouped by topic (sorted here,
    so that equal states give equal bytes), null for Empty. Version 0 cannot carry the
    tagged fields (previous/next producer id, client transaction version): it writes
    nothing for them and a replay reads their defaults."""
    if meta.state is S.EMPTY and meta.partitions:
        raise ValueError(f"an Empty transaction has no partitions: {meta}")
    parts: list[TransactionLogValue.PartitionsSchema] | None = None
    if meta.state is not S.EMPTY:
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            topics.setdefault(topic, []).append(partition)
        parts = [
            TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
            for t, ps in topics.items()
        ]
    version = value_version(transaction_version_level)
    tagged = version >= 1  # v0 has no tagged fields: their defaults, as a v0 reader sees
    msg = TransactionLogValue(
        producer_id=meta.producer_id,
        previous_producer_id=meta.previous_producer_id if tagged else NO_PRODUCER_ID,
        next_producer_id=meta.next_producer_id if tagged else NO_PRODUCER_ID,
        producer_epoch=meta.producer_epoch,
        transaction_timeout_ms=meta.timeout_ms,
        transaction_status=int(meta.state),
        transaction_partitions=parts,
        transaction_last_update_timestamp_ms=meta.last_update_ms,
        transaction_start_timestamp_ms=meta.start_ms,
        client_transaction_version=meta.client_transaction_version if tagged else 0,
        next_producer_epoch=meta.next_producer_epoch if tagged else NO_PRODUCER_EPOCH,
    )
    return _INT16.pack(version) + encode(msg, version)


def as_recorded(meta: TxnMetadata, transaction_version_level: int) -> TxnMetadata:
    """What a replay of ``value_bytes(meta, transaction_version_level)`` gives, plus the
    in-memory-only ``last_producer_epoch``, without decoding the bytes: Empty keeps no
    partitions (`value_bytes` refuses any) and version 0 none of the tagged fields (their
    defaults). The shard applies this when the record commits, so its memory equals a
    replay of the log (tests check it against `parse_record` of the bytes)."""
    if value_version(transaction_version_level) >= 1:
        return meta
    return replace(
        meta,
        previous_producer_id=NO_PRODUCER_ID,
        next_producer_id=NO_PRODUCER_ID,
        client_transaction_version=0,
        next_producer_epoch=NO_PRODUCER_EPOCH,
    )


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise ProtocolError(f"{what} shorter than its version", field=what)
    return int(_INT16.unpack_from(data)[0])


def _state(status: int) -> TxnState:
    try:
        return TxnState(status)
    except ValueError:
        raise ProtocolError(f"unknown transaction state id {status}", field="value") from None


def parse_record(key: bytes, value: bytes | None) -> TxnRecord | None:
    """The record at one offset of ``__transaction_state``: None for an unknown key
    version (Kafka's ``UnknownKey``, skipped by the load); ProtocolError when malformed or
    for an unknown value version (Kafka: IllegalStateException)."""
    kv = _version(key, "key")
    if kv != TRANSACTION_LOG_KEY_VERSION:
        return None
    tid = decode(TransactionLogKey, key[2:], kv).transactional_id
    if value is None:
        return TxnRecord(tid, None)
    vv = _version(value, "value")
    if vv not in (0, 1):
        raise ProtocolError(f"unknown TransactionLogValue version {vv}", field="value")
    v = decode(TransactionLogValue, value[2:], vv)
    state = _state(v.transaction_status)
    partitions: frozenset[TopicPartition] = frozenset()
    if state is not S.EMPTY and v.transaction_partitions:
        partitions = frozenset(
            (p.topic, pid) for p in v.transaction_partitions for pid in p.partition_ids
        )
    meta = TxnMetadata(
        transactional_id=tid,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout_ms=v.transaction_timeout_ms,
        state=state,
        partitions=partitions,
        start_ms=v.transaction_start_timestamp_ms,
        last_update_ms=v.transaction_last_update_timestamp_ms,
        previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        client_transaction_version=v.client_transaction_version,
        next_producer_epoch=v.next_producer_epoch,
    )
    return TxnRecord(tid, meta)


def replay_all(records: Iterable[tuple[bytes, bytes | None]]) -> dict[str, TxnMetadata]:
    """The state a load of these records (in log order) gives: the last value of each
    id, tombstoned ids gone."""
    state: dict[str, TxnMetadata] = {}
    for key, value in records:
        rec = parse_record(key, value)
        if rec is None:
            continue
        if rec.value is None:
            state.pop(rec.transactional_id, None)
        else:
            state[rec.transactional_id] = rec.value
    return state
