"""The sealed files' Bloom filters, bit-sliced so a read tests all of them at once.

A cache miss used to test each sealed file's filter in turn (~106 files at 10 million
producer ids: 70-100 µs of Python per read). Here the filters of one shape (bits ``m``,
hash functions ``k``; the ledger gives every flush file the same shape when it fits) are
stored transposed: ``rows`` holds, for every bit position ``i``, one bit per file
(``cols`` bytes: files ``8p .. 8p + 7`` in byte ``p``), so a read takes the ``k`` rows
its one hash selects (:func:`riverbed.producer.bloom.indices_of`), ANDs them as integers,
and the set bits are the files that may hold the producer id: ``k`` slices instead of a
loop over files.

Memory stays what the filters take: ``rows`` is ``m x cols`` bytes, the bitmaps of
``8 x cols`` files, and each file's own bitmap is dropped once its column is written. So
that a partition with few files does not pay for 8 columns, files stay *flat* (their own
bitmap, tested one by one) until 8 of a shape are waiting; then a byte column is added
and they move into it. A deleted file's column is cleared and reused by the next file.

Every operation runs under the ledger's lock; the column writes are C-speed
(``bytes.translate``, extended slices, big-integer ORs: a few ms per file of 4 MiB).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

from riverbed.producer.bloom import BloomFilter, indices_of, pid_hash

__all__ = ["SLICE_FILES", "FilterIndex"]

#: Files of one shape that wait flat before a byte column of ``rows`` is added for them.
SLICE_FILES: Final = 8
# _SPREAD[t][b]: a filter byte -> (1 << b) when its bit t is set (file bit b of a row)
_SPREAD: Final = [
    [bytes((1 << b) if x >> t & 1 else 0 for x in range(256)) for b in range(8)] for t in range(8)
]
_CLEAR: Final = [bytes(x & ~(1 << b) for x in range(256)) for b in range(8)]


class Owner(Protocol):
    offset: int


@dataclass(slots=True)
class _Shape:
    num_bits: int
    num_hashes: int
    row_count: int  # the filters' bitmap length in bits (m rounded up to 64)
    rows: bytearray = field(default_factory=bytearray)
    cols: int = 0  # bytes per row
    slots: list[Owner | None] = field(default_factory=list)  # column -> file
    flat: dict[Owner, BloomFilter] = field(default_factory=dict)

    def place(self, owner: Owner, filt: BloomFilter, col: int) -> None:
        p, b = divmod(col, 8)
        spread = bytearray(self.row_count)
        bits = bytes(filt.bits)
        for t in range(8):
            spread[t::8] = bits.translate(_SPREAD[t][b])
        plane = int.from_bytes(self.rows[p :: self.cols], "little")
        plane |= int.from_bytes(spread, "little")
        self.rows[p :: self.cols] = plane.to_bytes(self.row_count, "little")
        self.slots[col] = owner
        filt.bits = bytearray()  # the column holds it now

    def grow(self) -> None:
        """One more byte column (8 file slots): rows re-laid out, C-speed."""
        old, cols = self.rows, self.cols
        self.rows = bytearray(self.row_count * (cols + 1))
        for p in range(cols):
            self.rows[p :: cols + 1] = old[p::cols]
        self.cols = cols + 1
        self.slots.extend([None] * 8)

    def clear_col(self, col: int) -> None:
        p, b = divmod(col, 8)
        self.rows[p :: self.cols] = self.rows[p :: self.cols].translate(_CLEAR[b])
        self.slots[col] = None

    def sliced_matches(self, indices: list[int]) -> Iterator[Owner]:
        if not self.cols:
            return
        rows, cols = self.rows, self.cols
        hit = -1
        for i in indices:
            hit &= int.from_bytes(rows[i * cols : i * cols + cols], "little")
            if not hit:
                return
        while hit:
            low = hit & -hit
            owner = self.slots[low.bit_length() - 1]
            if owner is not None:
                yield owner
            hit ^= low


class FilterIndex:
    """The (filter, sealed file) pairs of a ledger; files are any objects with an
    ``offset`` (newest = highest)."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[int, int], _Shape] = {}
        self._where: dict[Owner, tuple[_Shape, int | None]] = {}  # column, None: flat

    def add(self, owner: Owner, filt: BloomFilter) -> None:
        key = (filt.num_bits, filt.num_hashes)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape(*key, row_count=len(filt.bits) * 8)
        if None in shape.slots:
            col = shape.slots.index(None)
            shape.place(owner, filt, col)
            self._where[owner] = (shape, col)
            return
        shape.flat[owner] = filt
        self._where[owner] = (shape, None)
        if len(shape.flat) >= SLICE_FILES:
            shape.grow()
            for waiting, f in list(shape.flat.items()):
                col = shape.slots.index(None)
                shape.place(waiting, f, col)
                self._where[waiting] = (shape, col)
            shape.flat.clear()

    def remove(self, owner: Owner) -> None:
        found = self._where.pop(owner, None)
        if found is None:
            return
        shape, col = found
        if col is None:
            del shape.flat[owner]
        else:
            shape.clear_col(col)
        if not shape.flat and all(s is None for s in shape.slots):
            del self._shapes[(shape.num_bits, shape.num_hashes)]

    def clear(self) -> None:
        self._shapes.clear()
        self._where.clear()

    def candidates(self, pid: int) -> list[Owner]:
        """The files whose filter may contain ``pid``, newest first (one hash)."""
        h = pid_hash(pid)
        out: list[Owner] = []
        for shape in self._shapes.values():
            indices = indices_of(h, shape.num_bits, shape.num_hashes)
            out.extend(shape.sliced_matches(indices))
            for owner, filt in shape.flat.items():
                if filt.contains_indices(indices):
                    out.append(owner)
        out.sort(key=lambda o: -o.offset)
        return out

    def might_contain(self, owner: Owner, pid: int) -> bool:
        found = self._where.get(owner)
        if found is None:
            return False
        shape, col = found
        indices = indices_of(pid_hash(pid), shape.num_bits, shape.num_hashes)
        if col is None:
            return shape.flat[owner].contains_indices(indices)
        return owner in shape.sliced_matches(indices)

    def memory_bytes(self) -> int:
        return sum(
            len(s.rows) + sum(f.memory_bytes() for f in s.flat.values())
            for s in self._shapes.values()
        )
