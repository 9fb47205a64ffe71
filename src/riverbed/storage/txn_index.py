"""The aborted-transaction index: ``<base offset, 20 digits>.txnindex`` beside each segment.

Kafka's ``TransactionIndex``: "The transaction index maintains metadata about the aborted
transactions for each segment. This includes the start and end offsets for the aborted
transactions and the last stable offset (LSO) at the time of the abort. This index is
used to find the aborted transactions in the range of a given fetch request at the
READ_COMMITTED isolation level." An entry belongs to the segment holding the ABORT marker;
the transaction's first offset may lie in an earlier segment, so rebuilding the index
after a crash needs the open transactions as of the segment's base (the producer state).

File format (big endian, Kafka's ``AbortedTxn``, 34 bytes per entry, no header)::

    version int16 (0)  producerId int64  firstOffset int64  lastOffset int64
    lastStableOffset int64

Entries are appended in marker order, so their last offsets increase (Kafka refuses
anything else). ``lastStableOffset`` is the partition's LSO once the transaction ended:
"the first offset of the next incomplete transaction, or the marker's offset + 1". A
search (:func:`collect_aborted`) returns the entries overlapping ``[fetch offset, upper
bound)`` and stops as Kafka does once an entry's LSO reaches the upper bound: every
transaction that could overlap the range ended before that abort.

The file is created on the first entry (most segments never have one); its entries are
read into memory on first use (34 bytes each on disk, one small tuple in memory).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from riverbed.storage.file_io import OS_FILE_IO, FileIO

__all__ = [
    "ABORTED_TXN_SIZE",
    "ABORTED_TXN_VERSION",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "CorruptTxnIndexError",
    "TransactionIndex",
    "TxnSearch",
    "collect_aborted",
    "decode_entries",
    "encode_entries",
]

TXN_INDEX_SUFFIX: Final = ".txnindex"
ABORTED_TXN_VERSION: Final = 0
_ENTRY: Final = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE: Final = _ENTRY.size  # 34


class CorruptTxnIndexError(Exception):
    """A ``.txnindex`` whose entries do not parse (unknown version) or go backwards."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, first and last (the marker's) offset, and
    the LSO once it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            ABORTED_TXN_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


@dataclass(frozen=True, slots=True)
class TxnSearch:
    """Kafka's ``TxnIndexSearchResult``: the aborted transactions found, and whether the
    search is complete (no later segment's index can add one)."""

    aborted: list[AbortedTxn]
    complete: bool


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(e.encode() for e in entries)


def decode_entries(data: bytes | memoryview, name: str = "txnindex") -> list[AbortedTxn]:
    """Whole entries of ``data`` (a torn tail entry, which a crash may leave, is ignored);
    CorruptTxnIndexError for an unknown version or last offsets that do not increase."""
    usable = len(data) - len(data) % ABORTED_TXN_SIZE
    out: list[AbortedTxn] = []
    for version, pid, first, last, lso in _ENTRY.iter_unpack(memoryview(data)[:usable]):
        if version > ABORTED_TXN_VERSION:
            raise CorruptTxnIndexError(
                f"{name}: unexpected aborted transaction version {version}, current "
                f"version is {ABORTED_TXN_VERSION}"
            )
        if out and last <= out[-1].last_offset:
            raise CorruptTxnIndexError(
                f"{name}: last offset {last} does not follow {out[-1].last_offset}"
            )
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted(
    entries: Sequence[AbortedTxn], fetch_offset: int, upper_bound: int
) -> TxnSearch:
    """Kafka's ``collectAbortedTxns``: the entries with ``last_offset >= fetch_offset``
    and ``first_offset < upper_bound``; complete at the first entry whose LSO is at or
    past ``upper_bound``.

    The search starts at the first entry ending at or after ``fetch_offset`` (a bisection:
    last offsets increase), not at the index's first entry as Kafka's scan does: a consumer
    near the end of a segment with many aborted transactions (a marker every few records)
    would otherwise walk every entry of the segment on every fetch. The entries skipped
    change nothing: none ends at or after ``fetch_offset``, and none could complete the
    search, since an entry's LSO is at most its marker's offset + 1 (the first offset of a
    transaction still open at the abort, or the marker's offset + 1), so at most
    ``fetch_offset`` < ``upper_bound``. (With ``upper_bound <= fetch_offset``, an empty
    range, the whole index is searched as Kafka does.)"""
    found = []
    start = 0
    if upper_bound > fetch_offset:
        start = bisect.bisect_left(entries, fetch_offset, key=_last_offset)
    for i in range(start, len(entries)):
        e = entries[i]
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
            found.append(e)
        if e.last_stable_offset >= upper_bound:
            return TxnSearch(found, True)
    return TxnSearch(found, False)


