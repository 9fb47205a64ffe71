"""The exactly-once sink's client: Kafka's default partitioner for keyed records."""

from __future__ import annotations

import pytest

from riverbed.spark.txn_client import murmur2, murmur2_partition


@pytest.mark.parametrize(
    ("key", "expected"),
    [  # Kafka's UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
    ],
)
def test_murmur2_is_kafkas(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_partition_is_the_positive_hash_modulo_the_partitions() -> None:
    assert murmur2_partition(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert {murmur2_partition(b"k%d" % i, 3) for i in range(50)} == {0, 1, 2}
