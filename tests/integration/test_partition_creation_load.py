"""A broker creating and deleting many partitions keeps acknowledging another topic's writes.

Issue 23 (metadata scale): a CreateTopics of 100 x 100 partitions on one broker held its
event loop while the logs were created, so every other client waited. The logs are now
created and deleted in worker threads (`riverbed.server.broker.log_work`). Here a
confluent-kafka producer writes acks=all to its own topic the whole time while an admin
client creates, then deletes, PARTITIONS partitions on the same (combined) node; counted,
never timed:

- acks arrive between the CreateTopics request and its answer (which comes only once
  every new log exists) and between the DeleteTopics request and the moment no partition
  dir of those topics is left;
- every record is acknowledged without error, and read back once each, in order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess, scaled_s
from riverbed.testing.group_coordinators import load_group_coordinators

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
TOPICS, PER_TOPIC = 20, 50  # 1,000 partitions on the one node
#: Liveness bounds of waits on conditions (stretched by the machine's load).
CREATE_DEADLINE_S = 120.0
DELETE_DEADLINE_S = 120.0
#: Records the producer keeps in flight at most (then it waits for acks).
IN_FLIGHT_MAX = 50


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # a new group's first join is not delayed (the default 3 s): the check's consumer has
    # the group to itself, and the load under test is the partitions' creation
    overrides = {"num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}
    proc = BrokerProcess(data_dir=tmp_path / "data", overrides=overrides)
    proc.start()
    try:
        load_group_coordinators(proc.bootstrap)  # not in the check consumer's join (3 s)
        yield proc
    finally:
        proc.close()


class AckCounter:
    """A producer thread writing acks=all records to ``topic`` until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1, **QUIET}
        )
        self.acks = 0
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ack-counter", daemon=True)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acks += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.sent - self.acks - len(self.errors) < IN_FLIGHT_MAX:
                self.producer.produce(
                    self.topic, value=str(self.sent).encode(), on_delivery=self._delivered
                )
                self.sent += 1
            self.producer.poll(0.01)

    def start(self) -> AckCounter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(scaled_s(30))
        assert self.producer.flush(scaled_s(30)) == 0


def wait_until(condition: object, deadline_s: float) -> None:
    end = time.monotonic() + scaled_s(deadline_s)
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, "condition never held"
        time.sleep(0.05)


def test_acks_keep_coming_while_a_thousand_partitions_are_created_and_deleted(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for fut in admin.create_topics([NewTopic("busy", 1, 1)]).values():
        fut.result(scaled_s(30))
    counter = AckCounter(broker.bootstrap, "busy").start()
    wait_until(lambda: counter.acks > 0, 30)  # the producer is under way

    names = [f"many-{i:02d}" for i in range(TOPICS)]
    before_create = counter.acks
    futures = admin.create_topics(
        [NewTopic(n, PER_TOPIC, 1) for n in names],
        operation_timeout=scaled_s(CREATE_DEADLINE_S),
        request_timeout=scaled_s(CREATE_DEADLINE_S),
    )
    for fut in futures.values():
        fut.result(scaled_s(CREATE_DEADLINE_S))
    during_create = counter.acks - before_create
    dirs = lambda: [p for p in broker.data_dir.iterdir() if p.name.startswith("many-")]  # noqa: E731
    assert len(dirs()) == TOPICS * PER_TOPIC  # answered once every log exists

    before_delete = counter.acks
    for fut in admin.delete_topics(names, operation_timeout=scaled_s(30)).values():
        fut.result(scaled_s(DELETE_DEADLINE_S))
    # deleted logs are renamed to <topic>-<p>.<id>-delete, then removed
    wait_until(lambda: not [p for p in dirs() if not p.name.endswith("-delete")], 120)
    during_delete = counter.acks - before_delete
    counter.stop()

    print(f"acks while creating: {during_create}, while deleting: {during_delete}")
    assert counter.errors == []
    assert during_create > 0, "no ack while the partitions were created"
    assert during_delete > 0, "no ack while the partitions were deleted"
    assert counter.acks == counter.sent

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "ack-check",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumer.subscribe(["busy"])
    values: list[int] = []
    end = time.monotonic() + scaled_s(60)
    while len(values) < counter.sent and time.monotonic() < end:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(counter.sent))  # every ack stands, once, in order
