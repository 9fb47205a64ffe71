"""The C fast path (riverbed.protocol._fastpath) against the generic engine, its reference:
random records -> the same bytes; the same messages decoded; malformed input -> the same
error class and message (the fast path declines, the generic engine reports); record
sections and snapshot batches byte for byte; image registrations equal to the Python ones."""

from __future__ import annotations

import gc
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.unit.protocol.strategies import message_strategy

from riverbed.metadata.image import PartitionRegistration
from riverbed.protocol import fastpath
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import (
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from riverbed.protocol.metadata_records import (
    decode_metadata_record,
    decode_metadata_record_generic,
    encode_metadata_record,
    encode_metadata_record_generic,
)
from riverbed.protocol.records import (
    CompressionType,
    SimpleRecord,
    _decode_records,
    batch_values,
    build_batch,
    build_values_batch,
    iter_records,
    parse_header,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT32 = st.one_of(
    st.sampled_from([-(2**31), 2**31 - 1, -1, 0, 1, -2]), st.integers(-(2**31), 2**31 - 1)
)
INT8 = st.integers(-128, 127)
# long enough to need a two-byte compact length now and then
BROKERS = st.lists(INT32, max_size=140).filter(lambda x: len(x) < 6 or len(x) > 125)
UUIDS = st.one_of(
    st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=1)]),
    st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
)

partition_records = st.builds(
    PartitionRecord,
    partition_id=INT32,
    topic_id=UUIDS,
    replicas=BROKERS,
    isr=BROKERS,
    removing_replicas=BROKERS,
    adding_replicas=BROKERS,
    leader=INT32,
    leader_recovery_state=st.one_of(st.just(0), INT8),
    leader_epoch=INT32,
    partition_epoch=INT32,
)
topic_records = st.builds(TopicRecord, name=st.text(max_size=300), topic_id=UUIDS)
change_records = st.builds(
    PartitionChangeRecord,
    partition_id=INT32,
    topic_id=UUIDS,
    isr=st.none() | BROKERS,
    leader=st.one_of(st.just(-2), INT32),
    replicas=st.none() | BROKERS,
    removing_replicas=st.none() | BROKERS,
    adding_replicas=st.none() | BROKERS,
    leader_recovery_state=st.one_of(st.just(-1), INT8),
)
fast_records = st.one_of(partition_records, topic_records, change_records)
# every version of the three, unknown tagged fields included: the fast path declines these
any_records = st.one_of(
    *(
        st.tuples(message_strategy(cls, v), st.just(v))
        for cls, versions in ((PartitionRecord, 3), (TopicRecord, 1), (PartitionChangeRecord, 3))
        for v in range(versions)
    )
)


def outcome(fn: Any, *args: Any) -> Any:
    """What ``fn(*args)`` gives: its value, or its error's class and text."""
    try:
        return ("ok", fn(*args))
    except ProtocolError as e:
        return ("error", type(e), str(e))


def test_the_fast_path_is_built_and_matches_the_schemas() -> None:
    """``make`` builds it; without it everything is correct but a snapshot loads slowly."""
    assert fastpath.available(), "riverbed.protocol._fastpath is not built: run make ext"
    assert fastpath._schema_matches()


@SETTINGS
@given(record=fast_records)
def test_encode_is_the_generic_encoding(record: Any) -> None:
    generic = encode_metadata_record_generic(record, 0)
    assert fastpath.fast.encode_record(record) == generic
    assert encode_metadata_record(record, 0) == generic


@SETTINGS
@given(record=fast_records)
def test_decode_is_the_generic_decoding(record: Any) -> None:
    data = encode_metadata_record_generic(record, 0)
    expected = decode_metadata_record_generic(data)
    got = fastpath.fast.decode_record(data)
    assert got == expected
    assert type(got[0]) is type(expected[0])
    for name in type(record)._FIELD_NAMES:  # lists stay lists, None stays None
        assert type(getattr(got[0], name)) is type(getattr(expected[0], name))
    assert got[0]._unknown_tagged_fields is None


