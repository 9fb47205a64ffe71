"""confluent-kafka clients that record their histories for `riverbed.testing.txn_history`.

`TxnWriter` runs random transactions (sends to random partitions, then commit or abort)
and records each with its outcome; `Reader` polls every partition from offset 0 and
records each non-empty poll. Times are ``time.monotonic_ns()`` (one clock per test
process, which runs every client in its threads).

Outcomes follow librdkafka's error classes: a commit that returned is OK; an abort that
returned is FAIL (aborted for sure); a retriable error is retried; an error that requires
an abort is aborted (FAIL once the abort returns); anything else (a fatal error, a timeout
that outlived its retries) is INFO and the producer is made anew with its transactional id
(its InitProducerId fences the old one and aborts what it left open).
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from riverbed.testing.txn_history import Outcome, Poll, Send, Txn

#: Attempts at a commit or an abort that fails with a retriable error.
END_ATTEMPTS_MAX = 5
#: Seconds librdkafka gets for one commit, abort or init.
END_TIMEOUT_S = 30.0
#: Records one consume() call may return.
POLL_RECORDS_MAX = 200
QUIET = {"log_level": 3}


def now() -> int:
    return time.monotonic_ns()


@dataclass
class TxnWriter:
    """One transactional producer: `run` until `stop` is set, each transaction recorded."""

    bootstrap: str
    topic: str
    partitions: int
    process: str
    seed: int
    commit_ratio: float = 0.7
    sends_max: int = 5
    #: poll (read_committed) inside each transaction before its sends, as a
    #: consume-transform-produce loop: write-read edges for the cycle search
    reads: bool = False
    history: list[Txn] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _next_value: int = 0

    def make(self) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"hist-{self.process}",
                "transaction.timeout.ms": 20000,
                **QUIET,
            }
        )
        p.init_transactions(END_TIMEOUT_S)
        return p

    def run(self, stop: threading.Event, value_base: int) -> None:
        rng = random.Random(self.seed)
        producer = self.make()
        consumer = None
        if self.reads:
            consumer = make_consumer(
                self.bootstrap, self.topic, self.partitions, self.process, "read_committed"
            )
        try:
            while not stop.is_set():
                txn, healthy = self.one(producer, rng, value_base, consumer)
                self.history.append(txn)
                if not healthy:
                    producer = self.make()
            producer.flush(END_TIMEOUT_S)
        finally:
            if consumer is not None:
                consumer.close()

    def one(
        self, producer: Producer, rng: random.Random, base: int, consumer: Consumer | None
    ) -> tuple[Txn, bool]:
        """One transaction: (its record, whether the producer is still usable)."""
        offsets: dict[int, int | None] = {}

        def delivered(err: KafkaError | None, msg: Message) -> None:
            offsets[int(msg.value() or b"-1")] = None if err is not None else msg.offset()

        invoke_at = now()
        planned: list[tuple[int, int]] = []
        commit_at: int | None = None
        polls: tuple[Poll, ...] = ()
        try:
            producer.begin_transaction()
            if consumer is not None:
                polls = consume(consumer, 0.05, set())
            for _ in range(rng.randint(1, self.sends_max)):
                value = base + self._next_value
                self._next_value += 1
                partition = rng.randrange(self.partitions)
                planned.append((partition, value))
                producer.produce(
                    self.topic, str(value).encode(), partition=partition, on_delivery=delivered
                )
            # delivered first: an aborted transaction's records are in the log (abort
            # would purge the unsent ones), its offsets known
            producer.flush(END_TIMEOUT_S)
            if rng.random() < self.commit_ratio:
                commit_at = now()
                outcome = self.end(producer, commit=True)
            else:
                outcome = self.end(producer, commit=False)
        except KafkaException as exc:
            self.errors.append(f"{self.process}: {exc}")
            outcome = self.abort_after(producer, exc)
        sends = tuple(Send(p, v, offsets.get(v)) for p, v in planned)
        txn = Txn(self.process, outcome, sends, polls, invoke_at, commit_at, now())
        return txn, outcome is not Outcome.INFO

    def end(self, producer: Producer, *, commit: bool) -> Outcome:
        for _ in range(END_ATTEMPTS_MAX):
            try:
                if commit:
                    producer.commit_transaction(END_TIMEOUT_S)
                    return Outcome.OK
                producer.abort_transaction(END_TIMEOUT_S)
                return Outcome.FAIL
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                self.errors.append(f"{self.process} {'commit' if commit else 'abort'}: {exc}")
                if error.txn_requires_abort():
                    return self.abort_after(producer, exc)
                if not error.retriable():
                    return Outcome.INFO
        return Outcome.INFO

    def abort_after(self, producer: Producer, exc: KafkaException) -> Outcome:
        error: KafkaError = exc.args[0]
        if error.fatal():
            return Outcome.INFO
        try:
            producer.abort_transaction(END_TIMEOUT_S)
        except KafkaException as again:
            self.errors.append(f"{self.process} abort: {again}")
            return Outcome.INFO
        return Outcome.FAIL


@dataclass
class Reader:
    """One consumer of every partition from offset 0, each non-empty poll recorded."""

    bootstrap: str
    topic: str
    partitions: int
    process: str
    isolation: str = "read_committed"
    history: list[Txn] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    want: set[int] = field(default_factory=set)  # set by the test once writers stopped

    def run(self, done: threading.Event, deadline: float) -> None:
        """Poll until `done` is set (and then every value of `self.want` read) or the
        monotonic `deadline`."""
        consumer = make_consumer(self.bootstrap, self.topic, self.partitions, self.process,
                                 self.isolation)  # fmt: skip
        try:
            while time.monotonic() < deadline:
                if done.is_set() and self.want <= self.seen:
                    return
                invoke_at = now()
                polls = consume(consumer, 0.2, self.seen)
                if polls:
                    self.history.append(
                        Txn(self.process, Outcome.OK, (), polls, invoke_at, None, now())
                    )
        finally:
            consumer.close()


def make_consumer(
    bootstrap: str, topic: str, partitions: int, process: str, isolation: str
) -> Consumer:
    """A consumer of every partition from offset 0 (assigned: no group rebalances)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"hist-{process}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer


def consume(consumer: Consumer, timeout_s: float, seen: set[int]) -> tuple[Poll, ...]:
    """One consume() call as polls per partition (values added to `seen`)."""
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for msg in consumer.consume(POLL_RECORDS_MAX, timeout_s):
        partition, offset = msg.partition(), msg.offset()
        if msg.error() is not None or partition is None or offset is None:
            continue
        value = int(msg.value() or b"-1")
        seen.add(value)
        by_partition[partition].append((offset, value))
    return tuple(Poll(p, tuple(rs)) for p, rs in sorted(by_partition.items()))