def _last_offset(e: AbortedTxn) -> int:
    return e.last_offset


class TransactionIndex:
    """The ``.txnindex`` of one segment (Kafka's ``TransactionIndex``). Not thread-safe:
    the log's lock serializes every change (reads take a copy of the entry list)."""

    def __init__(self, path: Path, start_offset: int, io: FileIO = OS_FILE_IO) -> None:
        self.path = path
        self.start_offset = start_offset
        self.io = io
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self._fd: int | None = None
        self.sync_pending = False

    # ---- reading -------------------------------------------------------------------------

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = decode_entries(data, str(self.path))
        return self._entries

    def collect(self, fetch_offset: int, upper_bound: int) -> TxnSearch:
        return collect_aborted(self.entries(), fetch_offset, upper_bound)

    def sanity_check(self) -> None:
        """Kafka's sanityCheck: no entry ends before the segment starts."""
        for e in self.entries():
            if e.last_offset < self.start_offset:
                raise CorruptTxnIndexError(
                    f"{self.path}: last offset of aborted transaction {e} is less than "
                    f"start offset {self.start_offset}"
                )

    def __len__(self) -> int:
        return len(self.entries())

    # ---- writing -------------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries()
        if entries and entries[-1].last_offset >= entry.last_offset:
            raise ValueError(
                f"{self.path}: the last offset of appended transactions must increase "
                f"sequentially, but {entry.last_offset} is not greater than current last "
                f"offset {entries[-1].last_offset}"
            )
        fd = self._open()
        data = entry.encode()
        self.io.pwrite(fd, data, len(entries) * ABORTED_TXN_SIZE)
        entries.append(entry)
        self.sync_pending = True

    def _open(self) -> int:
        if self._fd is None:
            self._fd = self.io.open(self.path, os.O_RDWR | os.O_CREAT)
        return self._fd

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose transaction ends at or after ``offset``."""
        entries = self.entries()
        keep = 0
        while keep < len(entries) and entries[keep].last_offset < offset:
            keep += 1
        if keep == len(entries):
            return
        del entries[keep:]
        self.io.ftruncate(self._open(), keep * ABORTED_TXN_SIZE)
        self.sync_pending = True

    def reset(self) -> None:
        """No entries (recovery rebuilds them)."""
        self._entries = []
        if self._fd is not None or self.path.exists():
            self.io.ftruncate(self._open(), 0)
            self.sync_pending = True

    def replace_entries(self, entries: Iterable[AbortedTxn]) -> None:
        """Write exactly ``entries`` (a rebuild), in order."""
        self.reset()
        for e in entries:
            self.append(e)

    def flush(self) -> None:
        if self._fd is not None and self.sync_pending:
            self.io.fsync(self._fd)
        self.sync_pending = False

    def dup_fd(self) -> int | None:
        return self.io.dup(self._fd) if self._fd is not None else None

    def close(self) -> None:
        """Close the file and forget the entries (read again on next use: memory stays
        bounded by the segments in use). An index known empty stays known: a
        read_committed fetch searches every later segment's index, and most have none."""
        if self._fd is not None:
            if self.sync_pending:
                return  # an unsynced index stays open until its segment's flush
            self.io.close(self._fd)
            self._fd = None
        if self._entries:
            self._entries = None

    def discard(self) -> None:
        """Close without a sync (a crash, or the files go)."""
        self.sync_pending = False
        self.close()

    def delete(self) -> None:
        self.discard()
        self.io.unlink(self.path)
