"""KIP-890: the partition leader verifies (part 1) or adds (part 2) a transaction's
partition with its coordinator.

Before a producer's first transactional append of a transaction to a partition (its
transaction is not open in the partition), the leader asks the transaction coordinator
of the produce's ``transactional_id`` whether that transaction is ongoing and includes
the partition: AddPartitionsToTxn v4 with ``verify_only`` (Kafka's
``AddPartitionsToTxnManager``), batched per coordinator broker (one request in flight
per broker; the verifications waiting meanwhile go in the next request, one entry per
transactional id). The coordinator is the leader of ``__transaction_state-<p>``; when
that is this node the core is asked directly.

The producer state's guard (``ProducerStateManager.begin_verification``) is taken before
asking and checked right before the append: a marker of the producer meanwhile means the
verified transaction ended, and the produce is refused (INVALID_TXN_STATE), so a late
or retried produce after an abort never opens a transaction that hangs the LSO.

Part 2 (transaction.version 2): a Produce v12+ does not follow an AddPartitionsToTxn of
the client's; the leader adds the partition to the transaction itself, with
AddPartitionsToTxn v5 without ``verify_only`` (Kafka's ``TransactionSupportedOperation``
``addPartition`` for "produce request version > 11"), which the coordinator takes as a TV2
add (the first add of a transaction starts it). Such adds happen whether or not
``transaction.partition.verification.enable`` is set: nothing else would add them.

Errors, as Kafka's ``ReplicaManager`` maps them for Produce: CONCURRENT_TRANSACTIONS,
NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and
NOT_COORDINATOR become NOT_ENOUGH_REPLICAS (retried by every client without a metadata
refresh); PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE becomes
INVALID_TXN_STATE for Produce versions below 11 (which do not know it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from riverbed.coordinator.records import TRANSACTION_STATE_TOPIC, partition_for
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from riverbed.server.broker.transactions import add_locally, verify_locally
from riverbed.server.replication.fetcher import BrokerChannel, Channel

if TYPE_CHECKING:
    from riverbed.server.broker.dispatch import Broker

__all__ = ["TxnVerifier", "produce_error"]

log = logging.getLogger(__name__)

E = ErrorCode
#: AddPartitionsToTxn version of a broker's verification (batched, VerifyOnly).
VERIFY_VERSION: Final = 4
#: AddPartitionsToTxn version of a broker's TV2 add (KIP-890 part 2).
ADD_VERSION: Final = 5
#: Transactions in one verification request (Kafka's handler takes up to 10,000).
VERIFY_TRANSACTIONS_MAX: Final = 1000
#: Largest AddPartitionsToTxn response frame read.
VERIFY_RESPONSE_BYTES_MAX: Final = 16 * 1024 * 1024
#: Produce versions from this one on know TRANSACTION_ABORTABLE (KIP-890).
PRODUCE_TRANSACTION_ABORTABLE_VERSION: Final = 11
_LOST = (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError, ConnectionError)
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        E.CONCURRENT_TRANSACTIONS,
        E.NETWORK_EXCEPTION,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
    }
)


def produce_error(code: ErrorCode, produce_version: int) -> ErrorCode:
    """The Produce answer for a coordinator's verification error (module docstring)."""
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return E.NOT_ENOUGH_REPLICAS
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code == E.TRANSACTION_ABORTABLE and produce_version < PRODUCE_TRANSACTION_ABORTABLE_VERSION:
        return E.INVALID_TXN_STATE
    return code


@dataclass
class _Pending:
    tid: str
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    answer: asyncio.Future[ErrorCode] = field(repr=False)
    add: bool = False  # a TV2 add (Produce v12+), not VerifyOnly


