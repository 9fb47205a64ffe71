"""Consumer groups with real clients: confluent-kafka, kafka-python and aiokafka.

One broker for the module with short group timings (initial rebalance delay 200 ms,
sessions down to 500 ms) and a 5-partition ``__consumer_offsets`` so each test stays fast.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.group_coordinators import load_group_coordinators

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
FAST = {"heartbeat.interval.ms": 100, "session.timeout.ms": 6000, **QUIET}
#: The same settings in kafka-python's and aiokafka's keyword spelling.
PY_FAST: dict[str, Any] = {
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "heartbeat_interval_ms": 100,
    "session_timeout_ms": 6000,
}


@pytest.fixture(scope="module")
def gbroker() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        overrides={
            "group.initial.rebalance.delay.ms": "200",
            "group.min.session.timeout.ms": "500",
            "offsets.topic.num.partitions": "5",
            # the coordinator's batches compressed (lz4): written, replicated and reloaded
            "offsets.topic.compression.codec": "3",
            "num.partitions": "1",
            "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.session.timeout.ms": "3000",
        }
    )
    proc.start()
    try:
        load_group_coordinators(proc.bootstrap)  # not in the first consumer's join (3 s)
        yield proc
    finally:
        proc.close()


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(20)


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(n):
        p.produce(topic, f"{i}".encode(), key=f"k{i}".encode(), partition=i % partitions)
    assert p.flush(20) == 0


def fill(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    create(bootstrap, topic, partitions)
    produce(bootstrap, topic, records, partitions)


def consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        **FAST,
        **extra,
    }
    return Consumer(conf)


def poll_until(
    consumers: list[Consumer], done: Callable[[], bool], timeout_s: float = 30
) -> list[Any]:
    """Poll every consumer round-robin until ``done()``; returns the messages seen."""
    got = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                got.append(msg)
        if done():
            return got
    raise AssertionError("timed out: " + str([parts(c) for c in consumers]))


def parts(c: Consumer) -> list[int]:
    return sorted(tp.partition for tp in c.assignment())


def split(consumers: list[Consumer], sizes: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        got = [parts(c) for c in consumers]
        flat = sorted(p for ps in got for p in ps)
        return sorted(len(ps) for ps in got) == sorted(sizes) and flat == list(range(sum(sizes)))

    return check


def test_three_consumers_get_two_partitions_each_and_rebalance_on_join_and_leave(
    gbroker: BrokerProcess,
) -> None:
    topic, group = "six-a", "g-six-a"
    fill(gbroker.bootstrap, topic, 6, 60)
    a, b = consumer(gbroker.bootstrap, group), consumer(gbroker.bootstrap, group)
    for c in (a, b):
        c.subscribe([topic])
    poll_until([a, b], split([a, b], [3, 3]))
    c3 = consumer(gbroker.bootstrap, group)
    c3.subscribe([topic])
    seen = poll_until([a, b, c3], split([a, b, c3], [2, 2, 2]))
    del seen
    c3.close()  # LeaveGroup: the other two take its partitions back
    poll_until([a, b], split([a, b], [3, 3]))
    a.close()
    poll_until([b], split([b], [6]))
    b.close()


_CRASHER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": 1500, "heartbeat.interval.ms": 100, "log_level": 3})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_a_crashed_consumer_is_removed_after_its_session_timeout(gbroker: BrokerProcess) -> None:
    topic, group = "six-crash", "g-crash"
    create(gbroker.bootstrap, topic, 6)
    a = consumer(gbroker.bootstrap, group)
    a.subscribe([topic])
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASHER, gbroker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        poll_until([a], lambda: len(parts(a)) == 3)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "assigned"
        os.kill(child.pid, signal.SIGKILL)  # no LeaveGroup: only the session timeout tells
        child.wait(10)
        start = time.monotonic()
        poll_until([a], lambda: len(parts(a)) == 6, timeout_s=20)
        assert time.monotonic() - start >= 1.0  # it took the 1.5 s session timeout
    finally:
        if child.poll() is None:
            child.kill()
        a.close()


def test_commit_and_resume_after_a_broker_restart_with_no_gap_and_no_repeat(
    gbroker: BrokerProcess,
) -> None:
    topic, group = "resume", "g-resume"
    fill(gbroker.bootstrap, topic, 3, 90)
    first = consumer(gbroker.bootstrap, group, **{"enable.auto.commit": False})
    first.subscribe([topic])
    taken: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(taken) < 40 and time.monotonic() < deadline:
        msg = first.poll(0.1)
        if msg is not None and msg.error() is None:
            taken.append((msg.partition(), msg.offset()))
            first.commit(message=msg, asynchronous=False)
    assert len(taken) == 40
    first.close()
    gbroker.restart(kill=True)  # committed offsets must survive a crash of the broker
    load_group_coordinators(gbroker.bootstrap)  # reloaded before the consumer joins (3 s)
    second = consumer(gbroker.bootstrap, group, **{"enable.auto.commit": False})
    second.subscribe([topic])
    rest: list[tuple[int, int]] = []
    deadline = time.monotonic() + 40
    while len(taken) + len(rest) < 90 and time.monotonic() < deadline:
        msg = second.poll(0.1)
        if msg is not None and msg.error() is None:
            rest.append((msg.partition(), msg.offset()))
    extra = second.poll(1.0)
    second.close()
    assert extra is None or extra.error() is not None
    assert not set(taken) & set(rest), "records delivered twice"
    assert sorted(taken + rest) == sorted((p, o) for p in range(3) for o in range(30))


def test_static_membership_rejoins_without_a_rebalance(gbroker: BrokerProcess) -> None:
    topic, group = "static", "g-static"
    create(gbroker.bootstrap, topic, 4)
    events: list[str] = []

    def on_revoke(_c: Any, ps: list[TopicPartition]) -> None:
        events.append("revoke")

    a = consumer(gbroker.bootstrap, group, **{"group.instance.id": "a"})
    a.subscribe([topic], on_revoke=on_revoke)
    b = consumer(gbroker.bootstrap, group, **{"group.instance.id": "b"})
    b.subscribe([topic])
    poll_until([a, b], split([a, b], [2, 2]))
    before = parts(b)
    events.clear()
    b.close()  # a static member sends no LeaveGroup (KIP-345)
    b2 = consumer(gbroker.bootstrap, group, **{"group.instance.id": "b"})
    b2.subscribe([topic])
    poll_until([a, b2], lambda: parts(b2) == before)
    settle = time.monotonic() + 1.0
    poll_until([a, b2], lambda: time.monotonic() > settle)  # heartbeats run meanwhile
    assert events == [], "the other member was made to rebalance"
    assert len(parts(a)) == 2
    a.close()
    b2.close()


def test_cooperative_sticky_revokes_only_what_moves(gbroker: BrokerProcess) -> None:
    topic, group = "coop", "g-coop"
    create(gbroker.bootstrap, topic, 6)
    revoked: dict[str, list[int]] = {"a": [], "b": []}

    def revoker(name: str) -> Callable[[Any, list[TopicPartition]], None]:
        def cb(_c: Any, ps: list[TopicPartition]) -> None:
            revoked[name] += [tp.partition for tp in ps]

        return cb

    sticky = {"partition.assignment.strategy": "cooperative-sticky"}
    a = consumer(gbroker.bootstrap, group, **sticky)
    b = consumer(gbroker.bootstrap, group, **sticky)
    a.subscribe([topic], on_revoke=revoker("a"))
    b.subscribe([topic], on_revoke=revoker("b"))
    poll_until([a, b], split([a, b], [3, 3]))
    held = {"a": set(parts(a)), "b": set(parts(b))}
    revoked["a"].clear()
    revoked["b"].clear()
    c = consumer(gbroker.bootstrap, group, **sticky)
    c.subscribe([topic])
    poll_until([a, b, c], split([a, b, c], [2, 2, 2]))
    assert len(revoked["a"]) == 1 and len(revoked["b"]) == 1, revoked
    assert set(parts(a)) == held["a"] - set(revoked["a"])  # the rest never moved
    assert set(parts(b)) == held["b"] - set(revoked["b"])
    for x in (a, b, c):
        x.close()


def test_kafka_python_group_consumers_share_and_commit(gbroker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    topic, group = "kp-group", "g-kp"
    fill(gbroker.bootstrap, topic, 4, 40)
    opts = {"bootstrap_servers": gbroker.bootstrap, "group_id": group, **PY_FAST}
    c1 = KafkaConsumer(topic, **opts)
    c2 = KafkaConsumer(topic, **opts)

    def caught_up(c: KafkaConsumer) -> bool:
        assigned = c.assignment()
        return len(assigned) == 2 and all(c.position(tp) == 10 for tp in assigned)

    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not (caught_up(c1) and caught_up(c2)):
        for c in (c1, c2):
            # kafka-python finishes a join across polls badly when each poll is very
            # short (its leader rejoins after every sync), so poll like an application
            c.poll(timeout_ms=500)
    assert caught_up(c1) and caught_up(c2)
    c1.commit()
    c2.commit()
    c1.close()
    c2.close()
    c3 = KafkaConsumer(**opts)
    committed = {p: c3.committed(KafkaTopicPartition(topic, p)) for p in range(4)}
    c3.close()
    assert committed == {p: 10 for p in range(4)}


def test_aiokafka_group_consumer_commits_and_resumes(gbroker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    topic, group = "aio-group", "g-aio"
    fill(gbroker.bootstrap, topic, 2, 20)

    async def consume(n: int) -> list[tuple[int, int]]:
        c = AIOKafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap, group_id=group, **PY_FAST)
        await c.start()
        out: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + 30
            while len(out) < n and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=200, max_records=n - len(out))
                for records in batch.values():
                    out += [(r.partition, r.offset) for r in records]
            await c.commit()
        finally:
            await c.stop()
        return out

    first = asyncio.run(consume(12))
    second = asyncio.run(consume(8))
    assert len(first) == 12 and len(second) == 8
    assert sorted(first + second) == sorted((p, o) for p in range(2) for o in range(10))


def test_describe_list_and_delete_groups_through_the_admin_client(gbroker: BrokerProcess) -> None:
    topic, group = "admin-g", "g-admin"
    create(gbroker.bootstrap, topic, 2)
    c = consumer(gbroker.bootstrap, group)
    c.subscribe([topic])
    poll_until([c], lambda: len(parts(c)) == 2)
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap, **QUIET})
    desc = admin.describe_consumer_groups([group], include_authorized_operations=True)[
        group
    ].result(10)
    assert str(desc.state).endswith("STABLE") and len(desc.members) == 1
    ops = {str(op).rsplit(".", 1)[-1] for op in desc.authorized_operations or []}
    assert {"READ", "DESCRIBE", "DELETE"} <= ops
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    fut = admin.delete_consumer_groups([group])[group]
    with pytest.raises(Exception) as err:
        fut.result(10)
    assert err.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    c.close()
    admin.delete_consumer_groups([group])[group].result(10)
    listed = admin.list_consumer_groups().result(10)
    assert group not in {g.group_id for g in listed.valid}


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    from riverbed.cli.main import main

    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_groups_cli_lists_describes_with_lag_resets_and_deletes(
    gbroker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    from riverbed.cli.main import main

    b = gbroker.bootstrap
    topic, group = "cli-lag", "g-cli"
    fill(b, topic, 2, 20)  # 10 records per partition
    c = consumer(b, group, **{"enable.auto.commit": False})
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 6 and time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None and msg.partition() == 0:
            seen += 1
            c.commit(message=msg, asynchronous=False)
    assert seen == 6
    listed = _cli_json(capsys, "groups", "list", "-b", b, "--json")["groups"]
    expected = {"group": group, "protocol_type": "consumer", "state": "Stable", "type": "classic"}
    assert expected in listed
    (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")["groups"]
    assert d["state"] == "Stable" and len(d["members"]) == 1
    assert d["members"][0]["assignment"] == {topic: [0, 1]}
    assert d["members"][0]["host"] == "/127.0.0.1"
    rows = {r["partition"]: r for r in d["offsets"]}
    assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (6, 10, 4)
    assert rows[0]["member_id"] == d["members"][0]["member_id"]
    # an active group's offsets cannot be reset
    capsys.readouterr()
    assert (
        main(
            [
                "groups",
                "reset-offsets",
                "-b",
                b,
                "--group",
                group,
                "--all-topics",
                "--to-earliest",
                "--execute",
            ]
        )
        == 1
    )
    assert "inactive" in capsys.readouterr().err
    c.close()
    plan = _cli_json(
        capsys,
        "groups",
        "reset-offsets",
        "-b",
        b,
        "--group",
        group,
        "--topic",
        f"{topic}:0",
        "--shift-by",
        "-2",
        "--json",
    )
    assert not plan["executed"]
    assert [(r["partition"], r["new_offset"]) for r in plan["partitions"]] == [(0, 4)]
    (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")["groups"]
    assert {r["partition"]: r["current_offset"] for r in d["offsets"]}[0] == 6  # dry run
    done = _cli_json(
        capsys,
        "groups",
        "reset-offsets",
        "-b",
        b,
        "--group",
        group,
        "--topic",
        topic,
        "--to-latest",
        "--execute",
        "--json",
    )
    assert [(r["new_offset"], r["error"]) for r in done["partitions"]] == [(10, None)] * 2
    (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")["groups"]
    assert d["state"] == "Empty"
    assert [(r["current_offset"], r["lag"]) for r in d["offsets"]] == [(10, 0), (10, 0)]
    shifted = _cli_json(
        capsys,
        "groups",
        "reset-offsets",
        "-b",
        b,
        "--group",
        group,
        "--all-topics",
        "--shift-by",
        "-100",
        "--execute",
        "--json",
    )
    assert [r["new_offset"] for r in shifted["partitions"]] == [0, 0]  # clamped to log start
    hour = _cli_json(
        capsys,
        "groups",
        "reset-offsets",
        "-b",
        b,
        "--group",
        group,
        "--all-topics",
        "--by-duration",
        "PT1H",
        "--json",
    )
    assert [r["new_offset"] for r in hour["partitions"]] == [0, 0]  # all written < 1 h ago
    deleted = _cli_json(capsys, "groups", "delete", "-b", b, "--group", group, "--json")
    assert deleted == {"deleted": [group], "errors": {}}
    listed = _cli_json(capsys, "groups", "list", "-b", b, "--json")["groups"]
    assert group not in {g["group"] for g in listed}


def test_consumer_protocol_group_rebalances_incrementally_and_commits(
    gbroker: BrokerProcess,
) -> None:
    """``group.protocol=consumer`` (KIP-848): server-side assignment; a join moves only the
    partitions the newcomer takes, a leave hands the leaver's over; commits resume."""
    topic, group = "kip848", "g-kip848"
    fill(gbroker.bootstrap, topic, 6, 60)
    revoked: dict[str, list[int]] = {"a": [], "b": []}

    def revoker(name: str) -> Callable[[Any, list[TopicPartition]], None]:
        def cb(_c: Any, ps: list[TopicPartition]) -> None:
            revoked[name] += [tp.partition for tp in ps]

        return cb

    def new(**extra: Any) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": gbroker.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **QUIET,
                **extra,
            }
        )

    a, b = new(), new()
    a.subscribe([topic], on_revoke=revoker("a"))
    b.subscribe([topic], on_revoke=revoker("b"))
    poll_until([a, b], split([a, b], [3, 3]))
    held = {"a": set(parts(a)), "b": set(parts(b))}
    revoked["a"].clear()
    revoked["b"].clear()
    c = new()
    c.subscribe([topic])
    poll_until([a, b, c], split([a, b, c], [2, 2, 2]))
    assert len(revoked["a"]) == 1 and len(revoked["b"]) == 1, revoked
    assert set(parts(a)) == held["a"] - set(revoked["a"])
    c.close()
    poll_until([a, b], split([a, b], [3, 3]))

    def at_end(x: Consumer) -> bool:
        return all(tp.offset == 10 for tp in x.position(x.assignment()))

    poll_until([a, b], lambda: at_end(a) and at_end(b))
    for x in (a, b):
        x.commit(asynchronous=False)
        x.close()
    # the committed positions survive the group's members
    check = new()
    committed = check.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    check.close()
    assert [tp.offset for tp in committed] == [10] * 6


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_client_side_assignors_work_unchanged(gbroker: BrokerProcess, assignor: str) -> None:
    topic, group = f"assignor-{assignor}", f"g-assignor-{assignor}"
    create(gbroker.bootstrap, topic, 4)
    a = consumer(gbroker.bootstrap, group, **{"partition.assignment.strategy": assignor})
    b = consumer(gbroker.bootstrap, group, **{"partition.assignment.strategy": assignor})
    for c in (a, b):
        c.subscribe([topic])
    poll_until([a, b], split([a, b], [2, 2]))
    for c in (a, b):
        c.close()


