"""Metrics and health scraped from real nodes while confluent-kafka produces and consumes
(issue 21).

- one node: bytes and messages in match what was produced (and the log sizes and end
  offsets the same scrape reports), bytes out cover what the consumer read, the request
  metrics count the produce requests, a group's lag is the records produced after its
  commit, and the whole exposition parses with prometheus-client's own parser;
- bad HTTP input (unknown path, wrong method, oversized body) gets clear errors and the
  node keeps serving Kafka clients;
- three nodes: ``/health/ready`` is 503 (naming the failing check) while a node waits for
  its quorum and 200 once it serves; a SIGSTOPped follower shows as under-replicated on
  the leaders within ``replica.lag.time.max.ms`` (plus the AlterPartition round trip),
  and the count is 0 again after SIGCONT, with ISR shrinks and expands counted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from riverbed.testing.cluster import BrokerProcess, scaled_s
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_replication import LAG_MAX_MS, OVERRIDES, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: Liveness bounds of the waits below (not timings under test).
WAIT_S = 60.0
#: The window of the single node's idle ratios (metrics.sample.window.ms).
IDLE_WINDOW_MS = 3000
#: The single node's dedupe buffer, in keys (one cleaner thread).
DEDUPE_SLOTS = 10_000
#: A new group's first join is not held back (Kafka's default 3 s): what these tests check
#: is the metrics of what was read and committed, and each consumer has a group of its own.
NO_JOIN_DELAY = {"group.initial.rebalance.delay.ms": "0"}
#: Seconds a consume call waits for more records: the last call of a read waits it out.
CONSUME_POLL_S = 0.1

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample of ``url``/metrics, parsed by prometheus-client's own parser."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lbls), v in samples.items() if n == name and want <= lbls)


def http_status(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def node() -> Any:
    overrides = {
        "num.partitions": "3",
        "metrics.sample.window.ms": str(IDLE_WINDOW_MS),
        "log.cleaner.backoff.ms": "100",
        "log.cleaner.dedupe.buffer.size": str(DEDUPE_SLOTS * 24),  # 24 bytes a key
        **NO_JOIN_DELAY,
    }
    with BrokerProcess(overrides=overrides) as b:
        load_group_coordinators(b.bootstrap)  # not in the first consumer's join (3 s)
        yield b


def produce(bootstrap: str, topic: str, values: list[bytes], **config: object) -> None:
    """Produce ``values`` and check every one was delivered."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for i, v in enumerate(values):
        p.produce(
            topic,
            value=v,
            key=str(i).encode(),
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0
    assert errors == []


def consume(bootstrap: str, topic: str, group: str, count: int) -> int:
    """Read ``count`` records of ``topic`` as ``group`` and commit; the records read."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + WAIT_S
    try:
        while got < count and time.monotonic() < deadline:
            for msg in c.consume(500, timeout=CONSUME_POLL_S):
                if msg.error() is None:
                    got += 1
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def test_bytes_and_messages_in_match_what_was_produced(node: BrokerProcess) -> None:
    topic = "metered"
    values = [bytes([i % 251]) * (50 + i % 300) for i in range(2000)]
    produce(node.bootstrap, topic, values)
    assert consume(node.bootstrap, topic, "metered-readers", len(values)) == len(values)
    m = scrape(node.http_url)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 2000
    bytes_in = value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    # every byte appended is in the log (nothing was deleted), and every record counted
    assert bytes_in == total(m, "kafka_log_log_size", topic=topic)
    assert total(m, "kafka_log_log_logendoffset", topic=topic) == 2000
    assert bytes_in > sum(map(len, values))  # batch and record headers on top of values
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= bytes_in
    # the unlabelled all-topics meter covers this topic too
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total") >= 2000
    produces = total(m, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produces >= 1
    assert total(m, "kafka_network_requestmetrics_errors_total", request="Produce") >= produces
    assert total(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produces
    assert total(m, "kafka_network_requestmetrics_requests_total", request="FetchConsumer") >= 1
    assert value(m, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    assert value(m, "kafka_server_replicamanager_leadercount") >= 3
    assert value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(m, "kafka_server_raftmetrics_current_state", current_state="leader") == 1
    # the topic's creation was a committed metadata append: its latency was measured
    avg = value(m, "kafka_server_raftmetrics_commit_latency_avg")
    assert value(m, "kafka_server_raftmetrics_commit_latency_max") >= avg >= 0
    assert value(
        m, "kafka_server_socket_server_metrics_connection_count",
        listener="PLAINTEXT", networkProcessor="0",
    ) >= 0  # fmt: skip


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


#: The request time families (Kafka's RequestMetrics timers) and the stages that make up
#: the total.
_RM = "kafka_network_requestmetrics_"
_STAGES = ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems",
           "responsesendtimems")  # fmt: skip


def _assert_stages_add_up(before: Samples, after: Samples, request: str, count: float) -> None:
    """Every stage timed each request once, and the stages' times add up to the total."""
    assert _delta(before, after, _RM + "totaltimems_count", request=request) == count
    stages = 0.0
    for stage in _STAGES:
        assert _delta(before, after, f"{_RM}{stage}_count", request=request) == count, stage
        stages += _delta(before, after, f"{_RM}{stage}_sum", request=request)
    assert stages == pytest.approx(_delta(before, after, _RM + "totaltimems_sum", request=request))


def test_long_poll_fetch_waits_in_remote_time_not_local(node: BrokerProcess) -> None:
    """Kafka's RequestMetrics: a fetch parked in the purgatory (nothing to read, waiting up
    to fetch.wait.max.ms) spends that wait in RemoteTimeMs; its handler's own work,
    LocalTimeMs, stays small; an acks=1 produce never parks (RemoteTimeMs 0)."""
    topic, wait_ms = "long-polled", 600
    produce(node.bootstrap, topic, [b"first"])
    before = scrape(node.http_url)
    produce(node.bootstrap, topic, [b"p"] * 5, acks=1)
    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "long-pollers",
            "fetch.wait.max.ms": wait_ms,
            "enable.auto.commit": False,
        }
    )
    try:
        # from the end, where nothing new comes: every fetch waits it out
        c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(3)])
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            c.poll(0.2)
    finally:
        c.close()
    after = scrape(node.http_url)
    fetches = _delta(before, after, _RM + "requests_total", request="FetchConsumer")
    assert fetches >= 2
    _assert_stages_add_up(before, after, "FetchConsumer", fetches)

    def over(stage: str, bound_ms: str) -> float:
        """FetchConsumer requests whose ``stage`` took longer than ``bound_ms``."""
        count = _delta(before, after, f"{_RM}{stage}_count", request="FetchConsumer")
        under = _delta(before, after, f"{_RM}{stage}_bucket", request="FetchConsumer", le=bound_ms)
        return count - under

    # the long polls (all but maybe the last, cut short by the consumer's close) waited
    # fetch.wait.max.ms in the purgatory: remote time, not local
    assert over("remotetimems", "250") >= fetches - 1 >= 1
    assert over("localtimems", "250") == 0
    produces = _delta(before, after, _RM + "requests_total", request="Produce")
    assert produces >= 1
    _assert_stages_add_up(before, after, "Produce", produces)
    assert _delta(before, after, _RM + "remotetimems_sum", request="Produce") == 0