@SETTINGS
@given(case=any_records)
def test_every_version_and_unknown_tags_agree(case: tuple[Any, int]) -> None:
    record, version = case
    generic = encode_metadata_record_generic(record, version)
    assert encode_metadata_record(record, version) == generic
    assert decode_metadata_record(generic) == decode_metadata_record_generic(generic)


@SETTINGS
@given(record=fast_records, data=st.data())
def test_malformed_input_gives_the_generic_error(record: Any, data: st.DataObject) -> None:
    good = encode_metadata_record_generic(record, 0)
    kind = data.draw(st.sampled_from(["truncate", "flip", "append", "insert", "set"]))
    pos = data.draw(st.integers(0, len(good)))
    byte = bytes([data.draw(st.integers(0, 255))])
    if kind == "truncate":
        bad = good[:pos]
    elif kind == "flip":
        assume(pos < len(good))
        bad = good[:pos] + bytes([good[pos] ^ byte[0] or 1]) + good[pos + 1 :]
    elif kind == "append":
        bad = good + byte
    elif kind == "insert":
        bad = good[:pos] + byte + good[pos:]
    else:  # a length or count byte set to something large
        assume(pos < len(good))
        bad = good[:pos] + bytes([0x80 | byte[0]]) + good[pos + 1 :]
    expected = outcome(decode_metadata_record_generic, bad)
    assert outcome(decode_metadata_record, bad) == expected
    fast = fastpath.fast.decode_record(bad)
    assert fast is None or ("ok", fast) == expected


def _bad_values() -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [None, 2**31, -(2**31) - 1, 1.0, "1", [1, None], [2**40], (1, 2), True, [True]]
    )


@SETTINGS
@given(record=fast_records, data=st.data())
def test_unencodable_values_give_the_generic_error(record: Any, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from([*type(record)._FIELD_NAMES, "_unknown_tagged_fields"]))
    value = data.draw(
        st.one_of(_bad_values(), st.just([]), st.just([(5, b"x")]), st.just([uuid.uuid4()]))
    )
    setattr(record, name, value)
    expected = outcome(encode_metadata_record_generic, record, 0)
    assert outcome(encode_metadata_record, record, 0) == expected
    fast = fastpath.fast.encode_record(record)
    assert fast is None or ("ok", fast) == expected


@SETTINGS
@given(record=partition_records)
def test_encode_partition_from_a_registration(record: PartitionRecord) -> None:
    reg = PartitionRegistration.from_record(record)
    generic = encode_metadata_record_generic(reg.to_record(record.topic_id, record.partition_id), 0)
    assert fastpath.fast.encode_partition(record.partition_id, record.topic_id, *reg) == generic


def test_encode_partition_declines_what_it_cannot_write() -> None:
    enc = fastpath.fast.encode_partition
    tid = uuid.uuid4()
    assert enc(0, tid, (1,), (1,), (), (), 1, 0, 0, 0) is not None
    assert enc(0, str(tid), (1,), (1,), (), (), 1, 0, 0, 0) is None
    assert enc(0, tid, (1,), (1,), (), (), 1, 128, 0, 0) is None
    assert enc(2**31, tid, (1,), (1,), (), (), 1, 0, 0, 0) is None
    assert enc(0, tid, (1.5,), (1,), (), (), 1, 0, 0, 0) is None
    with pytest.raises(TypeError):
        enc(0, tid)


@SETTINGS
@given(record=partition_records)
def test_registration_equals_from_record_and_is_untracked(record: PartitionRecord) -> None:
    decoded, _ = decode_metadata_record(encode_metadata_record_generic(record, 0))
    shared: dict[tuple[int, ...], tuple[int, ...]] = {}
    reg = fastpath.fast.registration(PartitionRegistration, shared, decoded)
    assert reg == PartitionRegistration.from_record(decoded)
    assert type(reg) is PartitionRegistration
    assert not gc.is_tracked(reg)
    again = fastpath.fast.registration(PartitionRegistration, shared, decoded)
    assert again.replicas is reg.replicas and again.isr is reg.isr  # one tuple per value
    assert reg.isr is reg.replicas or reg.isr != reg.replicas


