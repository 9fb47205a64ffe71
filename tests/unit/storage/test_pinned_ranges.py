"""A read pins the file it returns ranges of (issue 11: a fetch response pins its file).

Between a read and the send of its ranges, retention may rename and unlink the segment,
a new segment may take the same file name, and a truncation may cut the segment and
write other batches at the same positions. The range must then read exactly the bytes
it read before, or fail cleanly (``StaleRangeError``): never other bytes, never zeros.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.storage.log_files import StaleRangeError

T0 = 1_700_000_000_000


def batch(tag: bytes, n: int = 3) -> bytes:
    return build_batch([SimpleRecord(tag * 20, key=b"k%d" % i) for i in range(n)], now_ms=T0)


def open_log(tmp_path: Path, clock: ManualClock) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock)


def test_range_survives_retention_and_a_new_segment_with_its_name(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path, clock)
    for tag in (b"a", b"b"):
        log.append_as_leader(batch(tag), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    result = log.read(0, 1 << 20)
    before = result.read_bytes()
    # the whole log goes (its segment renamed *.deleted), a new segment 0 takes the
    # same file name and gets other batches, then the deleted file is unlinked
    log.truncate_fully_and_start_at(0)
    for tag in (b"x", b"y"):
        log.append_as_leader(batch(tag), leader_epoch=1)
    clock.advance(LogConfig().file_delete_delay_ms + 1)
    assert log.delete_expired_files(clock.now_ms()) == 1
    assert log.read(0, 1 << 20).read_bytes() != before  # the path holds other bytes now
    assert result.read_bytes() == before
    assert all(r.intact() for r in result.ranges)
    result.close()
    log.close()


def test_truncated_range_fails_instead_of_reading_other_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, ManualClock(T0))
    for tag in (b"a", b"b", b"c"):
        log.append_as_leader(batch(tag), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    result = log.read(0, 1 << 20)
    (rng,) = result.ranges
    # follower divergence: everything from offset 3 goes, a new leader's batches land at
    # the same positions of the same file
    assert log.truncate_to(3)
    for tag in (b"x", b"y"):
        other = [SimpleRecord(tag * 20)] * 3
        base = log.log_end_offset
        log.append_as_follower(
            build_batch(other, base_offset=base, now_ms=T0, partition_leader_epoch=1)
        )
    with pytest.raises(StaleRangeError):
        rng.read()
    assert not rng.intact()
    result.close()
    log.close()


def test_dropped_and_closed_ranges_release_their_fds(tmp_path: Path) -> None:
    log = open_log(tmp_path, ManualClock(T0))
    log.append_as_leader(batch(b"a"), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    fd_dir = Path("/proc/self/fd")
    baseline = len(list(fd_dir.iterdir()))
    with log.read(0, 1 << 20) as result:
        assert len(list(fd_dir.iterdir())) == baseline + 1
        assert result.read_bytes()
    assert len(list(fd_dir.iterdir())) == baseline
    log.read(0, 1 << 20)  # dropped unclosed: __del__ releases it
    assert len(list(fd_dir.iterdir())) == baseline
    log.close()
