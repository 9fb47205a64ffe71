"""Which fenced brokers a broker still lists in its Metadata answers, and until when.

Kafka's Metadata lists only unfenced brokers (``KRaftMetadataCache.getAliveBrokerNodes``).
A client then learns, in one answer, both that a dead broker's partitions have a new
leader and that the dead broker is gone. librdkafka (2.5+, which purges brokers no longer
in Metadata) handles that pair badly: the main thread moves the partition to its new
leader's broker thread, and the departing broker thread, tearing down, hands the partitions
it still held to the internal broker, undoing the move. The partition then waits for the
next leader query, one ``retry.backoff.max.ms`` (1 s) later; every fail-over pays that
second (measured in ``benchmarks/replication_bench.py``'s timeline: the client knows the
new leader, and its batch is acknowledged a second later).

So a broker keeps listing a broker it saw fenced for ``grace_ms`` after it saw the fence
(``riverbed.metadata.fenced.broker.listing.grace.ms``; 0 lists fenced brokers never, as
Kafka). The client's next query sees the new leader with the old broker still listed,
moves the partition cleanly, and drops the broker on a later query. Listing a fenced
broker a little longer is safe: no partition has a fenced leader (elections exclude
fenced brokers), so no request is routed to it; a client that connects to it finds it dead
or answering with its own (stale) view, as it would have a moment before the fence.

Only a transition counts (unfenced in the previous image, fenced in the new one, seen
while this broker runs): a broker that starts on an image where another is already fenced
does not list it, and a broker that is unfenced again or unregistered leaves the table.
Sans-I/O: images and ``now_ms`` in, answers out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

#: Brokers remembered at once; a cluster has far fewer, so reaching it means a bug.
RECENTLY_FENCED_MAX = 4096


class Registration(Protocol):
    @property
    def fenced(self) -> bool: ...


@dataclass
class RecentlyFenced:
    """Fence times (``now_ms`` when this broker applied the fence) of brokers fenced less
    than ``grace_ms`` ago."""

    grace_ms: int
    fenced_at_ms: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.grace_ms >= 0, self.grace_ms

    def observe(
        self,
        old: Mapping[int, Registration],
        new: Mapping[int, Registration],
        now_ms: int,
    ) -> None:
        """A new image was published: note fences, forget unfences and unregistrations."""
        if self.grace_ms == 0:
            return
        for broker_id in list(self.fenced_at_ms):
            reg = new.get(broker_id)
            if (
                reg is None
                or not reg.fenced
                or now_ms - self.fenced_at_ms[broker_id] >= self.grace_ms
            ):
                del self.fenced_at_ms[broker_id]
        for broker_id, reg in new.items():
            before = old.get(broker_id)
            if reg.fenced and before is not None and not before.fenced:
                self.fenced_at_ms[broker_id] = now_ms
        assert len(self.fenced_at_ms) <= RECENTLY_FENCED_MAX, len(self.fenced_at_ms)

    def listed(self, broker_id: int, now_ms: int) -> bool:
        """Does a Metadata answer at ``now_ms`` still list fenced broker ``broker_id``?"""
        at = self.fenced_at_ms.get(broker_id)
        return at is not None and now_ms - at < self.grace_ms
