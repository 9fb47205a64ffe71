"""Client quotas on the broker: produce and fetch byte rates and request time, enforced as
Kafka's KafkaApis does with its three ClientQuotaManagers.

- Produce: after the request is handled its size on the wire is recorded against
  ``producer_byte_rate`` (also for acks=0, which has no response to carry the throttle).
- Fetch (consumers only; a follower's fetch is replication, not a client): the fetch
  reads at most what the quota window may carry (``getMaxValueInQuotaWindow``: the quota
  times ``quota.window.num - 1`` windows); the data's size is recorded against
  ``consumer_byte_rate`` once the response is ready; a fetch throttled by either its
  byte rate or its request time is taken back and answered empty ("we are going to
  return an empty response", `riverbed.server.broker.fetch_throttle`).
- Request time (``request_percentage``, KIP-124): the time the handler spends running on
  the event loop (its synchronous steps, not its waits: riverbed's request handler thread
  time) as a percentage of one second, the throttle bounded by one window
  (ClientRequestQuotaManager). Every answer counts, as Kafka's RequestHandlerHelper
  records it: refusals by the authorizer (with the authorization's time) and a failing
  handler's error response too. Not counted, as Kafka's ``...ExemptThrottle`` answers:
  follower fetches, acks=0 produces, the cluster's own WriteTxnMarkers unless refused,
  and a failing cluster action's error unless CLUSTER_AUTHORIZATION_FAILED.
- Connections (``connection_creation_rate`` of ``ip`` entities): `connection_throttle_ms`
  for the acceptor (`riverbed.server.connection_quotas`).
- Controller mutations (``controller_mutation_rate``) are the active controller's
  (`riverbed.server.mutation_quota`); the broker mutes the client for the throttle the
  controller's response carries.
- The larger of the byte-rate and request-time throttles goes into the response's
  ``throttle_time_ms`` and mutes the connection for that long
  (`riverbed.server.network.ChannelThrottle`).

The user is the request's principal name (``ANONYMOUS`` on an unauthenticated listener)
and the client id the request header's, as Kafka's DefaultQuotaCallback. With no quota of a
kind configured nothing of that kind is measured (Kafka's ``quotasEnabled``).
"""

from __future__ import annotations

import time
import types
from collections.abc import Awaitable, Generator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import Message
from riverbed.security.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    ConnectionRateQuotas,
    IpQuotaBook,
    QuotaBook,
    QuotaEntity,
    QuotaWindows,
)
from riverbed.server.network import RequestContext

T = TypeVar("T")

#: ClientRequestQuotaManager.NanosToPercentagePerSecond
NANOS_TO_PERCENTAGE = 100.0 / 1_000_000_000
#: APIs the cluster sends itself, answered without the request-time quota (KafkaApis'
#: ``sendResponseExemptThrottle``), unless refused: a client's refused WriteTxnMarkers
#: (ClusterAuthorizationException) is answered ``sendErrorResponseMaybeThrottle``
_EXEMPT_APIS = frozenset({ApiKey.WRITE_TXN_MARKERS})
#: the APIs a broker listener serves that Kafka's ApiKeys marks ``clusterAction``: their
#: handler's errors are answered without the request-time quota, except a
#: ClusterAuthorizationException (RequestHandlerHelper.handleError)
CLUSTER_ACTION_APIS = frozenset(
    {ApiKey.WRITE_TXN_MARKERS, ApiKey.DESCRIBE_QUORUM, ApiKey.UPDATE_FEATURES}
)


