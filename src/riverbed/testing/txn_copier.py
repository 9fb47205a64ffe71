"""A transactional consume-transform-produce copier, run as its own process (issue 19's
copy job; Kafka's ``TransactionalMessageCopier`` of its transactions system test).

``python -m riverbed.testing.txn_copier BOOTSTRAP INPUT OUTPUT TXN_ID GROUP INCARNATION HISTORY MODE``

It reads every partition of INPUT read_committed from the group's committed offsets
(assigned, not subscribed: a copier killed and started again takes its partitions back at
once, with no rebalance to wait for) and copies each record to the same partition of
OUTPUT in a transaction, with the consumed positions sent to the transaction
(``send_offsets_to_transaction``): the copy and the progress commit or abort together.

Each output record's key is the input record's value (what was copied); its value is a
number unique over the whole run (``INCARNATION * VALUES_PER_INCARNATION + n``), so that a
record copied twice, once in an aborted and once in a committed transaction, is two
values to the history checker (`riverbed.testing.txn_history`).

The copier appends its transactions to HISTORY as JSON lines, flushed before each step
that may not return: ``{"begin": ...}`` with the sends and the time the commit is invoked
(before ``commit_transaction``), then ``{"end": ..., "outcome": "ok"|"fail"}`` once it is
known. A transaction with no end line (the copier was killed, or its commit raised) is
INFO to the checker. Times are ``time.monotonic_ns()``: one clock for every process of the
machine.

On an abortable error it aborts and seeks back to the committed offsets; on any other
error it exits with EXIT_FATAL and whoever runs it starts it again (its
``init_transactions`` fences the old producer and aborts what it left open); so does a
copier whose step overran STUCK_S (a client call past its own timeout), after dumping its
stacks. With no records for IDLE_REPORT_S it logs its clients' state, and its producer
logs librdkafka's ``eos`` and ``broker`` debug lines (the transaction's steps, its
connections going up and down, coordinator look-ups): a stalled copier says why.

MODE ``exactly-once`` is the above; ``at-least-once`` is the broken copier that the copy
job must catch: an idempotent producer, and the offsets committed outside any
transaction, one copy behind (as a periodic commit is): after each flush it commits the
positions of the copy before, so a kill while records flow copies the last one again.
(Committing right after each flush left a window of a few ms; copier kills, landing at
random, mostly missed it and the job passed.)
"""

from __future__ import annotations

import faulthandler
import json
import sys
import time
from typing import IO

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from riverbed.testing.txn_history_clients import QUIET, now

#: Output values of one incarnation are INCARNATION * this + n.
VALUES_PER_INCARNATION = 10_000_000
#: Records one transaction copies at most.
TXN_RECORDS_MAX = 200
#: Seconds one consume() waits for records.
CONSUME_S = 0.2
#: Seconds librdkafka gets for init, send_offsets, commit and abort.
TXN_TIMEOUT_S = 30.0
EXIT_FATAL = 3
#: Seconds one step of the copier (its start, or one transaction with its abort and
#: rewind) may take: each librdkafka call in it has TXN_TIMEOUT_S, so a step past this is
#: a call that overran its own timeout. The copier then dumps its threads' stacks to its
#: log and exits, and whoever runs it starts it again (see `Copier.run`).
STUCK_S = 4 * TXN_TIMEOUT_S
#: Seconds without a record after which the copier logs its clients' state (librdkafka's
#: statistics: each partition's fetch state, leader, positions, watermarks and the
#: transaction state), at most once per interval: what a stalled copier was waiting for.
IDLE_REPORT_S = 10.0


