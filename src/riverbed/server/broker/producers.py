"""InitProducerId and DescribeProducers, and the broker's supply of producer id blocks.

InitProducerId without a transactional id answers a fresh producer id with epoch 0, as
Kafka's ``TransactionCoordinator.handleInitProducerId`` does for idempotent producers: a
producer that sends its old id and epoch (KIP-360, after an UNKNOWN_PRODUCER_ID or an
epoch exhaustion) gets a new id too; idempotent clients bump their epoch locally for
sequence resets, which the partition's producer state accepts when the new epoch starts
at sequence 0. Transactional ids go to the transaction coordinator
(`riverbed.server.broker.transactions`), which takes its ids from the same blocks
(`BrokerProducerIds.allocate`). Ids come from blocks the active controller allocates
(:mod:`riverbed.metadata.producer_id_control`); the next block is fetched when 90 % of
the current one is used, and a request that finds no id waits for it at most
``PRODUCER_ID_WAIT_S`` (then COORDINATOR_LOAD_IN_PROGRESS, retriable, as Kafka answers).

DescribeProducers answers, per partition, the active producers of its producer state
(id, epoch, last sequence, last timestamp, coordinator epoch, open transaction start),
plus riverbed's ledger counts as a tagged field Kafka clients skip
(``LEDGER_STATS_TAG``: JSON of ledger ids, files, filter fill, cache hit rate,
false-positive checks; read by ``riverbed producers describe``). Only the partition's
leader answers (a follower or another node: NOT_LEADER_OR_FOLLOWER), as in Kafka.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import TYPE_CHECKING, Final

from riverbed.metadata.control_common import ControllerError
from riverbed.producer.id_blocks import IdBlock, ProducerIdBlocks
from riverbed.producer.manager import ProducerStateManager
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AllocateProducerIdsRequest,
    DescribeProducersRequest,
    DescribeProducersResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from riverbed.raft.node import NotLeaderError
from riverbed.server.backoff import ExponentialBackoff, Retrier
from riverbed.server.broker.hosted import NotServed, producer_state_of
from riverbed.server.broker.transactions import init_transactional_producer_id
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.network import RequestContext
from riverbed.server.supervise import supervise

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker
    from riverbed.server.quorum import QuorumMetadata

log = logging.getLogger(__name__)

#: Longest an InitProducerId waits for a block from the controller.
PRODUCER_ID_WAIT_S: Final = 10.0
#: Tag of riverbed's ledger counts in DescribeProducersResponse.PartitionResponse (tags
#: unknown to a client are skipped by it; Kafka's spec defines none there).
LEDGER_STATS_TAG: Final = 10_000
#: Pause between attempts to get a block (controller moving, broker not registered yet):
#: doubling from the first to the most, with jitter.
ALLOCATE_RETRY_BACKOFF_MS: Final = 100
ALLOCATE_RETRY_BACKOFF_MAX_MS: Final = 2_000
ALLOCATE_BACKOFF: Final = ExponentialBackoff(
    ALLOCATE_RETRY_BACKOFF_MS, ALLOCATE_RETRY_BACKOFF_MAX_MS
)


class ProducerIdsUnavailable(Exception):
    pass


class BrokerProducerIds:
    """The shell around :class:`ProducerIdBlocks`: fetches blocks via the metadata quorum."""

    def __init__(
        self,
        node_id: int,
        metadata: QuorumMetadata,
        *,
        fault_handler: FaultHandler | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = node_id
        self.metadata = metadata
        #: the prefetch task's unexpected errors halt the node (``supervise``)
        self.fault_handler: FaultHandler = fault_handler or ProcessTerminatingFaultHandler(node_id)
        self.rng = rng or random.Random()
        self.blocks = ProducerIdBlocks()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def next_id(self, wait_s: float = PRODUCER_ID_WAIT_S) -> int:
        pid = self.blocks.next_id()
        if pid is None:
            # wait_for, not asyncio.timeout: a request's first step runs in the reading
            # task (`riverbed.server.eager_start`), which a timeout would cancel
            pid = await asyncio.wait_for(self._fetch_id(), wait_s)
        self._prefetch()
        return pid

    async def _fetch_id(self) -> int:
        while (pid := self.blocks.next_id()) is None:
            await self._fetch()
        return pid

    def allocate(self) -> int | None:
        """The transaction coordinator's allocator (`ProducerIdAllocator`): an id at once,
        or None while no block is here (a fetch is started; the client retries)."""
        pid = self.blocks.next_id()
        self._prefetch()
        return pid

    async def wait_available(self, wait_s: float = PRODUCER_ID_WAIT_S) -> bool:
        """Wait (at most ``wait_s``) until an id can be handed out without waiting, so that
        a transactional InitProducerId rarely answers COORDINATOR_LOAD_IN_PROGRESS."""
        try:
            await asyncio.wait_for(self._fetch_until_available(), wait_s)  # (as next_id)
        except TimeoutError:
            return False
        return True

    async def _fetch_until_available(self) -> None:
        while not self.blocks.has_id():
            await self._fetch()

    def _prefetch(self) -> None:
        if self.blocks.needs_prefetch() and (self._task is None or self._task.done()):
            self._task = supervise("producer id block prefetch", self._fetch(), self.fault_handler)

    async def _fetch(self) -> None:
        async with self._lock:
            if not self.blocks.needs_prefetch():
                return  # another waiter got the block meanwhile
            self.blocks.fetching = True
            try:
                block = await self._allocate()
            finally:
                self.blocks.fetching = False
            self.blocks.add_block(block)
            log.info("producer id block [%d, %d)", block.start, block.end)

    async def _allocate(self) -> IdBlock:
        retrier = Retrier(ALLOCATE_BACKOFF, self.rng)
        while True:
            reg = self.metadata.image.brokers.get(self.node_id)
            request = AllocateProducerIdsRequest(
                broker_id=self.node_id, broker_epoch=reg.broker_epoch if reg else -1
            )
            try:
                resp = await self.metadata.allocate_producer_ids(request)
            except (NotLeaderError, TimeoutError, OSError, ControllerError) as exc:
                log.debug("AllocateProducerIds failed (controller moving): %r", exc)
                await asyncio.sleep(retrier.failed() / 1000)
                continue
            if resp.error_code == 0 and resp.producer_id_len > 0:
                return IdBlock(resp.producer_id_start, resp.producer_id_len)
            log.debug("AllocateProducerIds: %s", ErrorCode.of(resp.error_code).name)
            await asyncio.sleep(retrier.failed() / 1000)


async def handle_init_producer_id(
    broker: Broker, ctx: RequestContext, req: InitProducerIdRequest
) -> InitProducerIdResponse:
    if req.transactional_id is not None:
        return await init_transactional_producer_id(broker, ctx, req)
    if req.enable2_pc or req.keep_prepared_txn:  # KIP-939 flags need a transactional id
        return InitProducerIdResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), producer_id=-1, producer_epoch=-1
        )
    try:
        pid = await broker.producer_ids.next_id()
    except TimeoutError:
        return InitProducerIdResponse(
            error_code=int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
            producer_id=-1,
            producer_epoch=-1,
        )
    return InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=0)


def ledger_stats_json(state: ProducerStateManager) -> bytes:
    ledger, hit_rate, cached = state.stats()
    return json.dumps(
        {
            "ledger_entries": ledger.active_entries + ledger.sealed_entries,
            "active_entries": ledger.active_entries,
            "files": ledger.sealed_files,
            "active_filter_fill": round(ledger.filter_fill, 4),
            "filter_bytes": ledger.filter_bytes,
            "cached_entries": cached,
            "cache_hit_rate": round(hit_rate, 4),
            "reads": ledger.reads,
            "filter_checks": ledger.filter_checks,
            "false_positive_checks": ledger.false_positive_checks,
        }
    ).encode()


async def handle_describe_producers(
    broker: Broker, ctx: RequestContext, req: DescribeProducersRequest
) -> DescribeProducersResponse:
    topics = []
    for t in req.topics:
        parts = []
        for index in t.partition_indexes:
            hosted = broker.partitions.leader_partition(t.name, index)
            if isinstance(hosted, NotServed):  # the leader's producer state only (Kafka)
                parts.append(
                    DescribeProducersResponse.PartitionResponse(
                        partition_index=index, error_code=int(hosted.error), active_producers=[]
                    )
                )
                continue
            state = producer_state_of(hosted.log)
            entries = state.describe() if state is not None else []
            parts.append(
                part := DescribeProducersResponse.PartitionResponse(
                    partition_index=index,
                    error_code=0,
                    active_producers=[
                        DescribeProducersResponse.ProducerState(
                            producer_id=e.producer_id,
                            producer_epoch=e.epoch,
                            last_sequence=e.last_seq,
                            last_timestamp=e.last_timestamp,
                            coordinator_epoch=e.coordinator_epoch,
                            current_txn_start_offset=e.current_txn_first_offset,
                        )
                        for e in sorted(entries, key=lambda e: e.producer_id)
                    ],
                )
            )
            if state is not None:
                part._unknown_tagged_fields = [(LEDGER_STATS_TAG, ledger_stats_json(state))]
        topics.append(DescribeProducersResponse.TopicResponse(name=t.name, partitions=parts))
    return DescribeProducersResponse(topics=topics)