class TxnVerifier:
    """Verifications of one broker, batched per coordinator broker."""

    def __init__(
        self, broker: Broker, channel_factory: Callable[[int], Channel | None] | None = None
    ) -> None:
        self.broker = broker
        self.listener = broker.config.inter_broker_listener_name
        #: connections to other brokers (tests inject their own)
        self.channel_factory = channel_factory
        self._pending: dict[int, list[_Pending]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._channels: dict[int, Channel] = {}
        self.requests_sent = 0  # for tests: requests to other brokers

    def enabled(self) -> bool:
        return bool(self.broker.config.get("transaction.partition.verification.enable"))

    def _coordinator_of(self, tid: str) -> int | None:
        image = self.broker.metadata.image
        n = self.broker.config.get_int("transaction.state.log.num.partitions")
        reg = image.partition(TRANSACTION_STATE_TOPIC, partition_for(tid, n))
        if reg is None or reg.leader < 0:
            return None
        return int(reg.leader)

    async def verify(
        self, tid: str, pid: int, epoch: int, topic: str, partition: int, add: bool = False
    ) -> ErrorCode:
        """The coordinator's answer for one partition of ``tid``'s transaction (``add``:
        a TV2 add of the partition rather than a check that it is in)."""
        node = self._coordinator_of(tid)
        if node is None:
            return E.COORDINATOR_NOT_AVAILABLE
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        pending = _Pending(tid, pid, epoch, topic, partition, fut, add)
        self._pending.setdefault(node, []).append(pending)
        lock = self._locks.setdefault(node, asyncio.Lock())
        while not fut.done():
            async with lock:  # one request per coordinator in flight; it takes all waiting
                if not fut.done():
                    await self._send(node, self._take(node))
        return fut.result()

    def _take(self, node: int) -> list[_Pending]:
        """The waiting verifications for ``node``: one per transactional id (another of
        the same id waits for the next request)."""
        waiting = self._pending.get(node, [])
        batch: list[_Pending] = []
        later: list[_Pending] = []
        seen: set[str] = set()
        for p in waiting:
            if p.tid in seen or len(batch) >= VERIFY_TRANSACTIONS_MAX:
                later.append(p)
            else:
                seen.add(p.tid)
                batch.append(p)
        self._pending[node] = later
        return batch

    async def _send(self, node: int, batch: list[_Pending]) -> None:
        if node == self.broker.node_id:
            results = await self._ask_local(batch)
        else:
            results = await self._ask_remote(node, batch)
        for p in batch:
            if not p.answer.done():
                p.answer.set_result(results.get((p.tid, p.topic, p.partition), E.NONE))

    async def _ask_local(self, batch: list[_Pending]) -> dict[tuple[str, str, int], ErrorCode]:
        out: dict[tuple[str, str, int], ErrorCode] = {}
        for p in batch:
            ask = add_locally if p.add else verify_locally
            errors = await ask(
                self.broker, p.tid, p.producer_id, p.producer_epoch, {(p.topic, p.partition)}
            )
            for (topic, index), code in errors.items():
                out[(p.tid, topic, index)] = code
        return out

    def _request(self, batch: list[_Pending]) -> AddPartitionsToTxnRequest:
        R = AddPartitionsToTxnRequest
        return R(
            transactions=[
                R.AddPartitionsToTxnTransaction(
                    transactional_id=p.tid,
                    producer_id=p.producer_id,
                    producer_epoch=p.producer_epoch,
                    verify_only=not p.add,
                    topics=[R.AddPartitionsToTxnTopic(name=p.topic, partitions=[p.partition])],
                )
                for p in batch
            ]
        )

    async def _ask_remote(
        self, node: int, batch: list[_Pending]
    ) -> dict[tuple[str, str, int], ErrorCode]:
        def all_of(code: ErrorCode) -> dict[tuple[str, str, int], ErrorCode]:
            return {(p.tid, p.topic, p.partition): code for p in batch}

        channel = self._channel(node)
        if channel is None:
            return all_of(E.COORDINATOR_NOT_AVAILABLE)
        timeout_s = self.broker.config.get_int("request.timeout.ms") / 1000
        try:
            self.requests_sent += 1
            version = ADD_VERSION if any(p.add for p in batch) else VERIFY_VERSION
            response = await channel.request(
                ApiKey.ADD_PARTITIONS_TO_TXN, version, self._request(batch), timeout_s
            )
        except _LOST as exc:
            log.info("transaction verification with broker %d lost: %r", node, exc)
            channel.close()
            self._channels.pop(node, None)
            return all_of(E.NETWORK_EXCEPTION)
        if not isinstance(response, AddPartitionsToTxnResponse):
            return all_of(E.NETWORK_EXCEPTION)
        if response.error_code:
            code = E.of(response.error_code)
            # Kafka: "The client should not be exposed to CLUSTER_AUTHORIZATION_FAILED"
            return all_of(E.INVALID_TXN_STATE if code == E.CLUSTER_AUTHORIZATION_FAILED else code)
        out: dict[tuple[str, str, int], ErrorCode] = {}
        for t in response.results_by_transaction:
            for topic in t.topic_results:
                for r in topic.results_by_partition:
                    key = (t.transactional_id, topic.name, r.partition_index)
                    out[key] = E.of(r.partition_error_code)
        return out

    def _channel(self, node: int) -> Channel | None:
        channel = self._channels.get(node)
        if channel is not None:
            return channel
        if self.channel_factory is not None:
            channel = self.channel_factory(node)
        else:
            reg = self.broker.metadata.image.brokers.get(node)
            ep = reg.endpoint(self.listener) if reg is not None else None
            if ep is None:
                return None
            client_id = f"txn-verifier-{self.broker.node_id}"
            channel = BrokerChannel(
                ep.host,
                ep.port,
                client_id,
                VERIFY_RESPONSE_BYTES_MAX,
                fault_handler=self.broker.partitions.fault_handler,
            )
        if channel is not None:
            self._channels[node] = channel
        return channel

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