def _idle(url: str) -> float:
    """The loop's idle ratio; both of Kafka's names carry the same measure."""
    m = scrape(url)
    network = value(m, "kafka_network_socketserver_networkprocessoravgidlepercent")
    handlers = value(m, "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent")
    assert network == handlers and 0 <= network <= 1
    return network


def test_idle_ratio_falls_while_producers_keep_the_loop_busy(node: BrokerProcess) -> None:
    """The event loop's idle fraction (NetworkProcessorAvgIdlePercent and
    RequestHandlerAvgIdlePercent): high while nothing happens, low while producers keep
    the loop busy, high again after them (a window of IDLE_WINDOW_MS)."""
    wait_for("an idle loop", lambda: _idle(node.http_url) > 0.5 or None, WAIT_S)
    done = threading.Event()
    flooders = [
        threading.Thread(target=_flood, args=(node.bootstrap, "flooded", done)) for _ in range(3)
    ]
    for t in flooders:
        t.start()
    try:
        wait_for("a busy loop", lambda: _idle(node.http_url) < 0.5 or None, WAIT_S)
    finally:
        done.set()
        for t in flooders:
            t.join(WAIT_S)
    wait_for("an idle loop again", lambda: _idle(node.http_url) > 0.5 or None, WAIT_S)


