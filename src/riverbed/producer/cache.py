"""The bounded write-through cache in front of the producer-id ledger (the seed's "Cache").

At most ``producer.id.cache.max.entries`` producer ids (least recently used evicted).
A miss reads the ledger and caches the answer, "absent" included (a new producer's first
batch then costs one ledger read, its next ones none); a write updates the ledger first,
then the cache. Thread-safe (one lock).

A cached entry keeps the producer's last five batches (duplicate detection of any of
them); the ledger keeps the snapshot entry, i.e. only the last batch: a producer evicted
from the cache (idle while `max.entries` others produced) is recognised again with its
last batch only, exactly as after a restart from a Kafka snapshot.

Expiry (``producer.id.expiration.ms``) is applied on read: an expired entry reads as
absent, as Kafka's removal makes it; ``expire`` drops expired entries from the cache,
and the ledger forgets them when their file is deleted (they are not carried forward).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from riverbed.producer.ledger import PidLedger
from riverbed.producer.snapshot import entry_fields, entry_from_fields
from riverbed.producer.state import ProducerEntry, is_expired

__all__ = ["PRODUCER_ID_CACHE_MAX_ENTRIES_DEFAULT", "LedgerStore"]

#: producer.id.cache.max.entries default (per partition; a cached entry is ~350 bytes).
PRODUCER_ID_CACHE_MAX_ENTRIES_DEFAULT: Final = 10_000
_ABSENT: Final = None
#: Producers one DescribeProducers partition lists at most (the ledger may hold millions;
#: the most recently active come first).
DESCRIBE_ENTRIES_MAX: Final = 10_000


class LedgerStore:
    """A :class:`riverbed.producer.state.ProducerStore` over a :class:`PidLedger`."""

    def __init__(
        self,
        ledger: PidLedger,
        max_entries: int,
        now_ms: Callable[[], int],
        expiration_ms: int,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"producer.id.cache.max.entries must be >= 1, not {max_entries}")
        self.ledger = ledger
        self.max_entries = max_entries
        self.now_ms = now_ms
        self.expiration_ms = expiration_ms
        self._cache: OrderedDict[int, ProducerEntry | None] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, producer_id: int) -> ProducerEntry | None:
        with self._lock:
            if producer_id in self._cache:
                self.hits += 1
                self._cache.move_to_end(producer_id)
                entry = self._cache[producer_id]
            else:
                self.misses += 1
                fields = self.ledger.read(producer_id)
                entry = entry_from_fields(*fields) if fields is not None else _ABSENT
                self._insert(producer_id, entry)
        if entry is not None and is_expired(entry, self.now_ms(), self.expiration_ms):
            return None
        return entry

    def put(self, entry: ProducerEntry) -> None:
        with self._lock:
            self.ledger.update(entry_fields(entry))
            self._insert(entry.producer_id, entry)

    def _insert(self, producer_id: int, entry: ProducerEntry | None) -> None:
        cache = self._cache
        cache[producer_id] = entry
        cache.move_to_end(producer_id)
        while len(cache) > self.max_entries:
            cache.popitem(last=False)

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        with self._lock:
            gone = [
                pid
                for pid, e in self._cache.items()
                if e is not None and is_expired(e, now_ms, expiration_ms)
            ]
            for pid in gone:
                self._cache[pid] = _ABSENT
        return gone

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def entries(self, limit: int = DESCRIBE_ENTRIES_MAX) -> list[ProducerEntry]:
        """Live producers' newest entries (the cache's when cached, else the ledger's),
        most recently written files first, at most ``limit`` of them."""
        now = self.now_ms()
        with self._lock:
            cached = dict(self._cache)
        out = []
        for fields in self.ledger.iter_newest():
            pid = fields[0]
            entry = cached[pid] if pid in cached else entry_from_fields(*fields)
            if entry is not None and not is_expired(entry, now, self.expiration_ms):
                out.append(entry)
                if len(out) >= limit:
                    break
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
