"""The metrics' pure parts (issue 21): batch record counts, the error-code walk over any
response, the request/topic counters, the histogram, and the counters derived from
metadata deltas (ISR shrinks/expands of partitions led here, elections, unclean ones)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from array import array
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from riverbed.metadata.image import NO_LEADER_CHANGE, MetadataDelta, MetadataImage
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import (
    Message,
    MetadataRequest,
    MetadataResponse,
    PartitionChangeRecord,
    PartitionRecord,
    ProduceRequest,
    ProduceResponse,
    TopicRecord,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.metrics.cleaner import CleanerCollector
from riverbed.server.metrics.loop_idle import LoopIdle, schedstat_busy_ns
from riverbed.server.metrics.metadata_events import MetadataEvents
from riverbed.server.metrics.traffic import (
    PENDING_REQUESTS_MAX,
    PRODUCE_VERSIONS,
    TIME_METRICS,
    MsHistogram,
    TopicCounters,
    TrafficCollector,
    TrafficStats,
    error_codes,
    request_name,
)
from riverbed.server.network import RequestContext, Response
from riverbed.server.request_timing import ANSWERED, DEQUEUED, TimedPermit
from riverbed.storage import LogConfig, LogManager, ManualClock
from riverbed.storage.log_cleaner import CleanerConfig

TOPIC_ID = uuid.UUID(int=7)


def _batch(n: int) -> bytes:
    return build_batch([SimpleRecord(value=b"v%d" % i, timestamp=1000 + i) for i in range(n)])


def test_request_names_are_kafkas() -> None:
    assert request_name(0) == "Produce"
    assert request_name(2) == "ListOffsets"
    assert request_name(23) == "OffsetForLeaderEpoch"
    assert request_name(18) == "ApiVersions"


def test_error_codes_walk_nested_arrays_and_top_level_fields() -> None:
    resp = MetadataResponse(
        topics=[
            MetadataResponse.MetadataResponseTopic(
                error_code=3,
                name="t",
                partitions=[
                    MetadataResponse.MetadataResponsePartition(error_code=0, partition_index=0),
                    MetadataResponse.MetadataResponsePartition(error_code=6, partition_index=1),
                ],
            )
        ]
    )
    assert sorted(error_codes(resp)) == [
        "NONE",  # the top-level error code (Metadata v13, KIP-1102)
        "NONE",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_TOPIC_OR_PARTITION",
    ]


def _ctx(api_key: int, version: int) -> RequestContext:
    header = RequestHeader(api_key, version, 1, "t")
    return RequestContext(header, "peer", "PLAINTEXT", 1, received_ms=0)


def _traffic_samples(
    stats: TrafficStats, queue_size: int = 0
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, as prometheus-client parses the rendering."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrafficCollector(stats, lambda: queue_size))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }


def test_produce_requests_and_their_error_codes_are_counted() -> None:
    """The network layer counts a produce's request and each partition's answer (Kafka's
    errorCounts); the topic counters are the produce handler's (its append), untouched
    here (tests/unit/server/test_produce_topic_metrics.py)."""
    stats = TrafficStats(lambda _id: None)
    ok, bad = _batch(4), _batch(2)
    req = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=ok),
                    ProduceRequest.PartitionProduceData(index=1, records=bad),
                ],
            )
        ],
    )
    resp = ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="t",
                partition_responses=[
                    ProduceResponse.PartitionProduceResponse(index=0, error_code=0),
                    ProduceResponse.PartitionProduceResponse(index=1, error_code=6),
                ],
            )
        ]
    )
    assert stats.record(_ctx(0, 9), req, resp) == "Produce"
    assert stats.topics == {}
    assert stats.requests == {("Produce", 9): 1}
    assert stats.errors == {("Produce", "NONE"): 1, ("Produce", "NOT_LEADER_OR_FOLLOWER"): 1}
    req.acks = 0  # no response: a request, no codes
    stats.record(_ctx(0, 9), req, None)
    assert stats.requests == {("Produce", 9): 2} and sum(stats.errors.values()) == 2
    # the rendering parses, with the unlabelled all-topics series beside the per-topic one
    stats.produce_topic("t").messages_in = 10
    samples = _traffic_samples(stats, queue_size=3)
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 10
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "t"),))] == 10
    assert samples[("kafka_network_requestchannel_requestqueuesize", ())] == 3
    stats.forget_topic("t")  # deleted: its series go, the all-topics sums keep its counts
    assert "t" not in stats.topics and stats.all_topics().messages_in == 10


def _one_partition(records: bytes | None, code: int) -> tuple[ProduceRequest, ProduceResponse]:
    req = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(records=records)]
            )
        ],
    )
    resp = ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="t",
                partition_responses=[ProduceResponse.PartitionProduceResponse(error_code=code)],
            )
        ]
    )
    return req, resp


def test_one_partition_produce_counts_as_the_general_path_does() -> None:
    """The hot path (a version in the table, one partition answered NONE) and the
    general path count the same requests' codes the same way."""
    produces = [(_batch(3), 0), (_batch(2), 6), (None, 87), (_batch(1), 0)]
    stats = TrafficStats(lambda _id: None)
    for records, code in produces:
        req, resp = _one_partition(records, code)
        assert stats.record(_ctx(0, 9), req, resp) == "Produce"
        # a version past the hot path's table goes the general way, counted the same
        assert stats.record(_ctx(0, PRODUCE_VERSIONS), req, resp) == "Produce"
    assert stats.requests == {("Produce", 9): 4, ("Produce", PRODUCE_VERSIONS): 4}
    assert stats.errors == {
        ("Produce", "NONE"): 2 * 2,
        ("Produce", "NOT_LEADER_OR_FOLLOWER"): 2,
        ("Produce", "INVALID_RECORD"): 2,
    }
    # the exposition shows the merged counts
    samples = _traffic_samples(stats)
    requests = "kafka_network_requestmetrics_requests_total"
    assert samples[(requests, (("request", "Produce"), ("version", "9")))] == 4
    errors = "kafka_network_requestmetrics_errors_total"
    assert samples[(errors, (("error", "NONE"), ("request", "Produce")))] == 4