def _flood(bootstrap: str, topic: str, done: threading.Event) -> None:
    """Small produce requests, as many as the broker takes, until ``done``."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "log_level": 3})
    while not done.is_set():
        try:
            p.produce(topic, value=b"f" * 20)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(30)


def test_cleaner_gauges_follow_a_compaction(node: BrokerProcess) -> None:
    """kafka.log LogCleaner / LogCleanerManager: a compacted topic of 20 keys is cleaned:
    the dedupe buffer held those 20 keys, less was written than read; then segments of
    records written after the cleaning leave the log dirty, below the topic's
    min.cleanable.dirty.ratio (99%: a never-cleaned log, 100% dirty, is cleaned; then
    the dirty bytes must be 99 times the clean ones)."""
    topic = "compacted-metered"
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.99",
    }
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    keys = 20
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0, "batch.size": 1500})
    for i in range(600):
        p.produce(topic, b"v%d" % i, key=b"k%d" % (i % keys))
    assert p.flush(30) == 0
    lc, lcm = "kafka_log_logcleaner_", "kafka_log_logcleanermanager_"
    used = wait_for(
        "a cleaning",
        lambda: value(scrape(node.http_url), lc + "max_buffer_utilization_percent"),
        WAIT_S,
    )
    # each cleaning maps at least a whole segment (~50 records): every key once
    assert used == pytest.approx(100 * keys / DEDUPE_SLOTS)
    m = scrape(node.http_url)
    assert 0 < value(m, lc + "cleaner_recopy_percent") < 100
    assert 0 <= value(m, lc + "max_clean_time_secs") < WAIT_S
    assert value(m, lcm + "time_since_last_run_ms") >= 0
    assert total(m, lcm + "uncleanable_partitions_count") == 0
    for i in range(300):  # in 15 flushes: at least as many batches, several segments
        p.produce(topic, b"w%d" % i, key=b"k%d" % (i % keys))
        if i % 20 == 19:
            assert p.flush(30) == 0
    wait_for(
        "a dirty log left alone",
        lambda: 0 < value(scrape(node.http_url), lcm + "max_dirty_percent") < 99,
        WAIT_S,
    )


def test_transaction_gauges_follow_an_open_then_aborted_transaction(node: BrokerProcess) -> None:
    """A transaction left open with three records stamped an hour ago: one open
    transaction, HW - LSO = 3 (a read_committed reader waits for them), late (its producer
    last wrote more than transaction.max.timeout.ms (15 min) + 5 min ago: KIP-664), and
    Ongoing at the coordinator; after its abort: none, lag 0, CompleteAbort."""
    topic = "txn-metered"
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "metered-txn"})
    p.init_transactions(30)
    before = scrape(node.http_url)
    p.begin_transaction()
    hour_ago_ms = int(time.time() * 1000) - 3_600_000
    for i in range(3):
        p.produce(topic, b"t%d" % i, partition=0, timestamp=hour_ago_ms)
    assert p.flush(30) == 0
    m = scrape(node.http_url)
    assert value(m, "riverbed_partition_open_transactions") == 1
    assert value(m, "riverbed_partition_lso_lag_max") == 3
    assert value(m, "kafka_server_replicamanager_partitionswithlatetransactionscount") == 1
    ongoing = "riverbed_transaction_coordinator_transactions"
    assert _delta(before, m, ongoing, state="Ongoing") == 1
    p.abort_transaction(30)
    m = wait_for(
        "the abort's marker",
        lambda: (
            (s := scrape(node.http_url))["riverbed_partition_open_transactions", frozenset()] == 0
            and s
        ),
        WAIT_S,
    )
    assert value(m, "riverbed_partition_lso_lag_max") == 0
    assert value(m, "kafka_server_replicamanager_partitionswithlatetransactionscount") == 0
    assert total(m, ongoing, state="Ongoing") == total(before, ongoing, state="Ongoing")
    assert _delta(before, m, ongoing, state="CompleteAbort") == 1


def test_group_lag_matches_committed_offsets(node: BrokerProcess) -> None:
    topic, group = "lagging", "lag-readers"
    produce(node.bootstrap, topic, [b"a" * 10] * 300)
    assert consume(node.bootstrap, topic, group, 300) == 300
    produce(node.bootstrap, topic, [b"b" * 10] * 120)  # not read: the lag

    def lag() -> tuple[float, float]:
        m = scrape(node.http_url)
        current = total(m, "kafka_consumergroup_current_offset", consumergroup=group)
        behind = total(m, "kafka_consumergroup_lag", consumergroup=group, topic=topic)
        return current, behind

    assert lag() == (300, 120)
    m = scrape(node.http_url)
    assert value(m, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 120
    assert value(m, "kafka_consumergroup_members", consumergroup=group) == 0  # it left


def test_producer_ledger_counts_idempotent_producers(node: BrokerProcess) -> None:
    before = value(scrape(node.http_url), "riverbed_producer_ledger_ids")
    for _ in range(3):
        p = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
        for partition in range(3):
            p.produce("idempotent", value=b"x", partition=partition)
        assert p.flush(30) == 0
    m = scrape(node.http_url)
    assert value(m, "riverbed_producer_ledger_ids") == before + 9  # 3 producers x 3 partitions
    assert value(m, "riverbed_producer_ledger_filter_bytes") > 0


def test_bad_http_requests_get_clear_errors_and_kafka_goes_on(node: BrokerProcess) -> None:
    status, body = http_status(node.http_url + "/metrics", "POST", b"x")
    assert status == 405 and json.loads(body)["status"] == 405
    assert http_status(node.http_url + "/nothing-here")[0] == 404
    # a huge declared body is refused before it is read
    with socket.create_connection(("127.0.0.1", node.http_port), timeout=10) as sock:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n" + b"y" * 1000
        )
        answer = sock.recv(4096).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert "above" in answer
    assert http_status(node.http_url + "/health/live")[0] == 200
    produce(node.bootstrap, "after-bad-http", [b"still serving"])
    m = scrape(node.http_url)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="after-bad-http") == 1


# ------------------------------------------------------------------ three nodes


def _ready(cluster: QuorumCluster, node_id: int) -> tuple[int, dict[str, Any]]:
    status, body = http_status(cluster.nodes[node_id].http_url + "/health/ready")
    return status, json.loads(body)


def test_ready_is_503_until_the_quorum_forms_then_200(tmp_path: Path) -> None:
    cluster = QuorumCluster(tmp_path, 3, overrides=OVERRIDES)
    errors: list[BaseException] = []

    def start(ids: list[int]) -> None:
        try:
            cluster.start_nodes(ids, timeout_s=WAIT_S)
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)

    first = threading.Thread(target=start, args=([1],))
    try:
        first.start()
        # node 1 alone has no quorum: its HTTP listener answers, not ready, naming why
        status, body = wait_for("node 1's HTTP listener", lambda: _ready(cluster, 1), WAIT_S)
        assert status == 503 and body["ready"] is False
        assert "metadata" in body["failing"] and "listeners" in body["failing"]
        assert http_status(cluster.nodes[1].http_url + "/health/live")[0] == 200
        start([2, 3])
        first.join(WAIT_S)
        assert not errors, errors
        for i in cluster.ids:
            status, body = _ready(cluster, i)
            assert (status, body["failing"]) == (200, []), (i, body)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("metrics3"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=WAIT_S)
        yield c
    finally:
        c.stop()


def _under_replicated(cluster: QuorumCluster, ids: list[int]) -> float:
    return sum(
        value(
            scrape(cluster.nodes[i].http_url),
            "kafka_server_replicamanager_underreplicatedpartitions",
        )
        for i in ids
    )


def _counter(cluster: QuorumCluster, ids: list[int], name: str) -> float:
    return sum(value(scrape(cluster.nodes[i].http_url), name) for i in ids)


def test_sigstopped_follower_shows_as_under_replicated(trio: QuorumCluster) -> None:
    topic = "watched"
    admin = AdminClient({"bootstrap.servers": trio.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(30)
    ids = list(trio.ids)
    wait_for(
        "whole ISRs", lambda: _under_replicated(trio, ids) == 0 and _leaders(trio, topic), WAIT_S
    )
    leaders = _leaders(trio, topic)
    # stop a node that follows some partition led by another node
    stopped = next(i for i in ids if any(lead != i for lead in leaders.values()))
    others = [i for i in ids if i != stopped]
    shrinks_before = _counter(trio, others, "kafka_server_replicamanager_isrshrinks_total")
    produce(trio.bootstrap_servers, topic, [b"before"] * 60)
    pid = trio.nodes[stopped].pid
    assert pid is not None
    # records keep coming while the follower is stopped: a follower at the leader's log
    # end stays in sync however long it is silent (Kafka's isCaughtUp); it falls behind
    # only when there is something to fall behind
    done = threading.Event()
    writer = threading.Thread(target=_keep_producing, args=(trio, topic, done))
    os.kill(pid, signal.SIGSTOP)
    writer.start()
    try:
        started = time.monotonic()
        try:
            wait_for(
                f"under-replicated partitions while node {stopped} is stopped",
                lambda: _under_replicated(trio, others) > 0,
                # the lag, then AlterPartition (maybe a new controller), slower under load
                scaled_s(LAG_MAX_MS / 1000 + 20),
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {_diagnosis(trio, topic, others)}") from None
        took_s = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
        done.set()
        writer.join(WAIT_S)
    assert _counter(trio, others, "kafka_server_replicamanager_isrshrinks_total") > shrinks_before
    wait_for(
        f"no under-replicated partition once node {stopped} is back",
        lambda: _under_replicated(trio, ids) == 0,
        WAIT_S,
    )
    assert _counter(trio, ids, "kafka_server_replicamanager_isrexpands_total") >= 1
    assert took_s >= LAG_MAX_MS / 1000 * 0.5, "the ISR shrank before the follower could lag"


def test_acks_all_produce_waits_for_the_followers_in_remote_time(trio: QuorumCluster) -> None:
    """acks=all: the leader parks the produce until the ISR has the records (Kafka's
    DelayedProduce), time that shows as RemoteTimeMs of Produce."""
    topic = "acked-by-all"
    admin = AdminClient({"bootstrap.servers": trio.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    wait_for("a leader", lambda: _leaders(trio, topic), WAIT_S)
    ids = list(trio.ids)
    before = {i: scrape(trio.nodes[i].http_url) for i in ids}
    produce(trio.bootstrap_servers, topic, [b"all"] * 20, acks="all", **{"linger.ms": 0})
    after = {i: scrape(trio.nodes[i].http_url) for i in ids}

    def delta(name: str) -> float:
        return sum(_delta(before[i], after[i], name, request="Produce") for i in ids)

    produces = delta(_RM + "requests_total")
    assert produces >= 1
    assert delta(_RM + "remotetimems_count") == produces
    assert delta(_RM + "remotetimems_sum") > 0
    for i in ids:
        count = _delta(before[i], after[i], _RM + "requests_total", request="Produce")
        _assert_stages_add_up(before[i], after[i], "Produce", count)


def _keep_producing(cluster: QuorumCluster, topic: str, done: threading.Event) -> None:
    """A record to every partition every 100 ms until ``done`` (acks=1: the leader alone)."""
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": 1, "log_level": 3})
    while not done.is_set():
        for partition in range(6):
            p.produce(topic, value=b"during", partition=partition)
        p.poll(0)
        done.wait(0.1)
    p.flush(10)


def _leaders(cluster: QuorumCluster, topic: str) -> dict[int, int]:
    """partition -> leader of ``topic``; empty until every partition has one."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    leaders = {p: pm.leader for p, pm in parts.items()}
    return leaders if leaders and all(v > 0 for v in leaders.values()) else {}


