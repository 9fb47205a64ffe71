"""Fetch responses whose record data are file ranges (sendfile), planned before sending.

A handler puts ``FileRecords.token`` (16 bytes: the process's secret random 8-byte prefix
and a counter, unique in the process and unguessable to a client that would write it into
its records) in each ``records`` field of the response and lists the `FileRecords` in a `SplicedResponse`; the network layer encodes the
response, then `splice_plan` cuts it at the tokens into bytes and file ranges in wire order
(each token's length prefix replaced by the real size's).
"""

from __future__ import annotations

import itertools
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from riverbed.protocol.primitives import encode_uvarint

if TYPE_CHECKING:
    from riverbed.protocol.messages import Message

_INT32 = struct.Struct(">i")

#: The tokens' secret prefix, drawn once: ``secrets.token_bytes`` per fetched partition was
#: a getrandom call and ~1% of a replication leader's CPU (issue 23).
_TOKEN_PREFIX = secrets.token_bytes(8)
_TOKEN_SEQUENCE = itertools.count()
_TOKEN_SUFFIX = struct.Struct(">Q")


def _new_token() -> bytes:
    return _TOKEN_PREFIX + _TOKEN_SUFFIX.pack(next(_TOKEN_SEQUENCE))


class FileRange(Protocol):
    """A byte range of a segment file pinned at read time (storage's ``FileRange``)."""

    @property
    def fd(self) -> int: ...

    @property
    def position(self) -> int: ...

    @property
    def size(self) -> int: ...

    def intact(self) -> bool:
        """False once the file was truncated under the range (its bytes may differ)."""
        ...

    def close(self) -> None: ...


@dataclass
class FileRecords:
    """Record data of one fetched partition: file ranges streamed without copying."""

    ranges: Sequence[FileRange]
    token: bytes = field(default_factory=_new_token)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


@dataclass
class SplicedResponse:
    """A response body whose ``records`` fields are `FileRecords` tokens.

    The handler puts ``file_records.token`` into each ``records`` field of ``body`` and
    lists the `FileRecords` here; ``compact`` says whether the API version is flexible
    (compact bytes: uvarint length+1) or classic (int32 length).
    """

    body: Message
    files: list[FileRecords]
    compact: bool


def splice_plan(encoded: bytes, spliced: SplicedResponse) -> list[bytes | FileRecords]:
    """Split an encoded response at the tokens: bytes and file ranges, in wire order.

    ``encoded`` is the response WITHOUT its 4-byte size prefix. Each token is preceded by
    its length prefix as the encoder wrote it for 16 bytes; that prefix is replaced by the
    prefix for the real size. The tokens are found wherever the encoder wrote them: the
    order of ``spliced.files`` is only the likely one.
    """
    if spliced.compact:
        old_prefix = encode_uvarint(16 + 1)
    else:
        old_prefix = _INT32.pack(16)
    parts: list[bytes | FileRecords] = []
    pos = 0
    for at, fr in _token_positions(encoded, old_prefix, spliced.files):
        new_prefix = encode_uvarint(fr.size + 1) if spliced.compact else _INT32.pack(fr.size)
        parts.append(encoded[pos:at] + new_prefix)
        parts.append(fr)
        pos = at + len(old_prefix) + 16
    parts.append(encoded[pos:])
    return parts


def _token_positions(
    encoded: bytes, old_prefix: bytes, files: Sequence[FileRecords]
) -> list[tuple[int, FileRecords]]:
    """Where each file's (prefix + token) starts in ``encoded``, sorted by position.

    One scan when the files are listed in wire order (the fetch handler lists them so);
    otherwise each token is searched from the start. A token is 16 random bytes, so it
    occurs exactly where the encoder wrote it.
    """
    found: list[tuple[int, FileRecords]] = []
    pos = 0
    for fr in files:
        at = encoded.find(old_prefix + fr.token, pos)
        if at < 0:
            break
        found.append((at, fr))
        pos = at + len(old_prefix) + 16
    else:
        return found
    found = []
    for fr in files:
        at = encoded.find(old_prefix + fr.token)
        if at < 0:
            raise ValueError("fetch response token not found in the encoded response")
        found.append((at, fr))
    found.sort(key=lambda item: item[0])
    return found


def plan_size(parts: Sequence[bytes | FileRecords]) -> int:
    return sum(len(p) if isinstance(p, bytes) else p.size for p in parts)
