"""The network layer sends the bytes a fetch read, or fails the response cleanly.

A real ``PartitionLog`` behind a toy-codec ``SocketServer`` (both event loops): the
handler reads ranges, then the log changes before or during the send (retention with a
new segment under the same name; truncation followed by other batches at the same
positions). The client gets exactly the bytes of the read, or the connection closes with
the frame incomplete; never a whole frame holding other bytes or zero padding.

sendfile hands the kernel page-cache pages: bytes of the removed batches queued in the
socket before a truncation can still change on their way (a kernel property Kafka shares;
see ``Connection._range_changed``), so the mid-send case is checked on the copy path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.network import FileRecords, RequestContext, SplicedResponse
from riverbed.storage import LogConfig, ManualClock, PartitionLog
from riverbed.testing.toy_wire import LOOPS, frame, read_response, run, start

T0 = 1_700_000_000_000


def batch(tag: bytes, size: int = 20, base_offset: int = 0, epoch: int = 0) -> bytes:
    records = [SimpleRecord(tag * size, key=b"k%d" % i) for i in range(3)]
    return build_batch(records, base_offset=base_offset, now_ms=T0, partition_leader_epoch=epoch)


def open_log(tmp_path: Path, clock: ManualClock) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), clock)


def spliced(result: Any) -> SplicedResponse:
    fr = FileRecords(list(result.ranges))
    return SplicedResponse(body=b"H" + struct.pack(">i", 16) + fr.token, files=[fr], compact=False)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_retention_between_read_and_send_changes_nothing_sent(
    loop_kind: str, tmp_path: Path
) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path, clock)
    for tag in (b"a", b"b"):
        log.append_as_leader(batch(tag), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    at_read: list[bytes] = []

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        result = log.read(0, 1 << 20)
        at_read.append(result.read_bytes())
        # after the read, before the send: the segment is deleted and unlinked, and a
        # new segment with the same file name gets other batches
        log.truncate_fully_and_start_at(0)
        log.append_as_leader(batch(b"z"), leader_epoch=1)
        clock.advance(LogConfig().file_delete_delay_ms + 1)
        log.delete_expired_files(clock.now_ms())
        return spliced(result)

    async def main() -> tuple[int, bytes]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(1, b"fetch"))
        got = await read_response(reader)
        writer.close()
        await server.stop()
        return got

    cid, body = run(loop_kind, main())
    log.close()
    assert cid == 1 and body == b"H" + struct.pack(">i", len(at_read[0])) + at_read[0]


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_truncation_before_the_send_closes_without_a_byte(
    loop_kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path, ManualClock(T0))
    for tag in (b"a", b"b", b"c"):
        log.append_as_leader(batch(tag), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        if body != b"fetch":
            return body
        result = log.read(0, 1 << 20)
        log.truncate_to(3)  # a diverging follower; a new leader's batches follow
        for tag in (b"x", b"y"):
            log.append_as_follower(batch(tag, base_offset=log.log_end_offset, epoch=1))
        return spliced(result)

    async def main() -> tuple[tuple[int, bytes], bytes]:
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(1, b"before") + frame(2, b"fetch"))
        first = await read_response(reader)
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await server.stop()
        return first, rest

    with caplog.at_level(logging.WARNING, logger="riverbed.server.network"):
        first, rest = run(loop_kind, main())
    log.close()
    assert first == (1, b"before")
    assert rest == b""  # no partial frame was written
    assert any("truncated" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_truncation_during_the_send_never_completes_the_frame(
    loop_kind: str, tmp_path: Path
) -> None:
    # the copy path: every chunk is checked against truncation after it is read (with
    # sendfile the kernel holds page-cache pages, see the module docstring)
    log = open_log(tmp_path, ManualClock(T0))
    tags = [bytes([ord("a") + i]) for i in range(12)]
    for tag in tags:  # ~6 MB: the socket cannot take it while the client does not read
        log.append_as_leader(batch(tag, size=170_000), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    expected = log.read(0, 1 << 30).read_bytes()
    sending = asyncio.Event()

    async def handler(ctx: RequestContext, body: bytes) -> Any:
        result = log.read(0, 1 << 30)
        sending.set()
        return spliced(result)

    async def main() -> bytes:
        server, port = await start(handler)
        server.sendfile = False
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(frame(1, b"fetch"))
        await sending.wait()
        await asyncio.sleep(0.3)  # the send is under way, blocked on the full socket
        # a diverging follower cuts the log and a new leader's batches take the positions
        log.truncate_to(3)
        for tag in (b"x", b"y", b"z"):
            log.append_as_follower(
                batch(tag, size=170_000, base_offset=log.log_end_offset, epoch=1)
            )
        got = b""
        with contextlib.suppress(ConnectionResetError):  # the server resets it
            while chunk := await asyncio.wait_for(reader.read(1 << 16), 10):
                got += chunk
        writer.close()
        await server.stop()
        return got

    got = run(loop_kind, main())
    log.close()
    assert len(got) >= 4  # the send had begun
    (size,) = struct.unpack(">i", got[:4])
    frame_body = got[4:]
    assert size == 4 + 1 + 4 + len(expected)
    assert len(frame_body) < size  # incomplete: the client discards it
    sent = frame_body[9:]
    assert sent == expected[: len(sent)]  # every byte sent is a byte of the read
