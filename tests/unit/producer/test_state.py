"""Producer state machine: Kafka's sequence/epoch rules, duplicates, and a model check."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.producer.state import (
    BATCHES_RETAINED,
    INT32_MAX,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateTable,
    in_sequence,
)
from riverbed.protocol.records import SimpleRecord, build_batch, parse_header
from riverbed.storage.producer_hook import DuplicateBatch


def hdr(pid: int, epoch: int, seq: int, n: int = 1, offset: int = 0, ts: int = 1000) -> object:
    data = build_batch(
        [SimpleRecord(b"v", timestamp=ts) for _ in range(n)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    return parse_header(data)


def appended(table: ProducerStateTable, pid: int, epoch: int, seq: int, n: int = 1) -> int:
    """Check then apply at the table's end offset; returns the batch's base offset."""
    h = hdr(pid, epoch, seq, n, offset=table.map_end_offset)
    assert table.check([h]) is None  # type: ignore[list-item]
    table.apply(h)  # type: ignore[arg-type]
    return h.base_offset  # type: ignore[attr-defined,no-any-return]


def test_first_batch_of_unknown_producer_any_sequence_is_accepted() -> None:
    t = ProducerStateTable()
    assert t.check([hdr(7, 0, 42)]) is None  # type: ignore[list-item]


def test_in_order_then_gap_is_out_of_order() -> None:
    t = ProducerStateTable()
    appended(t, 1, 0, 0, n=3)
    appended(t, 1, 0, 3, n=2)
    with pytest.raises(OutOfOrderSequenceError):
        t.check([hdr(1, 0, 6)])  # type: ignore[list-item]
    with pytest.raises(OutOfOrderSequenceError):
        t.check([hdr(1, 0, 4)])  # type: ignore[list-item]  # overlaps, not an exact repeat


def test_exact_repeat_of_any_of_last_five_is_duplicate_with_original_offsets() -> None:
    t = ProducerStateTable()
    firsts = [appended(t, 1, 0, seq * 2, n=2) for seq in range(7)]
    # batches 2..6 are the last five; 0 and 1 are forgotten
    for i in range(2, 7):
        dup = t.check([hdr(1, 0, i * 2, n=2, offset=999)])  # type: ignore[list-item]
        assert dup == DuplicateBatch(firsts[i], firsts[i] + 1, 1000)
    with pytest.raises(OutOfOrderSequenceError):
        t.check([hdr(1, 0, 2, n=2)])  # type: ignore[list-item]
    entry = t.get(1)
    assert entry is not None and len(entry.batches) == BATCHES_RETAINED


def test_lower_epoch_is_invalid_producer_epoch() -> None:
    t = ProducerStateTable()
    appended(t, 1, 3, 0)
    with pytest.raises(InvalidProducerEpochError) as exc:
        t.check([hdr(1, 2, 1)])  # type: ignore[list-item]
    assert exc.value.error_code == 47


def test_new_epoch_must_start_at_zero() -> None:
    t = ProducerStateTable()
    appended(t, 1, 0, 0, n=5)
    with pytest.raises(OutOfOrderSequenceError):
        t.check([hdr(1, 1, 5)])  # type: ignore[list-item]
    appended(t, 1, 1, 0)
    entry = t.get(1)
    assert entry is not None and entry.epoch == 1 and len(entry.batches) == 1


def test_sequence_wraps_at_int32_max() -> None:
    assert in_sequence(INT32_MAX, 0) and not in_sequence(INT32_MAX, 1)
    t = ProducerStateTable()
    appended(t, 1, 0, INT32_MAX - 1, n=2)  # last seq INT32_MAX
    appended(t, 1, 0, 0)
    entry = t.get(1)
    assert entry is not None and entry.last_seq == 0


def test_batches_of_one_request_are_checked_against_each_other() -> None:
    t = ProducerStateTable()
    appended(t, 1, 0, 0)
    ok = [hdr(1, 0, 1, n=2), hdr(1, 0, 3)]
    assert t.check(ok) is None  # type: ignore[arg-type]
    with pytest.raises(OutOfOrderSequenceError):
        t.check([hdr(1, 0, 1, n=2), hdr(1, 0, 4)])  # type: ignore[list-item]


def test_expiry_uses_last_batch_timestamp() -> None:
    t = ProducerStateTable()
    t.apply(hdr(1, 0, 0, ts=1000))  # type: ignore[arg-type]
    t.apply(hdr(2, 0, 0, offset=1, ts=5000))  # type: ignore[arg-type]
    assert t.expire(now_ms=6000, expiration_ms=4000) == [1]
    assert t.get(1) is None and t.get(2) is not None


# ---- model-based: a stream of produce attempts against a straightforward model ----------

attempt = st.tuples(
    st.integers(0, 2),  # producer
    st.integers(0, 2),  # epoch
    st.integers(-1, 3),  # sequence relative to the model's next expected (-1: retry)
    st.integers(1, 3),  # records
)


@settings(max_examples=150, deadline=None)
@given(st.lists(attempt, max_size=60))
def test_model(attempts: list[tuple[int, int, int, int]]) -> None:
    t = ProducerStateTable()
    # model: pid -> (epoch, next seq, {(first, last): first offset} of the last 5)
    model: dict[int, tuple[int, int, list[tuple[int, int, int]]]] = {}
    log_len = 0
    for pid, epoch, rel, n in attempts:
        cur = model.get(pid)
        if cur is None:
            seq = 0
        elif rel == -1 and cur[2]:
            seq = cur[2][-1][0]  # retry the last batch
        else:
            seq = max(0, cur[1] + rel) if epoch == cur[0] else rel if rel >= 0 else 0
        n_eff = n if not (cur and rel == -1 and cur[2]) else cur[2][-1][1] - cur[2][-1][0] + 1
        h = hdr(pid, epoch, seq, n_eff, offset=log_len)
        # expected outcome
        if cur is not None and epoch < cur[0]:
            expect = "epoch"
        elif cur is not None and epoch == cur[0]:
            dup = [b for b in cur[2] if b[0] == seq and b[1] == seq + n_eff - 1]
            if dup:
                expect = "dup"
            elif seq == cur[1]:
                expect = "ok"
            else:
                expect = "ooo"
        elif cur is not None and seq != 0:
            expect = "ooo"
        else:
            expect = "ok"
        try:
            result = t.check([h])  # type: ignore[list-item]
        except InvalidProducerEpochError:
            assert expect == "epoch"
            continue
        except OutOfOrderSequenceError:
            assert expect == "ooo"
            continue
        if result is not None:
            assert expect == "dup"
            assert any(result.first_offset == b[2] for b in model[pid][2])
            continue
        assert expect == "ok", (expect, pid, epoch, seq, cur)
        t.apply(h)  # type: ignore[arg-type]
        batches = list(cur[2]) if cur is not None and cur[0] == epoch else []
        batches.append((seq, seq + n_eff - 1, log_len))
        model[pid] = (epoch, seq + n_eff, batches[-BATCHES_RETAINED:])
        log_len += n_eff
