"""The bit-sliced index of sealed files' Bloom filters against testing each filter."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.producer.bloom import BloomFilter
from riverbed.producer.filter_index import SLICE_FILES, FilterIndex
from riverbed.producer.ledger import LedgerConfig, PidLedger


@dataclass(eq=False)
class File:
    offset: int


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.sampled_from([40, 100]), st.integers(0, 2**31)),
            st.tuples(st.just("remove"), st.integers(0, 50), st.just(0)),
        ),
        max_size=60,
    ),
    st.integers(0, 2**32),
)
def test_candidates_are_the_files_whose_filter_matches_newest_first(
    ops: list[tuple[str, int, int]], seed: int
) -> None:
    index = FilterIndex()
    model: dict[File, BloomFilter] = {}  # untouched copies of the filters
    rng = random.Random(seed)
    for n, (op, a, b) in enumerate(ops):
        if op == "add":
            f = BloomFilter.for_items(a, 0.05)  # two shapes
            for _ in range(a):
                f.add(random.Random(b).randrange(1000) + rng.randrange(1000))
            owner = File(offset=n)
            model[owner] = copy.deepcopy(f)
            index.add(owner, f)
        elif model:
            gone = list(model)[a % len(model)]
            del model[gone]
            index.remove(gone)
        for pid in range(0, 2000, 37):
            want = sorted(
                (o for o, f in model.items() if f.might_contain(pid)), key=lambda o: -o.offset
            )
            assert index.candidates(pid) == want, (seed, pid)
            for o, f in model.items():
                assert index.might_contain(o, pid) == f.might_contain(pid)
    sliced = sum(len(s.rows) for s in index._shapes.values())
    flat = sum(len(f.bits) for s in index._shapes.values() for f in s.flat.values())
    assert index.memory_bytes() == sliced + flat


def test_sliced_filters_cost_the_bitmaps_they_replace() -> None:
    index = FilterIndex()
    filters = [BloomFilter.for_items(1000, 0.01) for _ in range(SLICE_FILES * 3)]
    each = len(filters[0].bits)
    for i, f in enumerate(filters):
        f.add(i)
        index.add(File(i), f)
    assert index.memory_bytes() == each * SLICE_FILES * 3
    assert 5 in [o.offset for o in index.candidates(5)]  # no false negatives


def test_ledger_with_many_sealed_files_and_deletions(tmp_path: Path) -> None:
    led = PidLedger(tmp_path, LedgerConfig(fpp=0.01, file_bytes=10 + 46 * 50))
    led.open()
    want: dict[int, tuple[int, ...]] = {}
    for flush in range(1, 40):
        for pid in range(flush * 7, flush * 7 + 30):
            want[pid] = (pid, 0, flush, flush * 100, 0, 0, -1, -1)
            led.update(want[pid])  # type: ignore[arg-type]
        led.flush(flush * 100)
    assert led.stats().sealed_files > 2 * SLICE_FILES
    led.delete_before(1500, keep=lambda f: True)
    for pid, fields in want.items():
        assert led.read(pid) == fields
    assert led.read(10**9) is None
    led.close()
    again = PidLedger(tmp_path, LedgerConfig(fpp=0.01, file_bytes=10 + 46 * 50))
    again.open()
    for pid, fields in want.items():
        assert again.read(pid) == fields


def test_union_of_filters_is_the_filter_of_the_union() -> None:
    a, b, both = (BloomFilter.for_items(500, 0.01) for _ in range(3))
    for pid in range(300):
        (a if pid % 2 else b).add(pid)
        both.add(pid)
    u = BloomFilter.for_items(500, 0.01)
    u.union_all([a, b])
    assert u.bits == both.bits and u.set_bits == both.set_bits
