"""Transaction-aware compaction: which transactional batches and markers a cleaning drops
(Kafka's ``CleanedTransactionMetadata``).

The cleaner cleans only below the last stable offset, so every transaction it sees has
ended; the aborted ones are known from the ``.txnindex`` entries overlapping the range
(`PartitionLog.aborted_transactions`). Walking the batches in offset order:

- a transactional batch of an aborted transaction is removed whole (never mapped: its
  keys do not supersede anything), except a producer's last batch, kept empty;
- a committed transaction's records are compacted like any others;
- an ABORT marker is kept while this cleaning still removed batches of its transaction
  (its ``.txnindex`` entry moves with it into the cleaned segment); a COMMIT marker while
  this cleaning saw batches of its transaction; otherwise the marker is "discardable":
  the first such cleaning stamps its batch's delete horizon (``delete.retention.ms``
  ahead, KIP-534) and the first cleaning after the horizon removes it (Kafka's two
  passes: a consumer that read the transaction's records has that long to read the
  marker too);
- a control batch without records (emptied before) is discardable.

So a transaction's records all go or all stay by its outcome, never split.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from riverbed.protocol.records import BatchHeader
from riverbed.storage.producer_hook import TxnMarker
from riverbed.storage.txn_index import AbortedTxn

__all__ = ["CleanerTxns"]


@dataclass
class _Aborting:
    entry: AbortedTxn
    #: last offset of a batch of the transaction this cleaning saw (None: none)
    last_observed: int | None = None


@dataclass
class CleanerTxns:
    """The transactions a cleaning walks through (module docstring)."""

    _aborted: list[tuple[int, int, AbortedTxn]] = field(default_factory=list)  # heap
    _ongoing_aborted: dict[int, _Aborting] = field(default_factory=dict)
    _ongoing_committed: set[int] = field(default_factory=set)
    #: the aborted transactions whose ABORT marker this cleaning kept, in marker order
    retained_aborts: list[AbortedTxn] = field(default_factory=list)

    @classmethod
    def of(cls, aborted: Iterable[AbortedTxn]) -> CleanerTxns:
        txns = cls()
        txns.add_aborted(aborted)
        return txns

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        for e in aborted:
            heapq.heappush(self._aborted, (e.first_offset, e.last_offset, e))

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, _, e = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(e.producer_id, _Aborting(e))

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (remove it)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        aborting = self._ongoing_aborted.get(h.producer_id)
        if aborting is not None:
            aborting.last_observed = h.last_offset
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control(self, h: BatchHeader, marker: TxnMarker | None) -> bool:
        """A control batch: True when it may be discarded (see the module docstring)."""
        self._consume_up_to(h.last_offset)
        if marker is None:
            return h.records_count == 0  # emptied before; other control records stay
        pid = h.producer_id
        if marker.commit:
            seen = pid in self._ongoing_committed
            self._ongoing_committed.discard(pid)
            return not seen
        aborting = self._ongoing_aborted.pop(pid, None)
        if aborting is not None and aborting.last_observed is not None:
            self.retained_aborts.append(aborting.entry)  # its records are removed now
            return False
        return True
