"""A segment's memory of its last appended batches (issue 23, latency): reads at the log end
answer from it exactly what the offset index and the file would answer, without either."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.records import SimpleRecord, build_batch, parse_header
from riverbed.storage.recent_batches import RECENT_BATCHES_MAX, RecentBatches
from riverbed.storage.segment import LogSegment, SegmentBatch


def _segment(directory: Path, index_interval_bytes: int = 4096) -> LogSegment:
    return LogSegment.create(
        directory,
        0,
        index_interval_bytes=index_interval_bytes,
        max_index_bytes=1 << 20,
        created_ms=0,
    )


def _append(seg: LogSegment, records: int, value_bytes: int = 20) -> None:
    data = build_batch(
        [SimpleRecord(b"v" * value_bytes) for _ in range(records)], base_offset=seg.next_offset
    )
    seg.append(memoryview(data), parse_header(data))


def _answers(seg: LogSegment, offsets: range, limits: list[int]) -> list[object]:
    starts = [b.position for b in seg.iter_headers()]
    out: list[object] = [seg.translate_offset(o) for o in offsets]
    out += [seg.translate_offset(o, p) for o in offsets for p in starts[-3:]]
    out += [seg.whole_batches_end(s, lim) for s in starts for lim in limits]
    return out


def _without_memory(seg: LogSegment, offsets: range, limits: list[int]) -> list[object]:
    kept, seg.recent = seg.recent, RecentBatches()
    try:
        return _answers(seg, offsets, limits)
    finally:
        seg.recent = kept


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=3 * RECENT_BATCHES_MAX),
    cut=st.none() | st.integers(0, 200),
    more=st.lists(st.integers(1, 12), max_size=5),
    interval=st.sampled_from([64, 512, 4096]),
)
def test_reads_from_the_memory_equal_reads_through_the_index(
    sizes: list[int], cut: int | None, more: list[int], interval: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seg = _segment(Path(tmp), interval)
        for n in sizes:
            _append(seg, n)
        if cut is not None:
            seg.truncate_to(cut)  # forgets the memory; appends after it start a new one
        for n in more:
            _append(seg, n)
        offsets = range(seg.next_offset + 2)
        limits = [0, 1, 100, 333, 1000, seg.size - 1, seg.size, seg.size + 5]
        assert _answers(seg, offsets, limits) == _without_memory(seg, offsets, limits)
        assert len(seg.recent.positions) <= RECENT_BATCHES_MAX
        seg.close_files()


def test_a_read_at_the_log_end_reads_no_header_from_the_file(tmp_path: Path) -> None:
    """A follower's fetch from its log end (a batch boundary near the end): the batch
    there, the last whole batch within the budget and the header after it come from
    memory. Through the index each took a header pread."""
    seg = _segment(tmp_path)
    for _ in range(10):
        _append(seg, 5)
    batches = list(seg.iter_headers())

    def no_pread(size: int, position: int) -> bytes:
        raise AssertionError(f"pread of {size} bytes at {position}")

    seg.pread = no_pread  # type: ignore[method-assign]
    at = batches[-4]
    assert seg.translate_offset(at.header.base_offset) == SegmentBatch(at.position, at.header)
    assert seg.translate_offset(seg.next_offset) is None
    end = seg.whole_batches_end(at.position, batches[-2].position + 3)
    assert end == batches[-2].position
    assert seg.read_header(end) == batches[-2].header


def test_the_memory_is_bounded_and_forgotten_on_roll(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    for _ in range(3 * RECENT_BATCHES_MAX):
        _append(seg, 1)
    assert RECENT_BATCHES_MAX // 2 <= len(seg.recent.positions) <= RECENT_BATCHES_MAX
    last = list(seg.iter_headers())[-1]
    assert seg.recent.positions[-1] == last.position
    seg.on_become_inactive()
    assert seg.recent.positions == []
