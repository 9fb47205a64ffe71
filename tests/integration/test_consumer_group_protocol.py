"""KIP-848 with real clients: confluent-kafka consumers with ``group.protocol=consumer``.

One broker for the module with short timings (heartbeat interval 200 ms, session 3 s) and
a 5-partition ``__consumer_offsets``. What is checked is what the client sees: its
assignment, its revocation callbacks, the records it reads and the admin views.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
SESSION_MS = 3000


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        overrides={
            "offsets.topic.num.partitions": "5",
            "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.session.timeout.ms": str(SESSION_MS),
        }
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


def create(bootstrap: str, name: str, partitions: int, records: int = 0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(20)
    if records:
        p = Producer({"bootstrap.servers": bootstrap, **QUIET})
        for i in range(records):
            p.produce(name, f"{i}".encode(), partition=i % partitions)
        assert p.flush(20) == 0


class Member:
    """A consumer with the new protocol that records what it was asked to give up."""

    def __init__(self, bootstrap: str, group: str, **extra: Any) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **QUIET,
                **extra,
            }
        )
        self.revoked: list[int] = []
        self.lost: list[int] = []

    def subscribe(self, topics: list[str]) -> None:
        def on_revoke(_c: Any, ps: list[TopicPartition]) -> None:
            self.revoked += [tp.partition for tp in ps]

        def on_lost(_c: Any, ps: list[TopicPartition]) -> None:
            self.lost += [tp.partition for tp in ps]

        self.consumer.subscribe(topics, on_revoke=on_revoke, on_lost=on_lost)

    def parts(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(members: list[Member], done: Callable[[], bool], timeout_s: float = 30) -> list[Any]:
    got = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            msg = m.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                got.append(msg)
        if done():
            return got
    raise AssertionError("timed out: " + str([sorted(m.parts()) for m in members]))


def split(members: list[Member], sizes: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        got = [m.parts() for m in members]
        flat = sorted(p for ps in got for p in ps)
        return sorted(len(ps) for ps in got) == sorted(sizes) and flat == list(range(sum(sizes)))

    return check


def test_three_members_get_two_each_and_a_join_moves_only_what_must(broker: BrokerProcess) -> None:
    topic, group = "k-six", "k-six"
    create(broker.bootstrap, topic, 6)
    ms = [Member(broker.bootstrap, group) for _ in range(3)]
    for m in ms:
        m.subscribe([topic])
    poll_until(ms, split(ms, [2, 2, 2]))
    held = [m.parts() for m in ms]
    for m in ms:
        m.revoked.clear()
    newcomer = Member(broker.bootstrap, group)
    newcomer.subscribe([topic])
    everyone = [*ms, newcomer]
    poll_until(everyone, split(everyone, [2, 2, 1, 1]))
    # exactly the partitions the newcomer needed moved: no member gave up more than one,
    # and those that kept two were never asked to revoke anything
    gave = [len(m.revoked) for m in ms]
    assert sum(gave) == len(newcomer.parts()) and max(gave) == 1, [m.revoked for m in ms]
    for m, had in zip(ms, held, strict=True):
        assert m.parts() == had - set(m.revoked)
    assert newcomer.parts() == {p for m in ms for p in m.revoked}
    # a leave (close sends epoch -1): its partitions go to the others, nobody revokes
    for m in ms:
        m.revoked.clear()
    newcomer.consumer.close()
    poll_until(ms, split(ms, [2, 2, 2]))
    assert all(not m.revoked and not m.lost for m in ms)
    for m in ms:
        m.consumer.close()


_CRASHER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer", "log_level": 3})
c.subscribe([sys.argv[3]])
told = False
while True:
    c.poll(0.1)
    if c.assignment() and not told:
        print("assigned", flush=True)
        told = True
"""


def test_a_crashed_member_is_removed_after_the_session_timeout(broker: BrokerProcess) -> None:
    topic, group = "k-crash", "k-crash"
    create(broker.bootstrap, topic, 4)
    a = Member(broker.bootstrap, group)
    a.subscribe([topic])
    poll_until([a], lambda: len(a.parts()) == 4)
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASHER, broker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        # The child's line is read on a thread while `a` keeps polling: its revocation
        # is acknowledged by a heartbeat after a poll, and the child is assigned only then
        # (KIP-848); a blocking read with `a` idle waited out the test's timeout once.
        said: list[str] = []
        out = child.stdout
        threading.Thread(target=lambda: said.append(out.readline()), daemon=True).start()
        poll_until([a], lambda: len(a.parts()) == 2 and bool(said))
        assert said[0].strip() == "assigned"
        os.kill(child.pid, signal.SIGKILL)  # no leave heartbeat: only the session tells
        child.wait(10)
        start = time.monotonic()
        poll_until([a], lambda: len(a.parts()) == 4, timeout_s=20)
        assert time.monotonic() - start >= 1.0  # it waited for the 3 s session timeout
    finally:
        if child.poll() is None:
            child.kill()
        a.consumer.close()