class _Recorded(TrafficStats):
    """TrafficStats keeping the bodies `record` was asked to count."""

    def __init__(self) -> None:
        super().__init__(lambda _id: None)
        self.recorded: list[Message] = []

    def record(self, ctx: RequestContext, body: Message, response: Response | None) -> str:
        self.recorded.append(body)
        return super().record(ctx, body, response)


def test_the_handler_task_counts_as_record_does() -> None:
    """`TrafficStats.run_timed` counts a one-partition Produce answered NONE itself (no
    call to `record`) and every other answer through `record`: the counters come out as
    `record` alone makes them, for NONE, an error, acks=0, another version and another API,
    and each permit gets its request name and both of its handler stamps."""
    answers: list[tuple[int, Message, Message | None]] = []
    for records, code in [(_batch(3), 0), (_batch(2), 6), (None, 87), (_batch(1), 0)]:
        req, resp = _one_partition(records, code)
        answers += [(9, req, resp), (PRODUCE_VERSIONS, req, resp), (3, req, None)]
    answers.append((12, MetadataRequest(), MetadataResponse()))
    by_task, by_record = _Recorded(), TrafficStats(lambda _id: None)
    for version, body, answer in answers:

        async def handler(
            _ctx: RequestContext, _body: Message, answer: Message | None = answer
        ) -> Response | None:
            return answer

        permit = TimedPermit(asyncio.Semaphore(1), time.perf_counter())
        ctx = _ctx(3 if isinstance(body, MetadataRequest) else 0, version)
        assert asyncio.run(by_task.run_timed(handler, permit, ctx, body)) is answer
        assert permit.name == by_record.record(ctx, body, answer)
        assert permit.stamps[DEQUEUED] > 0.0 and permit.stamps[ANSWERED] >= permit.stamps[DEQUEUED]
    assert by_task.requests == by_record.requests and by_task.errors == by_record.errors
    assert by_task.requests[("Produce", 9)] == 4 and by_task.errors[("Produce", "NONE")] == 4
    # the two one-partition answers NONE at v9 never reached record; the rest all did
    assert len(by_task.recorded) == len(answers) - 2


def _sent(stats: TrafficStats, *stamps: float, name: str = "Produce") -> None:
    """A request sent with these stamps (received, dequeued, parked, answered, taken,
    sent), handed to ``stats`` as the network layer does."""
    t = TimedPermit(asyncio.Semaphore(1), stamps[0])
    t.stamps[1:5] = array("d", stamps[1:5])
    t.name = name
    stats.sent([t], stamps[5])


