"""The `riverbed` CLI end to end against a real riverbed broker process."""

import json
import re
import subprocess
import sys
import time

import pytest

from riverbed.cli.main import main
from riverbed.testing.cluster import BrokerProcess, scaled_s

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker():
    with BrokerProcess() as b:  # __enter__ starts it and waits until it is ready
        yield b


def run_json(capsys, *argv):
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_topic_lifecycle(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "life", "--partitions", "3",
                 "--config", "retention.ms=60000"]) == 0  # fmt: skip
    assert "life" in run_json(capsys, "topics", "list", "-b", b, "--json")
    (desc,) = run_json(capsys, "topics", "describe", "-b", b, "--topic", "life", "--json")
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    assert len(desc["topic_id"]) == 22
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in desc["partitions"])
    assert desc["configs"] == {"retention.ms": "60000"}
    # creating it again fails with a clear error, unless --if-not-exists
    capsys.readouterr()
    assert main(["topics", "create", "-b", b, "--topic", "life"]) == 1
    assert "TOPIC_ALREADY_EXISTS" in capsys.readouterr().err
    assert main(["topics", "create", "-b", b, "--topic", "life", "--if-not-exists"]) == 0
    assert main(["topics", "alter-config", "-b", b, "--topic", "life",
                 "--add-config", "segment.ms=100000", "--delete-config", "retention.ms"]) == 0  # fmt: skip
    (desc,) = run_json(capsys, "topics", "describe", "-b", b, "--topic", "life", "--json")
    assert desc["configs"] == {"segment.ms": "100000"}
    assert main(["topics", "alter", "-b", b, "--topic", "life", "--partitions", "5"]) == 0
    (desc,) = run_json(capsys, "topics", "describe", "-b", b, "--topic", "life", "--json")
    assert len(desc["partitions"]) == 5
    assert main(["topics", "delete", "-b", b, "--topic", "life"]) == 0
    assert "life" not in run_json(capsys, "topics", "list", "-b", b, "--json")
    capsys.readouterr()
    assert main(["topics", "delete", "-b", b, "--topic", "life"]) == 1
    assert main(["topics", "delete", "-b", b, "--topic", "life", "--if-exists"]) == 0


def test_invalid_topic_requests_are_reported(broker, capsys):
    b = broker.bootstrap
    capsys.readouterr()
    assert main(["topics", "create", "-b", b, "--topic", "bad name"]) == 1
    assert "TOPIC_EXCEPTION" in capsys.readouterr().err
    assert main(["topics", "create", "-b", b, "--topic", "cfg", "--config", "nope=1"]) == 1
    assert "INVALID_CONFIG" in capsys.readouterr().err
    assert main(["topics", "create", "-b", b, "--topic", "rf", "--replication-factor", "3"]) == 1
    assert "INVALID_REPLICATION_FACTOR" in capsys.readouterr().err


def test_topics_create_with_a_replica_assignment(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "assigned",
                 "--replica-assignment", "1,1"]) == 0  # fmt: skip
    (desc,) = run_json(capsys, "topics", "describe", "-b", b, "--topic", "assigned", "--json")
    assert [(p["partition"], p["replicas"]) for p in desc["partitions"]] == [(0, [1]), (1, [1])]
    # the assignment gives the counts: --partitions beside it is refused, as by kafka-topics
    capsys.readouterr()
    assert main(["topics", "create", "-b", b, "--topic", "assigned2",
                 "--replica-assignment", "1", "--partitions", "2"]) == 1  # fmt: skip
    assert "cannot be used with --partitions" in capsys.readouterr().err


def test_produce_consume_with_keys_headers_timestamps(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "pc", "--partitions", "1"]) == 0
    lines = "h:1\tk1\tv1\nh:2\tk2\tNULL\n"
    proc = subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", "produce", "-b", b, "-t", "pc",
         "--parse-key", "--parse-headers", "--null-marker", "NULL", "--timestamp", "1600000000000"],
        input=lines, text=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    capsys.readouterr()
    assert main(["consume", "-b", b, "-t", "pc", "--from-beginning", "--max-messages", "2",
                 "--timeout-ms", "10000", "--json"]) == 0  # fmt: skip
    recs = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["key"], r["value"], r["offset"]) for r in recs] == [("k1", "v1", 0), ("k2", None, 1)]
    assert recs[0]["headers"] == [["h", "1"]]
    assert recs[0]["timestamp"] == 1600000000000
    assert recs[0]["timestamp_type"] == "CreateTime"
    # --offset and --timestamp pick the starting record
    assert main(["consume", "-b", b, "-t", "pc", "--partition", "0", "--offset", "1",
                 "--max-messages", "1", "--timeout-ms", "10000", "--print-key"]) == 0  # fmt: skip
    assert capsys.readouterr().out.strip() == "k2\tnull"
    now = int(time.time() * 1000)
    assert main(["produce", "-b", b, "-t", "pc", "--value", "late", "--timestamp", str(now)]) == 0
    capsys.readouterr()
    assert main(["consume", "-b", b, "-t", "pc", "--timestamp", str(now - 1),
                 "--max-messages", "1", "--timeout-ms", "10000"]) == 0  # fmt: skip
    assert capsys.readouterr().out.strip() == "late"


