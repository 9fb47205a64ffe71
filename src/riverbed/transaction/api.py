"""The transaction coordinator's inputs and outputs: configs, the producer id allocator,
answers, writes, and the admin views (DescribeTransactions / ListTransactions).

A `Step` is what one input produces: answers for request ids, and `TxnWrite` s (one
``__transaction_state`` record each) for the shell to append with acks=all and confirm
through ``complete_write``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from riverbed.protocol.errors import ErrorCode
from riverbed.transaction.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition

E = ErrorCode


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker configs the transaction coordinator obeys (Kafka's names and defaults)."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3_600_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    expiry_cleanup_interval_ms: int = 3_600_000
    #: the cluster's transaction.version feature level (the record value version)
    transaction_version_level: int = 2
    offsets_num_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn)
    two_phase_commit_enable: bool = False  # transaction.two.phase.commit.enable (KIP-939)


class ProducerIdAllocator(Protocol):
    """Kafka's ``ProducerIdManager``: a new producer id, or None when no block of ids is
    available yet (Kafka: COORDINATOR_LOAD_IN_PROGRESS, the client retries)."""

    def allocate(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class TxnResult:
    """InitProducerId / EndTxn / AddOffsetsToTxn answer (producer id/epoch -1 on errors);
    InitProducerId v6 also answers the kept ongoing transaction's id/epoch (KIP-939)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class PartitionsResult:
    """AddPartitionsToTxn answer: an error per partition."""

    errors: tuple[tuple[TopicPartition, ErrorCode], ...]

    @classmethod
    def of(cls, parts: Iterable[TopicPartition], error: ErrorCode) -> PartitionsResult:
        return cls(tuple((tp, error) for tp in sorted(parts)))


Result = TxnResult | PartitionsResult


@dataclass(frozen=True, slots=True)
class Answer:
    request_id: int
    result: Result


@dataclass(frozen=True, slots=True)
class TxnWrite:
    """One record for ``__transaction_state-<partition>`` (acks=all); the shell answers
    with `complete_write(partition, coordinator_epoch, token, error)`."""

    token: int
    partition: int
    coordinator_epoch: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Step:
    answers: tuple[Answer, ...] = ()
    writes: tuple[TxnWrite, ...] = ()

    def __add__(self, other: Step) -> Step:
        return Step(self.answers + other.answers, self.writes + other.writes)


@dataclass(frozen=True, slots=True)
class Described:
    """A DescribeTransactions entry."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_ms: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Listed:
    """A ListTransactions entry."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListFilter:
    """ListTransactions' filters: states (names), producer ids, "only transactions running
    longer than this duration" (< 0: all), and a transactional id pattern (a regex the
    whole id matches, as Java's ``Matcher.matches``; None or empty: all)."""

    states: frozenset[str] = frozenset()
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1
    id_pattern: str | None = None


def append_error(code: ErrorCode) -> ErrorCode:
    """Kafka's ``appendTransactionToLog``: "transform the log append error code to the
    corresponding coordinator error code"."""
    if code in (
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
    ):
        return E.COORDINATOR_NOT_AVAILABLE
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    if code in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE):
        return E.UNKNOWN_SERVER_ERROR
    return code


def fenced_for_version(code: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """ "Older clients could not understand the new PRODUCER_FENCED error code, so we need
    to return the old INVALID_PRODUCER_EPOCH" (KafkaApis: InitProducerId below v4, EndTxn,
    AddPartitionsToTxn and AddOffsetsToTxn below v2)."""
    if code is E.PRODUCER_FENCED and version < first_fenced_version:
        return E.INVALID_PRODUCER_EPOCH
    return code


class Matcher(Protocol):
    """A compiled id pattern (an RE2 regexp)."""

    def fullmatch(self, text: str) -> object | None: ...