class Copier:
    def __init__(self, bootstrap: str, source: str, sink: str, tid: str, group: str,
                 incarnation: int, history: IO[str], *, exactly_once: bool = True) -> None:  # fmt: skip
        self.source, self.sink, self.history = source, sink, history
        self.next_value = incarnation * VALUES_PER_INCARNATION
        self.exactly_once = exactly_once
        #: at-least-once: the positions after the last flushed copy, committed after the next
        self.behind: list[TopicPartition] = []
        self.idle_since = time.monotonic()
        self.stats: dict[str, str] = {}
        config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET,
                  **self.statistics("producer")}  # fmt: skip
        if exactly_once:  # the transaction's steps, to the log (what a stuck copier did last)
            config |= {"debug": "eos,broker", "log_level": 7}
        if exactly_once:
            config |= {"transactional.id": tid, "transaction.timeout.ms": 10_000}
        self.producer = Producer(config)
        if exactly_once:
            # fences the previous incarnation and aborts what it left open, so the
            # committed offsets read below are stable
            self.producer.init_transactions(TXN_TIMEOUT_S)
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
             "isolation.level": "read_committed", "auto.offset.reset": "earliest", **QUIET,
             **self.statistics("consumer")}
        )  # fmt: skip
        parts = self.consumer.list_topics(source, timeout=TXN_TIMEOUT_S).topics[source].partitions
        self.partitions = sorted(parts)
        self.rewind()

    def rewind(self) -> None:
        """Start again from the group's committed offsets (the last committed copy)."""
        committed = self.consumer.committed(
            [TopicPartition(self.source, p) for p in self.partitions], timeout=TXN_TIMEOUT_S
        )
        self.consumer.assign(committed)  # offset -1001 (none) starts at the earliest

    def write(self, line: dict[str, object]) -> None:
        self.history.write(json.dumps(line) + "\n")
        self.history.flush()

    def statistics(self, client: str) -> dict[str, object]:
        """librdkafka's statistics every IDLE_REPORT_S, the last kept per client."""

        def keep(text: str) -> None:
            self.stats[client] = text

        return {"statistics.interval.ms": int(IDLE_REPORT_S * 1000), "stats_cb": keep}

    def report_idle(self) -> None:
        """Log what the clients wait for once no record came for IDLE_REPORT_S."""
        if time.monotonic() - self.idle_since < IDLE_REPORT_S:
            return
        self.idle_since = time.monotonic()
        self.producer.poll(0)  # serves the producer's stats_cb
        print(f"idle {IDLE_REPORT_S:.0f} s: {idle_state(self.stats, self.source)}", flush=True)

    def copy_one(self) -> None:
        """One transaction: what one consume() returned, copied, with its positions."""
        msgs = []
        for m in self.consumer.consume(TXN_RECORDS_MAX, CONSUME_S):
            error = m.error()
            if error is None:
                msgs.append(m)
            else:  # (a consumer error is not fatal: librdkafka goes on by itself)
                print(f"consumer error: {m.topic()}-{m.partition()}: {error}", flush=True)
        if not msgs:
            if not self.exactly_once:  # caught up: the last copy's offsets too
                self.commit_behind()
            self.report_idle()
            return
        self.idle_since = time.monotonic()
        invoke_at = now()
        offsets: dict[int, int] = {}
        if not self.exactly_once:
            self.copy_at_least_once(msgs, invoke_at, offsets)
            return
        try:
            self.producer.begin_transaction()
            sends = self.produce(msgs, offsets)
            positions = self.consumer.position(
                [TopicPartition(self.source, p) for p in self.partitions]
            )
            self.producer.send_offsets_to_transaction(
                [tp for tp in positions if tp.offset >= 0],
                self.consumer.consumer_group_metadata(),
                TXN_TIMEOUT_S,
            )
            self.write({"begin": invoke_at, "commit": now(), "sends": sends})
            self.producer.commit_transaction(TXN_TIMEOUT_S)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise  # not known to be aborted: the caller exits, the copy starts anew
            self.producer.abort_transaction(TXN_TIMEOUT_S)
            self.write({"end": invoke_at, "at": now(), "outcome": "fail", "offsets": offsets})
            self.rewind()
            return
        self.write({"end": invoke_at, "at": now(), "outcome": "ok", "offsets": offsets})

    def produce(self, msgs: list[Message], offsets: dict[int, int]) -> list[tuple[int, int]]:
        """Each input record to the same partition of the output, its key the input's
        value; the (partition, value) sent, and each delivered value's offset in
        `offsets` once delivered."""

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                offsets[int(msg.value() or b"-1")] = msg.offset() or 0

        sends = []
        for msg in msgs:
            partition, value = msg.partition() or 0, self.next_value
            self.next_value += 1
            sends.append((partition, value))
            self.producer.produce(self.sink, str(value).encode(), key=msg.value(),
                                  partition=partition, on_delivery=delivered)  # fmt: skip
        return sends

    def copy_at_least_once(
        self, msgs: list[Message], invoke_at: int, offsets: dict[int, int]
    ) -> None:
        """The broken copy: the records, flushed, then the offsets of the copy before,
        outside a transaction."""
        first = self.next_value
        self.write({"begin": invoke_at, "commit": now(),
                    "sends": [(m.partition(), first + i) for i, m in enumerate(msgs)]})  # fmt: skip
        self.produce(msgs, offsets)
        if self.producer.flush(TXN_TIMEOUT_S) != 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        self.commit_behind()
        positions = self.consumer.position(
            [TopicPartition(self.source, p) for p in self.partitions]
        )
        self.behind = [tp for tp in positions if tp.offset >= 0]
        self.write({"end": invoke_at, "at": now(), "outcome": "ok", "offsets": offsets})

    def commit_behind(self) -> None:
        if self.behind:
            self.consumer.commit(offsets=self.behind, asynchronous=False)
            self.behind = []

    def run(self) -> None:
        """Copy until killed. A transaction that does not end within STUCK_S ends the
        process (exit code 1): librdkafka's ``send_offsets_to_transaction`` was seen not
        to return, past its timeout, after the group coordinator's node was killed
        while the offsets were sent (its group-coordinator lookup waits for a broker
        state change that may never come); the transaction then times out on the
        coordinator and the copier, waiting in that call, never copies again. A new
        copier fences it (``init_transactions``) and goes on."""
        while True:
            arm_watchdog()
            self.copy_one()