@dataclass(frozen=True, slots=True)
class QuotaBooks:
    """The configured quotas of one metadata image, per kind."""

    produce: QuotaBook
    fetch: QuotaBook
    request: QuotaBook
    ip: IpQuotaBook

    @staticmethod
    def of(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> QuotaBooks:
        return QuotaBooks(
            QuotaBook.of(PRODUCER_BYTE_RATE, quotas),
            QuotaBook.of(CONSUMER_BYTE_RATE, quotas),
            QuotaBook.of(REQUEST_PERCENTAGE, quotas),
            IpQuotaBook.of(quotas),
        )


def _who(ctx: RequestContext) -> tuple[str, str]:
    return ctx.principal.name, ctx.header.client_id or ""


class BrokerQuotas:
    """The broker's three quota managers and the books of its current image."""

    def __init__(self, windows: QuotaWindows) -> None:
        self.windows = windows
        self.produce = ClientQuotaManager(windows)
        self.fetch = ClientQuotaManager(windows)
        self.request = ClientQuotaManager(windows, throttle_max_ms=windows.window_ms)
        self.connections = ConnectionRateQuotas(windows)
        self._source: Mapping[QuotaEntity, Mapping[str, float]] | None = None
        self._books = QuotaBooks.of({})

    def books(self, image: MetadataImage) -> QuotaBooks:
        # images share the quotas mapping until a ClientQuotaRecord changes it
        if image.client_quotas is not self._source:
            self._source = image.client_quotas
            self._books = QuotaBooks.of(image.client_quotas)
        return self._books

    def connection_throttle_ms(self, image: MetadataImage, address: str) -> int:
        """A new connection from ``address``: 0 to accept it, else its throttle."""
        return self.connections.record(self.books(image).ip, address, self.now_ms())

    @staticmethod
    def now_ms() -> int:
        return int(time.monotonic() * 1000)

    def fetch_bytes_max(self, image: MetadataImage, ctx: RequestContext) -> int | None:
        """The most a consumer's fetch may read now (None: no consumer quota)."""
        book = self.books(image).fetch
        if not book.enabled:
            return None
        found = self.fetch.max_value_in_window(book, *_who(ctx))
        return None if found is None else max(1, int(found))

    def fetch_quota_enabled(self, image: MetadataImage) -> bool:
        return self.books(image).fetch.enabled

    def record_fetch(
        self, image: MetadataImage, ctx: RequestContext, size: int, request_throttle_ms: int = 0
    ) -> int:
        """A consumer fetch's throttle, as KafkaApis.handleFetchRequest decides it: its
        ``size`` bytes recorded against ``consumer_byte_rate``, the larger of that throttle
        and the request-time one returned; when either is > 0 the bytes are taken back
        (``unrecordQuotaSensor``: the fetch will be answered without data)."""
        book = self.books(image).fetch
        if not book.enabled:
            return request_throttle_ms
        now = self.now_ms()
        user, client_id = _who(ctx)
        throttle = max(self.fetch.record(book, user, client_id, size, now), request_throttle_ms)
        if throttle > 0:
            self.fetch.unrecord(book, user, client_id, size, now)
        return throttle

    def record_produce(self, image: MetadataImage, ctx: RequestContext) -> int:
        book = self.books(image).produce
        if not book.enabled:
            return 0
        return self.produce.record(book, *_who(ctx), ctx.size_bytes, self.now_ms())

    def measures_request_time(
        self, image: MetadataImage, ctx: RequestContext, refused: bool = False
    ) -> bool:
        """Whether the request's handler time counts (``refused``: by the authorizer)."""
        if not self.books(image).request.enabled:
            return False
        return refused or ctx.header.api_key not in _EXEMPT_APIS

    def record_request_time(
        self, image: MetadataImage, ctx: RequestContext, handler_ns: int
    ) -> int:
        book = self.books(image).request
        percent = handler_ns * NANOS_TO_PERCENTAGE
        return self.request.record(book, *_who(ctx), percent, self.now_ms())


@types.coroutine
def _timed(awaitable: Awaitable[T], spent_ns: list[int]) -> Generator[object, object, T]:
    """Await ``awaitable``, adding to ``spent_ns[0]`` the time its steps run (each
    ``send`` into it runs synchronously on the loop; the waits between are not counted)."""
    steps = awaitable.__await__()
    value: object = None
    error: BaseException | None = None
    while True:
        start = time.perf_counter_ns()
        try:
            yielded = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            result: T = stop.value
            return result
        finally:
            spent_ns[0] += time.perf_counter_ns() - start
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # cancellation goes into the handler, as awaiting would
            value, error = None, exc


async def timed(awaitable: Awaitable[T], spent_ns: list[int]) -> T:
    """``awaitable``'s result; the nanoseconds its steps ran on the loop are added to
    ``spent_ns[0]``, also when it raises (Kafka counts a failed request's handler time)."""
    return await _timed(awaitable, spent_ns)


async def run_timed(awaitable: Awaitable[T]) -> tuple[T, int]:
    """``awaitable``'s result and the nanoseconds its steps ran on the loop."""
    spent = [0]
    result = await _timed(awaitable, spent)
    return result, spent[0]


def set_throttle_time(body: Message, throttle_ms: int) -> None:
    """Put the throttle in a response's ``throttle_time_ms`` (every response of Kafka's
    throttled APIs has the field; the few without it, e.g. SaslHandshake, keep none)."""
    if "throttle_time_ms" in body._field_names():
        setattr(body, "throttle_time_ms", throttle_ms)  # noqa: B010 (the schema's field)
