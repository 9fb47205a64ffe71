"""The nemesis run's group consumer (`riverbed.testing.nemesis`): one member of a consumer
group reading the nemesis topic through the faults, committing what it has read.

It subscribes with ``group.protocol`` ``consumer`` (KIP-848) or ``classic``, reads with
``auto.offset.reset=earliest`` and commits synchronously every `COMMIT_EVERY_S` (Kafka's
at-least-once loop: read, then commit the next offsets). Recorded, for
`riverbed.testing.nemesis_checks`: every record delivered (partition, offset, value),
every commit the coordinator acknowledged (partition -> next offset, in order), and how
many commits failed (a coordinator or leader moving: allowed, the next one retries).
After the faults, `drain` reads until every partition's position reaches the log's end
and commits once more.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from riverbed.testing.nemesis_checks import GroupRead

#: Seconds between two commits of the consumer.
COMMIT_EVERY_S = 0.5
#: Records one poll returns at most.
POLL_RECORDS_MAX = 500
#: Seconds one poll waits for records.
POLL_S = 0.2
#: Seconds the drain may take to reach every partition's end.
DRAIN_TIMEOUT_S = 120.0


@dataclass
class GroupReader:
    """The consumer thread: `run` until `stop`, then `drain` to the log's end."""

    bootstrap: str
    topic: str
    group: str
    read: GroupRead
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    #: set when `run` has returned (a member stuck in a client call never sets it)
    finished: bool = False
    _consumer: Consumer | None = None
    #: partition -> the highest offset delivered so far
    _highest: dict[int, int] = field(default_factory=dict)

    def _config(self) -> dict[str, object]:
        conf: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "group.protocol": self.read.protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        if self.read.protocol == "classic":
            conf["session.timeout.ms"] = 6000
        return conf

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.finished = True

    def _run(self) -> None:
        try:
            self._consumer = Consumer(self._config())
            self._consumer.subscribe([self.topic])
            next_commit = time.monotonic() + COMMIT_EVERY_S
            while not self.stop.is_set():
                self._poll()
                if time.monotonic() >= next_commit:
                    self._commit()
                    next_commit = time.monotonic() + COMMIT_EVERY_S
        except BaseException as exc:  # reported by the run, not lost in the thread
            self.error = exc

    def _poll(self) -> None:
        assert self._consumer is not None
        for msg in self._consumer.consume(POLL_RECORDS_MAX, timeout=POLL_S):
            if msg.error() is not None:
                continue
            p, offset, value = msg.partition(), msg.offset(), msg.value()
            assert p is not None and offset is not None and value is not None
            self.read.delivered.setdefault(p, []).append((offset, int(value)))
            self._highest[p] = max(offset, self._highest.get(p, -1))

    def _commit(self) -> None:
        assert self._consumer is not None
        try:
            done = self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError._NO_OFFSET):
                self.read.failed_commits += 1  # (_NO_OFFSET: nothing new to commit)
            return
        for tp in done or []:
            if tp.error is None and tp.offset >= 0:
                self.read.commits.setdefault(tp.partition, []).append(tp.offset)

    def drain(self, ends: dict[int, int]) -> None:
        """Read until every partition of ``ends`` was delivered up to its end, then
        commit; close the member."""
        assert self._consumer is not None
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        try:
            while time.monotonic() < deadline and not self._reached(ends):
                self._poll()
                self._commit()
            self._commit()
        finally:
            self._consumer.close()

    def _reached(self, ends: dict[int, int]) -> bool:
        return all(self._highest.get(p, -1) >= end - 1 for p, end in ends.items())


def committed(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a new client reads them (-1: none)."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in probe.committed(tps, timeout=30)}
    finally:
        probe.close()
