"""Live tail: new records of a topic, pushed to the browser as server-sent events.

A tail is a consumer on its own thread (librdkafka blocks), assigned to every partition
at the high watermark it had when the tail began, that hands each record passing the
page's filters to the event loop through a bounded queue. At most `TAILS_MAX` tails run
at once (another gets a 429 naming the limit); a tail ends after `TAIL_SECONDS_MAX`
(the browser's EventSource then reconnects from the new end) or when the browser goes
away; a browser that cannot keep up loses records beyond `TAIL_QUEUE_MAX`, and is told how
many.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from riverbed.console.admin import ConsoleAdmin, TopicRow
from riverbed.console.browse import Filters, Found, found

#: Tails running at once (each holds a consumer and a thread).
TAILS_MAX = 8
#: Records waiting for a slow browser; more are dropped (and counted).
TAIL_QUEUE_MAX = 1000
#: Longest one tail stream lasts, seconds (the browser reconnects after it).
TAIL_SECONDS_MAX = 600.0
#: Comment lines keep idle connections open through proxies and find browsers that went
#: away (a write to a closed connection fails), seconds apart.
TAIL_KEEPALIVE_S = 5.0
_POLL_S = 0.1
_BATCH = 100


@dataclass(frozen=True, slots=True)
class Dropped:
    count: int


TailItem = Found | Dropped


class Tail:
    """One running tail; `start` then read `queue`; `stop` ends the thread."""

    def __init__(
        self,
        admin: ConsoleAdmin,
        topic: TopicRow,
        filters: Filters,
        decoding: str,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.admin = admin
        self.topic = topic
        self.filters = filters
        self.decoding = decoding
        self.loop = loop
        self.queue: asyncio.Queue[TailItem] = asyncio.Queue(TAIL_QUEUE_MAX)
        self.ready = asyncio.Event()
        self._stop = threading.Event()
        self._dropped = 0
        #: why the consumer could not start (set before `ready`), else None
        self.failed: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"tail-{topic.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end and wait for it (blocking: call it off the event loop)."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            consumer = self.admin.consumer()
            consumer.assign(
                [
                    TopicPartition(self.topic.name, p.partition, p.latest or 0)
                    for p in self.topic.partitions
                    if not p.offline
                ]
            )
        except Exception as exc:  # reported to the browser; the tail ends
            self.failed = f"cannot start the tail: {exc}"
            self.loop.call_soon_threadsafe(self.ready.set)
            return
        try:
            self.loop.call_soon_threadsafe(self.ready.set)
            while not self._stop.is_set():
                for msg in consumer.consume(_BATCH, _POLL_S):
                    if msg.error() is None and self.filters.matches(
                        msg.key(), msg.value(), list(msg.headers() or [])
                    ):
                        self._hand_over(found(msg, self.decoding))
        finally:
            consumer.close()

    def _hand_over(self, item: Found) -> None:
        self.loop.call_soon_threadsafe(self._put, item)

    def _put(self, item: TailItem) -> None:
        # On the event loop: the queue is not thread-safe.
        if self.queue.full():
            self._dropped += 1
            return
        if self._dropped and not isinstance(item, Dropped):
            self.queue.put_nowait(Dropped(self._dropped))
            self._dropped = 0
            if self.queue.full():
                self._dropped += 1
                return
        self.queue.put_nowait(item)
