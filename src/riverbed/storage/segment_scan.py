"""A segment's ``.log`` file read from its start: its format, and the valid prefix that
recovery keeps (Kafka's ``LogSegment.recover``).

Format of ``{B:020d}.log`` (segment base offset B): v2 record batches back to back, each
exactly as on the wire with its offsets assigned, and nothing else (no file header, no
padding, no trailer)::

    baseOffset            int64   absolute offset of the batch's first record
    batchLength           int32   bytes after this field (the batch is 12 + batchLength)
    partitionLeaderEpoch  int32
    magic                 int8    2
    crc                   uint32  CRC-32C of attributes .. the last record
    attributes            int16   compression, timestamp type, transactional, control
    lastOffsetDelta       int32
    baseTimestamp         int64
    maxTimestamp          int64
    producerId            int64
    producerEpoch         int16
    baseSequence          int32
    recordCount           int32
    records               ...     (61 header bytes in all before them)

The *valid prefix* is the run of batches from position 0 in which each batch's header
parses, lies wholly inside the file, validates (magic 2, lengths, CRC-32C:
`riverbed.protocol.records.validate_batch`), starts at or after the previous batch's next
offset, and ends at an offset the segment's 32-bit relative offsets can hold
(``lastOffset - B <= 2**31 - 1``). The first batch that fails any of these ends it: a torn
write at a crash or a corruption, after which recovery truncates the file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import BATCH_HEADER_SIZE, BatchHeader, parse_header, validate_batch
from riverbed.storage.index_file import INT32_MAX

log = logging.getLogger(__name__)

#: Recovery reads the .log in chunks of this size (a batch larger than it is read whole).
RECOVERY_READ_BYTES: Final = 8 * 1024 * 1024

#: ``pread(size, position)``: up to ``size`` bytes of the file from ``position``.
Pread = Callable[[int, int], bytes]


def valid_batches(
    pread: Pread, file_size: int, base_offset: int, path: Path
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of the valid prefix of a ``.log`` of
    ``file_size`` bytes, in file order; the reason it ends early is logged (``path``)."""
    pos = 0
    chunk = b""
    chunk_start = 0
    next_offset = base_offset
    while pos < file_size:
        rel = pos - chunk_start
        if rel + BATCH_HEADER_SIZE > len(chunk):
            chunk = pread(RECOVERY_READ_BYTES, pos)
            chunk_start, rel = pos, 0
        try:
            h = parse_header(chunk, rel)
        except ProtocolError as e:
            log.warning("%s: invalid batch header at %d: %s", path, pos, e)
            return
        if pos + h.size > file_size:
            log.warning("%s: torn batch at %d (%d bytes)", path, pos, h.size)
            return
        if rel + h.size > len(chunk):
            chunk = pread(max(RECOVERY_READ_BYTES, h.size), pos)
            chunk_start, rel = pos, 0
        try:
            h = validate_batch(chunk, rel)
        except ProtocolError as e:
            log.warning("%s: corrupt batch at %d: %s", path, pos, e)
            return
        if h.base_offset < next_offset or not 0 <= h.last_offset - base_offset <= INT32_MAX:
            log.warning(
                "%s: batch at %d has offsets %d..%d out of order (expected >= %d)",
                path,
                pos,
                h.base_offset,
                h.last_offset,
                next_offset,
            )
            return
        yield pos, h
        next_offset = h.next_offset
        pos += h.size