def test_registration_declines_other_values() -> None:
    rec = PartitionRecord(topic_id=uuid.uuid4(), replicas=[1], isr=[1], leader=1)
    fast = fastpath.fast.registration
    assert fast(PartitionRegistration, {}, TopicRecord(name="x")) is None
    rec.replicas = (1,)  # type: ignore[assignment]  # not a list: from_record's business
    assert fast(PartitionRegistration, {}, rec) is None
    rec.replicas, rec.leader = [1], True
    assert fast(PartitionRegistration, {}, rec) is None

    class WithDict(tuple):  # type: ignore[type-arg]  # instances have a __dict__
        pass

    with pytest.raises(TypeError):
        fast(WithDict, {}, rec)
    # many created and dropped: an untracked tuple subclass deallocates cleanly
    rec.leader = 1
    regs = [fast(PartitionRegistration, {}, rec) for _ in range(10000)]
    del regs
    gc.collect()


# ----------------------------------------------------------------- record batches

values = st.lists(st.binary(max_size=300), max_size=40)


@SETTINGS
@given(
    vals=values,
    base=st.integers(0, 2**40),
    epoch=st.integers(-1, 2**31 - 1),
    now=st.integers(-1, 2**42),
    codec=st.sampled_from(list(CompressionType)),
)
def test_values_batch_is_build_batch(
    vals: list[bytes], base: int, epoch: int, now: int, codec: CompressionType
) -> None:
    assume(vals)
    kw: dict[str, Any] = dict(
        base_offset=base, compression=codec, partition_leader_epoch=epoch, now_ms=now
    )
    expected = build_batch([SimpleRecord(v) for v in vals], **kw)
    assert build_values_batch(vals, **kw) == expected
    assert batch_values(expected) == vals
    assert fastpath.fast.value_records([*vals[:-1], None]) is None  # only bytes


records = st.builds(
    SimpleRecord,
    value=st.none() | st.binary(max_size=40),
    key=st.none() | st.binary(max_size=10),
    headers=st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=1),
    timestamp=st.integers(-(2**40), 2**42),
)


@SETTINGS
@given(recs=st.lists(records, min_size=1, max_size=8), data=st.data())
def test_record_values_agree_with_the_record_iterator(
    recs: list[SimpleRecord], data: st.DataObject
) -> None:
    batch = build_batch(recs)
    section = batch[61:]
    h = parse_header(batch)
    kind = data.draw(st.sampled_from(["good", "truncate", "flip", "append"]))
    pos = data.draw(st.integers(0, len(section) - 1))
    if kind == "truncate":
        section = section[:pos]
    elif kind == "flip":
        section = (
            section[:pos]
            + bytes([section[pos] ^ data.draw(st.integers(1, 255))])
            + section[pos + 1 :]
        )
    elif kind == "append":
        section += b"\x00"
    expected = outcome(lambda: [r.value for r in _decode_records(section, h, False)])
    fast = fastpath.fast.record_values(section, h.records_count, h.last_offset_delta)
    assert fast is None or ("ok", fast) == expected
    if kind == "good":
        assert batch_values(batch) == [r.value for r in iter_records(batch)]
        if not any(r.headers for r in recs):
            assert fast is not None  # the common shape is taken


def test_feature_level_records_use_the_generic_engine() -> None:
    record = FeatureLevelRecord(name="metadata.version", feature_level=21)
    data = encode_metadata_record(record, 0)
    assert fastpath.fast.encode_record(record) is None
    assert fastpath.fast.decode_record(data) is None
    assert decode_metadata_record(data) == (record, 0)
