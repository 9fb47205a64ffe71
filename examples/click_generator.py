"""Click-event generator: JSON click events with event-time (CreateTime) timestamps.

Each event is ``{"user": "u17", "page": "/pricing", "ts": <epoch ms>}`` keyed by user.
The record's CreateTime timestamp IS the event time (``ts``): events are spread over the
last ``--minutes`` minutes, slightly out of order (``--jitter-s``), as clicks collected
from many browsers would be. Downstream jobs window on the Kafka ``timestamp`` column.

    riverbed pipeline run examples/click_generator.py --events 20000 --minutes 10
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator

PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login", "/about", "/careers"]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)


def click_events(
    events: int, minutes: float, users: int, jitter_s: float, seed: int, now_ms: int
) -> Iterator[tuple[int, str, str]]:
    """(event time ms, user, page) of each click, in production order; deterministic."""
    rng = random.Random(seed)
    start_ms = now_ms - int(minutes * 60_000)
    step = (now_ms - start_ms) / max(events, 1)
    for i in range(events):
        # Mostly in order, with some clicks arriving up to jitter_s late.
        ts = int(start_ms + i * step - rng.random() * jitter_s * 1000)
        ts = max(start_ms, min(now_ms, ts))
        user = f"u{rng.randrange(users)}"
        page = rng.choices(PAGES, weights=[8, 3, 5, 4, 1, 2, 1, 1])[0]
        yield ts, user, page


def generate(
    bootstrap: str,
    topic: str = "clicks",
    events: int = 10_000,
    minutes: float = 10.0,
    users: int = 500,
    jitter_s: float = 20.0,
    seed: int = 7,
    now_ms: int | None = None,
) -> tuple[int, int]:
    """Produce ``events`` clicks; returns the (first, last) event time in ms."""
    from confluent_kafka import Producer

    end_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    errors: list[str] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    first, last = end_ms, 0
    for i, (ts, user, page) in enumerate(
        click_events(events, minutes, users, jitter_s, seed, end_ms)
    ):
        first, last = min(first, ts), max(last, ts)
        value = json.dumps({"user": user, "page": page, "ts": ts}).encode()
        while True:
            try:
                producer.produce(topic, value, user.encode(), timestamp=ts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    if errors:
        raise RuntimeError(f"{len(errors)} clicks were not delivered, first: {errors[0]}")
    return first, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--jitter-s", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    ensure_topic(args.bootstrap_server, args.topic, args.partitions)
    started = time.monotonic()
    first, last = generate(
        args.bootstrap_server,
        args.topic,
        args.events,
        args.minutes,
        args.users,
        args.jitter_s,
        args.seed,
    )
    took = time.monotonic() - started
    print(
        f"produced {args.events} clicks to {args.topic} in {took:.1f} s; "
        f"event time {first} .. {last} (epoch ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
