"""CLI argument handling (no broker needed)."""

import argparse
import json
import time
from types import SimpleNamespace

import pytest

from riverbed.cli import bench_runners, common, consume, produce, topics
from riverbed.cli.main import VERBS, build_parser, main


def test_help_lists_every_verb(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for verb in VERBS:
        assert verb in out


@pytest.mark.parametrize("verb", ["topics", "storage", "server", "cluster", "bench"])
def test_verb_without_subcommand_prints_its_help(verb, capsys):
    assert main([verb]) == 0
    assert "SUBCOMMAND" in capsys.readouterr().out


def test_bootstrap_defaults_to_the_embedded_default(capsys):
    # issue 21: --bootstrap-server defaults to localhost:9092 (as rpk does) instead of
    # being required; the default is named in the help (tests/unit/cli/test_cli_polish.py)
    with pytest.raises(SystemExit) as info:
        main(["topics", "list", "--help"])
    assert info.value.code == 0
    assert "default: localhost:9092" in " ".join(capsys.readouterr().out.split())


def test_parse_topics_create():
    args = build_parser().parse_args(
        [
            "topics", "create", "-b", "h:1", "--topic", "t", "--partitions", "3",
            "--config", "retention.ms=5", "--config", "cleanup.policy=compact,delete",
        ]
    )  # fmt: skip
    assert args.topic == "t" and args.partitions == 3 and args.replication_factor == -1
    assert common.parse_kv(args.config, "--config") == {
        "retention.ms": "5",
        "cleanup.policy": "compact,delete",
    }


def test_parse_kv_errors_and_lists():
    assert common.parse_kv(["a=1,b=2"], "x") == {"a": "1", "b": "2"}
    assert common.parse_kv(["p=[x,y]"], "x") == {"p": "x,y"}
    with pytest.raises(common.CliError, match="key=value"):
        common.parse_kv(["novalue"], "--config")


def test_replica_assignment():
    assert topics.parse_replica_assignment("1:2,2:3,3:1") == [[1, 2], [2, 3], [3, 1]]
    with pytest.raises(common.CliError, match="replica-assignment"):
        topics.parse_replica_assignment("1:x")


def test_client_config_merges_file_and_x(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("client.id=from-file\nsocket.timeout.ms=1000\n")
    args = SimpleNamespace(
        bootstrap_server="h:9", command_config=str(f), client_props=["client.id=from-x"]
    )
    conf = common.client_config(args)
    assert conf["bootstrap.servers"] == "h:9"
    assert conf["client.id"] == "from-x"
    assert conf["socket.timeout.ms"] == "1000"


def _produce_args(*extra):
    return build_parser().parse_args(["produce", "-b", "h:1", "-t", "t", *extra])


def test_produce_line_parsing():
    args = _produce_args("--parse-key", "--parse-headers", "--null-marker", "NULL")
    key, value, headers = produce.parse_line("h1:a,h2:NULL\tk\tv\tw", args)
    assert (key, value) == ("k", "v\tw")
    assert headers == [("h1", "a"), ("h2", None)]
    assert produce.parse_line("\tNULL\tNULL", args)[:2] == (None, None)
    plain = _produce_args()
    assert produce.parse_line("just a value", plain) == (None, "just a value", [])
    with pytest.raises(common.CliError, match="key separator"):
        produce.parse_line("nokey", _produce_args("--parse-key"))


class FakeMsg:
    def __init__(self, key, value, headers=None):
        self._k, self._v, self._h = key, value, headers

    def topic(self):
        return "t"

    def partition(self):
        return 2

    def offset(self):
        return 41

    def timestamp(self):
        return (1, 1234)

    def key(self):
        return self._k

    def value(self):
        return self._v

    def headers(self):
        return self._h


def _consume_args(*extra):
    return build_parser().parse_args(["consume", "-b", "h:1", "-t", "t", *extra])


def test_consume_formatting():
    msg = FakeMsg(b"k", b"v\xff", [("h", b"x"), ("n", None)])
    args = _consume_args(
        "--print-key", "--print-offset", "--print-timestamp", "--print-headers", "--print-partition"
    )
    assert (
        consume.format_record(msg, args)
        == "Partition:2\tOffset:41\tCreateTime:1234\th:x,n:None\tk\tv\\xff"
    )
    as_json = json.loads(consume.format_record(FakeMsg(None, None), _consume_args("--json")))
    assert as_json["key"] is None and as_json["value"] is None
    assert as_json["timestamp_type"] == "CreateTime" and as_json["offset"] == 41


class _ErrorOnlyConsumer:
    """A group consumer whose every poll is an error (e.g. INCONSISTENT_GROUP_PROTOCOL
    while its JoinGroup is refused): never a record."""

    polls = 0

    def __init__(self, conf):
        pass

    def subscribe(self, topics):
        pass

    def consume(self, num_messages, timeout):
        type(self).polls += 1
        assert type(self).polls < 500, "--timeout-ms never ended the consumer"
        time.sleep(0.01)
        return [SimpleNamespace(error=lambda: "JoinGroup failed: Inconsistent group protocol")]

    def close(self):
        pass


def test_consume_timeout_ms_counts_from_the_last_record_not_the_last_error(monkeypatch, capsys):
    # Kafka's console consumer: --timeout-ms ends it when no *message* arrived for that
    # long; an error every poll used to reset the clock, so it ran forever
    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Consumer", _ErrorOnlyConsumer)
    args = _consume_args("--group", "g", "--timeout-ms", "300")
    assert consume.consume_cmd(args) == 0
    err = capsys.readouterr().err
    assert "Inconsistent group protocol" in err
    assert "Processed a total of 0 messages" in err


def test_consume_start_options_are_exclusive(capsys):
    with pytest.raises(SystemExit):
        _consume_args("--from-beginning", "--offset", "3")


def test_latency_summary_percentiles():
    summary = bench_runners.latency_summary([float(i) for i in range(1, 1001)])
    assert summary["p50"] == 500.0
    assert summary["p95"] == 950.0
    assert summary["p99"] == 990.0
    assert summary["p99.9"] == 999.0
    assert summary["max"] == 1000.0
    assert summary["avg"] == pytest.approx(500.5)
    assert bench_runners.latency_summary([]) == {}


def test_bench_merge_uses_longest_process_time():
    from array import array

    parts = [
        {"records": 10, "bytes": 1000, "seconds": 2.0, "errors": 0, "samples": array("d", [1.0]).tobytes()},
        {"records": 30, "bytes": 3000, "seconds": 4.0, "errors": 1, "samples": array("d", [3.0]).tobytes()},
    ]  # fmt: skip
    r = bench_runners._merge("produce", parts)
    assert r.records == 40 and r.seconds == 4.0 and r.errors == 1
    assert r.records_per_s == 10.0
    assert r.latency_ms["max"] == 3.0


def test_bench_consume_plan_splits_by_partition_to_exact_end_offsets():
    # An uneven spread (a keyed partitioner) and a partition trimmed by retention.
    marks = {0: (0, 700), 1: (50, 150), 2: (0, 0), 3: (0, 200)}
    plans = bench_runners.consume_plan(marks, 1000, 3)
    assert plans == [{0: (0, 700)}, {1: (50, 150)}, {3: (0, 200)}]
    assert sum(e - s for plan in plans for s, e in plan.values()) == 1000
    # Fewer records wanted: the last partition read stops short of its high watermark.
    assert bench_runners.consume_plan(marks, 750, 4) == [{0: (0, 700)}, {1: (50, 100)}]
    # More processes than partitions with data; one process takes several partitions.
    assert len(bench_runners.consume_plan(marks, 1000, 8)) == 3
    assert bench_runners.consume_plan(marks, 1000, 2) == [
        {0: (0, 700), 3: (0, 200)},
        {1: (50, 150)},
    ]
    with pytest.raises(
        common.CliError, match="topic t holds 1000 records, fewer than --num-records 1001"
    ):
        bench_runners.consume_plan(marks, 1001, 1, "t")


def test_bench_rejects_bad_numbers_before_connecting(capsys):
    assert main(["bench", "produce", "-b", "127.0.0.1:1", "--num-records", "0"]) == 1
    assert "--num-records" in capsys.readouterr().err
    rc = main(["bench", "produce", "-b", "127.0.0.1:1", "--processes", "0"])
    assert rc == 1


def test_every_verb_module_registers():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    import importlib

    for verb in VERBS:
        importlib.import_module(f"riverbed.cli.{verb}").register(sub)
    assert set(VERBS) <= set(sub.choices)


def test_wire_client_errors():
    import socket

    from riverbed.cli.wire import WireClient, WireError

    with pytest.raises(WireError, match="host:port"):
        WireClient("nohostport")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(WireError, match="cannot connect"):
        WireClient(f"127.0.0.1:{port}")


def test_entity_default_only_for_brokers(capsys):
    rc = main(["configs", "describe", "-b", "127.0.0.1:1", "--entity-type", "topics",
               "--entity-default"])  # fmt: skip
    assert rc == 1
    assert "--entity-default only applies" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["configs", "describe", "-b", "h:1", "--entity-type", "topics"])


#: Verbs that move data or run things rather than administer: no JSON summary.
_NOT_ADMIN = {"server", "dev", "produce", "consume", "bench", "pipeline", "console"}


def test_every_admin_command_takes_json():
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for verb, vparser in verbs.choices.items():
        if verb in _NOT_ADMIN:
            continue
        for name, leaf in _leaves(verb, vparser):
            if not any("--json" in a.option_strings for a in leaf._actions):
                missing.append(name)
    assert missing == []


def _leaves(name: str, parser: argparse.ArgumentParser):
    """(command words, parser) of every runnable command under ``parser`` (sub-verbs nest:
    ``users scram set``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield name, parser
        return
    for sub_name, sub in subs[0].choices.items():
        yield from _leaves(f"{name} {sub_name}", sub)


def test_bench_latency_paces_from_intended_send_times():
    from riverbed.cli import bench_latency as bl

    # record i is due at i / rate: at 1000 records/s, 0..4 are due 4.5 ms in
    assert bl.records_due(0.0, 1000, 10) == 1
    assert bl.records_due(0.0045, 1000, 10) == 5
    assert bl.records_due(1.0, 1000, 10) == 10  # never past the total
    assert bl.records_due(-0.1, 1000, 10) == 0
    # the wait for the next record: record 5 at 200/s is due at 25 ms; a clock read just
    # past it waits 0 s, never a negative time (librdkafka's poll(-x) blocks for ever)
    assert bl.pace_wait_s(5, 200, 0.0249) == pytest.approx(0.0001)
    assert bl.pace_wait_s(5, 200, 0.0251) == 0.0
    assert bl.pace_wait_s(5, 200, 0.0) == bl.PACE_POLL_S
    # a wait under poll()'s millisecond resolution sleeps: poll(0.0004) returns at once,
    # and a loop of them spins a core beside the brokers being measured
    assert not bl.polls_for(0.0004) and not bl.polls_for(0.0)
    assert bl.polls_for(bl.PACE_POLL_S)
    # latency counts from the intended send time, so a late send shows as latency
    assert bl.intended_latency_ms(100, 1000.0, 5.0, 5.1 + 0.003) == pytest.approx(3.0)
    assert bl.intended_latency_ms(0, 1000.0, 5.0, 5.020) == pytest.approx(20.0)


def test_bench_latency_samples_one_record_in_every_uniformly():
    from itertools import islice

    from riverbed.cli import bench_latency as bl

    gaps = list(islice(bl.sample_gaps(10, seed=7), 20_000))
    assert min(gaps) >= 1  # never the same record twice
    assert 9.5 < sum(gaps) / len(gaps) < 10.5  # one record in 10 on average
    # not every 10th record: the gaps vary, so the sample cannot fall in step with the
    # pacing loop's bursts, and each residue mod 10 is taken about equally often
    assert len(set(gaps)) > 20
    indices, at = [], -1
    for gap in gaps:
        at += gap
        indices.append(at)
    residues = [sum(1 for i in indices if i % 10 == r) for r in range(10)]
    assert max(residues) < 1.2 * min(residues)
    assert list(islice(bl.sample_gaps(1, seed=7), 5)) == [1] * 5  # every record
    assert list(islice(bl.sample_gaps(10, seed=7), 50)) == gaps[:50]  # replayable
    # the interval widens only to keep the sample bounded
    assert bl.sample_every_for(1000, 10) == 10
    assert bl.sample_every_for(bl.LATENCY_SAMPLES_MAX * 30, 10) == 30
    assert bl.sample_every_for(5, 0) == 1


def test_bench_latency_arguments():
    args = build_parser().parse_args(["bench", "latency", "-b", "h:1", "--rate", "500"])
    assert (args.rate, args.rate_fraction, args.duration_s, args.acks) == (500, 0.5, 5.0, "all")
    assert args.sample_every == 10