def test_request_times_split_into_kafkas_stages() -> None:
    """received 0, dequeued 2 ms, parked 5 ms, answered 105 ms, taken 110 ms, sent 111 ms;
    a second request that never parked: all its handler time is local."""
    stats = TrafficStats(lambda _id: None)
    _sent(stats, 0.0, 0.002, 0.005, 0.105, 0.110, 0.111)
    _sent(stats, 1.0, 1.001, 0.0, 1.004, 1.004, 1.0045)
    _sent(stats, 2.0, 2.001, 0.0, 0.0, 0.0, 2.1, name="")  # never answered: not timed
    assert stats.times == {}  # folded at scrape time
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrafficCollector(stats, lambda: 0))
    samples = {
        s.name: s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
        if s.labels.get("request") == "Produce" and "le" not in s.labels
    }
    sums = {
        name: round(samples[f"kafka_network_requestmetrics_{name}_sum"], 6)
        for name, _timer, _doc in TIME_METRICS
    }
    assert sums == {
        "totaltimems": 111 + 4.5,
        "requestqueuetimems": 2 + 1,
        "localtimems": 3 + 3,
        "remotetimems": 100 + 0,
        "responsequeuetimems": 5 + 0,
        "responsesendtimems": 1 + 0.5,
    }
    # the stages add up to the total
    assert sum(sums.values()) - sums["totaltimems"] == sums["totaltimems"]
    for name, _timer, _doc in TIME_METRICS:
        assert samples[f"kafka_network_requestmetrics_{name}_count"] == 2
    remote = stats.times["Produce"].remote
    assert dict(remote.cumulative())["1"] == 1 and dict(remote.cumulative())["100"] == 2


def test_stamps_fold_when_bounded_and_bulk_matches_one_by_one() -> None:
    """Folded at the bound without a scrape (the permits are not kept: their stamps
    are copied), every stage's buckets and sum as if each stage time were observed one
    by one, parked or not."""
    stats = TrafficStats(lambda _id: None)
    step_s = 4.096 / PENDING_REQUESTS_MAX
    expected = {name: MsHistogram() for name, _timer, _doc in TIME_METRICS}
    for i in range(PENDING_REQUESTS_MAX):
        at = [1000.0 + i, 0.0, 0.0, 0.0, 0.0, 0.0]  # received .. sent
        for stage in range(1, 6):  # stage times 0 .. ~8 ms, some of them 0
            at[stage] = at[stage - 1] + (i % 3) * (stage % 3) * step_s
        parked = at[2]
        if i % 2:
            at[2] = 0.0  # never parked: its local time runs to the answer
            parked = at[3]
        _sent(stats, *at)
        for (name, _timer, _doc), (start, end) in zip(
            TIME_METRICS,
            [(at[0], at[5]), (at[0], at[1]), (at[1], parked), (parked, at[3]),
             (at[3], at[4]), (at[4], at[5])],
            strict=True,
        ):  # fmt: skip
            expected[name].observe((end - start) * 1000)
    folded = stats.times["Produce"]  # folded at the bound, no scrape needed
    for name, timer, _doc in TIME_METRICS:
        assert timer(folded).counts == expected[name].counts, name  # bounds inclusive in both
        assert timer(folded).sum_ms == pytest.approx(expected[name].sum_ms), name
    assert 0 < folded.local.counts[0] < PENDING_REQUESTS_MAX


def test_histogram_buckets_are_cumulative() -> None:
    h = MsHistogram()
    for ms in (0.5, 1, 3, 40_000):
        h.observe(ms)
    buckets = dict(h.cumulative())
    assert buckets["1"] == 2 and buckets["5"] == 3 and buckets["30000"] == 3
    assert buckets["+Inf"] == 4
    assert h.sum_ms == 0.5 + 1 + 3 + 40_000


def _apply(image: MetadataImage, *records: object) -> tuple[MetadataImage, MetadataDelta]:
    delta = MetadataDelta(image)
    for rec in records:
        delta.replay(rec)  # type: ignore[arg-type]
    return delta.apply(), delta


