"""Kafka messages: the generated classes plus ``encode``/``decode`` for any version.

Every spec in Kafka's message JSON (requests, responses, headers, KRaft metadata records,
Raft control records, coordinator records) is a ``Message`` subclass here, named as in the
spec (``ProduceRequest``, ``TopicRecord``, ``LeaderChangeMessage``) with its structs as
nested classes (``ProduceRequest.TopicProduceData``). Attributes are the snake_case field
names; ``records`` fields hold raw record-batch bytes (or None), never parsed here.

``encode(msg, version)`` / ``decode(cls, data, version)`` run the compiled codec
(``riverbed.protocol.codec``); the body wire format is described there.
"""

from __future__ import annotations

from typing import Any, TypeVar

from riverbed.protocol.base import MISSING, Message
from riverbed.protocol.codec import (
    EncodeError,
    UnsupportedVersionError,
    compiled,
    with_context,
)
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.schema import MessageSpec, build_all
from riverbed.protocol.schemas import classes as _classes
from riverbed.protocol.schemas.classes import *  # noqa: F403  (re-exported message classes)
from riverbed.protocol.schemas.generated import SCHEMAS

__all__ = [
    "MISSING",
    "EncodeError",
    "Message",
    "ProtocolError",
    "UnsupportedVersionError",
    "all_message_specs",
    "decode",
    "encode",
    "encode_into",
    "get_message",
    "message_spec",
    "metadata_record_class",
    "request_class",
    "response_class",
    *_classes.__all__,
]

M = TypeVar("M", bound=Message)

_SPECS: dict[str, MessageSpec] = build_all(SCHEMAS)
_BY_NAME: dict[str, type[Message]] = {}
_REQUESTS: dict[int, type[Message]] = {}
_RESPONSES: dict[int, type[Message]] = {}
_METADATA_RECORDS: dict[int, type[Message]] = {}


def _bind() -> None:
    """Attach each spec to its generated class (and back)."""
    for name, spec in _SPECS.items():
        cls: type[Message] = getattr(_classes, name)
        cls._message_spec = spec  # type: ignore[attr-defined]
        spec.struct.cls = cls
        cls._spec = spec.struct
        cls._FIELD_NAMES = tuple(f.attr for f in spec.struct.fields)
        for sname, sspec in spec.structs.items():
            scls: type[Message] = getattr(cls, sname)
            sspec.cls = scls
            scls._spec = sspec
            scls._FIELD_NAMES = tuple(f.attr for f in sspec.fields)
        _BY_NAME[name] = cls
        if spec.api_key is not None:
            table = {"request": _REQUESTS, "response": _RESPONSES, "metadata": _METADATA_RECORDS}
            registry = table.get(spec.type)
            if registry is not None:
                registry[spec.api_key] = cls


_bind()


def get_message(name: str) -> type[Message]:
    """The class for a spec name (``"ProduceRequest"``); KeyError when unknown."""
    return _BY_NAME[name]


def message_spec(cls: type[Message] | Message) -> MessageSpec:
    """The parsed schema of a top-level message class."""
    spec: Any = getattr(cls, "_message_spec", None)
    if not isinstance(spec, MessageSpec):
        raise TypeError(f"{cls!r} is not a top-level message class")
    return spec


def all_message_specs() -> dict[str, MessageSpec]:
    return dict(_SPECS)


def request_class(api_key: int) -> type[Message]:
    """The request class for an API key; ProtocolError when the key is unknown."""
    cls = _REQUESTS.get(api_key)
    if cls is None:
        raise ProtocolError(f"unknown api key {api_key}", api_key=api_key)
    return cls


def response_class(api_key: int) -> type[Message]:
    cls = _RESPONSES.get(api_key)
    if cls is None:
        raise ProtocolError(f"unknown api key {api_key}", api_key=api_key)
    return cls


def metadata_record_class(api_key: int) -> type[Message]:
    """KRaft metadata record class by its record type (the spec's apiKey)."""
    cls = _METADATA_RECORDS.get(api_key)
    if cls is None:
        raise ProtocolError(f"unknown metadata record type {api_key}", api_key=api_key)
    return cls


def encode_into(msg: Message, version: int, out: bytearray) -> None:
    """Append ``msg`` encoded at ``version`` to ``out``."""
    spec = message_spec(msg)
    _, enc = compiled(spec, version)
    try:
        enc(msg, out)
    except ProtocolError as e:
        raise with_context(e, api_key=spec.api_key, api_version=version) from None


def encode(msg: Message, version: int) -> bytes:
    """``msg`` encoded at ``version``.

    Raises UnsupportedVersionError when the version does not exist for the message or a
    non-ignorable field that the version lacks holds a non-default value, EncodeError for
    values that cannot be written (wrong type, out of range, null where not nullable).
    """
    out = bytearray()
    encode_into(msg, version, out)
    return bytes(out)


def decode(cls: type[M], data: bytes | bytearray | memoryview, version: int, pos: int = 0) -> M:
    """Decode a whole message body starting at ``pos`` (the rest of ``data`` must be exactly
    the message); ProtocolError on bad, truncated or trailing bytes."""
    obj, end = decode_prefix(cls, data, version, pos)
    if end != len(data):
        spec = message_spec(cls)
        raise ProtocolError(
            f"{len(data) - end} trailing bytes after {spec.name}",
            api_key=spec.api_key,
            api_version=version,
        )
    return obj


def decode_prefix(
    cls: type[M], data: bytes | bytearray | memoryview, version: int, pos: int = 0
) -> tuple[M, int]:
    """Decode a message starting at ``pos``; returns (message, position after it)."""
    spec = message_spec(cls)
    dec, _ = compiled(spec, version)
    buf = data if isinstance(data, bytes) else bytes(data)
    try:
        obj, end = dec(buf, pos)
    except ProtocolError as e:
        raise with_context(e, api_key=spec.api_key, api_version=version) from None
    return obj, end
