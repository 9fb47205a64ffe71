"""The transaction coordinator of one broker: the shards of the ``__transaction_state``
partitions it leads, and the checks before any shard is asked.

"The leader of that partition is its coordinator": `begin_load` / `load` when this broker
becomes leader of a partition at a leader epoch (the coordinator epoch), `unload` when it
stops. A request for a transactional id whose partition is loading answers
COORDINATOR_LOAD_IN_PROGRESS, one whose partition this broker does not lead
NOT_COORDINATOR (Kafka's ``getTransactionState``). Requests waiting for a write of an
unloaded shard answer NOT_COORDINATOR at once; their writes' completions are ignored.

Request-level checks, as Kafka's ``TransactionCoordinator`` and ``KafkaApis`` do them:
an InitProducerId without a transactional id gets a producer id at epoch 0 (the
idempotent producer); an empty transactional id is INVALID_REQUEST; a transaction timeout
not in (0, ``transaction.max.timeout.ms``] is INVALID_TRANSACTION_TIMEOUT; PRODUCER_FENCED
becomes INVALID_PRODUCER_EPOCH for the versions that predate it.

KIP-939 (InitProducerId v6): ``Enable2Pc`` makes the transaction a two-phase commit
participant whose timeout is Int.MaxValue ("such transactions have no timeout"; the
timeout asked for is not checked), refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
unless ``transaction.two.phase.commit.enable`` ("2PC functionality is disabled, clients
that attempt to use this functionality would receive an authorization failed error");
``KeepPreparedTxn`` keeps an Ongoing transaction for the new client instead of aborting it
("keepPreparedTxn can only be specified in the initial call of InitProducerId, so no
expected producerId / epoch should be set": INVALID_REQUEST otherwise), and needs
transaction.version 2 (its record carries the kept client's epoch in a tagged field):
UNSUPPORTED_VERSION below it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import re2

from riverbed.coordinator.records import partition_for
from riverbed.protocol.errors import ErrorCode
from riverbed.transaction.api import (
    Answer,
    Described,
    Listed,
    ListFilter,
    Matcher,
    PartitionsResult,
    ProducerIdAllocator,
    Step,
    TxnConfig,
    TxnResult,
    fenced_for_version,
)
from riverbed.transaction.markers import BrokerMarkers, LeaderOf, MarkerRequest, per_broker
from riverbed.transaction.records import TWO_PHASE_TIMEOUT_MS, TopicPartition, TxnState
from riverbed.transaction.shard import TransactionShard

E = ErrorCode
OFFSETS_TOPIC = "__consumer_offsets"
#: The first version of each API that knows PRODUCER_FENCED (KafkaApis).
INIT_PRODUCER_ID_FENCED_VERSION = 4
END_TXN_FENCED_VERSION = 2
ADD_PARTITIONS_FENCED_VERSION = 2
ADD_OFFSETS_FENCED_VERSION = 2
#: EndTxn v5+ is TV2 (``TransactionVersion.transactionVersionForEndTxn``).
END_TXN_TV2_VERSION = 5
#: InitProducerId v6's (Enable2Pc, KeepPreparedTxn) (KIP-939).
TwoPhase = tuple[bool, bool]
NO_2PC: TwoPhase = (False, False)
#: RE2 options for clients' patterns: a bad one is answered, not logged to stderr.
_QUIET = re2.Options()
_QUIET.log_errors = False
#: Transactional ids one DescribeTransactions may name.
DESCRIBE_IDS_MAX = 10_000


def _map_fenced(step: Step, version: int, first: int) -> Step:
    answers = []
    for a in step.answers:
        r = a.result
        if isinstance(r, TxnResult):
            r = replace(r, error=fenced_for_version(r.error, version, first))
        else:
            r = PartitionsResult(
                tuple((tp, fenced_for_version(e, version, first)) for tp, e in r.errors)
            )
        answers.append(Answer(a.request_id, r))
    return Step(tuple(answers), step.writes)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, allocator: ProducerIdAllocator) -> None:
        self.config = config
        self.allocator = allocator
        self.shards: dict[int, TransactionShard] = {}
        #: partition -> the coordinator epoch being loaded
        self.loading: dict[int, int] = {}
        #: partitions whose shard may have markers (or a Complete record) due: a shard's
        #: markers add its partition, `plan_markers` drops it once none are left
        self._marking: set[int] = set()

    def partition_for(self, tid: str) -> int:
        return partition_for(tid, self.config.num_partitions)

    # ------------------------------------------------------------------ leadership
    def begin_load(self, partition: int, coordinator_epoch: int) -> Step:
        """Elected leader of ``partition`` at ``coordinator_epoch``: "ensure we remove all
        associated state for this partition before we continue loading it"."""
        step = self.unload(partition)
        self.loading[partition] = coordinator_epoch
        return step

    def load(
        self,
        partition: int,
        coordinator_epoch: int,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
    ) -> bool:
        """The partition's records, read up to its end; False (ignored) when the load is
        stale (another epoch began loading, or leadership left meanwhile)."""
        if self.loading.get(partition) != coordinator_epoch:
            return False
        shard = TransactionShard(
            partition, coordinator_epoch, self.config, self.allocator, now_ms, self._marking
        )
        for key, value in records:
            shard.replay(key, value)
        shard.loaded()
        del self.loading[partition]
        self.shards[partition] = shard
        return True

    def unload(self, partition: int, coordinator_epoch: int | None = None) -> Step:
        """No longer the leader (``coordinator_epoch`` None: StopReplica, any epoch)."""
        shard = self.shards.get(partition)
        loading = self.loading.get(partition)
        if coordinator_epoch is None or loading == coordinator_epoch:
            self.loading.pop(partition, None)
        if shard is None or (
            coordinator_epoch is not None and shard.coordinator_epoch > coordinator_epoch
        ):
            return Step()
        del self.shards[partition]
        return Step(
            tuple(Answer(r, TxnResult(E.NOT_COORDINATOR)) for r in shard.pending_requests())
        )

    def _route(self, tid: str) -> TransactionShard | ErrorCode:
        partition = self.partition_for(tid)
        if partition in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return self.shards.get(partition, E.NOT_COORDINATOR)

    # ------------------------------------------------------------------ requests
    def init_producer_id(
        self,
        request_id: int,
        tid: str | None,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        version: int,
        now_ms: int,
        two_phase: TwoPhase = NO_2PC,
    ) -> Step:
        """InitProducerId; ``expected`` (v3+) is the (producer id, epoch) the client had,
        None when it sent -1/-1; ``two_phase`` the v6 flags."""
        step = self._init(request_id, tid, timeout_ms, expected, now_ms, two_phase)
        return _map_fenced(step, version, INIT_PRODUCER_ID_FENCED_VERSION)

    def _init(
        self,
        request_id: int,
        tid: str | None,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        two_phase: TwoPhase,
    ) -> Step:
        def reply(error: ErrorCode, pid: int = -1, epoch: int = -1) -> Step:
            return Step((Answer(request_id, TxnResult(error, pid, epoch)),))

        enable, keep = two_phase
        if tid is None and not (enable or keep):
            # "always blindly accept the request and return a new producerId"
            pid = self.allocator.allocate()
            return reply(E.COORDINATOR_LOAD_IN_PROGRESS) if pid is None else reply(E.NONE, pid, 0)
        if not tid or (keep and expected is not None):
            return reply(E.INVALID_REQUEST)
        if enable and not self.config.two_phase_commit_enable:
            return reply(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if keep and self.config.transaction_version_level < 2:
            return reply(E.UNSUPPORTED_VERSION)
        if enable:
            timeout_ms = TWO_PHASE_TIMEOUT_MS
        elif not 0 < timeout_ms <= self.config.max_timeout_ms:
            return reply(E.INVALID_TRANSACTION_TIMEOUT)
        shard = self._route(tid)
        if isinstance(shard, ErrorCode):
            return reply(shard)
        return shard.init_producer_id(request_id, tid, timeout_ms, expected, now_ms, keep)

    def add_partitions(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
        version: int,
        now_ms: int,
        client_tv: int = 0,
    ) -> Step:
        """AddPartitionsToTxn v0-3 from a client (``client_tv`` 0), or a v4-5 add that is
        not VerifyOnly from a broker under TV2 (``client_tv`` 2)."""
        shard = self._route(tid) if tid else E.INVALID_REQUEST
        if isinstance(shard, ErrorCode):
            return Step((Answer(request_id, PartitionsResult.of(partitions, shard)),))
        step = shard.add_partitions(
            request_id, tid, producer_id, producer_epoch, partitions, now_ms, client_tv
        )
        return _map_fenced(step, version, ADD_PARTITIONS_FENCED_VERSION)

    def verify_partitions(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> Step:
        """AddPartitionsToTxn v4-5 VerifyOnly from a partition leader (KIP-890)."""
        shard = self._route(tid) if tid else E.INVALID_REQUEST
        if isinstance(shard, ErrorCode):
            return Step((Answer(request_id, PartitionsResult.of(partitions, shard)),))
        return shard.verify_partitions(request_id, tid, producer_id, producer_epoch, partitions)

    def add_offsets(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        version: int,
        now_ms: int,
    ) -> Step:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction (KafkaApis: ``handleAddPartitionsToTransaction`` with that partition)."""
        shard = self._route(tid) if tid else E.INVALID_REQUEST
        if isinstance(shard, ErrorCode):
            return Step((Answer(request_id, TxnResult(shard)),))
        tp = (OFFSETS_TOPIC, partition_for(group_id, self.config.offsets_num_partitions))
        step = shard.add_partitions(
            request_id, tid, producer_id, producer_epoch, frozenset({tp}), now_ms, offsets=True
        )
        return _map_fenced(step, version, ADD_OFFSETS_FENCED_VERSION)

    def end_txn(
        self,
        request_id: int,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        version: int,
        now_ms: int,
    ) -> Step:
        shard = self._route(tid) if tid else E.INVALID_REQUEST
        if isinstance(shard, ErrorCode):
            return Step((Answer(request_id, TxnResult(shard)),))
        client_tv = 2 if version >= END_TXN_TV2_VERSION else 0
        step = shard.end_txn(
            request_id, tid, producer_id, producer_epoch, commit, client_tv, now_ms
        )
        return _map_fenced(step, version, END_TXN_FENCED_VERSION)

    # ------------------------------------------------------------------ writes, timers, markers
    def complete_write(
        self, partition: int, coordinator_epoch: int, token: int, code: ErrorCode, now_ms: int
    ) -> Step:
        shard = self.shards.get(partition)
        if shard is None or shard.coordinator_epoch != coordinator_epoch:
            return Step()  # unloaded: its requests were answered NOT_COORDINATOR
        return shard.complete_write(token, code, now_ms)

    def tick(self, now_ms: int) -> Step:
        step = Step()
        for shard in self.shards.values():
            step += shard.tick(now_ms)
        return step

    def plan_markers(self, leader_of: LeaderOf, now_ms: int) -> tuple[list[MarkerRequest], Step]:
        """Each shard's marker requests (one per leader broker), and the Complete records
        now due; `plan_broker_markers` merges them into one request per broker. A shard
        without a transaction being completed has neither (its Complete records follow
        its markers), so only those shards are asked: the partitions in ``_marking``
        (planning runs after every write and marker answer; most of the 50 are idle)."""
        requests: list[MarkerRequest] = []
        step = Step()
        for partition in sorted(self._marking):
            shard = self.shards.get(partition)
            if shard is None or not shard.markers:  # unloaded, or nothing due any more
                self._marking.discard(partition)
                continue
            r, s = shard.plan_markers(leader_of, now_ms)
            requests += r
            step += s
        return requests, step

    def plan_broker_markers(
        self, leader_of: LeaderOf, now_ms: int
    ) -> tuple[list[BrokerMarkers], Step]:
        """One WriteTxnMarkers per broker for every shard (Kafka's channel manager
        drains all transactions' markers for a broker into one request)."""
        requests, step = self.plan_markers(leader_of, now_ms)
        return per_broker(requests), step

    def on_broker_markers_response(
        self,
        batch: BrokerMarkers,
        errors: dict[tuple[int, TopicPartition], ErrorCode],
        now_ms: int,
    ) -> Step:
        step = Step()
        for part in batch.parts:
            step += self.on_markers_response(part, errors, now_ms)
        return step

    def on_broker_markers_failed(self, batch: BrokerMarkers) -> None:
        for part in batch.parts:
            self.on_markers_failed(part)

    def _marker_shard(self, request: MarkerRequest) -> TransactionShard | None:
        shard = self.shards.get(request.txn_partition)
        epoch = request.markers[0].coordinator_epoch if request.markers else -1
        return shard if shard is not None and shard.coordinator_epoch == epoch else None

    def on_markers_response(
        self,
        request: MarkerRequest,
        errors: dict[tuple[int, TopicPartition], ErrorCode],
        now_ms: int,
    ) -> Step:
        shard = self._marker_shard(request)
        if shard is None:
            return Step()
        return shard.on_markers_response(request.token, errors, now_ms)

    def on_markers_failed(self, request: MarkerRequest) -> None:
        shard = self._marker_shard(request)
        if shard is not None:
            shard.on_markers_failed(request.token)

    # ------------------------------------------------------------------ admin
    def describe(self, tids: list[str]) -> list[Described]:
        """DescribeTransactions: one entry per id (INVALID_REQUEST for an empty one)."""
        out = []
        for tid in tids[:DESCRIBE_IDS_MAX]:
            shard = self._route(tid) if tid else E.INVALID_REQUEST
            if isinstance(shard, ErrorCode):
                out.append(Described(tid, shard))
            else:
                out.append(shard.describe(tid))
        return out

    def list(self, f: ListFilter, now_ms: int) -> tuple[ErrorCode, list[Listed], list[str]]:
        """ListTransactions: (error, transactions, unknown state filters);
        COORDINATOR_LOAD_IN_PROGRESS while any partition loads. The id pattern (v2,
        KIP-1152) is "empowered with Re2j": RE2 here (linear time, so a client's pattern
        cannot stall the coordinator), INVALID_REGULAR_EXPRESSION when it does not
        compile."""
        unknown = sorted(n for n in f.states if TxnState.from_name(n) is None)
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], unknown
        try:  # "if it is empty or null, all transactions are returned"
            pattern: Matcher | None = re2.compile(f.id_pattern, _QUIET) if f.id_pattern else None
        except re2.error:
            return E.INVALID_REGULAR_EXPRESSION, [], unknown
        listed: list[Listed] = []
        for _, shard in sorted(self.shards.items()):
            listed += shard.list(f, pattern, now_ms)
        return E.NONE, listed, unknown
