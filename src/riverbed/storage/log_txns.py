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

The indexes are the segments', so the local log (:mod:`riverbed.storage.local_log`)
searches and writes them; this layer takes the unified log's lock first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from riverbed.protocol.records import BatchHeader
from riverbed.storage.log_base import LogBase
from riverbed.storage.producer_hook import TxnMarker
from riverbed.storage.txn_index import AbortedTxn

__all__ = ["LogTxns"]


class LogTxns(LogBase):
    """Aborted transactions of a log (mixed into PartitionLog)."""

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)``."""
        with self._lock:
            return self._local.aborted_transactions(fetch_offset, upper_bound)

    def txn_batches_from(self, offset: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        """(header, marker) of every batch from the one holding ``offset`` to the log end;
        a transaction marker is decoded (an undecodable one reads as None)."""
        with self._lock:
            yield from self._local.txn_batches_from(offset)

    def stale_txn_index_base(self) -> int | None:
        """The base of the first segment whose txn index recovery emptied (None: all
        indexes are current)."""
        with self._lock:
            return self._local.stale_txn_index_base()

    def install_txn_index_entries(self, entries: Iterable[AbortedTxn]) -> int:
        """Append the rebuilt ``entries`` (in marker order) to the stale segments holding
        their markers; every index is current afterwards. Returns the entries written.

        ``entries`` may be computed from :meth:`txn_batches_from` as they are consumed:
        each is taken before the local log's lock (the order is unified -> local)."""
        written = 0
        with self._lock, self._failing_dir("txn index rebuild"):
            self._local.reset_stale_txn_indexes()
            for e in entries:
                written += self._local.append_txn_index(e, stale_only=True)
            self._local.txn_indexes_current()
        return written
