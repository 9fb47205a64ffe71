"""The aborted-transaction index (``.txnindex``): Kafka's 34-byte entries, search, truncation."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import overload

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.storage.txn_index import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    CorruptTxnIndexError,
    TransactionIndex,
    TxnSearch,
    collect_aborted,
    decode_entries,
    encode_entries,
)


def test_entry_layout_is_kafkas_34_bytes() -> None:
    e = AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    data = e.encode()
    assert ABORTED_TXN_SIZE == len(data) == 34
    # version int16, producerId int64, firstOffset int64, lastOffset int64, LSO int64
    assert struct.unpack(">hqqqq", data) == (0, 7, 10, 20, 21)


@given(
    st.lists(
        st.tuples(st.integers(0, 2**62), st.integers(0, 2**40), st.integers(1, 1000)),
        max_size=20,
    )
)
def test_round_trip(raw: list[tuple[int, int, int]]) -> None:
    entries, last = [], 0
    for pid, first, step in raw:
        last += step
        entries.append(AbortedTxn(pid, min(first, last), last, last + 1))
    assert decode_entries(encode_entries(entries)) == entries


def test_torn_tail_is_ignored_and_newer_version_refused() -> None:
    data = encode_entries([AbortedTxn(1, 0, 5, 6)])
    assert decode_entries(data + b"\x00" * 10) == [AbortedTxn(1, 0, 5, 6)]
    newer = struct.pack(">hqqqq", 1, 1, 0, 5, 6)
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(newer)


def test_collect_overlapping_and_complete_at_lso() -> None:
    entries = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 30, 31), AbortedTxn(3, 40, 50, 60)]
    s = collect_aborted(entries, 12, 35)
    # the first ends before the fetch offset; the second overlaps; its LSO 31 < 35 so the
    # search goes on; the third starts at 40 >= 35, but its LSO 60 >= 35 completes it
    assert s.aborted == [AbortedTxn(2, 5, 30, 31)]
    assert s.complete
    s2 = collect_aborted(entries[:2], 0, 100)
    assert s2.aborted == entries[:2] and not s2.complete


def _kafka_scan(entries: Sequence[AbortedTxn], fetch_offset: int, upper_bound: int) -> TxnSearch:
    """Kafka's collectAbortedTxns as written: every entry from the index's first."""
    found = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
            found.append(e)
        if e.last_stable_offset >= upper_bound:
            return TxnSearch(found, True)
    return TxnSearch(found, False)


@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 60), st.integers(0, 60)), max_size=30),
    st.integers(0, 900),
    st.integers(0, 900),
)
def test_collect_finds_what_kafkas_full_scan_finds(
    raw: list[tuple[int, int, int]], fetch_offset: int, upper_bound: int
) -> None:
    # entries as a partition writes them: increasing marker offsets, the first offset
    # before the marker, the LSO at most the marker's offset + 1
    entries, last = [], 0
    for step, back, lso_back in raw:
        last += step
        entries.append(AbortedTxn(1, max(0, last - back), last, max(0, last + 1 - lso_back)))
    assert collect_aborted(entries, fetch_offset, upper_bound) == _kafka_scan(
        entries, fetch_offset, upper_bound
    )


class _CountingEntries(Sequence[AbortedTxn]):
    """An entry list that counts the entries read."""

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self.entries, self.reads = entries, 0

    @overload
    def __getitem__(self, i: int) -> AbortedTxn: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[AbortedTxn]: ...
    def __getitem__(self, i: int | slice) -> AbortedTxn | Sequence[AbortedTxn]:
        self.reads += 1
        return self.entries[i]

    def __len__(self) -> int:
        return len(self.entries)


def test_collect_does_not_walk_the_entries_before_the_fetch_offset() -> None:
    # a marker every 2 offsets, every transaction aborted: 20,000 entries in the segment;
    # a fetch near its end must not read all of them (Kafka's scan did: ~5 ms per fetch)
    entries = _CountingEntries([AbortedTxn(1, 2 * i, 2 * i + 1, 2 * i + 2) for i in range(20_000)])
    s = collect_aborted(entries, 39_000, 39_100)
    assert s.aborted == [AbortedTxn(1, 2 * i, 2 * i + 1, 2 * i + 2) for i in range(19_500, 19_550)]
    assert s.complete
    assert entries.reads < 100, entries.reads


def test_file_append_truncate_reload_delete(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    idx = TransactionIndex(path, 0)
    assert not path.exists() and len(idx) == 0  # created on the first entry
    for i in range(1, 5):
        idx.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(9, 0, 45, 46))  # last offsets must increase
    idx.flush()
    assert path.stat().st_size == 4 * 34
    idx.truncate_to(35)  # entries ending at or after 35 go
    idx.close()
    again = TransactionIndex(path, 0)
    assert [e.producer_id for e in again.entries()] == [1, 2]
    assert path.stat().st_size == 2 * 34
    again.sanity_check()
    bad = TransactionIndex(path, 100)
    with pytest.raises(CorruptTxnIndexError):
        bad.sanity_check()  # an entry ends before the segment starts
    again.delete()
    assert not path.exists()