def test_cluster_describe(broker, capsys):
    info = run_json(capsys, "cluster", "describe", "-b", broker.bootstrap, "--json")
    assert info["controller_id"] == 1
    assert info["brokers"] == [{"id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}]
    assert len(info["cluster_id"]) == 22


def test_brokers_list(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "bl", "--partitions", "3"]) == 0
    capsys.readouterr()
    rows = run_json(capsys, "brokers", "list", "-b", b, "--json")
    assert len(rows) == 1
    row = rows[0]
    assert (row["id"], row["host"], row["port"], row["controller"]) == (
        1,
        "127.0.0.1",
        broker.port,
        True,
    )
    # the three new partitions at least (internal topics may add more), all led here
    assert row["leaders"] >= 3 and row["replicas"] == row["leaders"]
    assert row["out_of_isr"] == 0
    assert main(["brokers", "list", "-b", b]) == 0
    out = capsys.readouterr().out
    assert "out of ISR" in out and str(broker.port) in out


def test_bench_produce_consume_e2e(broker, capsys):
    b = broker.bootstrap
    res = run_json(capsys, "bench", "produce", "-b", b, "--topic", "bench", "--num-records",
                   "2000", "--record-size", "100", "--partitions", "2", "--json")  # fmt: skip
    assert res["records"] == 2000 and res["errors"] == 0 and res["bytes"] == 200_000
    assert res["latency_ms"]["p50"] <= res["latency_ms"]["p99"] <= res["latency_ms"]["max"]
    res = run_json(capsys, "bench", "consume", "-b", b, "--topic", "bench", "--num-records",
                   "2000", "--json")  # fmt: skip
    assert res["records"] == 2000 and res["bytes"] == 200_000
    res = run_json(capsys, "bench", "e2e", "-b", b, "--topic", "bench-e2e", "--num-records",
                   "200", "--json")  # fmt: skip
    assert res["records"] == 200 and res["errors"] == 0


def test_node_froze_its_start_up_heap(broker):
    # issue 23: full collections must not walk the start-up heap while serving
    # (the process freezes right after its ready line: wait for it, bounded)
    deadline = time.monotonic() + scaled_s(30)
    found = None
    while found is None and time.monotonic() < deadline:
        found = re.search(r"froze (\d+) start-up objects", broker.log_text())
        if found is None:
            time.sleep(0.1)
    assert found is not None and int(found.group(1)) > 10_000


def test_node_reports_loop_stalls_and_collector_pauses(broker):
    # issue 23: the stall sampler runs in the node's loop, the collector hook times pauses
    import urllib.request

    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=30) as r:
        text = r.read().decode()
    assert re.search(r"^riverbed_event_loop_stalls_total \d", text, re.M)
    # the start-up collection before the freeze, at least, was timed
    found = re.search(r'^python_gc_pauses_total\{generation="2"\} (\S+)', text, re.M)
    assert found is not None and float(found.group(1)) >= 1


