"""Nullable strings and bytes without a spec default are null, as Kafka sends them.

Kafka's brokers write null (length -1, or compact length 0) for an absent error message,
config value or member id; clients test for null, so an empty string reads as an error.
Every message at every version: defaults encode, and each nullable field without an
explicit default comes back null; in the versions where a field is not nullable, a None
goes out empty instead of failing the encode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.unit.protocol.strategies import as_written

from riverbed.protocol import messages as m
from riverbed.protocol.schema import FieldSpec, StructSpec

ALL = [
    (name, version)
    for name, spec in sorted(m.all_message_specs().items())
    for version in range(spec.valid_versions.lo, spec.valid_versions.hi + 1)
]
RESPONSES = [(n, v) for n, v in ALL if m.all_message_specs()[n].type == "response"]


def _null_by_default(f: FieldSpec) -> bool:
    return (
        f.type in ("string", "bytes") and f.default_text is None and not f.nullable_versions.empty
    )


def _filled(s: StructSpec, version: int, depth: int = 0) -> Any:
    """A default instance of ``s`` whose struct arrays present at ``version`` hold one
    default element each, so nested nullable fields are encoded too."""
    obj = s.cls()
    for f in s.fields:
        if f.struct is None or version not in f.versions or depth > 4:
            continue
        child = _filled(f.struct, version, depth + 1)
        if f.is_array:
            setattr(obj, f.attr, [child])
        else:
            setattr(obj, f.attr, child)
    return obj


def _walk(obj: Any, s: StructSpec, version: int) -> Iterator[tuple[FieldSpec, Any]]:
    for f in s.fields:
        if version not in f.versions:
            continue
        value = getattr(obj, f.attr)
        if f.struct is not None and value is not None:
            for item in value if f.is_array else [value]:
                yield from _walk(item, f.struct, version)
        else:
            yield f, value


def test_every_message_has_nullable_fields_defaulting_to_null() -> None:
    nulls = [
        (name, f.name)
        for name, spec in m.all_message_specs().items()
        for s in [spec.struct, *spec.structs.values()]
        for f in s.fields
        if _null_by_default(f)
    ]
    assert ("CreateTopicsResponse", "ErrorMessage") in nulls
    assert len(nulls) > 50
    for f in m.CreateTopicsResponse.CreatableTopicResult._spec.fields:
        if f.name == "ErrorMessage":
            assert f.default() is None


@pytest.mark.parametrize(("name", "version"), RESPONSES, ids=[f"{n}-v{v}" for n, v in RESPONSES])
def test_response_defaults_encode_at_every_version(name: str, version: int) -> None:
    cls = m.get_message(name)
    spec = m.message_spec(cls)
    obj = _filled(spec.struct, version)
    data = m.encode(obj, version)
    decoded = m.decode(cls, data, version)
    assert decoded == as_written(obj, version)
    assert m.encode(decoded, version) == data


@pytest.mark.parametrize(("name", "version"), ALL, ids=[f"{n}-v{v}" for n, v in ALL])
def test_nullable_fields_without_default_travel_as_null(name: str, version: int) -> None:
    cls = m.get_message(name)
    spec = m.message_spec(cls)
    decoded = m.decode(cls, m.encode(_filled(spec.struct, version), version), version)
    for f, value in _walk(decoded, spec.struct, version):
        if not _null_by_default(f):
            continue
        if version in f.nullable_versions:
            assert value is None, f"{name} v{version} {f.name}: {value!r}"
        else:
            assert value == ("" if f.type == "string" else b""), f"{name} v{version} {f.name}"


@pytest.mark.parametrize("version", range(3, 8))
def test_create_topics_success_carries_a_null_error_message(version: int) -> None:
    result = m.CreateTopicsResponse.CreatableTopicResult(name="t", error_code=0)
    resp = m.CreateTopicsResponse(topics=[result])
    data = m.encode(resp, version)
    flexible = version >= 5
    name = (b"\x02t" if flexible else b"\x00\x01t") + b"\x00\x00"  # + error code 0
    if version >= 7:
        name = (b"\x02t" + bytes(16)) + b"\x00\x00"  # topic id (zero uuid) before the code
    at = data.index(name) + len(name)
    # Kafka: a null string is length -1 (int16), or compact length 0 in flexible versions
    assert data[at : at + (1 if flexible else 2)] == (b"\x00" if flexible else b"\xff\xff")
    assert m.decode(m.CreateTopicsResponse, data, version).topics[0].error_message is None


def test_null_in_a_version_that_cannot_carry_it_goes_out_empty() -> None:
    # MetadataResponseTopic.Name is nullable from v12 only; JoinGroup ProtocolName from v7.
    topic = m.MetadataResponse.MetadataResponseTopic(name=None)
    old = m.decode(m.MetadataResponse, m.encode(m.MetadataResponse(topics=[topic]), 1), 1)
    new = m.decode(m.MetadataResponse, m.encode(m.MetadataResponse(topics=[topic]), 12), 12)
    assert old.topics[0].name == "" and new.topics[0].name is None
    join = m.JoinGroupResponse(protocol_name=None)
    assert m.decode(m.JoinGroupResponse, m.encode(join, 5), 5).protocol_name == ""
    assert m.decode(m.JoinGroupResponse, m.encode(join, 7), 7).protocol_name is None
