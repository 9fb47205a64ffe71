"""A blocking transactional producer on riverbed's own protocol engine, for the
exactly-once sink (its tasks and its driver).

librdkafka cannot express what the sink needs: InitProducerId v6 with ``Enable2Pc`` and
``KeepPreparedTxn`` (KIP-939), a transaction left prepared when the task ends, and a
different client (the Spark driver) completing it. This client sends FindCoordinator
(key type 1), InitProducerId, AddPartitionsToTxn v3 (the client form), transactional
Produce (acks=all, one sequence per partition from 0 at each epoch) and EndTxn, retrying
what Kafka's producer retries (coordinator moves and loads, CONCURRENT_TRANSACTIONS, leader
changes) until a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TypeVar

from riverbed.cli.wire import WireAuthError, WireClient, WireError
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity

E = ErrorCode
TopicPartition = tuple[str, int]
M = TypeVar("M", bound=Message)

#: How long one operation (init, add, produce, end) retries before failing the task/commit.
operation_deadline_s: Final = 120.0
retry_backoff_s_min: Final = 0.05
retry_backoff_s_max: Final = 1.0
#: Produce request timeout (the broker's wait for acks=all).
produce_timeout_ms: Final = 30_000
CLIENT_ID: Final = "riverbed-spark-sink"
#: Errors after which the same request is sent again (to a new coordinator or leader).
_COORDINATOR_MOVED: Final = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})
_RETRIABLE: Final = (
    frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT})
    | _COORDINATOR_MOVED
)
_LEADER_MOVED: Final = frozenset(
    {
        E.NOT_LEADER_OR_FOLLOWER,
        E.LEADER_NOT_AVAILABLE,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.KAFKA_STORAGE_ERROR,
    }
)


class TxnSinkError(RuntimeError):
    """A transactional write or completion failed; the message names what and why."""


class Retry:
    """Backoff (doubling) until a deadline; `failed` raises once it has passed."""

    def __init__(self, what: str, deadline_s: float = operation_deadline_s) -> None:
        self.what = what
        self.deadline = time.monotonic() + deadline_s
        self.backoff = retry_backoff_s_min

    def failed(self, why: str) -> None:
        if time.monotonic() + self.backoff > self.deadline:
            raise TxnSinkError(f"{self.what} failed: {why}")
        time.sleep(self.backoff)
        self.backoff = min(self.backoff * 2, retry_backoff_s_max)


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= key[end + 2] << 16
    if rest >= 2:
        h ^= key[end + 1] << 8
    if rest >= 1:
        h ^= key[end]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Cluster:
    """Connections to one cluster's brokers (by node id, bootstrap addresses first)."""

    def __init__(
        self, bootstrap: str, timeout_s: float = 30.0, security: ClientSecurity = PLAINTEXT_CLIENT
    ) -> None:
        self.bootstrap = [a.strip() for a in bootstrap.split(",") if a.strip()]
        self.timeout_s = timeout_s
        self.security = security
        self.brokers: dict[int, str] = {}
        self._conns: dict[int | str, WireClient] = {}

    def conn(self, key: int | str) -> WireClient:
        c = self._conns.get(key)
        if c is None:
            address = self.brokers[key] if isinstance(key, int) else key
            try:
                c = WireClient(address, self.timeout_s, CLIENT_ID, self.security)
            except WireAuthError as e:  # not retried: no retry cures credentials
                raise TxnSinkError(f"authentication with {address} failed: {e}") from None
            self._conns[key] = c
        return c

    def drop(self, key: int | str) -> None:
        c = self._conns.pop(key, None)
        if c is not None:
            c.close()

    def any(self, api_key: ApiKey, body: Message, version: int | None = None) -> Message:
        """``body`` to the first broker that answers (known brokers, then bootstrap)."""
        errors = []
        keys: list[int | str] = [*self.brokers, *self.bootstrap]
        for key in keys:
            try:
                c = self.conn(key)
                return (
                    c.request(api_key, body)
                    if version is None
                    else c.request_at(api_key, version, body)
                )
            except WireError as e:
                self.drop(key)
                errors.append(f"{key}: {e}")
        raise WireError("no broker answered: " + "; ".join(errors))

    def metadata(self, topics: list[str]) -> dict[str, dict[int, int]]:
        """Leader node id of each partition of ``topics`` (-1: none now); learns brokers."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        response = _as(MetadataResponse, self.any(ApiKey.METADATA, request))
        self.brokers.update({b.node_id: f"{b.host}:{b.port}" for b in response.brokers})
        out: dict[str, dict[int, int]] = {}
        for t in response.topics:
            if t.error_code == E.NONE and t.name is not None:
                out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
        return out

    def ongoing_transactions(self) -> list[tuple[str, int]]:
        """(transactional id, producer id) of every Ongoing transaction, from every
        broker's coordinator (ListTransactions answers for the partitions it leads)."""
        self.metadata([])
        found: list[tuple[str, int]] = []
        for node in list(self.brokers):
            r = _as(
                ListTransactionsResponse,
                self.conn(node).request(
                    ApiKey.LIST_TRANSACTIONS, ListTransactionsRequest(state_filters=["Ongoing"])
                ),
            )
            if r.error_code != E.NONE:
                raise TxnSinkError(f"ListTransactions on node {node}: {E.of(r.error_code).name}")
            found += [(s.transactional_id, s.producer_id) for s in r.transaction_states]
        return found

    def close(self) -> None:
        for key in list(self._conns):
            self.drop(key)


