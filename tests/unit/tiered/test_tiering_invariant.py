"""Seeded simulation of a tiered log: no offset between the log start and the log end is
ever in neither tier, whatever the order of appends, rolls, copies, local retention and
remote retention. Replay one seed: ``pytest -k "no_offset_is_lost and <seed>"``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.tiered.rlm import LocalSegmentInfo, remote_segments_to_delete, segments_to_copy
from riverbed.tiered.rsm import RemoteSegmentMetadata

T0 = 1_700_000_000_000


@pytest.mark.parametrize("seed", range(12))
def test_no_offset_is_lost(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock(T0)
    config = LogConfig.from_props(
        {
            "segment.bytes": 600,
            "remote.storage.enable": "true",
            "local.retention.bytes": str(rng.choice([0, 800, 2000])),
            "retention.ms": str(rng.choice([-1, 60_000])),
            "retention.bytes": str(rng.choice([-1, 5000])),
            "file.delete.delay.ms": "0",
        }
    )
    plog = PartitionLog(tmp_path / "t-0", "t", 0, config, clock, remote_log_enabled=True)
    remote: list[RemoteSegmentMetadata] = []
    for step in range(300):
        where = f"seed {seed} step {step}"
        clock.advance(rng.randrange(0, 2000))
        now = clock.now_ms()
        op = rng.random()
        if op < 0.5:
            n = rng.randrange(1, 6)
            recs = [SimpleRecord(b"x" * rng.randrange(5, 60), timestamp=now) for _ in range(n)]
            plog.append_as_leader(build_batch(recs), 0)
            plog.update_high_watermark(plog.log_end_offset)
        elif op < 0.7:  # the copier: rolled segments, earliest first, maybe only some
            infos = [
                LocalSegmentInfo(s.base_offset, s.next_offset, s.size, s.active)
                for s in plog.segments
            ]
            todo = segments_to_copy(infos, plog.highest_offset_in_remote, plog.high_watermark)
            for info in todo[: rng.randrange(0, len(todo) + 1)]:
                seg = next(s for s in plog.segments if s.base_offset == info.base_offset)
                remote.append(
                    RemoteSegmentMetadata(
                        f"{info.base_offset:020d}-x",
                        info.base_offset,
                        info.next_offset - 1,
                        seg.largest_timestamp(),
                        info.size_bytes,
                        ((0, info.base_offset),),
                        now,
                        (".log",),
                    )
                )
                plog.update_highest_offset_in_remote(info.next_offset - 1)
        elif op < 0.85:
            plog.delete_old_segments(now)
        else:  # remote retention (leader)
            highest = remote[-1].end_offset if remote else -1
            doomed = remote_segments_to_delete(
                remote,
                log_start_offset=plog.log_start_offset,
                retention_ms=config.retention_ms,
                retention_bytes=config.retention_bytes,
                local_only_bytes=sum(s.size for s in plog.segments if s.base_offset > highest),
                now_ms=now,
            )
            for meta in doomed:
                plog.advance_log_start_offset(meta.end_offset + 1)
                remote.remove(meta)
        # the invariant: [log start, local start) is entirely in the remote tier
        covered = plog.log_start_offset
        for meta in remote:
            if meta.base_offset <= covered <= meta.end_offset:
                covered = meta.end_offset + 1
        assert covered >= plog.local_log_start_offset, (where, covered, plog, remote[:3])
        assert plog.log_start_offset <= plog.local_log_start_offset <= plog.log_end_offset, where
