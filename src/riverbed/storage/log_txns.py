"""Transactions in a partition log: the aborted-transaction index across segments.

Each segment's ``.txnindex`` (:mod:`riverbed.storage.txn_index`) holds the transactions
aborted by a marker in that segment. Kafka's rules, as here:

- a READ_COMMITTED fetch returns the aborted transactions overlapping the fetched range:
  the search starts at the segment holding the fetch offset and goes on through the later
  segments until an entry's last stable offset reaches the range's end (Kafka's
  ``collectAbortedTransactions``);
- recovery revalidates the segments from the recovery point on and empties their
  indexes; the producer state, once rebuilt, replays the batches from the first of them
  (with the transactions open at its base) and installs the entries again
  (:meth:`LogTxns.install_txn_index_entries`): "a transaction may span segments, so
  recovering the index requires the start of the transactions" (Kafka's LogLoader);
- truncation cuts the entries ending at or after the new end (``LogSegment.truncate_to``)
  and a deleted segment takes its index with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from riverbed.protocol.records import BatchHeader
from riverbed.storage.errors import CorruptRecordError
from riverbed.storage.log_base import LogBase
from riverbed.storage.producer_hook import TxnMarker, txn_marker_of
from riverbed.storage.txn_index import AbortedTxn

__all__ = ["LogTxns"]


class LogTxns(LogBase):
    """Aborted transactions of a log (mixed into PartitionLog)."""

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)``."""
        found: list[AbortedTxn] = []
        with self._lock:
            if not self._segments:
                return found
            i = self._segment_index_for(max(fetch_offset, self._segments[0].base_offset))
            for seg in self._segments[i:]:
                search = seg.txn_index.collect(fetch_offset, upper_bound)
                found += search.aborted
                if search.complete:
                    break
        return found

    def txn_batches_from(self, offset: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        """(header, marker) of every batch from the one holding ``offset`` to the log end;
        a transaction marker is decoded (an undecodable one reads as None)."""
        with self._lock:
            i = self._segment_index_for(offset)
            for seg in self._segments[i:]:
                try:
                    start = seg.translate_offset(offset)
                    if start is None:
                        continue
                    for b in seg.iter_headers(start.position):
                        h = b.header
                        marker = None
                        if h.is_control and h.is_transactional:
                            try:
                                marker = txn_marker_of(seg.pread(h.size, b.position), h)
                            except CorruptRecordError:
                                marker = None
                        yield h, marker
                finally:
                    self._release(seg)

    def stale_txn_index_base(self) -> int | None:
        """The base of the first segment whose txn index recovery emptied (None: all
        indexes are current)."""
        with self._lock:
            for seg in self._segments:
                if seg.txn_index_stale:
                    return seg.base_offset
        return None

    def install_txn_index_entries(self, entries: Iterable[AbortedTxn]) -> int:
        """Append the rebuilt ``entries`` (in marker order) to the stale segments holding
        their markers; every index is current afterwards. Returns the entries written."""
        written = 0
        with self._lock, self._failing_dir("txn index rebuild"):
            for e in entries:
                seg = self._segments[self._segment_index_for(e.last_offset)]
                if seg.txn_index_stale:
                    seg.txn_index.append(e)
                    written += 1
            for seg in self._segments:
                seg.txn_index_stale = False
        return written
