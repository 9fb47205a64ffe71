"""Small fetch reads are answered with the bytes the handler read (issue 23).

A fetch whose file ranges hold at most ``SPLICE_COPY_BYTES_MAX`` in all (a follower's at
the log end, a tailing consumer's) is read into the response by the handler
(`riverbed.server.broker.fetch._read_small`): a plain `FetchResponse`, no token or
`SplicedResponse`, its pinned ranges closed. Larger reads stay file ranges (sendfile). A
range truncated between the read and the copy closes the connection, as the network
layer's copy did.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.protocol.messages import FetchResponse
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker.fetch import _build_response, _PartitionRead, _read_small
from riverbed.server.network import SPLICE_COPY_BYTES_MAX, CloseConnection, SplicedResponse
from riverbed.storage import LogConfig, ManualClock, PartitionLog

T0 = 1_700_000_000_000
VERSION = 15


def batch(tag: bytes, size: int, base_offset: int = 0, epoch: int = 0) -> bytes:
    records = [SimpleRecord(tag * size, key=b"k%d" % i) for i in range(3)]
    return build_batch(records, base_offset=base_offset, now_ms=T0, partition_leader_epoch=epoch)


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0))
    yield plog  # type: ignore[misc]
    plog.close()


def _read(plog: PartitionLog, index: int, offset: int) -> _PartitionRead:
    result = plog.read(offset, 1 << 20)
    ranges = list(result.ranges)
    r = _PartitionRead("t", index, 0, 0, 0, ranges, sum(x.size for x in ranges))
    r.end_offset = result.next_offset
    return r


def _append(plog: PartitionLog, tag: bytes, size: int) -> None:
    plog.append_as_leader(batch(tag, size), leader_epoch=0)


def test_small_reads_become_the_bytes_of_their_ranges(log: PartitionLog) -> None:
    for tag in (b"a", b"b", b"c"):
        _append(log, tag, 20)
    reads = [_read(log, 0, 0), _read(log, 1, 2 * 3)]  # (a second read: the last batch)
    expected = [r.ranges[0].read() for r in reads]
    ranges = [x for r in reads for x in r.ranges]
    _read_small(reads)
    assert [r.data for r in reads] == expected
    assert all(not r.ranges for r in reads)
    assert not any(x.intact() for x in ranges)  # closed: their fds are given back
    response = _build_response(reads, VERSION, read_committed=False)
    assert isinstance(response, FetchResponse)  # no token, no splice
    assert [p.records for t in response.responses for p in t.partitions] == expected
    assert [r.size for r in reads] == [len(e) for e in expected]


def test_reads_above_the_copy_limit_stay_file_ranges(log: PartitionLog) -> None:
    _append(log, b"a", SPLICE_COPY_BYTES_MAX // 3 + 1)  # 3 records: above the limit
    reads = [_read(log, 0, 0)]
    assert reads[0].size > SPLICE_COPY_BYTES_MAX
    _read_small(reads)
    assert reads[0].ranges and reads[0].data == b""
    response = _build_response(reads, VERSION, read_committed=False)
    assert isinstance(response, SplicedResponse)
    for fr in response.files:
        for x in fr.ranges:
            x.close()


def test_the_limit_counts_every_partition_of_the_response(log: PartitionLog) -> None:
    _append(log, b"a", SPLICE_COPY_BYTES_MAX // 6)
    reads = [_read(log, 0, 0), _read(log, 1, 0)]  # each below the limit, both above it
    assert all(r.size <= SPLICE_COPY_BYTES_MAX for r in reads)
    assert sum(r.size for r in reads) > SPLICE_COPY_BYTES_MAX
    _read_small(reads)
    assert all(r.ranges and not r.data for r in reads)
    for r in reads:
        for x in r.ranges:
            x.close()


def test_a_range_truncated_after_the_read_closes_the_connection(log: PartitionLog) -> None:
    for tag in (b"a", b"b", b"c"):
        _append(log, tag, 20)
    log.update_high_watermark(log.log_end_offset)
    reads = [_read(log, 0, 0)]
    ranges = list(reads[0].ranges)
    log.truncate_to(3)  # a diverging follower; a new leader's batches follow
    for tag in (b"x", b"y"):
        log.append_as_follower(batch(tag, 20, base_offset=log.log_end_offset, epoch=1))
    with pytest.raises(CloseConnection, match="truncated"):
        _read_small(reads)
    assert not reads[0].ranges and not any(x.intact() for x in ranges)
