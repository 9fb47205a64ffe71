"""The log side of the producer ledger's model check (:mod:`riverbed.testing.ledger_model`).

A fake of :class:`riverbed.storage.PartitionLog` as the producer state manager sees it
(``log_start_offset``, ``log_end_offset``, ``batch_headers_from``, ``producer_state``,
``attach_producer_state``, ``update_producer_state``), in memory, calling the hook (:mod:`riverbed.storage.producer_hook`)
at the points the real log calls it: a leader append (check, then ``on_batch``), a roll,
a truncation (of an emptied last segment too), a full truncation, DeleteRecords and
retention (``on_segments_deleted`` with the first remaining base; deleting every segment
rolls first), a clean close. ``flushed`` is what an fsync made durable: a lossy crash
keeps the batches below a point chosen between it (or the first segment) and the end.

And the reference: every batch ever appended and not truncated away, deleted ones too
(the producer state rule, :mod:`riverbed.producer.manager`: retention and DeleteRecords
never remove a producer, only ``producer.id.expiration.ms`` does), so the state as of an
offset is each producer's newest batch below it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from riverbed.producer.ledger_files import Fields
from riverbed.protocol.records import BatchHeader
from riverbed.storage.producer_hook import DuplicateBatch, ProducerStateHook, TxnMarker
from riverbed.storage.txn_index import AbortedTxn

T = TypeVar("T")

__all__ = ["ModelLog", "Reference", "Segment", "alive", "header", "header_fields"]


def header(offset: int, pid: int, epoch: int, seq: int, count: int, ts: int) -> BatchHeader:
    """An idempotent batch header (``pid`` -1: a plain batch)."""
    return BatchHeader(
        base_offset=offset,
        batch_length=0,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=count - 1,
        first_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


def header_fields(h: BatchHeader) -> Fields:
    """The snapshot entry of a producer whose last batch is ``h`` (not transactional)."""
    return (
        h.producer_id,
        h.producer_epoch,
        h.last_sequence,
        h.last_offset,
        h.last_offset_delta,
        h.max_timestamp,
        -1,
        -1,
    )


def alive(fields: Fields, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's isProducerExpired, negated."""
    return fields[7] >= 0 or now_ms - fields[5] < expiration_ms