def _change(**fields: object) -> PartitionChangeRecord:
    rec = PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=NO_LEADER_CHANGE)
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def test_metadata_events_count_isr_changes_led_here_and_elections() -> None:
    events = MetadataEvents(node_id=1, is_controller=True)
    created, delta = _apply(
        MetadataImage.EMPTY,
        TopicRecord(name="t", topic_id=TOPIC_ID),
        PartitionRecord(
            partition_id=0, topic_id=TOPIC_ID, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1
        ),
    )
    events.on_image(MetadataImage.EMPTY, created, delta)
    assert (events.leader_elections, events.isr_shrinks) == (0, 0)  # creation is neither
    shrunk, delta = _apply(created, _change(isr=[1, 2]))
    events.on_image(created, shrunk, delta)
    expanded, delta = _apply(shrunk, _change(isr=[1, 2, 3]))
    events.on_image(shrunk, expanded, delta)
    assert (events.isr_shrinks, events.isr_expands) == (1, 1)
    moved, delta = _apply(expanded, _change(leader=2, isr=[2, 3]))
    events.on_image(expanded, moved, delta)
    assert (events.leader_elections, events.unclean_elections) == (1, 0)
    assert events.isr_shrinks == 1  # a new leader epoch is an election, not a shrink
    unclean, delta = _apply(moved, _change(leader=3, isr=[3], leader_recovery_state=1))
    events.on_image(moved, unclean, delta)
    assert (events.leader_elections, events.unclean_elections) == (2, 1)
    other = MetadataEvents(node_id=2, is_controller=False)
    shrink2, delta = _apply(moved, _change(isr=[2]))
    other.on_image(moved, shrink2, delta)
    assert other.isr_shrinks == 1  # node 2 leads now


def test_the_fast_exposition_parses_to_what_generate_latest_gives() -> None:
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

    from riverbed.server.metrics.exposition import render_text

    class Mixed:
        def collect(self):  # type: ignore[no-untyped-def]
            gauge = GaugeMetricFamily("g", 'help with \\ and "quotes"', labels=["topic", "group"])
            gauge.add_metric(["t.1", 'odd "group"\\x\nline'], 3)
            gauge.add_metric(["t-2", "plain"], 2.5)
            gauge.add_metric(["t-3", "big"], 2.0**60)
            yield gauge
            yield GaugeMetricFamily("nan_gauge", "x", value=float("nan"))
            hist = HistogramMetricFamily("h", "x", labels=["request"])
            hist.add_metric(["Produce"], [("1", 1.0), ("+Inf", 3.0)], sum_value=7.5)
            yield hist

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Mixed())
    stats = TrafficStats(lambda _id: None)
    stats.topics["t"] = TopicCounters(bytes_in=10)
    registry.register(TrafficCollector(stats, lambda: 0))
    from riverbed.server.metrics.metadata_events import MetadataEvents

    registry.register(MetadataEvents(1, True))

    def parsed(text: str) -> list[tuple[str, str, tuple[object, ...]]]:
        out = []
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                value = "nan" if s.value != s.value else s.value
                out.append((family.type, s.name, (tuple(sorted(s.labels.items())), value)))
        return sorted(out, key=repr)

    ours = render_text(registry).decode()
    assert parsed(ours) == parsed(generate_latest(registry).decode())
    assert 'group="odd \\"group\\"\\\\x\\nline"' in ours


def test_rendered_families_parse_like_any_other() -> None:
    from riverbed.server.metrics.exposition import RenderedFamily, labels_text, render_text

    class Logs:
        def collect(self):  # type: ignore[no-untyped-def]
            family = RenderedFamily("kafka_log_log_size", "Bytes")
            family.add(labels_text(topic="a.b-c", partition="0"), 10)
            family.add(labels_text(topic="x", partition="7"), 2.5)
            yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Logs())
    [family] = text_string_to_metric_families(render_text(registry).decode())
    assert family.type == "gauge"
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"topic": "a.b-c", "partition": "0"}, 10.0),
        ({"topic": "x", "partition": "7"}, 2.5),
    ]