def arm_watchdog() -> None:
    """Dump every thread's stack and exit in STUCK_S unless armed again before."""
    faulthandler.dump_traceback_later(STUCK_S, exit=True, file=sys.stdout)


def idle_state(stats: dict[str, str], source: str) -> str:
    """The parts of the clients' last statistics that say why nothing is copied."""
    out: list[str] = []
    if "consumer" in stats:
        topic = json.loads(stats["consumer"]).get("topics", {}).get(source, {})
        for p, s in sorted(topic.get("partitions", {}).items()):
            if p == "-1":
                continue
            fields = ("fetch_state", "leader", "fetchq_cnt", "next_offset", "app_offset",
                      "committed_offset", "hi_offset", "ls_offset", "consumer_lag")  # fmt: skip
            out.append(f"{source}-{p} " + " ".join(f"{f}={s.get(f)}" for f in fields))
    if "producer" in stats:
        eos = json.loads(stats["producer"]).get("eos", {})
        out.append(f"producer {eos}")
    return "; ".join(out)


def main(argv: list[str]) -> int:
    bootstrap, source, sink, tid, group, incarnation, path, mode = argv
    with open(path, "a", encoding="utf-8") as history:
        try:
            arm_watchdog()  # the start's calls too (init, metadata, committed offsets)
            copier = Copier(bootstrap, source, sink, tid, group, int(incarnation), history,
                            exactly_once=mode == "exactly-once")  # fmt: skip
            print("copying", flush=True)
            copier.run()
        except KafkaException as exc:
            print(f"copier: {exc}", file=sys.stderr, flush=True)
            return EXIT_FATAL
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