class ModelLog:
    """The fake partition log (see the module docstring). HW = log end (one replica)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.headers: list[BatchHeader] = []  # the batches on disk, in offset order
        self.bases = [0]  # segment base offsets
        self._log_start_offset = 0
        self.flushed = 0  # every batch below it is durable
        self.producer_state: ProducerStateHook | None = None
        #: runs the pending background flushes: called before every hook call that
        #: waits for them (the real pool runs them meanwhile)
        self.settle: Callable[[], None] = lambda: None

    def attach_producer_state(
        self, hook: ProducerStateHook, rebuild: Callable[[int, int], None]
    ) -> None:
        with self._lock:  # as PartitionLog: nothing is appended meanwhile
            rebuild(self._log_start_offset, self.log_end_offset)
            self.producer_state = hook

    def update_producer_state(self, change: Callable[[], T]) -> T:
        with self._lock:
            return change()

    @property
    def hook(self) -> ProducerStateHook:
        assert self.producer_state is not None
        return self.producer_state

    @property
    def waiting_hook(self) -> ProducerStateHook:
        self.settle()
        return self.hook

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        end = self.headers[-1].next_offset if self.headers else 0
        return max(end, self.bases[-1])

    @property
    def segments(self) -> list[Segment]:
        return [Segment(b) for b in self.bases]

    def boundaries(self, low: int) -> list[int]:
        """Batch boundaries from ``low`` up to the log end (offsets a truncation keeps)."""
        out = [h.base_offset for h in self.headers if h.base_offset >= low]
        return [*out, self.log_end_offset] if low <= self.log_end_offset else out

    def stale_txn_index_base(self) -> int | None:
        return None  # the model keeps no aborted-transaction index

    def txn_batches_from(self, offset: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        return ((h, None) for h in self.batch_headers_from(offset))

    def install_txn_index_entries(self, entries: Iterable[AbortedTxn]) -> int:
        return 0

    def batch_headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches ending at or after ``offset`` (from the first segment
        when below it), under the lock as the real log holds it."""
        with self._lock:
            for h in list(self.headers):
                if h.last_offset >= offset:
                    yield h

    def append(self, h: BatchHeader) -> DuplicateBatch | None:
        with self._lock:
            dup = self.hook.check_leader_append([h])
            if dup is not None:
                return dup
            self.headers.append(h)
            self.hook.on_batch(h)
            return None

    def roll(self) -> bool:
        with self._lock:
            end = self.log_end_offset
            if end == self.bases[-1]:
                return False  # the active segment is empty
            self.bases.append(end)
            self.waiting_hook.on_roll(end)
            return True

    def truncate_to(self, offset: int) -> None:
        with self._lock:
            if offset < self.bases[0]:
                self.truncate_fully(offset)
                return
            self.headers = [h for h in self.headers if h.base_offset < offset]
            self.bases = [b for b in self.bases if b <= offset]
            if len(self.bases) > 1 and self.bases[-1] == offset:
                self.bases.pop()  # the emptied segment goes (PartitionLog does the same)
            end = self.log_end_offset
            self._log_start_offset = min(self._log_start_offset, end)
            self.flushed = min(self.flushed, end)
            self.waiting_hook.on_truncate(self._log_start_offset, end)

    def truncate_fully(self, offset: int) -> None:
        with self._lock:
            self.headers = []
            self.bases = [offset]
            self._log_start_offset = self.flushed = offset
            self.waiting_hook.on_truncate_fully(offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: the segments whose next base is at most ``offset`` go."""
        with self._lock:
            self._log_start_offset = max(self._log_start_offset, offset)
            n = 0
            while n < len(self.bases) and self._next_base(n) <= offset:
                n += 1
            return self._delete_segments(n)

    def delete_oldest_segments(self, n: int) -> int:
        """Retention (by time or size): the ``n`` oldest segments go."""
        with self._lock:
            return self._delete_segments(min(n, len(self.bases)))

    def _next_base(self, i: int) -> int:
        return self.bases[i + 1] if i + 1 < len(self.bases) else self.log_end_offset

    def _delete_segments(self, n: int) -> int:
        if n == len(self.bases) and self.log_end_offset == self.bases[-1]:
            n -= 1  # never the empty active segment
        if n <= 0:
            return 0
        if n == len(self.bases):
            self.roll()  # PartitionLog rolls first: the active segment never goes
        first = self.bases[n]
        del self.bases[:n]
        self.headers = [h for h in self.headers if h.base_offset >= first]
        self._log_start_offset = max(self._log_start_offset, first)
        self.flushed = max(self.flushed, first)  # the real log's recovery point too
        self.waiting_hook.on_segments_deleted(first)
        return n

    def fsync(self) -> None:
        with self._lock:
            self.flushed = self.log_end_offset

    def close(self) -> None:
        with self._lock:
            self.waiting_hook.on_close(self.log_end_offset)
            self.flushed = self.log_end_offset
            self.producer_state = None

    def lose_unflushed(self, keep_to: int) -> None:
        """A power failure: only the batches below ``keep_to`` (>= flushed) remain."""
        with self._lock:
            self.headers = [h for h in self.headers if h.base_offset < keep_to]
            self.bases = [b for b in self.bases if b <= keep_to]
            self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
            self.producer_state = None


class Segment(NamedTuple):
    base_offset: int


@dataclass
class Reference:
    """Every batch appended and not truncated away, deleted ones too: (base, entry)."""

    batches: list[tuple[int, Fields]] = field(default_factory=list)

    def append(self, h: BatchHeader) -> None:
        self.batches.append((h.base_offset, header_fields(h)))

    def truncate(self, end: int) -> None:
        self.batches = [(o, f) for o, f in self.batches if o < end]

    def clear(self) -> None:
        self.batches = []

    def state(self, as_of: int | None = None) -> dict[int, Fields]:
        """Each producer's newest batch below ``as_of`` (default: all)."""
        out: dict[int, Fields] = {}
        for offset, fields in self.batches:
            if as_of is None or offset < as_of:
                out[fields[0]] = fields
        return out