def test_loop_idle_is_one_minus_busy_over_the_window() -> None:
    """Samples every second; a window of 3 s keeps 4 samples (3 differences)."""
    clock = {"wall": 0, "busy": 0}
    idle = LoopIdle(
        3000, busy_ns=lambda: clock["busy"], now_ns=lambda: clock["wall"], interval_ms=1000
    )
    assert idle.idle_ratio() == 1.0  # nothing measured yet
    for busy_ms in (0, 100, 900, 500, 500):  # busy time in each second
        clock["wall"] += 1_000_000_000
        clock["busy"] += busy_ms * 1_000_000
        idle.sample()
    # the window: the last 3 seconds, 900 + 500 + 500 ms busy of 3000
    assert idle.idle_ratio() == pytest.approx(1 - 1900 / 3000)
    clock["wall"] += 1_000_000_000
    clock["busy"] += 2_000_000_000  # busier than the wall (a runqueue wait in the sample)
    idle.sample()
    clock["wall"] += 1_000_000_000
    clock["busy"] += 2_000_000_000
    idle.sample()
    clock["wall"] += 1_000_000_000
    clock["busy"] += 2_000_000_000
    idle.sample()
    assert idle.idle_ratio() == 0.0  # clamped


def test_schedstat_busy_time_of_this_thread_grows_with_work() -> None:
    busy = schedstat_busy_ns(threading.get_native_id())
    before = busy()
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:  # 50 ms of CPU
        pass
    assert busy() - before >= 40_000_000


def _cleaner_gauges(manager: LogManager) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CleanerCollector(lambda: manager.cleaner))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }


def test_cleaner_gauges_follow_the_cleanings_and_count_failed_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cleaning of 9 keys in a dedupe buffer of 1,000 slots; then a cleaning that fails
    (its log's read raises) makes the partition uncleanable until one succeeds."""
    clock = ManualClock(1_700_000_000_000)
    compact = LogConfig(
        cleanup_policy=("compact",), segment_bytes=600, min_cleanable_dirty_ratio=0.0
    )
    data = tmp_path / "data"
    manager = LogManager(
        [data], clock, default_config=compact,
        cleaner_config=CleanerConfig(backoff_ms=0, dedupe_buffer_bytes=24_000),
    )  # fmt: skip
    log = manager.get_or_create("t", 0, compact)
    # a key written once: the first segment keeps it, so the cleaning rewrites that one
    log.append_as_leader(build_batch([SimpleRecord(b"once", key=b"solo")]), 0)
    for i in range(200):
        log.append_as_leader(build_batch([SimpleRecord(b"v%d" % i, key=b"k%d" % (i % 8))]), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    before = log.size_bytes
    manager.flush_due(clock.now_ms())
    manager.cleaner.wait(30)
    g = _cleaner_gauges(manager)
    (run,) = manager.cleaner.last_runs
    # the copy pass read every closed segment and wrote back what it kept of them
    assert run.bytes_read == before and 0 < run.bytes_written < before
    p, m = "kafka_log_logcleaner_", "kafka_log_logcleanermanager_"
    recopy = 100 * run.bytes_written / before
    assert g[(p + "cleaner_recopy_percent", ())] == pytest.approx(recopy)
    assert g[(p + "max_buffer_utilization_percent", ())] == pytest.approx(100 * 9 / 1000)
    assert g[(p + "max_clean_time_secs", ())] == 0  # the manual clock stood still
    assert g[(m + "max_dirty_percent", ())] == 100  # never cleaned before: all dirty
    assert g[(m + "uncleanable_partitions_count", (("logDirectory", str(data)),))] == 0
    clock.advance(1500)
    assert _cleaner_gauges(manager)[(m + "time_since_last_run_ms", ())] == 1500

    def broken(*_args: object, **_kw: object) -> None:
        raise OSError("a read failed")

    for i in range(50):  # dirty again
        log.append_as_leader(build_batch([SimpleRecord(b"w%d" % i, key=b"k%d" % (i % 8))]), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    monkeypatch.setattr(log, "clean", broken)
    manager.flush_due(clock.now_ms())
    manager.cleaner.wait(30)
    g = _cleaner_gauges(manager)
    assert g[(m + "uncleanable_partitions_count", (("logDirectory", str(data)),))] == 1
    assert 0 < g[(m + "max_dirty_percent", ())] < 100
    monkeypatch.undo()
    clock.advance(1)
    manager.flush_due(clock.now_ms())
    manager.cleaner.wait(30)
    g = _cleaner_gauges(manager)
    assert g[(m + "uncleanable_partitions_count", (("logDirectory", str(data)),))] == 0
    manager.shutdown()
