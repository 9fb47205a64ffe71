"""Property test: seeded random operation sequences against an in-memory model.

Each seed picks a LogConfig (tiny segments and indexes so rolls of every kind happen) and
runs append / roll / truncate / high watermark / DeleteRecords / retention / clean
restart / crash (files cut at a random byte of the unflushed tail, a byte flipped,
index files deleted or torn). After every step the log must agree with the model on
offsets, reads, timestamp lookups, and its index files must be consistent with the .log.
A failing seed is printed in the assertion message and replays exactly.
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from riverbed.storage import LogConfig, ManualClock, OffsetOutOfRangeError, PartitionLog

SEEDS = range(int(os.environ.get("RB_SEED0", "0")), int(os.environ.get("RB_SEED0", "0")) + 40)
STEPS = int(os.environ.get("RB_STEPS", "70"))


@dataclass
class MBatch:
    base: int
    records: list[tuple[int, int, bytes]]  # (offset, timestamp, value)

    @property
    def last(self) -> int:
        return self.records[-1][0]


@dataclass
class Model:
    batches: list[MBatch] = field(default_factory=list)
    lso: int = 0
    leo: int = 0
    hw: int = 0

    def truncate(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b.last < offset]
        self.leo = self.batches[-1].last + 1 if self.batches else min(self.leo, offset)

    def live(self) -> list[MBatch]:
        return [b for b in self.batches if b.last >= self.lso]


class Harness:
    def __init__(self, seed: int, tmp: Path) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.dir = tmp / "topic-0"
        self.clock = ManualClock(1_700_000_000_000)
        self.config = LogConfig(
            segment_bytes=rng.choice([400, 900, 2500, 6000]),
            segment_index_bytes=rng.choice([24, 48, 120, 10485760]),
            index_interval_bytes=rng.choice([0, 100, 300, 4096]),
            segment_ms=rng.choice([5_000, 60_000, 604800000]),
            message_timestamp_type=rng.choice(["CreateTime", "CreateTime", "LogAppendTime"]),
            retention_ms=-1,
        )
        self.model = Model()
        self.sizes: dict[int, int] = {}
        self.epoch = 0
        self.log = self._open(clean=True, recovery_point=0)

    def ctx(self, what: str) -> str:
        return f"seed={self.seed} config={self.config} step={what}"

    def _open(self, *, clean: bool, recovery_point: int) -> PartitionLog:
        return PartitionLog(
            self.dir,
            "topic",
            0,
            self.config,
            self.clock,
            recovery_point=recovery_point,
            log_start_offset=self.model.lso,
            high_watermark=self.model.hw,
            clean_shutdown=clean,
        )

    # ---- operations ---------------------------------------------------------------------

    def append(self) -> None:
        rng = self.rng
        self.clock.advance(rng.choice([0, 1, 50, 1000, 4000]))
        if rng.random() < 0.05:
            self.clock.advance(-rng.randint(1, 5000))  # a new leader with a slower clock
            self.epoch += 1
        now = self.clock.now_ms()
        n = rng.randint(1, 5)
        stamps = [now + rng.randint(-3_000_000, 3_000_000) for _ in range(n)]
        values = [rng.randbytes(rng.choice([0, 5, 60, 250])) for _ in range(n)]
        codec = rng.choice([CompressionType.NONE] * 4 + [CompressionType.LZ4, CompressionType.ZSTD])
        raw = build_batch(
            [SimpleRecord(v, timestamp=t) for v, t in zip(values, stamps, strict=True)],
            compression=codec,
        )
        info = self.log.append_as_leader(raw, self.epoch)
        assert info.first_offset == self.model.leo, self.ctx("append offset")
        assert info.last_offset == self.model.leo + n - 1
        if self.config.log_append_time:
            assert info.log_append_time >= now
            # against what the log still holds (a fully deleted log has nothing to follow)
            prev = [r[1] for b in self.model.live()[-1:] for r in b.records]
            assert not prev or info.log_append_time >= max(prev), self.ctx("LAT went back")
            stamps = [info.log_append_time] * n
        recs = [(self.model.leo + i, stamps[i], values[i]) for i in range(n)]
        self.model.batches.append(MBatch(self.model.leo, recs))
        self.model.leo += n

    def set_hw(self) -> None:
        m = self.model
        m.hw = self.rng.randint(m.lso, m.leo)
        assert self.log.update_high_watermark(m.hw) == m.hw

    def truncate(self) -> None:
        m = self.model
        live = m.live()
        if not live:
            return
        # followers truncate to batch boundaries (OffsetForLeaderEpoch answers), never
        # below the log start
        offset = self.rng.choice([b.base for b in live if b.base >= m.lso] + [m.leo])
        self.log.truncate_to(offset)
        m.truncate(offset)
        m.hw = min(m.hw, m.leo)
        m.lso = min(m.lso, m.leo)

    def delete_records(self) -> None:
        m = self.model
        target = self.rng.randint(m.lso, m.hw)
        assert self.log.delete_records_before(target) == max(target, m.lso)
        m.lso = max(m.lso, target)

    def retention(self) -> None:
        m = self.model
        by_time = self.rng.random() < 0.5
        retention_ms = self.rng.choice([0, 1_000_000, 3_000_000])
        if by_time:
            self.log.update_config(self._with(retention_ms=retention_ms))
        else:
            self.log.update_config(self._with(retention_bytes=self.rng.choice([0, 500, 3000])))
        now = self.clock.now_ms()
        segs = self.log.segments
        info = [
            (s.base_offset, s.largest_timestamp(), nxt.base_offset, s.size)
            for s, nxt in itertools.pairwise(segs)
        ] + [(segs[-1].base_offset, segs[-1].largest_timestamp(), m.leo, segs[-1].size)]
        before = self.log.size_bytes
        self.log.delete_old_segments(now)
        self.log.update_config(self.config)
        new_lso = self.log.log_start_offset
        assert new_lso >= m.lso and new_lso <= m.hw, self.ctx("retention lso")
        if new_lso > m.lso:
            assert any(b.base == new_lso for b in m.batches) or new_lso == m.leo
            assert self.log.size_bytes < before
        if by_time:
            first_kept = self.log.segments[0].base_offset
            for base, largest, upper, size in info:
                if base < first_kept:
                    # deleted: below the log start, or expired and below the high watermark
                    expired = now - largest > retention_ms and upper <= m.hw
                    assert upper <= m.lso or expired, self.ctx("retention deleted too much")
                elif size and upper <= m.hw and new_lso == first_kept:
                    # the first kept segment was eligible: it must not have expired
                    assert now - largest <= retention_ms, self.ctx("retention kept expired")
                    break
                else:
                    break
        m.lso = new_lso

    def follower_append(self) -> None:
        if self.config.log_append_time:
            return  # a LogAppendTime leader would send stamped batches; covered elsewhere
        rng = self.rng
        m = self.model
        gap = rng.choice([0, 0, 0, 1, 7, 2**31 + 5]) if rng.random() < 0.3 else 0
        base = m.leo + gap
        n = rng.randint(1, 4)
        now = self.clock.now_ms()
        stamps = [now + rng.randint(-3_000_000, 3_000_000) for _ in range(n)]
        values = [rng.randbytes(rng.choice([0, 40])) for _ in range(n)]
        self.epoch += rng.choice([0, 0, 1])
        raw = build_batch(
            [SimpleRecord(v, timestamp=t) for v, t in zip(values, stamps, strict=True)],
            base_offset=base,
            partition_leader_epoch=self.epoch,
        )
        segs = self.log.segments
        restarts = len(segs) == 1 and segs[0].size == 0 and base - segs[0].base_offset >= 2**31
        info = self.log.append_as_follower(raw)
        if restarts:
            # an empty log whose offsets cannot reach the batch restarts at it
            m.lso = max(m.lso, base)
            m.hw = max(m.hw, m.lso)
        assert (info.first_offset, info.last_offset) == (base, base + n - 1), self.ctx("follow")
        m.batches.append(MBatch(base, [(base + i, stamps[i], values[i]) for i in range(n)]))
        m.leo = base + n
        assert self.log.epoch_cache.latest_epoch == self.epoch or self.epoch == 0

    def _with(self, **kw: int) -> LogConfig:
        props = self.config.to_props()
        props.update({k.replace("_", "."): str(v) for k, v in kw.items()})
        return LogConfig.from_props(props)

    def restart(self) -> None:
        self.log.close()
        self.log = self._open(clean=True, recovery_point=self.log.recovery_point)

    def crash(self) -> None:
        rng = self.rng
        m = self.model
        if rng.random() < 0.5:
            self.log.flush()
        rp = self.log.recovery_point
        active = self.log.active_segment
        headers = list(active.iter_headers())
        self.log.abandon()
        # the unflushed tail of the active segment: batches from the first one >= rp
        flushed_pos = next((b.position for b in headers if b.header.last_offset >= rp), None)
        expected_leo = m.leo
        if flushed_pos is not None:
            size = active.size
            path = active.log_path
            unflushed = [b for b in headers if b.position >= flushed_pos]
            if unflushed and rng.random() < 0.3:
                # flip a byte the recovery must notice: batchLength, magic or CRC-covered
                # bytes (baseOffset and leader epoch are outside the CRC, as in Kafka)
                victim = rng.choice(unflushed)
                rel = rng.choice([8, 9, 10, 11, *range(16, victim.header.size)])
                with open(path, "r+b") as f:
                    f.seek(victim.position + rel)
                    byte = f.read(1)[0]
                    f.seek(victim.position + rel)
                    f.write(bytes([byte ^ 0x5A]))
                cut = victim.position
            else:
                cut = rng.randint(flushed_pos, size)
                os.truncate(path, cut)
            survivors = [b for b in headers if b.position + b.header.size <= cut]
            if survivors:
                expected_leo = survivors[-1].header.next_offset
            elif len(self.log.segments) == 1:
                expected_leo = active.base_offset
            else:  # the emptied last segment is dropped: the log ends where data ends
                expected_leo = max(b.last + 1 for b in m.batches if b.last < active.base_offset)
        self._damage_indexes()
        if expected_leo < m.lso:
            # the log end fell below the checkpointed log start: Kafka (and riverbed)
            # restart the log empty at the log start offset
            expected_leo = m.lso
            m.batches.clear()
            m.leo = m.lso
        self.log = self._open(clean=False, recovery_point=rp)
        assert self.log.log_end_offset == expected_leo, self.ctx(
            f"crash: leo {self.log.log_end_offset} != {expected_leo} (rp {rp})"
        )
        assert self.log.log_end_offset >= min(rp, m.leo), self.ctx("lost flushed data")
        m.truncate(expected_leo)
        m.hw = min(m.hw, m.leo)
        m.lso = min(m.lso, m.leo)

    def _damage_indexes(self) -> None:
        rng = self.rng
        files = sorted(self.dir.glob("*.index")) + sorted(self.dir.glob("*.timeindex"))
        for path in files:
            r = rng.random()
            if r < 0.1:
                path.unlink()
            elif r < 0.2:
                with open(path, "ab") as f:
                    f.write(b"\x07\x01\x02")  # torn entry
            elif r < 0.25 and path.stat().st_size:
                os.truncate(path, 0)

    # ---- checks -------------------------------------------------------------------------

    def check(self, step: str, deep: bool) -> None:
        log, m = self.log, self.model
        ctx = self.ctx(step)
        assert log.log_end_offset == m.leo, ctx
        assert log.log_start_offset == m.lso, ctx
        assert log.high_watermark == m.hw, ctx
        live = m.live()
        data = log.read(m.lso, 1 << 30).read_bytes() if m.lso < m.leo else b""
        self.sizes = {h.base_offset: h.size for _, h in iter_batches(data)}
        if deep:
            got = (
                [
                    (r.offset, r.timestamp, r.value or b"")
                    for pos, _ in iter_batches(data)
                    for r in iter_records(memoryview(data)[pos:])
                ]
                if data
                else []
            )
            want = [r for b in live for r in b.records]
            assert got == want, ctx
            self.check_indexes(ctx)
        # random reads
        for _ in range(3):
            if m.lso >= m.leo:
                break
            offset = self.rng.randint(m.lso, m.leo)
            max_bytes = self.rng.choice([1, 200, 1000, 100000])
            bound = self.rng.choice([m.hw, m.leo])
            self.check_read(offset, max_bytes, bound, live, ctx)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(m.leo + 1, 100)
        if m.lso > 0:
            with pytest.raises(OffsetOutOfRangeError):
                log.read(m.lso - 1, 100)
        # timestamp lookups
        records = [r for b in live for r in b.records if r[0] >= m.lso]
        probes = [r[1] for r in records[:: max(1, len(records) // 4)]]
        probes += [self.rng.randint(1_699_990_000_000, 1_700_010_000_000) for _ in range(3)]
        for ts in probes:
            expect = next(((t, o) for o, t, _ in records if t >= ts), None)
            got = log.offset_for_timestamp(ts)
            got_pair = (got.timestamp, got.offset) if got is not None else None
            assert got_pair == expect, f"{ctx} offset_for_timestamp({ts})"
        mx = log.max_timestamp_offset()
        if mx is not None:
            by_offset = {o: t for o, t, _ in records}
            assert by_offset.get(mx.offset) == mx.timestamp, ctx
            assert all(t <= mx.timestamp for _, t, _ in records), ctx

    def check_read(
        self, offset: int, max_bytes: int, bound: int, live: list[MBatch], ctx: str
    ) -> None:
        res = self.log.read(offset, max_bytes, bound)
        data = res.read_bytes()
        got = [h for _, h in iter_batches(data)]
        assert res.size == len(data)
        start = next((i for i, b in enumerate(live) if b.last >= offset), len(live))
        if not got:
            # nothing fits: the batch holding offset is beyond the bound
            assert start == len(live) or live[start].last >= bound, f"{ctx} empty read"
            return
        assert res.first_offset == got[0].base_offset
        for k, h in enumerate(got):
            mb = live[start + k]
            assert (h.base_offset, h.last_offset) == (mb.base, mb.last), f"{ctx} read batch"
            assert h.next_offset <= bound, ctx
        assert len(data) <= max_bytes or len(got) == 1, ctx
        nxt = start + len(got)
        if nxt < len(live):
            # maximal: the next batch would break the size limit or the bound
            too_big = len(data) + self.sizes[live[nxt].base] > max_bytes
            assert too_big or live[nxt].last >= bound, f"{ctx} read stopped early"
        # the offset after the last batch, or the next batch's base across an offset gap
        upper = live[nxt].base if nxt < len(live) else self.model.leo
        assert got[-1].next_offset <= res.next_offset <= upper, ctx

    def check_indexes(self, ctx: str) -> None:
        for seg in self.log.segments:
            seg.ensure_indexes()
            batches = list(seg.iter_headers())
            by_pos = {b.position: b.header for b in batches}
            for rel, pos in seg.offset_index.iter_raw():
                assert pos in by_pos, f"{ctx} index points inside a batch"
                assert by_pos[pos].last_offset == seg.base_offset + rel, ctx
            running: dict[int, int] = {}
            mx = -1
            for b in batches:
                mx = max(mx, b.header.max_timestamp)
                running[b.header.last_offset] = mx
            prev = -1
            for ts, rel in seg.time_index.iter_raw():
                off = seg.base_offset + rel
                assert ts > prev, ctx
                prev = ts
                assert off in running, f"{ctx} time index offset {off} is no batch end"
                assert running[off] == ts, f"{ctx} time index entry ({ts}, {off})"
            if batches:
                assert seg.largest_timestamp() == mx, ctx
            for idx, entry_size in ((seg.offset_index, 8), (seg.time_index, 12)):
                if idx.path.exists():
                    assert os.path.getsize(idx.path) % entry_size == 0, ctx
                else:
                    # lazy index files: only the active segment may still lack them
                    assert seg.active, f"{ctx} inactive {seg} without {idx.path.name}"


OPS = [
    ("append", 10),
    ("follower_append", 3),
    ("set_hw", 3),
    ("truncate", 1),
    ("delete_records", 1),
    ("retention", 1),
    ("restart", 1),
    ("crash", 1),
]


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequences_agree_with_model(seed: int, tmp_path: Path) -> None:
    h = Harness(seed, tmp_path)
    names = [n for n, _ in OPS]
    weights = [w for _, w in OPS]
    try:
        for step in range(STEPS):
            op = h.rng.choices(names, weights)[0]
            getattr(h, op)()
            h.check(f"{step}:{op}", deep=step % 10 == 9 or op in ("crash", "restart"))
        h.check("final", deep=True)
    finally:
        h.log.close()
