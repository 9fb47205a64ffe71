"""The exactly-once sink's client: Kafka's default partitioner for keyed records, and its
record batch encoder against riverbed's general one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.records import SimpleRecord, build_batch, iter_records
from riverbed.spark.exactly_once import build_rows
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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=50),
            st.none() | st.binary(max_size=50) | st.just(b"v" * 40_000),  # past the table
        ),
        min_size=1,
        max_size=40,
    )
)
def test_the_plain_record_encoder_is_byte_for_byte_the_general_one(
    rows: list[tuple[bytes | None, bytes | None]],
) -> None:
    buffered = [(k, v, 0, None) for k, v in rows]
    fast = build_rows(buffered, 7, 3, 11, 1_700_000_000_000)
    general = build_batch(
        [SimpleRecord(v, k) for k, v in rows],
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        now_ms=1_700_000_000_000,
        is_transactional=True,
    )
    assert fast == general


def test_rows_with_headers_or_timestamps_take_the_general_builder() -> None:
    rows = [(b"k", b"v", 1_600_000_000_000, [("h", b"1")]), (None, b"w", 0, None)]
    batch = build_rows(rows, 7, 3, 0, 1_700_000_000_000)
    records = list(iter_records(batch))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (b"k", b"v", 1_600_000_000_000, [("h", b"1")]),
        (None, b"w", 1_700_000_000_000, []),
    ]
