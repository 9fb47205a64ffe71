"""Typed view of the message schema tables (``schemas/generated.py``).

The tables keep Kafka's JSON spec vocabulary: every message has ``name``, ``type``
(request/response/header/data/metadata), ``apiKey``, ``listeners`` (requests: the listener
types serving the API, of ``zkBroker``, ``broker``, ``controller``), ``validVersions``,
``flexibleVersions``, ``fields`` and ``commonStructs``; every field has ``name``, ``type``
(``int8`` .. ``int64``, ``uint16``, ``uint32``, ``float64``, ``bool``, ``string``, ``bytes``,
``records``, ``uuid``, ``[]T`` or a struct name), ``versions``, ``nullableVersions``,
``taggedVersions``, ``tag``, ``default``, ``ignorable``, ``flexibleVersions`` and nested
``fields``. Version ranges are ``"N+"``, ``"N-M"``, ``"N"`` or ``"none"``.

This module turns them into ``MessageSpec``/``StructSpec``/``FieldSpec`` objects with parsed
ranges, resolved struct references and typed defaults; the codec compiles from those.
"""

from __future__ import annotations

import keyword
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from riverbed.protocol.primitives import ZERO_UUID

VERSION_MAX = 0x7FFF

PRIMITIVE_TYPES = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "bool",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)
INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32"})


class SchemaError(Exception):
    """A schema table that does not make sense (a bug in the tables, not in input bytes)."""


@dataclass(frozen=True, slots=True)
class VersionRange:
    """Inclusive range of versions; empty when lo > hi."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | None) -> VersionRange:
        if text is None or text == "" or text == "none":
            return cls(1, 0)
        text = str(text).strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), VERSION_MAX)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == VERSION_MAX:
            return f"{self.lo}+"
        return f"{self.lo}" if self.lo == self.hi else f"{self.lo}-{self.hi}"


_SNAKE_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name -> Python attribute (``ThrottleTimeMs`` -> ``throttle_time_ms``)."""
    # "KRaft" is one word (kraft_version, is_kraft_controller), not "k_raft"
    s = _SNAKE_1.sub(r"\1_\2", name.replace("KRaft", "Kraft"))
    s = _SNAKE_2.sub(r"\1_\2", s)
    s = s.lower()
    if keyword.iskeyword(s):
        s += "_"
    return s


@dataclass(slots=True)
class FieldSpec:
    name: str  # Kafka's name
    attr: str  # snake_case attribute
    type: str  # as in the JSON: "int32", "[]Foo", "Foo", ...
    versions: VersionRange
    nullable_versions: VersionRange
    tagged_versions: VersionRange
    tag: int | None
    ignorable: bool
    default_text: Any
    # Field-level override (RequestHeader.ClientId is a classic string even in header v2).
    flexible_versions: VersionRange | None
    element_type: str | None = None  # for arrays: element type name
    struct: StructSpec | None = None  # for struct fields and arrays of structs

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def is_struct(self) -> bool:
        return self.struct is not None and not self.is_array

    @property
    def is_struct_array(self) -> bool:
        return self.struct is not None and self.is_array

    @property
    def base_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def nullable_anywhere(self) -> bool:
        return not self.nullable_versions.empty or self.type == "records"

    def default(self) -> Any:
        """A fresh default value (a new list / struct each call)."""
        d = self.default_text
        if self.is_array:
            return None if d == "null" else []
        if self.struct is not None:
            return None if d == "null" else self.struct.default_instance()
        return _scalar_default(self.type, d, self.name, not self.nullable_versions.empty)


def _scalar_default(ftype: str, d: Any, name: str, nullable: bool = False) -> Any:
    """A scalar field's default: the spec's ``default``, else the type's zero value.

    A nullable string or bytes field without an explicit default is null, not empty:
    that is what Kafka's brokers put on the wire for an absent error message, config
    value or member id, and clients test for null (an empty ``ErrorMessage`` reads as an
    error). The codec writes such a None as empty in the versions where the field is not
    nullable.
    """
    if ftype in INT_TYPES:
        if d is None or d == "":
            return 0
        if isinstance(d, int) and not isinstance(d, bool):
            return d
        text = str(d).strip().lower()
        return int(text, 16) if text.startswith(("0x", "-0x")) else int(text)
    if ftype == "float64":
        return 0.0 if d is None or d == "" else float(d)
    if ftype == "bool":
        if d is None or d == "":
            return False
        if isinstance(d, bool):
            return d
        if str(d).lower() in ("true", "false"):
            return str(d).lower() == "true"
        raise SchemaError(f"bad bool default {d!r} for {name}")
    if ftype == "string":
        if d is None:
            return None if nullable else ""
        return None if d == "null" else str(d)
    if ftype == "bytes":
        if d is None:
            return None if nullable else b""
        return None if d == "null" else b""
    if ftype == "records":
        return None
    if ftype == "uuid":
        if d is None or d == "" or d == "AAAAAAAAAAAAAAAAAAAAAA":
            return ZERO_UUID
        return uuid.UUID(str(d))
    raise SchemaError(f"unknown type {ftype} for {name}")


@dataclass(slots=True)
class StructSpec:
    name: str  # struct name (class name)
    path: str  # "ProduceRequest.TopicProduceData"
    fields: list[FieldSpec]
    versions: VersionRange  # versions in which the struct can appear
    cls: Any = None  # the Message subclass, bound by riverbed.protocol.messages

    def default_instance(self) -> Any:
        if self.cls is None:
            raise SchemaError(f"struct {self.path} has no class bound")
        return self.cls()


