"""Console benchmark (issue 21): the message browser's server-side search over a topic vs
reading the same records with a plain consumer.

Run: ``.venv/bin/python -m benchmarks.console_search_bench [--mib 1024] [--record-bytes 1024]
[--needle-every 10000]`` (the issue's figure is over 1 GiB; the default 128 MiB is quicker)

One broker; one partition filled with ``--mib`` MiB of JSON records of ``--record-bytes``
bytes, one in ``--needle-every`` holding ``"needle"``. Then, in the same run:

- ``consumer``: confluent-kafka reads every record from offset 0 to the high watermark
  (no filter: the floor any search pays);
- ``search``: `riverbed.console.browse.search` walks the partition as the console does,
  ``SCAN_RECORDS_MAX`` records per request (each a new bounded scan from the next offset),
  with the value filter ``"needle"`` (RE2), counting the matches.

Printed: records, MiB, seconds and MiB/s of each, and the ratio search / consumer. Not a
test: it never asserts on time (the matches are checked, as a wrong search is no figure).
"""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.console import browse
from riverbed.console.admin import ConsoleAdmin
from riverbed.testing.cluster import BrokerProcess

TOPIC = "search-bench"
QUIET = {"log_level": 3}


def _fill(bootstrap: str, records: int, record_bytes: int, needle_every: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(timeout=60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "compression.type": "lz4", **QUIET})  # fmt: skip
    needles = 0
    for i in range(records):
        word = "needle" if i % needle_every == 0 else "hay"
        needles += word == "needle"
        head = json.dumps({"i": i, "word": word, "pad": ""})
        value = head[:-2] + "x" * max(0, record_bytes - len(head)) + '"}'
        while True:
            try:
                p.produce(TOPIC, value=value.encode(), key=str(i).encode())
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(300) == 0
    return needles


def _consume(bootstrap: str, end: int) -> tuple[int, int, float]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  **QUIET})  # fmt: skip
    c.assign([TopicPartition(TOPIC, 0, 0)])
    records = size = 0
    start = time.perf_counter()
    while records < end:
        for msg in c.consume(500, 1.0):
            if msg.error() is None:
                records += 1
                size += len(msg.value() or b"")
    elapsed = time.perf_counter() - start
    c.close()
    return records, size, elapsed


def _search(bootstrap: str, end: int) -> tuple[int, int, float]:
    admin = ConsoleAdmin({"bootstrap.servers": bootstrap, **QUIET})
    filters = browse.parse_filters("", "needle", "")
    offset = matches = 0
    start = time.perf_counter()
    while offset < end:
        s = browse.Search(TOPIC, 0, "offset", offset, 0, browse.SCAN_RECORDS_MAX, "text", filters)
        result = browse.search(admin, s)
        matches += len(result.records)
        offset += result.scanned
    return offset, matches, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=128, help="data to fill, MiB")
    parser.add_argument("--record-bytes", type=int, default=1024, help="bytes per record value")
    parser.add_argument("--needle-every", type=int, default=10_000, help="one match in N")
    args = parser.parse_args()
    records = args.mib * 1024 * 1024 // args.record_bytes
    with BrokerProcess(overrides={"log.segment.bytes": str(256 * 1024 * 1024)}) as broker:
        t0 = time.perf_counter()
        needles = _fill(broker.bootstrap, records, args.record_bytes, args.needle_every)
        print(f"filled {records} records ({args.mib} MiB) in {time.perf_counter() - t0:.1f} s")
        got, size, c_s = _consume(broker.bootstrap, records)
        mib = size / 1024 / 1024
        print(f"consumer: {got} records, {mib:.0f} MiB in {c_s:.1f} s = {mib / c_s:.1f} MiB/s")
        scanned, matches, s_s = _search(broker.bootstrap, records)
        assert matches == needles, f"search found {matches} of {needles} needles"
        print(f"search:   {scanned} records scanned, {matches} matches, {s_s:.1f} s = "
              f"{mib / s_s:.1f} MiB/s ({browse.SCAN_RECORDS_MAX} records per request)")  # fmt: skip
        print(f"ratio search / consumer throughput: {c_s / s_s:.2f}")


if __name__ == "__main__":
    main()
