"""Replica fetchers: followers pull the leader's log with Fetch (``replica_id`` >= 0).

Each hosted follower partition is assigned to one fetcher per source broker:
``num.replica.fetchers`` fetchers per leader, a partition's fetcher chosen by a stable hash
of (topic, partition). A fetcher is one asyncio task with one connection to the leader's
inter-broker listener and one Fetch (v15: ReplicaState with this broker's epoch, KIP-903,
so a leader refuses a stale incarnation; LastFetchedEpoch, CurrentLeaderEpoch; the
answer may carry a DivergingEpoch) in flight for all its partitions:
``replica.fetch.wait.max.ms`` / ``replica.fetch.min.bytes`` let the leader park it,
``replica.fetch.max.bytes`` bounds each partition, ``replica.fetch.response.max.bytes``
the response. What a response means for each partition (append, truncate, high
watermark, back-off) is the partition core's decision (``riverbed.replication.follower``).

Retries back off, bounded and exponential with jitter (``riverbed.server.backoff``), from
``replica.fetch.backoff.ms`` up to ``REPLICA_FETCH_BACKOFF_MAX_MS``: a failed connection
or a top-level error backs the whole fetcher off; a batch the local log refuses (corrupt,
out of order, too large, its log dir offline: a ``StorageError``) delays that partition
alone (Kafka's ``delayPartitions``) and the others go on. Any other error is a fault: the
fetcher runs under ``supervise`` and halts the node rather than stop fetching quietly.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

from riverbed.metadata.records import ZERO_UUID
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import FetchRequest, FetchResponse, Message
from riverbed.replication.actions import FetchAnswer, FetchPosition, FetchResult
from riverbed.server.backoff import ExponentialBackoff, Retrier
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity
from riverbed.server.fault_handler import FaultHandler
from riverbed.server.inter_broker import connect
from riverbed.server.replication import cycle_trace
from riverbed.server.supervise import guarded, supervise
from riverbed.storage.errors import StorageError

if TYPE_CHECKING:
    from riverbed.server.replication.manager import ReplicaManager

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: KIP-903: v15 carries the follower's broker epoch (ReplicaState); topics by id (v13+).
REPLICA_FETCH_VERSION = 15
_SIZE = struct.Struct(">i")
#: Upper bound on a response frame a fetcher accepts (replica.fetch.response.max.bytes
#: plus headers); a larger one is a protocol error and the connection is dropped.
FRAME_SLACK_BYTES = 1 << 20
#: Pause of a fetcher with partitions that all back off (no request to send).
IDLE_POLL_S = 0.05
#: Longest back-off of a fetcher or of one refused partition (``replica.fetch.backoff.ms``
#: doubles up to this): a leader that heals is fetched from again within it.
REPLICA_FETCH_BACKOFF_MAX_MS: Final = 10_000
#: Errors of one exchange with the leader that end the connection: reconnect after back-off.
CONNECTION_ERRORS = (OSError, TimeoutError, asyncio.IncompleteReadError, ProtocolError)

Sleep = Callable[[float], Awaitable[None]]


class Channel(Protocol):
    """A connection to the leader, one request at a time."""

    async def request(
        self, api_key: int, version: int, body: Message, timeout_s: float
    ) -> Message: ...

    def close(self) -> None: ...


class BrokerChannel:
    """One connection to another broker, one request at a time.

    The request timeout is one watchdog timer per channel, moved on lazily (as the
    network layer's idle watch): a request only stamps its deadline. An
    ``asyncio.timeout`` per request cost a timer armed and cancelled on every replica
    fetch (~8 us, ~3% of a follower's CPU at replication factor 3). A request past its
    deadline has its connection aborted and raises TimeoutError, as the timeout did; the
    caller closes the channel either way.
    """

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        frame_bytes_max: int,
        security: ClientSecurity = PLAINTEXT_CLIENT,
        *,
        fault_handler: FaultHandler,
    ) -> None:
        self.host, self.port = host, port
        self.security = security
        self.client_id = client_id
        self._guarded_watch = guarded("inter-broker request watchdog", self._watch, fault_handler)
        self.frame_bytes_max = frame_bytes_max
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        #: when the connection's SASL session should be renewed (None: it does not end)
        self._renew_by: float | None = None
        self._correlation = 0
        #: the event loop's time by which the request in flight must be answered (0: none)
        self._deadline = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self._watch_at = 0.0  # when the watchdog looks next
        self._timed_out = False  # the watchdog aborted the connection

    async def request(self, api_key: int, version: int, body: Message, timeout_s: float) -> Message:
        now = asyncio.get_running_loop().time()
        deadline = now + timeout_s
        renew_by = self._renew_by
        if self._writer is not None and renew_by is not None and now >= renew_by:
            self.close()  # a new login before the leader's SASL session ends (KIP-368)
        if self._writer is None:  # (re)connecting is rare: a timeout of its own
            async with asyncio.timeout_at(deadline):
                login = await connect(self.host, self.port, self.security, self.client_id)
            self._reader, self._writer, self._renew_by = login.reader, login.writer, login.renew_by
        self._deadline = deadline
        if self._watchdog is None or self._watch_at > deadline:  # (a shorter timeout)
            self._arm(deadline)
        try:
            response = await self._exchange(api_key, version, body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            if self._timed_out:
                self.close()
                raise TimeoutError(
                    f"no answer from {self.host}:{self.port} in {timeout_s}s"
                ) from exc
            raise
        finally:
            self._deadline = 0.0
        if self._timed_out:
            # answered in the turn the watchdog aborted the connection (asyncio reads
            # before it runs due timers): the answer stands, the connection does not
            self.close()
        return response

    def _arm(self, at: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watch_at = at
        self._watchdog = asyncio.get_running_loop().call_at(at, self._guarded_watch)

    def _watch(self) -> None:
        """The watchdog's turn: idle, it stops (the next request starts it again); a
        request with time left, it waits for that deadline; one past it, its connection
        is aborted (the pending read or drain fails at once)."""
        self._watchdog = None
        deadline = self._deadline
        if deadline == 0.0 or self._writer is None:
            return
        if asyncio.get_running_loop().time() < deadline:
            self._arm(deadline)
            return
        self._timed_out = True
        self._writer.transport.abort()

    async def _exchange(self, api_key: int, version: int, body: Message) -> Message:
        assert self._reader is not None and self._writer is not None
        self._correlation += 1
        header = RequestHeader(api_key, version, self._correlation, self.client_id)
        self._writer.write(encode_request(header, body))
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 4 <= size <= self.frame_bytes_max:
            raise ConnectionError(f"response frame of {size} bytes from {self.host}:{self.port}")
        return decode_response(header, await self._reader.readexactly(size))

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._renew_by = None
        self._timed_out = False


class ReplicaFetcher:
    def __init__(
        self, manager: ReplicaManager, owner: ReplicaFetcherManager, leader_id: int
    ) -> None:
        self.manager = manager
        self.owner = owner
        self.leader_id = leader_id
        self.partitions: set[Key] = set()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.retrier = Retrier(owner.backoff, owner.rng)  # the connection / whole fetch
        self.refusals: dict[Key, Retrier] = {}  # partitions whose batch was refused
        self.delayed_until_ms: dict[Key, int] = {}

    def start(self) -> None:
        what = f"replica fetcher from broker {self.leader_id}"
        self.task = supervise(what, self._run(), self.manager.fault_handler)

    def positions(self) -> dict[Key, FetchPosition]:
        """What to fetch now: each partition's position (none: every one waits)."""
        now = self.manager.now_ms()
        return {
            key: pos
            for key in sorted(self.partitions)
            if self.delayed_until_ms.get(key, 0) <= now
            and (pos := self.manager.fetch_position(key)) is not None
        }

    async def _back_off(self) -> None:
        await self.owner.sleep(self.failed() / 1000)

    def failed(self) -> int:
        """The fetch got no answer (connection, timeout): ms to wait before the next one
        (exponential back-off with jitter)."""
        return self.retrier.failed()

    def answered(self, positions: dict[Key, FetchPosition], response: FetchResponse) -> int:
        """A Fetch response to ``positions``: each partition's part to its core; the ms
        to wait before the next fetch (0 unless the whole response is an error)."""
        if response.error_code:
            return self.retrier.failed()
        self.retrier.succeeded()
        self._handle(positions, response)
        return 0

    async def _run(self) -> None:
        channel: Channel | None = None
        o = self.owner
        try:
            while True:
                if not self.partitions:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                positions = self.positions()
                if not positions:
                    await o.sleep(IDLE_POLL_S)
                    continue
                if channel is None:
                    channel = o.channel_to(self.leader_id)
                    if channel is None:  # the leader has no endpoint we can use yet
                        await self._back_off()
                        continue
                if cycle_trace.TRACE is not None:
                    cycle_trace.TRACE.event("f_sent", *(p.fetch_offset for p in positions.values()))
                try:
                    response = await channel.request(
                        ApiKey.FETCH,
                        REPLICA_FETCH_VERSION,
                        o.request_for(positions),
                        (o.wait_max_ms + o.socket_timeout_ms) / 1000,
                    )
                except CONNECTION_ERRORS as exc:
                    log.info(
                        "replica fetch from broker %d failed (%r): backing off", self.leader_id, exc
                    )
                    channel.close()
                    channel = None
                    await self._back_off()
                    continue
                if not isinstance(response, FetchResponse):  # a bug, not a network error
                    raise TypeError(f"a Fetch answered with {type(response).__name__}")
                trace = cycle_trace.TRACE
                if trace is not None:
                    trace.event("f_recv")
                delay_ms = self.answered(positions, response)
                if trace is not None:
                    trace.event("f_appended", *(self.manager.log_end(k) for k in positions))
                if delay_ms:
                    await o.sleep(delay_ms / 1000)
        finally:
            if channel is not None:
                channel.close()

    def _handle(self, positions: dict[Key, FetchPosition], response: FetchResponse) -> None:
        names = {tid: name for name, tid in self.owner.topic_ids(k[0] for k in positions).items()}
        for topic in response.responses:
            name = topic.topic or names.get(topic.topic_id, "")
            for p in topic.partitions:
                key = (name, p.partition_index)
                pos = positions.get(key)
                if pos is None or key not in self.partitions:
                    continue
                de = p.diverging_epoch
                diverging = (de.epoch, de.end_offset) if de is not None and de.epoch >= 0 else None
                answer = FetchAnswer(
                    ErrorCode.of(p.error_code), p.high_watermark, p.log_start_offset, diverging
                )
                try:
                    self.manager.on_fetch_result(key, FetchResult(pos, answer, p.records or None))
                except StorageError as exc:
                    self._refused(key, exc)
                else:
                    self.refusals.pop(key, None)
                    self.delayed_until_ms.pop(key, None)

    def _refused(self, key: Key, exc: StorageError) -> None:
        """The local log refused the batch (corrupt, out of order, its dir offline): this
        partition waits, longer each time, before it is fetched again."""
        retrier = self.refusals.get(key)
        if retrier is None:
            retrier = self.refusals[key] = Retrier(self.owner.backoff, self.owner.rng)
        delay_ms = retrier.failed()
        self.delayed_until_ms[key] = self.manager.now_ms() + delay_ms
        log.warning(
            "replica fetch of %s-%d: the local log refused the response (%s): retry in %d ms",
            *key,
            exc,
            delay_ms,
        )

    def forget(self, key: Key) -> None:
        self.partitions.discard(key)
        self.refusals.pop(key, None)
        self.delayed_until_ms.pop(key, None)


class ReplicaFetcherManager:
    def __init__(
        self,
        manager: ReplicaManager,
        node_id: int,
        config: Mapping[str, str],
        listener: str,
        *,
        rng: random.Random | None = None,
        sleep: Sleep = asyncio.sleep,
        channel_factory: Callable[[int], Channel | None] | None = None,
        run_tasks: bool = True,
        security: ClientSecurity = PLAINTEXT_CLIENT,
    ) -> None:
        self.manager = manager
        #: the inter-broker listener's protocol and this broker's login
        self.security = security
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.channel_factory = channel_factory
        self.node_id = node_id
        #: False: fetchers are state only, their requests sent by the caller (simulation)
        self.run_tasks = run_tasks
        self.listener = listener
        self.num_fetchers = max(1, int(config.get("num.replica.fetchers", "1")))
        self.fetch_max_bytes = int(config.get("replica.fetch.max.bytes", "1048576"))
        self.response_max_bytes = int(config.get("replica.fetch.response.max.bytes", "10485760"))
        self.wait_max_ms = int(config.get("replica.fetch.wait.max.ms", "500"))
        self.min_bytes = int(config.get("replica.fetch.min.bytes", "1"))
        self.backoff_ms = int(config.get("replica.fetch.backoff.ms", "1000"))
        self.backoff = ExponentialBackoff(
            self.backoff_ms, max(self.backoff_ms, REPLICA_FETCH_BACKOFF_MAX_MS)
        )
        self.socket_timeout_ms = int(config.get("replica.socket.timeout.ms", "30000"))
        self.assigned: dict[Key, tuple[int, int]] = {}  # -> (leader, fetcher index)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._ids_image: object = None  # the image `_ids` was read from
        self._ids: dict[str, uuid.UUID] = {}

    def _index(self, key: Key) -> int:
        return (zlib.crc32(key[0].encode()) + key[1]) % self.num_fetchers

    def ensure(self, key: Key, leader_id: int) -> None:
        target = (leader_id, self._index(key))
        if self.assigned.get(key) == target:
            fetcher = self.fetchers.get(target)
            if fetcher is not None:
                fetcher.wake.set()
            return
        self.remove(key)
        fetcher = self.fetchers.get(target)
        if fetcher is None:
            fetcher = ReplicaFetcher(self.manager, self, leader_id)
            self.fetchers[target] = fetcher
            if self.run_tasks:
                fetcher.start()
        fetcher.partitions.add(key)
        fetcher.wake.set()
        self.assigned[key] = target

    def remove(self, key: Key) -> None:
        target = self.assigned.pop(key, None)
        if target is None:
            return
        fetcher = self.fetchers.get(target)
        if fetcher is None:
            return
        fetcher.forget(key)
        if not fetcher.partitions:
            if fetcher.task is not None:
                fetcher.task.cancel()
            del self.fetchers[target]

    async def close(self) -> None:
        tasks = [f.task for f in self.fetchers.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # a fetcher's own fault went to the fault handler
        self.fetchers.clear()
        self.assigned.clear()

    def channel_to(self, broker_id: int) -> Channel | None:
        if self.channel_factory is not None:
            return self.channel_factory(broker_id)
        reg = self.manager._image().brokers.get(broker_id)
        ep = reg.endpoint(self.listener) if reg is not None else None
        if ep is None:
            return None
        frame_max = self.response_max_bytes + FRAME_SLACK_BYTES
        client_id = f"replica-fetcher-{self.node_id}"
        return BrokerChannel(
            ep.host,
            ep.port,
            client_id,
            frame_max,
            self.security,
            fault_handler=self.manager.fault_handler,
        )

    def topic_ids(self, names: Iterable[str]) -> dict[str, uuid.UUID]:
        """Topic name -> id in this broker's metadata (Fetch v13+ names topics by id),
        remembered until the next image (asked twice per fetch: request and answer)."""
        image = self.manager._image()
        if image is not self._ids_image:
            self._ids_image, self._ids = image, {}
        known = self._ids
        out = {}
        for name in names:
            tid = known.get(name)
            if tid is None:
                topic = image.topic(name)
                if topic is None:
                    continue
                tid = known[name] = topic.topic_id
            out[name] = tid
        return out

    def request_for(self, positions: dict[Key, FetchPosition]) -> FetchRequest:
        topics: dict[str, FetchRequest.FetchTopic] = {}
        ids = self.topic_ids(key[0] for key in positions)
        epoch = -1
        for (topic, index), pos in positions.items():
            epoch = pos.replica_epoch
            t = topics.get(topic)
            if t is None:
                t = FetchRequest.FetchTopic(topic=topic, topic_id=ids.get(topic, ZERO_UUID))
                topics[topic] = t
            t.partitions.append(
                FetchRequest.FetchPartition(
                    partition=index,
                    current_leader_epoch=pos.current_leader_epoch,
                    fetch_offset=pos.fetch_offset,
                    last_fetched_epoch=pos.last_fetched_epoch,
                    log_start_offset=-1,
                    partition_max_bytes=self.fetch_max_bytes,
                )
            )
        return FetchRequest(
            replica_id=-1,  # v0-14's field; v15 names the replica in ReplicaState
            replica_state=FetchRequest.ReplicaState(replica_id=self.node_id, replica_epoch=epoch),
            max_wait_ms=self.wait_max_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.response_max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=list(topics.values()),
        )
