"""``__transaction_state`` formats: Kafka's bytes, checked by hand, and round trips."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.coordinator import records as group_records
from riverbed.protocol.exceptions import ProtocolError
from riverbed.transaction.records import (
    TxnMetadata,
    TxnRecord,
    TxnState,
    as_recorded,
    key_bytes,
    parse_record,
    partition_for,
    value_bytes,
)

S = TxnState


def _ongoing(**kw: object) -> TxnMetadata:
    base: dict[str, object] = dict(
        transactional_id="txn-1",
        producer_id=1000,
        producer_epoch=3,
        timeout_ms=60_000,
        state=S.ONGOING,
        partitions=frozenset({("t", 0), ("t", 2)}),
        start_ms=1500,
        last_update_ms=2000,
    )
    base.update(kw)
    return TxnMetadata(**base)  # type: ignore[arg-type]


def test_key_v0_bytes() -> None:
    # int16 version 0, then TransactionalId as a (non-compact) string
    assert key_bytes("txn-1") == bytes.fromhex("0000 0005") + b"txn-1"


def test_value_v0_bytes() -> None:
    expected = bytes.fromhex(
        "0000"  # version 0
        "00000000000003e8"  # ProducerId 1000
        "0003"  # ProducerEpoch
        "0000ea60"  # TransactionTimeoutMs 60000
        "01"  # TransactionStatus Ongoing
        "00000001 0001 74 00000002 00000000 00000002"  # [t: [0, 2]]
        "00000000000007d0"  # LastUpdate 2000
        "00000000000005dc"  # Start 1500
    )
    assert value_bytes(_ongoing(), transaction_version_level=0) == expected


def test_value_v1_bytes_with_tagged_fields() -> None:
    meta = _ongoing(next_producer_id=2000, client_transaction_version=2)
    expected = bytes.fromhex(
        "0001"  # version 1 (flexible)
        "00000000000003e8 0003 0000ea60 01"
        "02 02 74 03 00000000 00000002 00"  # compact [t: [0, 2]], no tags
        "00000000000007d0 00000000000005dc"
        "02"  # two tagged fields (PreviousProducerId -1 is the default: omitted)
        "01 08 00000000000007d0"  # tag 1 NextProducerId 2000
        "02 02 0002"  # tag 2 ClientTransactionVersion 2
    )
    assert value_bytes(meta, transaction_version_level=2) == expected


def test_empty_state_writes_null_partitions() -> None:
    meta = _ongoing(state=S.EMPTY, partitions=frozenset(), start_ms=-1)
    v0 = value_bytes(meta, 0)
    assert v0[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"
    v1 = value_bytes(meta, 1)
    assert v1[2 + 8 + 2 + 4 + 1] == 0  # compact nullable array: null
    with pytest.raises(ValueError):
        value_bytes(_ongoing(state=S.EMPTY), 1)


def test_tombstone_and_unknown_key_version() -> None:
    assert parse_record(key_bytes("a"), None) == TxnRecord("a", None)
    assert parse_record(b"\x00\x01\x00\x01a", b"") is None
    with pytest.raises(ProtocolError):
        parse_record(key_bytes("a"), b"\x00\x02" + value_bytes(_ongoing(), 1)[2:])
    bad_state = bytearray(value_bytes(_ongoing(), 0))
    bad_state[2 + 8 + 2 + 4] = 9
    with pytest.raises(ProtocolError):
        parse_record(key_bytes("a"), bytes(bad_state))


def test_v0_loses_the_tagged_fields_as_kafka_does() -> None:
    meta = _ongoing(previous_producer_id=7, next_producer_id=8, client_transaction_version=2)
    back = parse_record(key_bytes("txn-1"), value_bytes(meta, 0))
    assert back is not None and back.value is not None
    assert (back.value.previous_producer_id, back.value.next_producer_id) == (-1, -1)
    assert back.value.client_transaction_version == 0


def test_partition_is_the_group_coordinators_hash() -> None:
    assert partition_for is group_records.partition_for
    assert partition_for("a", 50) == 97 % 50  # "a".hashCode() == 97
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0


_topics = st.text(alphabet="abcxyz-._", min_size=1, max_size=8)
_parts = st.frozensets(st.tuples(_topics, st.integers(0, 2**31 - 1)), max_size=6)


@given(
    tid=st.text(max_size=20),
    state=st.sampled_from(list(S)),
    parts=_parts,
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 2**15 - 1),
    prev=st.integers(-1, 2**40),
    nxt=st.integers(-1, 2**40),
    tv=st.integers(0, 2),
    level=st.integers(1, 2),
)
def test_round_trip_v1(
    tid: str,
    state: TxnState,
    parts: frozenset[tuple[str, int]],
    pid: int,
    epoch: int,
    prev: int,
    nxt: int,
    tv: int,
    level: int,
) -> None:
    meta = TxnMetadata(
        transactional_id=tid,
        producer_id=pid,
        producer_epoch=epoch,
        timeout_ms=60_000,
        state=state,
        partitions=frozenset() if state is S.EMPTY else parts,
        start_ms=-1,
        last_update_ms=123,
        previous_producer_id=prev,
        next_producer_id=nxt,
        client_transaction_version=tv,
        last_producer_epoch=5,
    )
    assert parse_record(key_bytes(tid), value_bytes(meta, level)) == TxnRecord(
        tid, meta.persisted()
    )


@given(
    tid=st.text(max_size=20),
    state=st.sampled_from(list(S)),
    parts=_parts,
    pid=st.integers(-1, 2**63 - 1),
    epoch=st.integers(-1, 2**15 - 1),
    ids=st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**40)),
    next_epoch=st.integers(-1, 2**15 - 1),
    tv=st.integers(0, 2),
    level=st.integers(0, 2),
    last_epoch=st.integers(-1, 2**15 - 1),
)
def test_as_recorded_is_what_a_replay_of_the_bytes_gives(
    tid: str,
    state: TxnState,
    parts: frozenset[tuple[str, int]],
    pid: int,
    epoch: int,
    ids: tuple[int, int],
    next_epoch: int,
    tv: int,
    level: int,
    last_epoch: int,
) -> None:
    """The shard applies `as_recorded` instead of parsing its own bytes back: both must
    agree at every level (v0 drops the tagged fields), and the in-memory-only last
    producer epoch is kept."""
    parts = frozenset() if state is S.EMPTY else parts
    meta = TxnMetadata(tid, pid, epoch, 60_000, state, parts, -1, 123, *ids, tv, next_epoch)
    meta = replace(meta, last_producer_epoch=last_epoch)
    recorded = as_recorded(meta, level)
    assert parse_record(key_bytes(tid), value_bytes(meta, level)) == TxnRecord(
        tid, recorded.persisted()
    )
    assert recorded.last_producer_epoch == last_epoch
