"""Hypothesis strategies that build valid message objects for a given version."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from riverbed.protocol.base import Message
from riverbed.protocol.messages import message_spec
from riverbed.protocol.schema import FieldSpec, MessageSpec, StructSpec

LIST_SIZE_MAX = 3
_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}


def _scalar(ftype: str) -> st.SearchStrategy[Any]:
    if ftype in _INT_RANGES:
        lo, hi = _INT_RANGES[ftype]
        return st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi))
    if ftype == "float64":
        return st.floats(allow_nan=False)
    if ftype == "bool":
        return st.booleans()
    if ftype == "string":
        return st.text(max_size=12)
    if ftype in ("bytes", "records"):
        return st.binary(max_size=24)
    if ftype == "uuid":
        return st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1))
    raise AssertionError(ftype)


def _field(spec: MessageSpec, f: FieldSpec, version: int, unknown: bool) -> st.SearchStrategy[Any]:
    if f.is_array:
        if f.struct is not None:
            elem = struct_strategy(spec, f.struct, version, unknown)
        else:
            elem = _scalar(f.base_type)
        s: st.SearchStrategy[Any] = st.lists(elem, max_size=LIST_SIZE_MAX)
    elif f.struct is not None:
        s = struct_strategy(spec, f.struct, version, unknown)
    else:
        s = _scalar(f.type)
    nullable = version in f.nullable_versions or f.type == "records"
    if nullable:
        s = st.one_of(st.none(), s)
    return s


# Tags no spec defines, to exercise preserving unknown tagged fields.
UNKNOWN_TAGS = st.lists(
    st.tuples(st.integers(1000, 1010), st.binary(max_size=4)),
    max_size=2,
    unique_by=lambda t: t[0],
).map(sorted)


def _set_unknown(pair: tuple[Any, list[tuple[int, bytes]]]) -> Any:
    obj, unknown = pair
    obj._unknown_tagged_fields = unknown or None
    return obj


def struct_strategy(
    spec: MessageSpec, s: StructSpec, version: int, unknown: bool = True
) -> st.SearchStrategy[Any]:
    """Values for every field of ``s`` present at ``version``; with ``unknown``, flexible
    versions also get unknown tagged fields."""
    kwargs = {f.attr: _field(spec, f, version, unknown) for f in s.fields if version in f.versions}
    built = st.builds(s.cls, **kwargs)
    if not unknown or not spec.is_flexible(version):
        return built
    return st.tuples(built, UNKNOWN_TAGS).map(_set_unknown)


def message_strategy(
    cls: type[Message], version: int, unknown_tags: bool = True
) -> st.SearchStrategy[Any]:
    spec = message_spec(cls)
    return struct_strategy(spec, spec.struct, version, unknown_tags)


def as_written(obj: Any, version: int) -> Any:
    """``obj`` (a fresh copy) as the wire carries it at ``version``: a None string or bytes
    in a version where the field is not nullable goes out, and comes back, empty."""
    spec: StructSpec = obj._spec
    kwargs: dict[str, Any] = {}
    for f in spec.fields:
        value = getattr(obj, f.attr)
        if version not in f.versions:
            kwargs[f.attr] = value
        elif f.struct is not None and value is not None:
            if f.is_array:
                value = [as_written(item, version) for item in value]
            else:
                value = as_written(value, version)
            kwargs[f.attr] = value
        elif value is None and f.type in ("string", "bytes") and version not in f.nullable_versions:
            kwargs[f.attr] = "" if f.type == "string" else b""
        else:
            kwargs[f.attr] = value
    copy = type(obj)(**kwargs)
    copy._unknown_tagged_fields = obj._unknown_tagged_fields
    return copy
