"""Marker planning: which WriteTxnMarkers to send, to which broker, and when a
transaction's markers are all written (Kafka's ``TransactionMarkerChannelManager``).

Once a PrepareCommit / PrepareAbort record is committed (or found by a load), every
partition of the transaction gets a COMMIT / ABORT marker carrying the producer id, the
producer epoch of the Prepare record and the coordinator epoch. Markers are "batched per
broker": one request per partition leader with at most ``MARKERS_PER_REQUEST_MAX``
entries. Per partition, as Kafka's ``TransactionMarkerRequestCompletionHandler`` does:

- NONE: written ("txnMetadata.removePartition");
- UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR: "retriable errors": sent again, to the leader
  of that time; a lost request (disconnect, timeout) likewise;
- INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: "producer or coordinator
  epoch has changed, this txn can now be ignored": no more markers for it from this
  coordinator (a newer one finishes it);
- UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: "the producer would have failed to
  send data to the failed topic so we can safely remove the partition";
- anything else: "unexpected error": `MarkerError` (the node halts).

A partition whose leader is unknown (``leader_of`` None) is skipped: "the partition is
likely to be deleted already and hence can be skipped"; a partition whose leader is known
but unavailable (-1) waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from riverbed.protocol.errors import ErrorCode
from riverbed.transaction.records import TopicPartition, TxnMetadata, TxnState

E = ErrorCode
#: Transactions (entries) in one WriteTxnMarkers request; the rest go in the next one.
MARKERS_PER_REQUEST_MAX = 100
#: Marker requests a coordinator partition has in flight at once.
MARKER_REQUESTS_IN_FLIGHT_MAX = 64
_WRITTEN = frozenset({E.NONE, E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_VERSION})
_RETRY = frozenset(
    {
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_LEADER_OR_FOLLOWER,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
        E.KAFKA_STORAGE_ERROR,
    }
)
_CANCEL = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED})
#: ``leader_of``: the partition's leader broker, -1 none right now, None no such partition.
LeaderOf = Callable[[TopicPartition], int | None]


class MarkerError(Exception):
    """A marker answer Kafka calls fatal (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE...)."""


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WriteTxnMarkers entry: a transaction's marker for some of its partitions."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """A WriteTxnMarkers request to one broker; answered through `MarkerBook.on_response`
    (or `on_failed` when it is lost)."""

    token: int
    txn_partition: int  # the __transaction_state partition whose coordinator sends it
    broker_id: int
    markers: tuple[TxnMarker, ...]


@dataclass(frozen=True, slots=True)
class BrokerMarkers:
    """One WriteTxnMarkers request to a broker: the marker requests of every coordinator
    partition (shard) for that broker, "batched per broker". Its answer is one error per
    (producer id, partition), the same map for each part (a producer id belongs to one
    transactional id, hence to one shard)."""

    broker_id: int
    parts: tuple[MarkerRequest, ...]

    @property
    def markers(self) -> tuple[TxnMarker, ...]:
        return tuple(m for part in self.parts for m in part.markers)


def per_broker(requests: Iterable[MarkerRequest]) -> list[BrokerMarkers]:
    by_broker: dict[int, list[MarkerRequest]] = {}
    for r in requests:
        by_broker.setdefault(r.broker_id, []).append(r)
    return [BrokerMarkers(b, tuple(rs)) for b, rs in sorted(by_broker.items())]


@dataclass(slots=True)
class _Job:
    marker: TxnMarker
    left: set[TopicPartition]
    in_flight: dict[TopicPartition, int] = field(default_factory=dict)


class MarkerBook:
    """The transactions of one coordinator partition (and epoch) whose markers are due."""

    def __init__(
        self, txn_partition: int, coordinator_epoch: int, marking: set[int] | None = None
    ) -> None:
        self.txn_partition = txn_partition
        self.coordinator_epoch = coordinator_epoch
        #: the coordinator's partitions that may have markers due: this one joins it when a
        #: transaction's markers start (so that planning skips every idle partition)
        self._marking = marking
        self._jobs: dict[str, _Job] = {}
        self._requests: dict[int, tuple[int, tuple[TxnMarker, ...]]] = {}
        self._next_token = 0

    def start(self, meta: TxnMetadata) -> None:
        """Markers for a committed PrepareCommit / PrepareAbort (again after a load: the
        partitions apply them idempotently)."""
        assert meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT), meta
        marker = TxnMarker(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            self.coordinator_epoch,
            meta.state is TxnState.PREPARE_COMMIT,
            tuple(sorted(meta.partitions)),
        )
        self._jobs[meta.transactional_id] = _Job(marker, set(meta.partitions))
        if self._marking is not None:
            self._marking.add(self.txn_partition)

    def pending(self) -> frozenset[str]:
        return frozenset(self._jobs)

    def __bool__(self) -> bool:
        """Any transaction whose markers (or Complete record) are still due."""
        return bool(self._jobs)

    def done(self) -> list[str]:
        """Transactions whose markers are all written (their Complete record is due)."""
        return [tid for tid, job in self._jobs.items() if not job.left]

    def forget(self, tid: str) -> None:
        self._jobs.pop(tid, None)

    def plan(self, leader_of: LeaderOf) -> list[MarkerRequest]:
        """The requests to send now: every partition left and not in flight, per leader."""
        per_broker: dict[int, list[TxnMarker]] = {}
        for job in self._jobs.values():
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(job.left - job.in_flight.keys()):
                leader = leader_of(tp)
                if leader is None:
                    job.left.discard(tp)  # deleted: no marker needed
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            for broker, tps in by_leader.items():
                m = job.marker
                per_broker.setdefault(broker, []).append(
                    TxnMarker(m.transactional_id, m.producer_id, m.producer_epoch,
                              m.coordinator_epoch, m.committed, tuple(tps))
                )  # fmt: skip
        return self._requests_for(per_broker)

    def _requests_for(self, per_broker: Mapping[int, list[TxnMarker]]) -> list[MarkerRequest]:
        out: list[MarkerRequest] = []
        for broker, markers in sorted(per_broker.items()):
            for i in range(0, len(markers), MARKERS_PER_REQUEST_MAX):
                if len(self._requests) >= MARKER_REQUESTS_IN_FLIGHT_MAX:
                    return out
                chunk = tuple(markers[i : i + MARKERS_PER_REQUEST_MAX])
                self._next_token += 1
                self._requests[self._next_token] = (broker, chunk)
                for m in chunk:
                    for tp in m.partitions:
                        self._jobs[m.transactional_id].in_flight[tp] = self._next_token
                out.append(MarkerRequest(self._next_token, self.txn_partition, broker, chunk))
        return out

    def on_failed(self, token: int) -> None:
        """The request was lost (disconnected, timed out): its partitions go again."""
        self.on_response(token, {})

    def on_response(
        self, token: int, errors: Mapping[tuple[int, TopicPartition], ErrorCode]
    ) -> None:
        """The answer of request ``token``: an error per (producer id, partition); a
        partition missing from ``errors`` is sent again. An unknown token (a duplicate, or
        a request of a job since forgotten) is ignored."""
        request = self._requests.pop(token, None)
        if request is None:
            return
        for m in request[1]:
            job = self._jobs.get(m.transactional_id)
            if job is None:
                continue
            self._apply(job, token, m, errors)

    def _apply(
        self,
        job: _Job,
        token: int,
        m: TxnMarker,
        errors: Mapping[tuple[int, TopicPartition], ErrorCode],
    ) -> None:
        for tp in m.partitions:
            if job.in_flight.get(tp) != token:
                continue
            del job.in_flight[tp]
            code = errors.get((m.producer_id, tp))
            if code is None or code in _RETRY:
                continue
            if code in _WRITTEN:
                job.left.discard(tp)
            elif code in _CANCEL:
                self.forget(m.transactional_id)
                return
            else:
                raise MarkerError(f"unexpected error {code.name} for marker {m} on {tp}")
