"""The remote index file formats: round trips, corruption, rotation, lookups."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.tiered.remote_indexes import RemoteIndexes
from riverbed.tiered.remote_log_index import (
    CorruptRemoteIndexError,
    RemoteLogIndexEntry,
    RemoteLogIndexFile,
    decode_entries,
    decode_entry,
    encode_entries,
)

SEG = "00000000000000000000-0123456789abcdef0123456789abcdef"


def _entry(
    first: int, last: int, ts: int = 1000, seg: str = SEG, pos: int = 0
) -> RemoteLogIndexEntry:
    return RemoteLogIndexEntry(
        first, last, ts, ts + (last - first), 100 * (last - first + 1), pos, seg
    )


def test_entry_layout_is_the_seeds() -> None:
    e = _entry(5, 9, ts=77)
    raw = e.encode()
    magic, length, crc = struct.unpack_from(">hhI", raw)
    assert (magic, length) == (0, len(raw))
    assert crc == crc32c.crc32c(raw[8:])
    first, last, fts, lts, dlen, rlen = struct.unpack_from(">qqqqih", raw, 8)
    assert (first, last, fts, lts, dlen) == (5, 9, 77, 81, 500)
    rdi = raw[8 + 38 :]
    assert rlen == len(rdi) and struct.unpack_from(">q", rdi)[0] == 0 and rdi[8:] == SEG.encode()


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**40),
            st.integers(0, 10**6),
            st.integers(-1, 2**41),
            st.integers(0, 2**31),
        ),
        max_size=20,
    )
)
def test_entries_round_trip(items: list[tuple[int, int, int, int]]) -> None:
    entries = [
        RemoteLogIndexEntry(first, first + span, ts, ts + span, span + 1, pos, SEG)
        for first, span, ts, pos in items
    ]
    assert decode_entries(encode_entries(entries)) == entries


def test_corruption_is_detected() -> None:
    raw = bytearray(_entry(1, 2).encode())
    for i in (0, 1, 9, 30, len(raw) - 1):  # magic, length, body, rdi
        bad = bytearray(raw)
        bad[i] ^= 0x40
        with pytest.raises(CorruptRemoteIndexError):
            decode_entry(bytes(bad))
    with pytest.raises(CorruptRemoteIndexError):
        decode_entry(bytes(raw[:-1]))


def test_file_drops_a_torn_tail(tmp_path: Path) -> None:
    f = RemoteLogIndexFile.create(tmp_path, 0)
    f.append([_entry(0, 9), _entry(10, 19, pos=1000)])
    good = f.path.stat().st_size
    with open(f.path, "ab") as out:
        out.write(_entry(20, 29).encode()[:-3])
    again = RemoteLogIndexFile(f.path)
    assert again.load() > 0
    assert [e.first_offset for e in again.entries] == [0, 10]
    assert f.path.stat().st_size == good
    assert again.entry_at(again.positions[1]).first_offset == 10


def test_indexes_lookup_and_rotation(tmp_path: Path) -> None:
    idx = RemoteIndexes(tmp_path, 0, file_bytes_max=150, roll_ms=10_000)
    seg = [f"{b:020d}-{'a' * 32}" for b in (0, 100, 200)]
    idx.add_segment([_entry(0, 49, 100, seg[0]), _entry(50, 99, 150, seg[0], 5000)], 0)
    idx.add_segment([_entry(100, 199, 200, seg[1])], 1)  # file over 150 bytes: new group
    idx.add_segment([_entry(200, 299, 90, seg[2])], 20_000)  # old timestamps, new group (age)
    assert [g.base_offset for g in idx.groups] == [0, 100, 200]
    assert sorted(p.name for p in tmp_path.iterdir())[:3] == [
        "00000000000000000000.remotelogindex",
        "00000000000000000000.remoteoffsetindex",
        "00000000000000000000.remotetimeindex",
    ]
    assert [e.first_offset for e in idx.entries_from(60)] == [50, 100, 200]
    assert [e.first_offset for e in idx.entries_from(150)] == [100, 200]
    assert next(iter(idx.entries_from(0))).first_offset == 0
    found = idx.entry_for_timestamp(160)
    assert found is not None and found.first_offset == 50
    found = idx.entry_for_timestamp(240)
    assert found is not None and found.first_offset == 100
    assert idx.entry_for_timestamp(10**9) is None
    assert idx.highest_offset == 299
    # reload: same content, derived files verified
    again = RemoteIndexes(tmp_path, 0)
    assert [e.first_offset for e in again.entries_from(0)] == [0, 50, 100, 200]
    # a torn offset index is rebuilt from the log index
    path = tmp_path / "00000000000000000000.remoteoffsetindex"
    path.write_bytes(path.read_bytes()[:-3])
    again = RemoteIndexes(tmp_path, 0)
    assert len(again.groups[0].offset_index.entries) == 2
    assert path.stat().st_size == 16
    # remote retention deleted the first two segments: their groups go
    assert again.retain_segments({seg[2]}) == 2
    assert [g.base_offset for g in again.groups] == [200]
    assert not (tmp_path / "00000000000000000000.remotelogindex").exists()