def test_kafka_python_sticky_assignor(gbroker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    topic, group = "kp-sticky", "g-kp-sticky"
    create(gbroker.bootstrap, topic, 4)
    opts = {
        "bootstrap_servers": gbroker.bootstrap,
        "group_id": group,
        "partition_assignment_strategy": [StickyPartitionAssignor],
        **PY_FAST,
    }
    c1, c2 = KafkaConsumer(topic, **opts), KafkaConsumer(topic, **opts)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        for c in (c1, c2):
            c.poll(timeout_ms=500)
        if len(c1.assignment()) == 2 and len(c2.assignment()) == 2:
            break
    assert len(c1.assignment()) == len(c2.assignment()) == 2
    assert not c1.assignment() & c2.assignment()
    c1.close()
    c2.close()


def test_groups_cli_delete_offsets(
    gbroker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    from riverbed.cli.main import main

    b = gbroker.bootstrap
    topic, group = "cli-delete-offsets", "g-cli-delete-offsets"
    fill(b, topic, 2, 20)
    c = consumer(b, group, **{"enable.auto.commit": False})
    c.subscribe([topic])
    poll_until([c], lambda: len(parts(c)) == 2)
    c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 7)], asynchronous=False)

    def run(*argv: str) -> tuple[int, Any]:
        capsys.readouterr()
        code = main(["groups", "delete-offsets", "-b", b, *argv, "--json"])
        return code, json.loads(capsys.readouterr().out)

    # an active member subscribes to the topic: its offsets stay
    code, out = run("--group", group, "--topic", topic)
    assert code == 1 and out["error"] is None
    assert [(r["partition"], r["error"]) for r in out["partitions"]] == [
        (0, "GROUP_SUBSCRIBED_TO_TOPIC"),
        (1, "GROUP_SUBSCRIBED_TO_TOPIC"),
    ]
    c.close()
    code, out = run("--group", group, "--topic", f"{topic}:0")
    assert (code, out["partitions"]) == (0, [{"topic": topic, "partition": 0, "error": None}])
    (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")["groups"]
    assert [(r["partition"], r["current_offset"]) for r in d["offsets"]] == [(1, 7)]
    code, out = run("--group", group, "--all-topics")
    assert (code, [r["partition"] for r in out["partitions"]]) == (0, [1])
    (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")["groups"]
    assert d["offsets"] == []
    code, out = run("--group", "no-such-group", "--topic", f"{topic}:0")
    assert (code, out["error"]) == (1, "GROUP_ID_NOT_FOUND")


class _TtyIO(io.StringIO):
    """A stderr that says it is a terminal (where progress bars are drawn)."""

    def isatty(self) -> bool:
        return True


def test_reset_offsets_commits_in_steps_with_a_progress_bar_on_a_terminal_never_in_json(
    gbroker: BrokerProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reset over more partitions than one OffsetCommit step takes commits them all;
    with stderr a terminal it draws a progress bar, with --json it draws none (and stdout is
    one JSON document)."""
    from riverbed.cli import groups
    from riverbed.cli.main import main

    b = gbroker.bootstrap
    topic, group = "reset-steps", "reset-steps-group"
    fill(b, topic, 5, 50)
    c = consumer(b, group, **{"enable.auto.commit": False})  # the group exists, then is Empty
    c.subscribe([topic])
    msg = None
    deadline = time.monotonic() + 30
    while (msg is None or msg.error() is not None) and time.monotonic() < deadline:
        msg = c.poll(0.1)
    assert msg is not None and msg.error() is None
    c.commit(message=msg, asynchronous=False)
    c.close()
    monkeypatch.setattr(groups, "RESET_COMMIT_PARTITIONS_MAX", 2)  # 3 steps of 5 partitions
    argv = ["groups", "reset-offsets", "-b", b, "--group", group, "--topic", topic, "--execute"]
    for to, offset, json_output in (("--to-latest", 10, True), ("--to-earliest", 0, False)):
        err = _TtyIO()
        monkeypatch.setattr(sys, "stderr", err)
        capsys.readouterr()
        assert main([*argv, to] + (["--json"] if json_output else [])) == 0, err.getvalue()
        out = capsys.readouterr().out
        if json_output:
            assert err.getvalue() == ""
            doc = json.loads(out)
            assert [(r["new_offset"], r["error"]) for r in doc["partitions"]] == [(10, None)] * 5
        else:
            assert f"resetting {group}" in err.getvalue()
        monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")[
            "groups"
        ]
        assert [r["current_offset"] for r in d["offsets"]] == [offset] * 5
