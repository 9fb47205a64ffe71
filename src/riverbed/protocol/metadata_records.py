"""KRaft metadata record framing (the value of each record in the metadata log / snapshots).

Wire format (Kafka's ``AbstractApiMessageSerde``)::

    frame_version  unsigned varint  (always 1)
    api_key        unsigned varint  (record type: TopicRecord = 2, PartitionRecord = 3, ...)
    version        unsigned varint  (the record's schema version)
    body           the record encoded at that version (see ``riverbed.protocol.codec``)

The record types and their schemas are Kafka's ``metadata/*.json`` specs
(``riverbed.protocol.messages.metadata_record_class``). The records a snapshot is made of
(PartitionRecord, TopicRecord, PartitionChangeRecord at version 0) go through the
specialised C codecs of ``riverbed.protocol.fastpath`` when it is built; everything else,
malformed input included, through the generic engine (the ``*_generic`` functions), which
the fast path is tested against byte for byte.
"""

from __future__ import annotations

from riverbed.protocol.base import Message
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.fastpath import FAST_VERSION, fast
from riverbed.protocol.messages import (
    decode,
    encode_into,
    message_spec,
    metadata_record_class,
)
from riverbed.protocol.primitives import encode_uvarint, read_uvarint

METADATA_FRAME_VERSION = 1


def encode_metadata_record(msg: Message, version: int) -> bytes:
    """Frame ``msg`` (a metadata record such as ``TopicRecord``) at ``version``."""
    if fast is not None and version == FAST_VERSION:
        data: bytes | None = fast.encode_record(msg)
        if data is not None:
            return data
    return encode_metadata_record_generic(msg, version)


def encode_metadata_record_generic(msg: Message, version: int) -> bytes:
    """``encode_metadata_record`` by the generic message engine (the reference)."""
    spec = message_spec(msg)
    if spec.type != "metadata" or spec.api_key is None:
        raise TypeError(f"{spec.name} is not a metadata record")
    out = bytearray(encode_uvarint(METADATA_FRAME_VERSION))
    out += encode_uvarint(spec.api_key)
    out += encode_uvarint(version)
    encode_into(msg, version, out)
    return bytes(out)


def decode_metadata_record(data: bytes | bytearray | memoryview) -> tuple[Message, int]:
    """Parse a framed metadata record; returns (record, version)."""
    if fast is not None:
        got: tuple[Message, int] | None = fast.decode_record(data)
        if got is not None:
            return got
    return decode_metadata_record_generic(data)


def decode_metadata_record_generic(
    data: bytes | bytearray | memoryview,
) -> tuple[Message, int]:
    """``decode_metadata_record`` by the generic message engine (the reference)."""
    buf = data if isinstance(data, bytes) else bytes(data)
    frame_version, pos = read_uvarint(buf, 0, field="frame_version")
    if frame_version != METADATA_FRAME_VERSION:
        raise ProtocolError(
            f"unknown metadata record frame version {frame_version} "
            f"(only {METADATA_FRAME_VERSION} is supported)",
            field="frame_version",
        )
    api_key, pos = read_uvarint(buf, pos, field="api_key")
    version, pos = read_uvarint(buf, pos, field="version")
    cls = metadata_record_class(api_key)
    if version not in message_spec(cls).valid_versions:
        raise ProtocolError(
            f"{cls.__name__} has no version {version}", api_key=api_key, api_version=version
        )
    return decode(cls, buf, version, pos), version