def test_bench_latency_finds_the_peak_then_holds_half_of_it(broker, capsys):
    b = broker.bootstrap
    res = run_json(capsys, "bench", "latency", "-b", b, "--topic", "lat", "--peak-records",
                   "3000", "--duration-s", "1", "--json")  # fmt: skip
    peak = res["peak_records_per_s"]
    assert peak > 0 and res["target_rate"] == pytest.approx(peak / 2, rel=0.01)
    # every record of one second at the target rate, each acknowledged: int(rate * 1 s) of
    # the unrounded rate, which the report rounds to 0.1 (73,339.96/s -> 73340.0, 73,339 records)
    rate = res["target_rate"]
    assert int(rate - 0.05) <= res["records"] <= int(rate + 0.05) and res["errors"] == 0
    lat = res["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
    # a fixed --rate skips the peak run
    res = run_json(capsys, "bench", "latency", "-b", b, "--topic", "lat", "--rate", "400",
                   "--duration-s", "0.5", "--json")  # fmt: skip
    assert res["peak_records_per_s"] is None and res["records"] == 200
    assert res["seconds"] >= 0.49  # paced: 200 records at 400/s take half a second


def test_bench_consume_processes_read_everything_the_producer_spread_unevenly(broker, capsys):
    from confluent_kafka import Producer

    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "uneven", "--partitions", "3"]) == 0
    p = Producer({"bootstrap.servers": b, "linger.ms": 5, "log_level": 3})
    # 600 / 250 / 50 records: shares by record count would come up short.
    for i, part in enumerate([0] * 600 + [1] * 250 + [2] * 50):
        p.produce("uneven", value=b"v" * 10, key=str(i).encode(), partition=part)
    assert p.flush(20) == 0
    del p
    res = run_json(capsys, "bench", "consume", "-b", b, "--topic", "uneven", "--num-records",
                   "900", "--processes", "3", "--json")  # fmt: skip
    assert res["records"] == 900 and res["bytes"] == 900 * 10 and res["errors"] == 0
    res = run_json(capsys, "bench", "consume", "-b", b, "--topic", "uneven", "--num-records",
                   "700", "--processes", "2", "--json")  # fmt: skip
    assert res["records"] == 700


def test_configs_describe_and_alter(broker, capsys):
    b = broker.bootstrap
    assert (
        main(["topics", "create", "-b", b, "--topic", "cfgs", "--config", "segment.ms=1000"]) == 0
    )
    rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "topics",
                    "--entity-name", "cfgs", "--json")  # fmt: skip
    assert {r["name"]: r["source"] for r in rows} == {"segment.ms": "DYNAMIC_TOPIC_CONFIG"}
    assert main(["configs", "alter", "-b", b, "--entity-type", "topics", "--entity-name", "cfgs",
                 "--add-config", "retention.bytes=1000", "--delete-config", "segment.ms"]) == 0  # fmt: skip
    rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "topics",
                    "--entity-name", "cfgs", "--all", "--json")  # fmt: skip
    by_name = {r["name"]: r for r in rows}
    assert by_name["retention.bytes"]["value"] == "1000"
    assert by_name["segment.ms"]["source"] == "DEFAULT_CONFIG"
    rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "brokers",
                    "--entity-name", "1", "--json")  # fmt: skip
    assert {r["name"]: r["value"] for r in rows}["node.id"] == "1"
    capsys.readouterr()
    assert main(["configs", "alter", "-b", b, "--entity-type", "topics", "--entity-name", "cfgs",
                 "--add-config", "retention.ms=soon"]) == 1  # fmt: skip
    assert "INVALID_CONFIG" in capsys.readouterr().err


def test_dynamic_broker_config_reaches_partitions(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "dyn"]) == 0
    assert main(["configs", "alter", "-b", b, "--entity-type", "brokers", "--entity-name", "1",
                 "--add-config", "message.max.bytes=2000"]) == 0  # fmt: skip
    try:
        rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "topics",
                        "--entity-name", "dyn", "--json")  # fmt: skip
        by_name = {r["name"]: r for r in rows}
        assert by_name["max.message.bytes"]["value"] == "2000"
        assert by_name["max.message.bytes"]["source"] == "DYNAMIC_BROKER_CONFIG"
        # --synonyms shows Kafka's whole list, the same broker key from two layers included.
        rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "topics",
                        "--entity-name", "dyn", "--synonyms", "--json")  # fmt: skip
        syn = {r["name"]: r["synonyms"] for r in rows}["max.message.bytes"]
        assert [(s["name"], s["value"], s["source"]) for s in syn] == [
            ("message.max.bytes", "2000", "DYNAMIC_BROKER_CONFIG"),
            ("message.max.bytes", "1048588", "DEFAULT_CONFIG"),
        ]
        capsys.readouterr()
        big = "x" * 5000
        assert main(["produce", "-b", b, "-t", "dyn", "--value", big]) == 1
        assert "MSG_SIZE_TOO_LARGE" in capsys.readouterr().err
    finally:
        assert main(["configs", "alter", "-b", b, "--entity-type", "brokers", "--entity-name", "1",
                     "--delete-config", "message.max.bytes"]) == 0  # fmt: skip
    assert main(["produce", "-b", b, "-t", "dyn", "--value", big]) == 0


