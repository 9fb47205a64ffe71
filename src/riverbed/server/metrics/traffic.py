"""Hot-path counters: Kafka's RequestMetrics and BrokerTopicMetrics.

Every request the node's listeners answer is counted in its handler task
(`TrafficStats.run_timed`, the network layer's `RequestObserver.run_timed`: a one-partition
Produce answered NONE inline, any other answer by `TrafficStats.record`), per Kafka request
name (``Produce``, ``FetchConsumer``, ``FetchFollower``, ``Metadata``, ...):

- ``RequestsPerSec{request, version}`` and ``ErrorsPerSec{request, error}`` (every error
  code found in the response, ``NONE`` included, as Kafka's ``errorCounts``);
- as histograms, from the request's stage stamps (`riverbed.server.request_timing` has
  Kafka's definitions), recorded once its response is handed to the socket:
  ``TotalTimeMs`` (read -> sent), ``RequestQueueTimeMs`` (read -> handler start: the wait
  for a ``queued.max.requests`` permit), ``LocalTimeMs`` (the handler's own work),
  ``RemoteTimeMs`` (parked in a purgatory: acks=all, long-poll fetch, group joins),
  ``ResponseQueueTimeMs`` (answered -> taken by the connection's writer) and
  ``ResponseSendTimeMs`` (taken -> sent);

and, for produce and fetch, Kafka's BrokerTopicMetrics per topic and over all topics:
``BytesInPerSec`` / ``MessagesInPerSec`` (records a produce appended: the records' size
and the append info's count, counted by the produce handler at its append as Kafka's
ReplicaManager does, through `TrafficStats.produce_topic`; nothing re-reads a batch),
``BytesOutPerSec`` (consumer fetches) / ``ReplicationBytesOutPerSec`` (follower
fetches), ``TotalProduceRequestsPerSec`` / ``FailedProduceRequestsPerSec`` (the produce
handler too) and ``TotalFetchRequestsPerSec`` / ``FailedFetchRequestsPerSec`` (one per
partition in a request, as Kafka's ReplicaManager marks them; failed = the partition's
answer carries an error).

Cost: the counters are plain integers in dicts, touched only by the event loop (no
locks, no prometheus_client objects on the hot path); `TrafficCollector` turns them into
metric families when ``/metrics`` is scraped. A sent request's six stamps are appended
to a flat array of doubles of its request name (one copy of its permit's array of
stamps; the permit is not kept); they are folded into the histograms (vectorised, numpy: a few calls per fold, whatever its size)
at scrape time or when `PENDING_REQUESTS_MAX` requests have gathered.
"""

from __future__ import annotations

import uuid
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from time import perf_counter

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    FetchRequest,
    FetchResponse,
    Message,
    ProduceRequest,
    ProduceResponse,
    message_spec,
)
from riverbed.protocol.schema import StructSpec
from riverbed.server.network import RequestContext, RequestHandler, Response, SplicedResponse
from riverbed.server.request_permits import CURRENT_PERMIT
from riverbed.server.request_timing import (
    ANSWERED,
    DEQUEUED,
    PARKED,
    SENT,
    STAMPS,
    TimedPermit,
)

#: Upper bounds (ms) of the request time histograms' buckets (+Inf is added).
TIME_BUCKETS_MS: tuple[float, ...] = (
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)  # fmt: skip
_BOUNDS_MS = np.array(TIME_BUCKETS_MS)
#: Sent requests whose stamps are kept (48 bytes each, 192 KB in all) before they are
#: folded into the histograms. Keeping timing objects (~230 bytes each with their
#: floats) cost an on broker ~1.5% more CPU per message at 4,096 than at 256
#: (metrics_bench); the stamps are flat arrays now, and a fold costs its ~10 numpy
#: calls whatever its size (~0.6 ms in a broker, cold): at 1,024 ~0.55 us a request.
PENDING_REQUESTS_MAX = 4096
#: Stamps per request in the pending arrays (`riverbed.server.request_timing`'s order):
#: received, dequeued, parked (0.0 if it never parked), answered, taken, sent.
_STAMPS = STAMPS
#: Nesting bound of the error-code walk (Kafka's messages nest three deep at most).
_DEPTH_MAX = 8