def _diagnosis(cluster: QuorumCluster, topic: str, live: list[int]) -> str:
    """What the live nodes say: ISRs and who is the active controller."""
    via = f"127.0.0.1:{cluster.ports[live[0]][0]}"
    parts = AdminClient({"bootstrap.servers": via}).list_topics(topic, timeout=10).topics
    isrs = {p: (pm.leader, pm.isrs) for p, pm in parts[topic].partitions.items()}
    active = {
        i: value(
            scrape(cluster.nodes[i].http_url),
            "kafka_controller_kafkacontroller_activecontrollercount",
        )
        for i in live
    }
    return f"partitions (leader, isr): {isrs}; active controller counts: {active}"


def test_tiered_storage_copies_and_remote_reads_are_counted(tmp_path: Path) -> None:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "300",
        "rsm.config.url": f"file://{tmp_path / 'remote'}",
        **NO_JOIN_DELAY,
    }
    topic = "tiered-metered"
    with BrokerProcess(overrides=overrides) as broker:
        load_group_coordinators(broker.bootstrap)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(16 * 1024),
            "local.retention.bytes": "0",
            "retention.ms": "-1",
        }
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
        produce(broker.bootstrap, topic, [b"t" * 200] * 1500, **{"batch.num.messages": 20})

        def copied() -> float:
            m = scrape(broker.http_url)
            return value(m, "kafka_server_brokertopicmetrics_remotecopybytes_total")

        copied_bytes = wait_for("segments copied to the remote tier", copied, WAIT_S)
        m = scrape(broker.http_url)
        assert value(m, "kafka_server_brokertopicmetrics_remotecopyrequests_total") >= 1
        assert value(m, "kafka_server_brokertopicmetrics_remotecopyerrors_total") == 0
        # the copies are whole segments: at most what was produced, most of it by now
        assert copied_bytes <= value(
            m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic
        )
        # local retention removes the copied segments; reading from 0 goes to the remote tier
        bytes_in = value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)

        def local_bytes() -> float:
            m = scrape(broker.http_url)
            return value(m, "kafka_log_log_size", topic=topic, partition="0")

        wait_for("local retention of copied segments", lambda: local_bytes() < bytes_in / 2, WAIT_S)
        assert consume(broker.bootstrap, topic, "tier-readers", 1500) == 1500
        m = scrape(broker.http_url)
        assert value(m, "kafka_server_brokertopicmetrics_remotefetchrequests_total") >= 1
        assert value(m, "kafka_server_brokertopicmetrics_remotefetchbytes_total") > 0
