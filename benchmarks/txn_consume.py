"""read_committed vs read_uncommitted consume of the same data (issue 19), in fine
alternated pairs: the consume part of `benchmarks.txn_bench` (``--only consume`` runs it
alone).

Both consumers (librdkafka's defaults but for ``isolation.level``, and on both sides
``fetch.wait.max.ms`` 10, so that a pass that ends at the log end does not wait half a
second for its parked fetch, and ``fetch.queue.backoff.ms`` 10, whose 1 s default stalled
passes at random) are made and warmed up once (a first full pass each: connections,
metadata, the page cache), so no start-up is timed. Then ``pairs`` pairs: each side reads
the range ``passes`` times (assign at its start, read to its last data record, unassign:
librdkafka's pause/resume instead delays the next fetch by ~1 s), which side goes first
alternating from pair to pair; a pass is timed from its assign to its last data record
(each ``consume`` asks for no more records than the pass has left, so it returns with the
last one), and the unassigned side sends no fetch while the other is timed. The rate is the range's data records (aborted ones
included: the same units for both sides, the work read_committed does to skip them)
per second; the figure is the median of the pairs' ratios, with the broker's CPU per
record of each side (its threads' schedstat over each side's passes, as
`ab_brokers.run_ns`: what a loaded machine disturbs least).

The dedicated data (``--only consume``): one topic per transaction size with
``transactions`` transactions of 1, 100 or 10,000 records, every ``ABORT_EVERY``-th one
aborted (the ABORT markers, the aborted-transaction lists of the fetches and the
consumer's filtering are all exercised), the last one committed. Dense markers (a marker
per record, or per 100) are where read_committed costs most per record.

``control``: the A/A check, both sides read_uncommitted (expect ~1.00; the spread is the
method's noise).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.ab_brokers import cpu_since, run_ns
from riverbed.testing.cluster import BrokerProcess

QUIET = {"log_level": 3}
RECORD = b"x" * 100
TIMEOUT_S = 120.0
#: Every ABORT_EVERY-th transaction of the dedicated data is aborted (10%).
ABORT_EVERY = 10
#: (records per transaction, transactions) of the dedicated data, per topic: the dense
#: cases are short (one EndTxn per transaction; ~250-500 transactions/s here).
CONSUME_DATA: tuple[tuple[int, int], ...] = ((1, 2_000), (100, 300), (10_000, 20))
#: A side reads at least this many records per pair (passes over a shorter range).
CHUNK_RECORDS_MIN = 100_000
#: Both sides' fetch.wait.max.ms: only a fetch at the log end waits (never a timed one).
FETCH_WAIT_MS = 10
#: (also both sides' fetch.queue.backoff.ms: librdkafka's default 1,000 ms stalls a pass
#: whenever its queue passes queued.min.messages, at random: pair ratios of 0.2-0.3)
#: Untimed pause before a pass: a pass ends with a fetch parked at the log end (up to
#: FETCH_WAIT_MS), which the next pass's fetch would otherwise wait for.
SETTLE_S = 3 * FETCH_WAIT_MS / 1000
#: Records asked of one ``consume`` call (it returns once it has them, or times out).
CONSUME_BATCH = 10_000
COMMITTED, UNCOMMITTED = "read_committed", "read_uncommitted"


@dataclass(frozen=True)
class ConsumeFigures:
    """One range's figures: per pair each side's records per second, and the broker's
    CPU per record of each side (us)."""

    topic: str
    records: int  # data records in the range (aborted included)
    passes: int  # per side per pair
    rates: tuple[list[float], list[float]]  # (read_committed, read_uncommitted) per pair
    cpu_us: tuple[float, float]

    @property
    def ratios(self) -> list[float]:
        return [c / u for c, u in zip(*self.rates, strict=True)]


def write_topic(bootstrap: str, topic: str, per_txn: int, txns: int) -> int:
    """``txns`` transactions of ``per_txn`` records to partition 0 of ``topic``, every
    ABORT_EVERY-th aborted, the last committed; returns the data records written."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"w-{topic}", **QUIET})
    p.init_transactions(TIMEOUT_S)
    for i in range(txns):
        p.begin_transaction()
        for j in range(per_txn):
            while True:
                try:
                    p.produce(topic, RECORD, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
            if j % 10_000 == 9_999:
                p.poll(0)
        if i % ABORT_EVERY == ABORT_EVERY // 2 and i != txns - 1:
            assert p.flush(TIMEOUT_S) == 0  # (abort_transaction drops what is unsent)
            p.abort_transaction(TIMEOUT_S)
        else:
            p.commit_transaction(TIMEOUT_S)
    return per_txn * txns


class _Reader:
    """One consumer of partition 0 of a topic, read in timed passes."""

    def __init__(self, bootstrap: str, topic: str, isolation: str, name: str) -> None:
        self.tp = TopicPartition(topic, 0, 0)
        self.c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"bench-{name}",
             "isolation.level": isolation, "enable.auto.commit": False,
             "fetch.wait.max.ms": FETCH_WAIT_MS,
             "fetch.queue.backoff.ms": FETCH_WAIT_MS, **QUIET}
        )  # fmt: skip
        self.started = False

    def read_pass(self, last: int, expected: int = 0) -> tuple[int, float]:
        """Read from offset 0 through offset ``last``: (records received, seconds from
        the seek). ``expected`` (the records a pass receives, known after the first): each
        ``consume`` asks for no more than are left, so it returns with the pass's last
        record instead of waiting out its timeout for records that will not come."""
        if self.started:
            time.sleep(SETTLE_S)  # the last (parked) fetch of the pass before is back
        start = time.perf_counter()
        self.c.assign([self.tp])
        self.started = True
        got = 0
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            want = min(CONSUME_BATCH, expected - got) if expected > got else CONSUME_BATCH
            for m in self.c.consume(want, 0.5):
                if m.error() is not None:
                    continue
                got += 1
                if (m.offset() or 0) >= last:
                    elapsed = time.perf_counter() - start
                    self.c.unassign()  # no fetch while the other side is timed
                    return got, elapsed
        raise AssertionError(f"{self.tp.topic}: offset {last} not read in {TIMEOUT_S} s")

    def close(self) -> None:
        self.c.close()


