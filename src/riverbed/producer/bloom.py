"""Bloom filters over producer ids, and their ``.bloom`` file format.

Shape (Apache commons-collections' ``Shape.fromNP``): for ``n`` expected items at
false-positive probability ``p``, ``m = ceil(-n ln p / ln(2)^2)`` bits and
``k = max(1, round(m / n * ln 2))`` hash functions.

Hashing (commons-collections' ``EnhancedDoubleHasher`` over ``MurmurHash3.hash128x64``,
seed 0): the producer id as 8 big-endian bytes is hashed with MurmurHash3 x64 128 (the
``mmh3`` library); its two unsigned 64-bit halves are the initial value and the increment
of enhanced double hashing: ``index_0 = initial mod m``, then
``index_i = index_{i-1} - inc_{i-1} (mod m)``, ``inc_i = inc_{i-1} - i (mod m)``.

``.bloom`` file (big-endian, the seed's layout): int32 number of bits, int32 number of
hash functions, then ``ceil(m / 64)`` int64 words of the bitmap (commons-collections'
``BitMap``: bit ``i`` is bit ``i mod 64`` of word ``i / 64``).

``estimate_n`` is commons-collections' ``estimateN``: ``-(m / k) ln(1 - X / m)`` for X set
bits; a filter is *full* when it reaches ``estimate_max_n`` (the item count at which the
configured false-positive probability is reached: ``-(m / k) ln(1 - p^(1/k))``).
"""

from __future__ import annotations

import math
import struct
from typing import Final

import mmh3

__all__ = ["BloomFilter", "BloomFormatError"]

_HEAD: Final = struct.Struct(">ii")
_PID: Final = struct.Struct(">q")
#: Largest filter a .bloom file may declare (bits): 2^31 - 1, an int32.
BITS_MAX: Final = 2**31 - 1


class BloomFormatError(Exception):
    pass


def pid_hash(pid: int) -> tuple[int, int]:
    """The two unsigned 64-bit halves of MurmurHash3 x64 128 of the id (8 bytes, BE)."""
    h: tuple[int, int] = mmh3.mmh3_x64_128_utupledigest(_PID.pack(pid), 0)
    return h


def _indices(pid: int, m: int, k: int) -> list[int]:
    return indices_of(pid_hash(pid), m, k)


def indices_of(h: tuple[int, int], m: int, k: int) -> list[int]:
    """Enhanced double hashing of a :func:`pid_hash` for a filter of ``m`` bits, ``k``
    hash functions (computed once per shape when many filters are probed)."""
    initial, increment = h
    index = initial % m
    out = [index]
    inc = increment % m
    for i in range(1, k):
        index -= inc
        if index < 0:
            index += m
        out.append(index)
        inc -= i
        if inc < 0:
            inc += m
    return out


class BloomFilter:
    """A bitmap of ``num_bits`` with ``num_hashes`` hash functions (not thread-safe:
    the ledger serializes access)."""

    __slots__ = ("bits", "fpp", "num_bits", "num_hashes", "set_bits")

    def __init__(self, num_bits: int, num_hashes: int, fpp: float = 0.01) -> None:
        if not 0 < num_bits <= BITS_MAX or num_hashes < 1:
            raise ValueError(f"bad Bloom filter shape: {num_bits} bits, {num_hashes} hashes")
        self.num_bits = num_bits
        self.num_hashes = num_hashes
        self.fpp = fpp
        self.bits = bytearray((num_bits + 63) // 64 * 8)  # little-endian words in memory
        self.set_bits = 0

    @classmethod
    def for_items(cls, n: int, fpp: float) -> BloomFilter:
        if n < 1 or not 0 < fpp < 1:
            raise ValueError(f"bad Bloom filter parameters n={n} p={fpp}")
        m = math.ceil(-n * math.log(fpp) / (math.log(2) ** 2))
        k = max(1, round(m / n * math.log(2)))
        return cls(min(m, BITS_MAX), k, fpp)

    def add(self, pid: int) -> None:
        bits = self.bits
        for i in _indices(pid, self.num_bits, self.num_hashes):
            byte, mask = i >> 3, 1 << (i & 7)
            if not bits[byte] & mask:
                bits[byte] |= mask
                self.set_bits += 1

    def might_contain(self, pid: int) -> bool:
        return self.contains_indices(_indices(pid, self.num_bits, self.num_hashes))

    def contains_indices(self, indices: list[int]) -> bool:
        bits = self.bits
        for i in indices:  # noqa: SIM110 - a plain loop: no generator per probe (hot)
            if not bits[i >> 3] & (1 << (i & 7)):
                return False
        return True

    def union_all(self, others: list[BloomFilter]) -> None:
        """Become the union of this filter and ``others`` (all of its shape): the filter
        of the union of their items."""
        acc = int.from_bytes(self.bits, "little")
        for o in others:
            if o.shape != self.shape:
                raise ValueError(f"union of Bloom filters of shapes {o.shape} and {self.shape}")
            acc |= int.from_bytes(o.bits, "little")
        self.bits = bytearray(acc.to_bytes(len(self.bits), "little"))
        self.set_bits = acc.bit_count()

    @property
    def shape(self) -> tuple[int, int]:
        return self.num_bits, self.num_hashes

    def estimate_n(self) -> float:
        m, x = self.num_bits, self.set_bits
        if x >= m:
            return math.inf
        return -(m / self.num_hashes) * math.log1p(-x / m)

    def estimate_max_n(self) -> float:
        m, k = self.num_bits, self.num_hashes
        return -(m / k) * math.log1p(-(self.fpp ** (1 / k)))

    def is_full(self) -> bool:
        return self.estimate_n() >= self.estimate_max_n()

    @property
    def fill_ratio(self) -> float:
        return self.set_bits / self.num_bits

    def memory_bytes(self) -> int:
        return len(self.bits)

    # ---- the .bloom file ------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        words = len(self.bits) // 8
        le = struct.unpack(f"<{words}Q", self.bits)
        return _HEAD.pack(self.num_bits, self.num_hashes) + struct.pack(f">{words}Q", *le)

    @classmethod
    def from_bytes(cls, data: bytes, fpp: float = 0.01) -> BloomFilter:
        if len(data) < _HEAD.size:
            raise BloomFormatError(f".bloom file of {len(data)} bytes")
        m, k = _HEAD.unpack_from(data)
        if not 0 < m <= BITS_MAX or k < 1:
            raise BloomFormatError(f".bloom file declares {m} bits and {k} hashes")
        words = (m + 63) // 64
        if len(data) != _HEAD.size + words * 8:
            raise BloomFormatError(f".bloom file of {len(data)} bytes for {m} bits")
        f = cls(m, k, fpp)
        be = struct.unpack_from(f">{words}Q", data, _HEAD.size)
        f.bits = bytearray(struct.pack(f"<{words}Q", *be))
        f.set_bits = int.from_bytes(f.bits, "little").bit_count()
        return f