def test_members_and_commits_survive_a_broker_restart(broker: BrokerProcess) -> None:
    """The group's state is reloaded from ``__consumer_offsets``: the members keep their
    partitions (nothing revoked, nothing lost) and resume after their commits."""
    topic, group = "k-resume", "k-resume"
    create(broker.bootstrap, topic, 4, 80)
    ms = [Member(broker.bootstrap, group) for _ in range(2)]
    for m in ms:
        m.subscribe([topic])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    even = split(ms, [2, 2])
    while (len(seen) < 40 or not even()) and time.monotonic() < deadline:
        for m in ms:
            msg = m.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                seen.append((msg.partition(), msg.offset()))
                m.consumer.commit(message=msg, asynchronous=False)
    assert len(seen) >= 40 and even()
    held = [m.parts() for m in ms]
    for m in ms:  # what the first member gave the second when it joined does not count
        m.revoked.clear()
        m.lost.clear()
    broker.restart(kill=True)
    rest_seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while len(seen) + len(rest_seen) < 80 and time.monotonic() < deadline:
        for m in ms:
            msg = m.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                rest_seen.append((msg.partition(), msg.offset()))
    assert not set(seen) & set(rest_seen), "records delivered twice"
    assert sorted(seen + rest_seen) == sorted((p, o) for p in range(4) for o in range(20))
    assert [m.parts() for m in ms] == held
    assert all(not m.revoked and not m.lost for m in ms), [(m.revoked, m.lost) for m in ms]
    for m in ms:
        m.consumer.close()


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    from riverbed.cli.main import main

    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_regex_subscription_range_assignor_and_admin_views(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    group = "k-regex"
    create(broker.bootstrap, "rx-a", 2)
    create(broker.bootstrap, "rx-b", 2)
    create(broker.bootstrap, "other-rx", 2)
    a = Member(broker.bootstrap, group, **{"group.remote.assignor": "range"})
    a.subscribe(["^rx-.*"])

    def topics(m: Member) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in m.consumer.assignment()}

    poll_until([a], lambda: topics(a) == {(t, p) for t in ("rx-a", "rx-b") for p in (0, 1)})
    create(broker.bootstrap, "rx-c", 1)  # a new matching topic joins the subscription
    poll_until([a], lambda: ("rx-c", 0) in topics(a))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(20)
    assert group in {g.group_id for g in listed.valid}
    classic_only = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(20)
    assert group not in {g.group_id for g in classic_only.valid}
    desc = admin.describe_consumer_groups([group])[group].result(20)
    assert desc.type == ConsumerGroupType.CONSUMER and desc.partition_assignor == "range"
    (member,) = desc.members
    assigned = {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions}
    assert assigned == topics(a)
    # the classic views (DescribeGroups, as kafka-consumer-groups and `riverbed groups`)
    b = broker.bootstrap
    listed = _cli_json(capsys, "groups", "list", "-b", b, "--json")["groups"]
    expected = {"group": group, "protocol_type": "consumer", "state": "Stable", "type": "consumer"}
    assert expected in listed
    (d,) = _cli_json(capsys, "groups", "describe", "-b", b, "--group", group, "--json")["groups"]
    assert d["state"] == "Stable" and len(d["members"]) == 1
    assert d["members"][0]["assignment"] == {"rx-a": [0, 1], "rx-b": [0, 1], "rx-c": [0]}
    a.consumer.close()  # leaves: the group is empty and can be deleted
    deleted = _cli_json(capsys, "groups", "delete", "-b", b, "--group", group, "--json")
    assert deleted == {"deleted": [group], "errors": {}}


def test_a_static_member_rejoins_with_its_partitions_and_nobody_else_moves(
    broker: BrokerProcess,
) -> None:
    topic, group = "k-static", "k-static"
    create(broker.bootstrap, topic, 4)
    a = Member(broker.bootstrap, group, **{"group.instance.id": "i-a"})
    b = Member(broker.bootstrap, group, **{"group.instance.id": "i-b"})
    for m in (a, b):
        m.subscribe([topic])
    poll_until([a, b], split([a, b], [2, 2]))
    held_a, held_b = a.parts(), b.parts()
    b.revoked.clear()
    a.consumer.close()  # a static member leaves for now (epoch -2): its partitions wait
    deadline = time.monotonic() + 1.5  # several heartbeats of b
    while time.monotonic() < deadline:
        b.consumer.poll(0.05)
    assert b.parts() == held_b
    again = Member(broker.bootstrap, group, **{"group.instance.id": "i-a"})
    again.subscribe([topic])
    poll_until([again, b], lambda: again.parts() == held_a, timeout_s=10)
    assert b.parts() == held_b and not b.revoked and not b.lost
    for m in (again, b):
        m.consumer.close()


def test_the_new_protocol_can_be_switched_off() -> None:
    """``group.coordinator.rebalance.protocols=classic``: ConsumerGroupHeartbeat and
    ConsumerGroupDescribe are not advertised, and a heartbeat sent anyway is refused
    with UNSUPPORTED_VERSION (Kafka's behaviour)."""
    from riverbed.cli.wire import WireClient
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import ApiVersionsRequest, ConsumerGroupHeartbeatRequest

    overrides = {"group.coordinator.rebalance.protocols": "classic"}
    with BrokerProcess(overrides=overrides) as off, WireClient(off.bootstrap) as client:
        versions: Any = client.request(
            ApiKey.API_VERSIONS,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        keys = {k.api_key for k in versions.api_keys}
        assert ApiKey.JOIN_GROUP in keys and ApiKey.LIST_GROUPS in keys
        assert not keys & {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}
        beat = ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000,
            subscribed_topic_names=["t"], topic_partitions=[],
        )  # fmt: skip
        answer: Any = client._send(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, beat)
        assert answer.error_code == 35  # UNSUPPORTED_VERSION