@dataclass(slots=True)
class MessageSpec:
    name: str
    type: str
    api_key: int | None
    valid_versions: VersionRange
    flexible_versions: VersionRange
    struct: StructSpec
    structs: dict[str, StructSpec] = field(default_factory=dict)  # every nested struct by name
    listeners: frozenset[str] = frozenset()  # requests: listener types that serve the API

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _field_spec(ft: Mapping[str, Any]) -> FieldSpec:
    """A field's own attributes (its struct, if any, is resolved by `_StructBuilder`)."""
    ftype = str(ft["type"])
    fname = str(ft["name"])
    tag = ft.get("tag")
    fflex = ft.get("flexibleVersions")
    spec = FieldSpec(
        name=fname,
        attr=snake_case(fname),
        type=ftype,
        # Kafka: a tagged field without "versions" exists in its taggedVersions
        versions=VersionRange.parse(ft.get("versions", ft.get("taggedVersions"))),
        nullable_versions=VersionRange.parse(ft.get("nullableVersions")),
        tagged_versions=VersionRange.parse(ft.get("taggedVersions")),
        tag=None if tag is None else int(tag),
        ignorable=bool(ft.get("ignorable", False)),
        default_text=ft.get("default"),
        flexible_versions=None if fflex is None else VersionRange.parse(fflex),
    )
    if ftype.startswith("[]"):
        spec.element_type = ftype[2:]
    return spec


class _StructBuilder:
    """The structs of one message, nested ones and ``commonStructs`` resolved by name."""

    def __init__(self, name: str, common_tables: Mapping[str, Sequence[Mapping[str, Any]]]):
        self.name = name
        self.common_tables = common_tables
        self.structs: dict[str, StructSpec] = {}

    def struct(
        self, sname: str, ftables: Sequence[Mapping[str, Any]], versions: VersionRange
    ) -> StructSpec:
        existing = self.structs.get(sname)
        if existing is not None:
            if sname in self.common_tables:
                return existing  # a common struct used in several places
            raise SchemaError(f"{self.name}: struct {sname} defined twice")
        spec = StructSpec(sname, f"{self.name}.{sname}", [], versions)
        self.structs[sname] = spec
        spec.fields = [self.field(ft) for ft in ftables]
        return spec

    def field(self, ft: Mapping[str, Any]) -> FieldSpec:
        spec = _field_spec(ft)
        base = spec.type[2:] if spec.type.startswith("[]") else spec.type
        if base not in PRIMITIVE_TYPES:
            nested = ft.get("fields")
            if nested is not None:
                spec.struct = self.struct(base, nested, spec.versions)
            elif base in self.common_tables:
                spec.struct = self.structs.get(base) or self.struct(
                    base, self.common_tables[base], VersionRange(0, VERSION_MAX)
                )
            else:
                raise SchemaError(f"{self.name}.{spec.name}: unknown type {spec.type}")
        if spec.tag is not None and spec.tagged_versions.empty:
            raise SchemaError(f"{self.name}.{spec.name}: tag without taggedVersions")
        return spec


def build_message_spec(table: Mapping[str, Any]) -> MessageSpec:
    """One message's table -> MessageSpec with struct references resolved."""
    name = str(table["name"])
    valid = VersionRange.parse(table["validVersions"])
    flexible = VersionRange.parse(table.get("flexibleVersions", "none"))
    common_tables: dict[str, Sequence[Mapping[str, Any]]] = {
        str(cs["name"]): cs["fields"] for cs in table.get("commonStructs", ())
    }
    builder = _StructBuilder(name, common_tables)
    top = StructSpec(name, name, [], valid)
    top.fields = [builder.field(ft) for ft in table["fields"]]
    for cs_name, cs_fields in common_tables.items():
        if cs_name not in builder.structs:
            builder.struct(cs_name, cs_fields, VersionRange(0, VERSION_MAX))
    attrs = [f.attr for f in top.fields]
    if len(set(attrs)) != len(attrs):
        raise SchemaError(f"{name}: duplicate attribute names {attrs}")
    api_key = table.get("apiKey")
    return MessageSpec(
        name=name,
        type=str(table["type"]),
        api_key=None if api_key is None else int(api_key),
        valid_versions=valid,
        flexible_versions=flexible,
        struct=top,
        structs=builder.structs,
        listeners=frozenset(str(x) for x in table.get("listeners", ())),
    )


def build_all(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, MessageSpec]:
    return {name: build_message_spec(t) for name, t in tables.items()}


def python_type(f: FieldSpec, owner: str) -> str:
    """The annotation used for a field in the generated classes."""
    base = f.base_type
    if base in INT_TYPES:
        t = "int"
    elif base == "float64":
        t = "float"
    elif base == "bool":
        t = "bool"
    elif base == "string":
        t = "str"
    elif base in ("bytes", "records"):
        t = "bytes"
    elif base == "uuid":
        t = "uuid.UUID"
    else:
        t = f"{owner}.{base}"
    nullable = f.nullable_anywhere or f.default_text == "null"
    if f.is_array:
        t = f"list[{t}]"
    if nullable:
        t += " | None"
    return t