def _as(cls: type[M], message: Message) -> M:
    if not isinstance(message, cls):
        raise WireError(f"expected {cls.__name__}, got {type(message).__name__}")
    return message


class TxnProducer:
    """The requests of one transactional id, to its coordinator and partition leaders."""

    def __init__(self, cluster: Cluster, transactional_id: str, timeout_ms: int) -> None:
        self.cluster = cluster
        self.tid = transactional_id
        self.timeout_ms = timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self._coordinator: int | None = None
        self._added: set[TopicPartition] = set()
        self._sequence: dict[TopicPartition, int] = {}

    # ------------------------------------------------------------------ coordinator
    def _find(self) -> int:
        request = FindCoordinatorRequest(key=self.tid, key_type=1)
        r = _as(FindCoordinatorResponse, self.cluster.any(ApiKey.FIND_COORDINATOR, request, 3))
        if r.error_code != E.NONE:
            raise _Retriable(E.of(r.error_code))
        self.cluster.brokers[r.node_id] = f"{r.host}:{r.port}"
        return r.node_id

    def _ask(self, what: str, api_key: ApiKey, version: int | None, body: Message,
             error: Callable[[Message], ErrorCode]) -> Message:  # fmt: skip
        """``body`` to the coordinator until it answers something not retriable."""
        retry = Retry(f"{what} of transactional id {self.tid}")
        while True:
            try:
                if self._coordinator is None:
                    self._coordinator = self._find()
                c = self.cluster.conn(self._coordinator)
                r = (
                    c.request(api_key, body)
                    if version is None
                    else c.request_at(api_key, version, body)
                )
                code = error(r)
                if code not in _RETRIABLE:
                    return r
                if code in _COORDINATOR_MOVED:
                    self._coordinator = None
                retry.failed(code.name)
            except _Retriable as e:
                retry.failed(e.code.name)
            except WireError as e:
                if self._coordinator is not None:
                    self.cluster.drop(self._coordinator)
                self._coordinator = None
                retry.failed(str(e))

    def init(self, enable_2pc: bool = False, keep: bool = False) -> InitProducerIdResponse:
        """InitProducerId v6 (KIP-939); the answer's id/epoch become this producer's."""
        body = InitProducerIdRequest(
            transactional_id=self.tid,
            transaction_timeout_ms=self.timeout_ms,
            enable2_pc=enable_2pc,
            keep_prepared_txn=keep,
        )
        r = _as(
            InitProducerIdResponse,
            self._ask("InitProducerId", ApiKey.INIT_PRODUCER_ID, 6, body, _code),
        )
        if r.error_code != E.NONE:
            raise TxnSinkError(init_error(self.tid, E.of(r.error_code)))
        self.producer_id, self.producer_epoch = r.producer_id, r.producer_epoch
        self._added.clear()
        self._sequence.clear()
        return r

    def add_partitions(self, tps: set[TopicPartition]) -> None:
        new = tps - self._added
        if not new:
            return
        topics: dict[str, list[int]] = {}
        for t, p in sorted(new):
            topics.setdefault(t, []).append(p)
        body = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        r = _as(
            AddPartitionsToTxnResponse,
            self._ask(
                "AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, 3, body, _partitions_code
            ),
        )
        code = _partitions_code(r)
        if code != E.NONE:
            raise TxnSinkError(f"AddPartitionsToTxn of {self.tid} failed: {code.name}")
        self._added |= new

    def end(self, commit: bool) -> None:
        body = EndTxnRequest(
            transactional_id=self.tid,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            committed=commit,
        )
        r = _as(EndTxnResponse, self._ask("EndTxn", ApiKey.END_TXN, None, body, _code))
        if r.error_code != E.NONE:
            verb = "commit" if commit else "abort"
            raise TxnSinkError(f"EndTxn ({verb}) of {self.tid} failed: {E.of(r.error_code).name}")

    # ------------------------------------------------------------------ produce
    def append(self, tp: TopicPartition, batch: bytes) -> None:
        """A non-transactional batch (acks=all) to ``tp``'s leader, retried on leader
        moves."""

        def leaders(_refresh: bool) -> dict[TopicPartition, int]:
            found = self.cluster.metadata([tp[0]]).get(tp[0], {})
            return {(tp[0], p): leader for p, leader in found.items()}

        self._send(tp, batch, None, leaders)

    def produce(self, tp: TopicPartition, build: Callable[[int, int, int], bytes],
                count: int, leaders: Callable[[bool], dict[TopicPartition, int]]) -> None:  # fmt: skip
        """One transactional batch of ``count`` records to ``tp``'s leader; ``build``
        (producer id, epoch, base sequence) frames it. A retry sends the same sequence
        (the leader drops a duplicate)."""
        self.add_partitions({tp})
        seq = self._sequence.get(tp, 0)
        batch = build(self.producer_id, self.producer_epoch, seq)
        self._send(tp, batch, self.tid, leaders)
        self._sequence[tp] = seq + count

    def _send(self, tp: TopicPartition, batch: bytes, tid: str | None,
              leaders: Callable[[bool], dict[TopicPartition, int]]) -> None:  # fmt: skip
        body = ProduceRequest(
            transactional_id=tid,
            acks=-1,
            timeout_ms=produce_timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=tp[0],
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=tp[1], records=batch)
                    ],
                )
            ],
        )
        retry = Retry(f"producing to {tp[0]}-{tp[1]} for {tid or 'the commit log'}")
        refresh = False
        while True:
            leader = leaders(refresh).get(tp, -1)
            try:
                if leader < 0:
                    raise _Retriable(E.LEADER_NOT_AVAILABLE)
                r = _as(ProduceResponse, self.cluster.conn(leader).request(ApiKey.PRODUCE, body))
                code = E.of(r.responses[0].partition_responses[0].error_code)
            except WireError as e:
                self.cluster.drop(leader)
                code, refresh = E.NETWORK_EXCEPTION, True
                retry.failed(str(e))
                continue
            except _Retriable as e:
                code = e.code
            if code in (E.NONE, E.DUPLICATE_SEQUENCE_NUMBER):
                return
            if code not in _LEADER_MOVED and code is not E.LEADER_NOT_AVAILABLE:
                raise TxnSinkError(f"delivery to {tp[0]}-{tp[1]} failed: {code.name}")
            refresh = True
            retry.failed(code.name)


class _Retriable(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


def _code(r: Message) -> ErrorCode:
    if isinstance(r, (InitProducerIdResponse, EndTxnResponse)):
        return E.of(r.error_code)
    raise WireError(f"unexpected {type(r).__name__}")


def _partitions_code(r: Message) -> ErrorCode:
    """AddPartitionsToTxn v3: the first error among the partitions, else NONE."""
    resp = _as(AddPartitionsToTxnResponse, r)
    for t in resp.results_by_topic_v3_and_below:
        for p in t.results_by_partition:
            if p.partition_error_code != E.NONE:
                return E.of(p.partition_error_code)
    return E.NONE


def init_error(tid: str, code: ErrorCode) -> str:
    """InitProducerId's refusals, with what to do about the two-phase ones."""
    if code is E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return (
            f"the broker refused a two-phase commit transaction for {tid} "
            "(KIP-939): set transaction.two.phase.commit.enable=true on the brokers "
            "(and grant the transactional id), or set option exactlyOnce=false"
        )
    return f"InitProducerId of {tid} failed: {code.name}"
