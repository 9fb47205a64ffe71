"""The transaction coordinator's marker sender: WriteTxnMarkers to partition leaders.

Kafka's ``TransactionMarkerChannelManager``: the coordinator core plans one request per
leader broker for every transaction whose markers are due ("batched per broker",
`riverbed.transaction.markers`); this shell sends each over a connection to that broker's
inter-broker listener, one request in flight per broker (the next plan sends what is
left), and hands the answer back to the core: an error per (producer id, partition), or
"lost" (disconnected, timed out, refused as a whole), after which the partitions are
planned again. A broker whose request was lost is not sent to again until its back-off
(``ExponentialBackoff``, doubling with jitter) has passed: its partitions wait, as for a
leader that is unavailable. Markers for the partitions this node leads itself are
written in-process (``local``: the broker's WriteTxnMarkers handling without the
request's encoding, socket round trip and decoding; Kafka sends them over the network
to itself too): the same appends with the same acks=-1 wait, several event-loop hops
fewer between a transaction's PrepareCommit and its Complete record, which the
producer's next transaction waits for (its first AddPartitionsToTxn).

The request is WriteTxnMarkers v1 (flexible), the version Kafka 4.x's coordinators send.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import Message, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from riverbed.server.backoff import ExponentialBackoff, Retrier
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.replication.fetcher import BrokerChannel, Channel
from riverbed.transaction.markers import BrokerMarkers
from riverbed.transaction.records import TopicPartition

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage

log = logging.getLogger(__name__)

#: WriteTxnMarkers version sent (v1: flexible, Kafka 4.x).
WRITE_TXN_MARKERS_VERSION: Final = 1
#: Back-off before a broker whose marker request was lost is sent to again.
MARKER_RETRY_BACKOFF_MS: Final = 100
MARKER_RETRY_BACKOFF_MAX_MS: Final = 5_000
#: Largest WriteTxnMarkers response frame read (a few bytes per partition).
MARKER_RESPONSE_BYTES_MAX: Final = 16 * 1024 * 1024
#: The connection errors of one exchange: the request is lost, the connection closed.
LOST = (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError, ConnectionError)

MarkerErrors = dict[tuple[int, TopicPartition], ErrorCode]
#: The broker's own WriteTxnMarkers handling, called in-process for this node's partitions.
LocalMarkers = Callable[[WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse]]


class ImageSource(Protocol):
    @property
    def image(self) -> MetadataImage: ...


def marker_request(batch: BrokerMarkers) -> WriteTxnMarkersRequest:
    R = WriteTxnMarkersRequest
    markers = []
    for m in batch.markers:
        topics: dict[str, list[int]] = {}
        for topic, partition in m.partitions:
            topics.setdefault(topic, []).append(partition)
        markers.append(
            R.WritableTxnMarker(
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                transaction_result=m.committed,
                topics=[
                    R.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()
                ],
                coordinator_epoch=m.coordinator_epoch,
            )
        )
    return R(markers=markers)


def marker_errors(response: WriteTxnMarkersResponse) -> MarkerErrors:
    return {
        (m.producer_id, (t.name, p.partition_index)): ErrorCode.of(p.error_code)
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }


class MarkerSender:
    """Connections to partition leaders and their back-offs (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        metadata: ImageSource,
        listener: str,
        now_ms: Callable[[], int],
        timeout_ms: int,
        *,
        channel_factory: Callable[[int], Channel | None] | None = None,
        rng: random.Random | None = None,
        security: ClientSecurity = PLAINTEXT_CLIENT,
        local: LocalMarkers | None = None,
    ) -> None:
        self.node_id = node_id
        self.fault_handler: FaultHandler = ProcessTerminatingFaultHandler(node_id)
        #: this node's own marker writes (None: over the network like any broker's)
        self.local = local
        #: the inter-broker listener's protocol and this broker's login (issue 20)
        self.security = security
        self.metadata = metadata
        self.listener = listener
        self.now_ms = now_ms
        self.timeout_ms = timeout_ms
        self.channel_factory = channel_factory
        self.backoff = ExponentialBackoff(MARKER_RETRY_BACKOFF_MS, MARKER_RETRY_BACKOFF_MAX_MS)
        self.rng = rng or random.Random()
        self._channels: dict[int, Channel] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._retriers: dict[int, Retrier] = {}
        self._waiting_until_ms: dict[int, int] = {}
        #: batches answered / lost (for tests and logs)
        self.answered = 0
        self.lost = 0

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The core's ``leader_of``: the partition's leader, -1 when it has none now or
        its broker cannot be sent to now, None when the partition does not exist."""
        image = self.metadata.image
        reg = image.partition(*tp)
        if reg is None:
            return None
        broker = image.brokers.get(reg.leader)
        if broker is None or broker.fenced or broker.endpoint(self.listener) is None:
            return -1
        if self._waiting_until_ms.get(reg.leader, 0) > self.now_ms():
            return -1
        return reg.leader

    def _channel(self, broker_id: int) -> Channel | None:
        channel = self._channels.get(broker_id)
        if channel is not None:
            return channel
        if self.channel_factory is not None:
            channel = self.channel_factory(broker_id)
        else:
            reg = self.metadata.image.brokers.get(broker_id)
            ep = reg.endpoint(self.listener) if reg is not None else None
            if ep is None:
                return None
            client_id = f"txn-marker-sender-{self.node_id}"
            channel = BrokerChannel(
                ep.host,
                ep.port,
                client_id,
                MARKER_RESPONSE_BYTES_MAX,
                self.security,
                fault_handler=self.fault_handler,
            )
        if channel is not None:
            self._channels[broker_id] = channel
        return channel

    async def send(self, batch: BrokerMarkers) -> MarkerErrors | None:
        """The answer to ``batch``: an error per (producer id, partition), or None when
        the request was lost (the broker then backs off)."""
        broker_id = batch.broker_id
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:  # one request in flight per connection
            if broker_id == self.node_id and self.local is not None:
                return await self._send_locally(batch)
            channel = self._channel(broker_id)
            response: Message | None = None
            if channel is not None:
                try:
                    response = await channel.request(
                        ApiKey.WRITE_TXN_MARKERS,
                        WRITE_TXN_MARKERS_VERSION,
                        marker_request(batch),
                        self.timeout_ms / 1000,
                    )
                except LOST as exc:
                    log.info("WriteTxnMarkers to broker %d lost: %r", broker_id, exc)
                    channel.close()
                    self._channels.pop(broker_id, None)
            if not isinstance(response, WriteTxnMarkersResponse):
                self._lost(broker_id)
                return None
            self._retriers.pop(broker_id, None)
            self._waiting_until_ms.pop(broker_id, None)
            self.answered += 1
            return marker_errors(response)

    async def _send_locally(self, batch: BrokerMarkers) -> MarkerErrors | None:
        assert self.local is not None
        try:
            response = await self.local(marker_request(batch))
        except Exception:  # what dispatch answers UNKNOWN_SERVER_ERROR over the network
            log.exception("writing transaction markers on this node failed")
            self._lost(batch.broker_id)
            return None
        self._retriers.pop(batch.broker_id, None)
        self._waiting_until_ms.pop(batch.broker_id, None)
        self.answered += 1
        return marker_errors(response)

    def _lost(self, broker_id: int) -> None:
        self.lost += 1
        retrier = self._retriers.setdefault(broker_id, Retrier(self.backoff, self.rng))
        self._waiting_until_ms[broker_id] = self.now_ms() + retrier.failed()

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