def _range_end(bootstrap: str, topic: str, records: int) -> tuple[int, int]:
    """(offset of the ``records``-th data record of ``topic``, or of its last one; the
    data records up to it), read read_uncommitted."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-range",
         "isolation.level": UNCOMMITTED, "enable.auto.commit": False, **QUIET}
    )  # fmt: skip
    c.assign([TopicPartition(topic, 0, 0)])
    watermarks = c.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)
    assert watermarks is not None
    high = watermarks[1]
    got, last = 0, -1
    deadline = time.monotonic() + TIMEOUT_S
    while got < records and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.5):
            if m.error() is None:
                got, last = got + 1, int(m.offset() or 0)
                if got == records:
                    break
        if high - last <= 2:  # the last data record (a marker may follow it)
            break
    c.close()
    return last, got


def measure(
    b: BrokerProcess, topic: str, records: int, pairs: int, control: bool = False
) -> ConsumeFigures:
    """The alternated pairs over the first ``records`` data records of ``topic``."""
    last, count = _range_end(b.bootstrap, topic, records)
    isolations = (UNCOMMITTED, UNCOMMITTED) if control else (COMMITTED, UNCOMMITTED)
    readers = [_Reader(b.bootstrap, topic, iso, f"{iso}-{i}") for i, iso in enumerate(isolations)]
    try:
        # warm-up: connections, metadata, page cache; what each side's pass receives
        expected = [r.read_pass(last)[0] for r in readers]
        passes = math.ceil(CHUNK_RECORDS_MIN / count)
        rates: tuple[list[float], list[float]] = ([], [])
        cpu_s = [0.0, 0.0]
        for pair in range(pairs):
            for side in (0, 1) if pair % 2 == 0 else (1, 0):
                ran, seconds = run_ns(b.pid), 0.0
                for _ in range(passes):
                    seconds += readers[side].read_pass(last, expected[side])[1]
                cpu_s[side] += cpu_since(b.pid, ran)
                rates[side].append(count * passes / seconds)
    finally:
        for r in readers:
            r.close()
    per = count * passes * pairs
    return ConsumeFigures(topic, count, passes, rates, (cpu_s[0] * 1e6 / per, cpu_s[1] * 1e6 / per))


def report(label: str, f: ConsumeFigures, control: bool = False) -> None:
    """The figures' lines; the first is the issue's ``consume: ... ratio R`` line."""
    med = statistics.median
    first = "read_uncommitted B (A/A control)" if control else COMMITTED
    committed, uncommitted = med(f.rates[0]), med(f.rates[1])
    print(f"consume{label}: {first} {committed:.0f} rec/s vs read_uncommitted"
          f" {uncommitted:.0f} rec/s: ratio {med(f.ratios):.2f}"
          f" (median of {len(f.ratios)} pairs; min {min(f.ratios):.2f},"
          f" max {max(f.ratios):.2f}; {f.records} records of {f.topic} x {f.passes} passes)")  # fmt: skip
    print("  pair ratios: " + " ".join(f"{x:.3f}" for x in f.ratios))
    c_us, u_us = f.cpu_us
    print(f"  broker CPU per record: {first} {c_us:.3f} us, read_uncommitted {u_us:.3f} us"
          f" (ratio {c_us / u_us:.3f})")  # fmt: skip