def test_cluster_default_broker_config(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "dflt"]) == 0
    assert main(["configs", "alter", "-b", b, "--entity-type", "brokers", "--entity-default",
                 "--add-config", "log.retention.ms=123456"]) == 0  # fmt: skip
    try:
        rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "brokers",
                        "--entity-default", "--json")  # fmt: skip
        assert [(r["name"], r["value"], r["source"]) for r in rows] == [
            ("log.retention.ms", "123456", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        ]
        rows = run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "topics",
                        "--entity-name", "dflt", "--json")  # fmt: skip
        assert {r["name"]: r["value"] for r in rows}["retention.ms"] == "123456"
        capsys.readouterr()
        assert main(["configs", "alter", "-b", b, "--entity-type", "brokers", "--entity-default",
                     "--add-config", "num.io.threads=2"]) == 1  # fmt: skip
        assert "dynamically" in capsys.readouterr().err
    finally:
        assert main(["configs", "alter", "-b", b, "--entity-type", "brokers", "--entity-default",
                     "--delete-config", "log.retention.ms"]) == 0  # fmt: skip
    assert run_json(capsys, "configs", "describe", "-b", b, "--entity-type", "brokers",
                    "--entity-default", "--json") == []  # fmt: skip


def test_alter_commands_print_json(broker, capsys):
    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "alterjson"]) == 0
    res = run_json(capsys, "topics", "alter", "-b", b, "--topic", "alterjson",
                   "--partitions", "3", "--validate-only", "--json")  # fmt: skip
    assert res == {"topic": "alterjson", "partitions": 3, "altered": False}
    res = run_json(capsys, "topics", "alter", "-b", b, "--topic", "alterjson",
                   "--partitions", "2", "--json")  # fmt: skip
    assert res == {"topic": "alterjson", "partitions": 2, "altered": True}
    res = run_json(capsys, "topics", "alter-config", "-b", b, "--topic", "alterjson",
                   "--add-config", "retention.ms=5000", "--json")  # fmt: skip
    assert res == {"topic": "alterjson", "set": {"retention.ms": "5000"}, "deleted": [],
                   "altered": True}  # fmt: skip
    res = run_json(capsys, "configs", "alter", "-b", b, "--entity-type", "topics",
                   "--entity-name", "alterjson", "--delete-config", "retention.ms",
                   "--json")  # fmt: skip
    assert res["deleted"] == ["retention.ms"] and res["altered"] is True
    info = run_json(capsys, "topics", "describe", "-b", b, "--topic", "alterjson", "--json")
    assert len(info[0]["partitions"]) == 2


def test_bench_progress_counts_every_record_across_processes(broker, monkeypatch):
    from riverbed.cli import bench_runners

    ticks: list[int] = []
    monkeypatch.setattr(bench_runners, "_PROGRESS", ticks.append)
    res = bench_runners.run_produce(
        broker.bootstrap, "progress", 2500, 10, partitions=2, processes=2
    )
    assert res.records == 2500
    assert sum(ticks) == 2500  # the parent saw the workers' progress through the counter
    ticks.clear()
    res = bench_runners.run_consume(broker.bootstrap, "progress", 2500, processes=2)
    assert res.records == 2500 and sum(ticks) == 2500


def test_leaders_elect_with_nothing_to_elect_says_so(broker, capsys):
    # issue 21: a single broker leads every partition it has: nothing needs an election
    b = ["-b", broker.bootstrap]
    assert main(["topics", "create", "--topic", "led", "--partitions", "2", *b]) == 0
    capsys.readouterr()
    assert main(["leaders", "elect", "--preferred", *b]) == 0
    assert "nothing to elect" in capsys.readouterr().out
    assert main(["leaders", "elect", "--preferred", "--topic", "led", *b]) == 0
    assert "nothing to elect" in capsys.readouterr().out


def test_consume_stopped_by_sigterm_says_how_many_it_processed(broker):
    """As Kafka's console consumer's shutdown hook: SIGTERM (a supervisor's stop, `kill`)
    ends `consume` as Ctrl-C does, with the count, not a silent death."""
    import signal

    b = broker.bootstrap
    assert main(["topics", "create", "-b", b, "--topic", "term", "--partitions", "1"]) == 0
    sent = subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", "produce", "-b", b, "-t", "term"],
        input="a\nb\nc\n", text=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverbed.cli.main", "consume", "-b", b, "-t", "term",
         "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        got = [proc.stdout.readline() for _ in range(3)]  # all three printed: it is polling
        assert got == ["a\n", "b\n", "c\n"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=scaled_s(30))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Processed a total of 3 messages" in err