def request_name(api_key: int) -> str:
    """Kafka's request name (ApiKeys.name): LIST_OFFSETS -> ListOffsets."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"Unknown{api_key}"


_NAMES = {int(k): request_name(int(k)) for k in ApiKey}
_PRODUCE = _NAMES[ApiKey.PRODUCE]
_PRODUCE_NONE = (_PRODUCE, "NONE")
#: Produce versions counted on the hot path (0-13 today; a later one goes by the dict).
PRODUCE_VERSIONS = 16


class MsHistogram:
    """A fixed-bucket histogram of milliseconds (counts per bucket, not cumulative)."""

    __slots__ = ("counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(TIME_BUCKETS_MS) + 1)
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        """One value (a bucket's bound is inclusive: bisect_left's index, as
        `RequestTimes.observe_many`'s searchsorted)."""
        self.counts[bisect_left(TIME_BUCKETS_MS, ms)] += 1
        self.sum_ms += ms

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip((*TIME_BUCKETS_MS, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else str(bound), float(total)))
        return out


class RequestTimes:
    """Kafka's RequestMetrics timers of one request name (ms)."""

    __slots__ = ("local", "remote", "request_queue", "response_queue", "response_send", "total")

    def __init__(self) -> None:
        self.total = MsHistogram()
        self.request_queue = MsHistogram()
        self.local = MsHistogram()
        self.remote = MsHistogram()
        self.response_queue = MsHistogram()
        self.response_send = MsHistogram()

    def observe_many(self, stamps: np.ndarray) -> None:
        """Kafka's ``updateRequestMetrics`` for each request's stamps (a row of
        ``stamps``: received, dequeued, parked - 0.0 if it never parked -, answered,
        taken, sent): each stage is the difference of two consecutive stamps, the total
        the last minus the first; a request that never parked spent its handler time
        locally (its park counts as at its answer). ``stamps`` is changed."""
        never_parked = stamps[:, PARKED] == 0.0
        stamps[never_parked, PARKED] = stamps[never_parked, ANSWERED]
        ms = np.empty((len(stamps), _STAMPS))
        ms[:, 0] = stamps[:, 5] - stamps[:, 0]
        ms[:, 1:] = np.diff(stamps, axis=1)
        ms *= 1000
        width = len(TIME_BUCKETS_MS) + 1
        # one bincount for all six: each column's bucket indexes offset by its column
        found = np.bincount(
            (np.searchsorted(_BOUNDS_MS, ms) + np.arange(_STAMPS) * width).ravel(),
            minlength=_STAMPS * width,
        ).reshape(_STAMPS, width)
        hists = (
            self.total, self.request_queue, self.local,
            self.remote, self.response_queue, self.response_send,
        )  # fmt: skip
        for h, row, sum_ms in zip(hists, found.tolist(), ms.sum(axis=0).tolist(), strict=True):
            h.counts = [a + b for a, b in zip(h.counts, row, strict=True)]
            h.sum_ms += sum_ms


#: (metric suffix, timer, help): kafka_network_requestmetrics_<suffix>
TIME_METRICS: tuple[tuple[str, Callable[[RequestTimes], MsHistogram], str], ...] = (
    ("totaltimems", lambda r: r.total, "Request read -> response sent (TotalTimeMs)"),
    ("requestqueuetimems", lambda r: r.request_queue, "Request read -> handler start"),
    ("localtimems", lambda r: r.local, "Handler start -> parked or answered (LocalTimeMs)"),
    ("remotetimems", lambda r: r.remote, "Parked in a purgatory -> answered (RemoteTimeMs)"),
    ("responsequeuetimems", lambda r: r.response_queue, "Answered -> taken by the writer"),
    ("responsesendtimems", lambda r: r.response_send, "Taken by the writer -> sent"),
)


@dataclass(slots=True)
class TopicCounters:
    """BrokerTopicMetrics of one topic (or of all topics)."""

    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    replication_bytes_out: int = 0
    total_produce: int = 0
    failed_produce: int = 0
    total_fetch: int = 0
    failed_fetch: int = 0

    def add(self, other: TopicCounters) -> None:
        self.bytes_in += other.bytes_in
        self.messages_in += other.messages_in
        self.bytes_out += other.bytes_out
        self.replication_bytes_out += other.replication_bytes_out
        self.total_produce += other.total_produce
        self.failed_produce += other.failed_produce
        self.total_fetch += other.total_fetch
        self.failed_fetch += other.failed_fetch


#: (metric suffix, value, help): kafka_server_brokertopicmetrics_<suffix>_total
TOPIC_METRICS: tuple[tuple[str, Callable[[TopicCounters], int], str], ...] = (
    ("bytesin", lambda c: c.bytes_in, "Bytes appended by produce requests (BytesInPerSec)"),
    ("messagesin", lambda c: c.messages_in, "Records appended by produce (MessagesInPerSec)"),
    ("bytesout", lambda c: c.bytes_out, "Record bytes sent to consumers (BytesOutPerSec)"),
    ("replicationbytesout", lambda c: c.replication_bytes_out, "Record bytes sent to followers"),
    ("totalproducerequests", lambda c: c.total_produce, "Partitions in produce requests"),
    ("failedproducerequests", lambda c: c.failed_produce, "Partitions whose produce failed"),
    ("totalfetchrequests", lambda c: c.total_fetch, "Partitions in fetch requests"),
    ("failedfetchrequests", lambda c: c.failed_fetch, "Partitions whose fetch failed"),
)


class TrafficStats:
    """The node's request and topic counters (see the module docstring)."""

    def __init__(self, topic_name: Callable[[uuid.UUID], str | None]) -> None:
        #: topic id -> name (Fetch v13+ names topics by id only)
        self._topic_name = topic_name
        self._requests: dict[tuple[str, int], int] = {}
        self._errors: dict[tuple[str, str], int] = {}
        #: the hot path's counts, merged into `requests` / `errors` when read: Produce
        #: requests by version, and its partitions answered NONE
        self._produce_requests = [0] * PRODUCE_VERSIONS
        self._produce_none = 0
        #: one-partition Produce requests answered NONE, by version (`run_timed` counts
        #: them inline): each is a request and a NONE
        self._produce_answered_none = [0] * PRODUCE_VERSIONS
        self.times: dict[str, RequestTimes] = {}
        #: the stamps of the answered requests sent since the last fold, by request
        #: name (`_STAMPS` floats a request), and how many requests they hold
        self._pending: dict[str, array[float]] = {}
        self._pending_requests = 0
        self.topics: dict[str, TopicCounters] = {}
        #: the counts of deleted topics (kept in the all-topics sums)
        self._retired = TopicCounters()

    @property
    def requests(self) -> dict[tuple[str, int], int]:
        """Requests answered by (request name, version) (scrape time)."""
        out = dict(self._requests)
        counts = zip(self._produce_requests, self._produce_answered_none, strict=True)
        for version, n in enumerate(a + b for a, b in counts):
            if n:
                out[(_PRODUCE, version)] = out.get((_PRODUCE, version), 0) + n
        return out

    @property
    def errors(self) -> dict[tuple[str, str], int]:
        """Error codes in responses by (request name, code name), NONE included."""
        out = dict(self._errors)
        none = self._produce_none + sum(self._produce_answered_none)
        if none:
            out[_PRODUCE_NONE] = out.get(_PRODUCE_NONE, 0) + none
        return out

    def sent(self, permits: list[TimedPermit], sent: float) -> None:
        """`RequestObserver.sent`: keep the requests' stamps, ``sent`` the last, for the
        next fold (each permit's array copied into a flat one: the permits are not
        kept)."""
        pending = self._pending
        for p in permits:
            name = p.name
            if not name:  # never answered (its handler raised)
                continue
            stamps = p.stamps
            stamps[SENT] = sent
            kept = pending.get(name)
            if kept is None:
                kept = pending[name] = array("d")
            kept += stamps  # one memory copy
        self._pending_requests += len(permits)
        if self._pending_requests >= PENDING_REQUESTS_MAX:
            self.fold()

    def fold(self) -> None:
        """Fold the pending stamps into the histograms (scrape time, or when bounded)."""
        pending, self._pending = self._pending, {}
        self._pending_requests = 0
        for name, stamps in pending.items():
            times = self.times.get(name)
            if times is None:
                times = self.times[name] = RequestTimes()
            # a writable copy of the stamps (`observe_many` fills in parks)
            times.observe_many(np.frombuffer(stamps).reshape(-1, _STAMPS).copy())

    def record(self, ctx: RequestContext, body: Message, response: Response | None) -> str:
        """Count an answered request; its Kafka request name."""
        version = ctx.header.api_version
        if type(body) is ProduceRequest and version < PRODUCE_VERSIONS:
            # the hot path: no name look-up, no key, no walk
            self._produce_requests[version] += 1
            if type(response) is ProduceResponse:
                # `_produce_errors` inline for one topic of one partition answered NONE
                answers = response.responses
                if len(answers) == 1:
                    codes = answers[0].partition_responses
                    if len(codes) == 1 and not codes[0].error_code:
                        self._produce_none += 1
                        return _PRODUCE
                self._produce_errors(response)
            return _PRODUCE
        api_key = ctx.header.api_key
        name = _NAMES.get(api_key) or request_name(api_key)
        if isinstance(body, FetchRequest):
            name = "FetchFollower" if _replica_id(body) >= 0 else "FetchConsumer"
        key = (name, version)
        self._requests[key] = self._requests.get(key, 0) + 1
        if isinstance(body, ProduceRequest):  # a version the hot path does not count
            if isinstance(response, ProduceResponse):
                self._produce_errors(response)
            return name
        message = response.body if isinstance(response, SplicedResponse) else response
        if isinstance(body, FetchRequest) and isinstance(message, FetchResponse):
            spliced = response if isinstance(response, SplicedResponse) else None
            self._fetched(name, message, spliced)
        elif message is not None:
            for code in error_codes(message):
                self._error(name, code)
        return name

    async def run_timed(
        self, handler: RequestHandler, permit: TimedPermit, ctx: RequestContext, body: Message
    ) -> Response | None:
        """`RequestObserver.run_timed`: the request's handler task stamps its dequeue and
        answer on its permit and counts the answer; one coroutine and one context variable
        per request, as without metrics (`park_current_request` stamps the park). The
        usual Produce (one partition, answered NONE) is counted here without a call (the
        call to `record` was ~1% of a 20-record Produce's broker CPU); `record` the rest."""
        CURRENT_PERMIT.set(permit)  # the task runs in its own copy of the context
        stamps = permit.stamps
        stamps[DEQUEUED] = perf_counter()
        try:
            response = await handler(ctx, body)
        finally:
            permit.release()
        stamps[ANSWERED] = perf_counter()
        version = ctx.header.api_version
        if (
            type(body) is ProduceRequest
            and type(response) is ProduceResponse
            and version < PRODUCE_VERSIONS
            and len(answers := response.responses) == 1
            and len(parts := answers[0].partition_responses) == 1
            and not parts[0].error_code
        ):
            self._produce_answered_none[version] += 1
            permit.name = _PRODUCE
        else:
            permit.name = self.record(ctx, body, response)
        return response

    def _error(self, name: str, code: str) -> None:
        key = (name, code)
        self._errors[key] = self._errors.get(key, 0) + 1

    def _name_of(self, topic_id: uuid.UUID) -> str:
        """The name of a topic a request names by id only (Produce v13+, Fetch v13+)."""
        return self._topic_name(topic_id) or str(topic_id)

    def _topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def produce_topic(self, name: str) -> TopicCounters:
        """The BrokerTopicMetrics of a topic a produce names: the produce handler counts
        its partitions, bytes and records there as it appends them (Kafka's
        ReplicaManager marks BrokerTopicStats from the append's info), so nothing here
        reads a batch again."""
        return self.topics.get(name) or self._topic(name)

    def _produce_errors(self, resp: ProduceResponse) -> None:
        """Kafka's errorCounts of a produce response: each partition's code (`record`
        counts the usual one, one partition answered NONE, itself)."""
        answered_none = 0
        for answer in resp.responses:
            for part in answer.partition_responses:
                code = part.error_code
                if code:
                    self._error(_PRODUCE, _code_name(code))
                else:
                    answered_none += 1
        self._produce_none += answered_none

    def _fetched(self, name: str, resp: FetchResponse, spliced: SplicedResponse | None) -> None:
        follower = name == "FetchFollower"
        sizes = {fr.token: fr.size for fr in spliced.files} if spliced is not None else {}
        self._error(name, _code_name(resp.error_code))
        for t in resp.responses:
            topic = self._topic(t.topic or self._name_of(t.topic_id))
            for p in t.partitions:
                topic.total_fetch += 1
                self._error(name, _code_name(p.error_code))
                if p.error_code:
                    topic.failed_fetch += 1
                records = p.records
                if not records:
                    continue
                size = sizes.get(records) if isinstance(records, bytes) else None
                if size is None:
                    size = len(records)
                if follower:
                    topic.replication_bytes_out += size
                else:
                    topic.bytes_out += size

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go away (Kafka removes its BrokerTopicMetrics); its
        counts stay in the all-topics sums."""
        gone = self.topics.pop(name, None)
        if gone is not None:
            self._retired = _sum_counters([self._retired, gone])

    def all_topics(self) -> TopicCounters:
        """BrokerTopicMetrics over all topics, deleted ones included (scrape time)."""
        return _sum_counters([self._retired, *self.topics.values()])


def _sum_counters(counters: list[TopicCounters]) -> TopicCounters:
    out = TopicCounters()
    for c in counters:
        out.add(c)
    return out


def _replica_id(req: FetchRequest) -> int:
    state = req.replica_state
    if state is not None and state.replica_id >= 0:
        return int(state.replica_id)
    return int(req.replica_id)


# ------------------------------------------------------------------ error codes
#: A walk plan: (attribute, None for an int16 error_code, else (is_array, sub-plan)).
_Plan = tuple[tuple[str, "tuple[bool, _Plan] | None"], ...]


def _plan_of(spec: StructSpec, depth: int = 0) -> _Plan:
    out: list[tuple[str, tuple[bool, _Plan] | None]] = []
    if depth > _DEPTH_MAX:
        return ()
    for f in spec.fields:
        if f.attr == "error_code" and f.type == "int16":
            out.append((f.attr, None))
        elif f.struct is not None:
            sub = _plan_of(f.struct, depth + 1)
            if sub:
                out.append((f.attr, (f.is_array, sub)))
    return tuple(out)


_PLANS: dict[type[Message], _Plan] = {}


def _response_plan(cls: type[Message]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan_of(message_spec(cls).struct)
    return plan


def error_codes(message: Message) -> Iterator[str]:
    """The name of every error code in a response (Kafka's ``errorCounts``)."""
    try:
        plan = _response_plan(type(message))
    except TypeError:  # not a top-level message class
        return iter(())
    return _walk(message, plan)


def _walk(obj: object, plan: _Plan) -> Iterator[str]:
    for attr, sub in plan:
        value = getattr(obj, attr, None)  # schema-named field of a decoded message
        if sub is None:
            if isinstance(value, int):
                yield _code_name(value)
            continue
        is_array, inner = sub
        if value is None:
            continue
        if is_array:
            assert isinstance(value, list)
            for item in value:
                yield from _walk(item, inner)
        else:
            yield from _walk(value, inner)


@cache
def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_{code}"


# ------------------------------------------------------------------ rendering
class TrafficCollector(Collector):
    """Renders `TrafficStats` (and the request queue) at scrape time."""

    def __init__(self, stats: TrafficStats, queue_size: Callable[[], int]) -> None:
        self.stats = stats
        self.queue_size = queue_size

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        s = self.stats
        s.fold()
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered (RequestsPerSec)",
            labels=["request", "version"],
        )
        for (name, version), n in sorted(s.requests.items()):
            requests.add_metric([name, str(version)], n)
        yield requests
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses, NONE included (ErrorsPerSec)",
            labels=["request", "error"],
        )
        for (name, code), n in sorted(s.errors.items()):
            errors.add_metric([name, code], n)
        yield errors
        times = sorted(s.times.items())
        for metric, timer, what in TIME_METRICS:
            family = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{metric}", what, labels=["request"]
            )
            for name, t in times:
                h = timer(t)
                family.add_metric([name], h.cumulative(), sum_value=h.sum_ms)
            yield family
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_requestqueuesize",
            "Requests waiting for or running in a handler (queued.max.requests permits)",
            value=self.queue_size(),
        )
        yield from self._topic_families()

    def _topic_families(self) -> Iterator[CounterMetricFamily]:
        s = self.stats
        every = s.all_topics()
        for suffix, value, what in TOPIC_METRICS:
            name = f"kafka_server_brokertopicmetrics_{suffix}"
            family = CounterMetricFamily(name, what, labels=["topic"])
            # the all-topics meter has no topic label (jmx_exporter's rule without one)
            family.add_metric([], value(every))
            for topic, counters in sorted(s.topics.items()):
                family.add_metric([topic], value(counters))
            yield family
