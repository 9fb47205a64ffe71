"""Property tests: the log's epoch lookup against a brute-force definition, and entries
through record batches and back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.raft.log import MemoryLog
from riverbed.raft.messages import Entry, EntryKind, OffsetAndEpoch
from riverbed.raft.role_transitions import leader_change_value
from riverbed.raft.wire import entries_to_records, records_to_entries

epoch_steps = st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=40)


def build(start: int, start_epoch: int, steps: list[int]) -> MemoryLog:
    log = MemoryLog(start, start_epoch)
    epoch = start_epoch
    for i, step in enumerate(steps):
        epoch += step
        log.append([Entry(start + i, epoch, b"x")])
    return log


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=50),
    start_epoch=st.integers(min_value=0, max_value=5),
    steps=epoch_steps,
    query=st.integers(min_value=0, max_value=140),
)
def test_end_offset_for_epoch_matches_definition(
    start: int, start_epoch: int, steps: list[int], query: int
) -> None:
    log = build(start, start_epoch, steps)
    entries = log.entries()
    # definition: the largest epoch <= query among the entries (or the snapshot's epoch
    # for the log start), and the offset where that epoch ends
    candidates = [e.epoch for e in entries if e.epoch <= query]
    if candidates:
        epoch = max(candidates)
        end = max(e.offset for e in entries if e.epoch == epoch) + 1
        expected = OffsetAndEpoch(end, epoch)
    elif start_epoch <= query:
        expected = OffsetAndEpoch(start, start_epoch)
    else:
        expected = OffsetAndEpoch(-1, -1)
    assert log.end_offset_for_epoch(query) == expected


@settings(max_examples=100, deadline=None)
@given(
    base=st.integers(min_value=0, max_value=10**12),
    epochs=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=30),
    kinds=st.lists(st.booleans(), min_size=30, max_size=30),
    values=st.lists(st.binary(min_size=0, max_size=50), min_size=30, max_size=30),
)
def test_entries_roundtrip_through_record_batches(
    base: int, epochs: list[int], kinds: list[bool], values: list[bytes]
) -> None:
    out: list[Entry] = []
    epoch = 0
    for i, step in enumerate(epochs):
        epoch += step
        if kinds[i]:
            out.append(
                Entry(base + i, epoch, leader_change_value(1, [1, 2]), EntryKind.LEADER_CHANGE)
            )
        else:
            out.append(Entry(base + i, epoch, values[i]))
    assert records_to_entries(entries_to_records(out)) == tuple(out)
