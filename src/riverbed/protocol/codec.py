"""The message engine: compiles a (message, version) pair into specialised Python functions.

Wire format per struct (Kafka's protocol guide): the fields present in the version, in
schema order, each in its type's encoding (see ``primitives``); in flexible versions strings,
bytes and arrays use the compact (unsigned varint length + 1) forms and every struct ends
with a tagged-field section holding the fields tagged in that version whose value differs
from the default. A nullable struct is preceded by an int8 marker (-1 = null, 1 = present).

For each (message, version) the engine writes Python source with one decode and one encode
function per struct, straight-line code with the version's decisions already taken and runs
of fixed-width fields packed/unpacked with one ``struct.Struct``; the functions are cached.
Decoders check every length against the bytes that remain before slicing or looping, so
hostile input fails fast with ``ProtocolError`` naming the struct and field.
"""

from __future__ import annotations

import struct
import threading
import uuid
from collections.abc import Callable
from typing import Any

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.primitives import encode_uvarint, read_uvarint
from riverbed.protocol.schema import FieldSpec, MessageSpec, StructSpec

DecodeFn = Callable[[bytes, int], tuple[Any, int]]
EncodeFn = Callable[[Any, bytearray], None]

# How many compiled (message, version) pairs are kept; all specs together have ~730.
COMPILED_CACHE_ENTRIES_MAX = 4096

_FIXED_FORMATS = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}
_FIXED_SIZES = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "I": 4, "d": 8, "?": 1}


class UnsupportedVersionError(ProtocolError):
    """A message, or a non-default field value, that the requested version cannot carry."""


class EncodeError(ProtocolError):
    """A message object whose values cannot be written (wrong type, out of range, null)."""


def with_context(
    e: ProtocolError,
    *,
    field: str | None = None,
    api_key: int | None = None,
    api_version: int | None = None,
) -> ProtocolError:
    """``e`` with missing context filled in, keeping its class (inner context wins)."""
    return type(e)(
        e.reason,
        api_key=e.api_key if e.api_key is not None else api_key,
        api_version=e.api_version if e.api_version is not None else api_version,
        field=e.field if e.field is not None else field,
    )


_HELPERS: dict[str, Any] = {
    "ProtocolError": ProtocolError,
    "_ctx": with_context,
    "UnsupportedVersionError": UnsupportedVersionError,
    "EncodeError": EncodeError,
    "_uv": read_uvarint,  # 32-bit unsigned varint (lengths, tags, counts)
    "_uvb": encode_uvarint,
    "_UUID": uuid.UUID,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_struct_error": struct.error,
    "_I8": struct.Struct(">b"),
    "_I16": struct.Struct(">h"),
    "_I32": struct.Struct(">i"),
}


class _Gen:
    """Source generator for one message at one version."""

    def __init__(self, spec: MessageSpec, version: int) -> None:
        self.spec = spec
        self.version = version
        self.flexible = spec.is_flexible(version)
        self.ns: dict[str, Any] = dict(_HELPERS)
        self.lines: list[str] = []
        self.done: set[str] = set()
        self.isdef_done: set[str] = set()
        self.min_sizes: dict[str, int] = {}
        self.counter = 0

    # -- helpers -------------------------------------------------------------------------

    def const(self, value: Any) -> str:
        self.counter += 1
        name = f"_K{self.counter}"
        self.ns[name] = value
        return name

    def present(self, f: FieldSpec) -> bool:
        return self.version in f.versions

    def tagged(self, f: FieldSpec) -> bool:
        return self.flexible and self.version in f.tagged_versions

    def nullable(self, f: FieldSpec) -> bool:
        return f.type == "records" or self.version in f.nullable_versions

    def compact(self, f: FieldSpec) -> bool:
        if f.flexible_versions is not None:
            return self.version in f.flexible_versions
        return self.flexible

    def struct_min_size(self, s: StructSpec) -> int:
        if s.name in self.min_sizes:
            return self.min_sizes[s.name]
        size = 1 if self.flexible else 0
        for f in s.fields:
            if self.present(f) and not self.tagged(f):
                size += self.field_min_size(f)
        self.min_sizes[s.name] = size
        return size

    def field_min_size(self, f: FieldSpec) -> int:
        if f.is_array:
            return 1 if self.compact(f) else 4
        if f.struct is not None:
            return 1 if self.nullable(f) else self.struct_min_size(f.struct)
        return self.type_min_size(f.type, self.compact(f))

    def type_min_size(self, ftype: str, compact: bool) -> int:
        if ftype in _FIXED_FORMATS:
            return _FIXED_SIZES[_FIXED_FORMATS[ftype]]
        if ftype == "uuid":
            return 16
        if ftype == "string":
            return 1 if compact else 2
        return 1 if compact else 4  # bytes, records

    # -- decoding ------------------------------------------------------------------------

    def gen_struct(self, s: StructSpec) -> None:
        if s.name in self.done:
            return
        self.done.add(s.name)
        for f in s.fields:
            if f.struct is not None and self.present(f):
                self.gen_struct(f.struct)
        self.gen_decoder(s)
        self.gen_encoder(s)

    def fixed_run(self, fields: list[FieldSpec], i: int) -> tuple[list[FieldSpec], int, str]:
        """The run of present, untagged fixed-size fields from ``fields[i]`` on, the index
        after it and the struct format that packs the whole run in one call."""
        run: list[FieldSpec] = []
        while (
            i < len(fields)
            and fields[i].type in _FIXED_FORMATS
            and self.present(fields[i])
            and not self.tagged(fields[i])
        ):
            run.append(fields[i])
            i += 1
        return run, i, ">" + "".join(_FIXED_FORMATS[g.type] for g in run)

    def gen_decoder(self, s: StructSpec) -> None:
        cls_name = self.const(s.cls)
        out = [f"def d_{s.name}(buf, pos):", "    n = len(buf)", "    f = None", "    try:"]
        body: list[str] = []
        fields = s.fields
        i = 0
        while i < len(fields):
            f = fields[i]
            if not self.present(f) or self.tagged(f):
                i += 1
                continue
            if f.type in _FIXED_FORMATS:
                run, i, fmt = self.fixed_run(fields, i)
                st = self.const(struct.Struct(fmt))
                names = ", ".join(f"v_{g.attr}" for g in run)
                body.append(f"f = {run[0].name!r}")
                body.append(f"{names}{',' if len(run) == 1 else ''} = {st}.unpack_from(buf, pos)")
                body.append(f"pos += {struct.calcsize(fmt)}")
                continue
            body.append(f"f = {f.name!r}")
            body += self.decode_value(f, f"v_{f.attr}")
            i += 1
        if self.flexible:
            body += self.decode_tagged(s)
        body.append(f"o = {cls_name}.__new__({cls_name})")
        for f in fields:
            if self.present(f) or self.tagged(f):
                body.append(f"o.{f.attr} = v_{f.attr}")
            else:
                body.append(f"o.{f.attr} = {self.default_expr(f)}")
        if self.flexible:
            body.append("o._unknown_tagged_fields = unk")
        else:
            body.append("o._unknown_tagged_fields = None")
        body.append("return o, pos")
        out += ["        " + b for b in body]
        path = s.path
        out += [
            "    except ProtocolError as e:",
            f"        raise _ctx(e, field=f'{path}.{{f}}' if f else {path!r}) from None",
            "    except (_struct_error, IndexError, ValueError) as e:",
            f"        raise ProtocolError('truncated or malformed input: ' + str(e), field=f'{path}.{{f}}') from None",
        ]
        self.lines += out

    def default_expr(self, f: FieldSpec) -> str:
        if f.is_array:
            return "None" if f.default_text == "null" else "[]"
        if f.struct is not None:
            if f.default_text == "null":
                return "None"
            return f"{self.const(f.struct.cls)}()"
        return self.const(f.default())

    def decode_length(self, compact: bool, fmt: str, var: str) -> list[str]:
        if compact:
            return [
                f"{var} = buf[pos]",
                f"if {var} < 128: pos += 1",
                f"else: {var}, pos = _uv(buf, pos)",
                f"{var} -= 1",
            ]
        return [f"{var}, = {fmt}.unpack_from(buf, pos)", f"pos += {4 if fmt == '_I32' else 2}"]

    def decode_null(self, f: FieldSpec, var: str, ln: str) -> list[str]:
        """Lines handling a negative length; leaves an open ``else:`` for the value."""
        if self.nullable(f):
            return [
                f"if {ln} < 0:",
                f"    if {ln} != -1: raise ProtocolError(f'invalid length {{{ln}}}')",
                f"    {var} = None",
                "else:",
            ]
        return [
            f"if {ln} < 0: raise ProtocolError(f'null or negative length {{{ln}}} in a non-nullable field')",
            "if True:",
        ]

    def decode_value(self, f: FieldSpec, var: str) -> list[str]:
        compact = self.compact(f)
        if f.is_array:
            return self.decode_array(f, var, compact)
        if f.struct is not None:
            fn = f"d_{f.struct.name}"
            if self.nullable(f):
                return [
                    "if buf[pos] >= 128:",
                    f"    pos += 1; {var} = None",
                    "else:",
                    f"    {var}, pos = {fn}(buf, pos + 1)",
                ]
            return [f"{var}, pos = {fn}(buf, pos)"]
        return self.decode_scalar(f.type, var, compact, f)

    def decode_scalar(
        self, ftype: str, var: str, compact: bool, f: FieldSpec | None, nullable_ok: bool = True
    ) -> list[str]:
        if ftype in _FIXED_FORMATS:
            st = self.const(struct.Struct(">" + _FIXED_FORMATS[ftype]))
            size = _FIXED_SIZES[_FIXED_FORMATS[ftype]]
            return [f"{var}, = {st}.unpack_from(buf, pos)", f"pos += {size}"]
        if ftype == "uuid":
            return [
                "if pos + 16 > n: raise ProtocolError('truncated uuid')",
                f"{var} = _UUID(bytes=buf[pos:pos + 16])",
                "pos += 16",
            ]
        if ftype == "string":
            lines = self.decode_length(compact, "_I16", "ln")
            lines += self._null_guard(f, var, nullable_ok)
            lines += [
                "    e = pos + ln",
                "    if e > n: raise ProtocolError(f'string of {ln} bytes exceeds the {n - pos} remaining')",
                f"    {var} = buf[pos:e].decode('utf-8')",
                "    pos = e",
            ]
            return lines
        # bytes and records
        lines = self.decode_length(compact, "_I32", "ln")
        lines += self._null_guard(f, var, nullable_ok)
        lines += [
            "    e = pos + ln",
            "    if e > n: raise ProtocolError(f'bytes of {ln} exceed the {n - pos} remaining')",
            f"    {var} = buf[pos:e]",
            "    pos = e",
        ]
        return lines

    def _null_guard(self, f: FieldSpec | None, var: str, nullable_ok: bool) -> list[str]:
        if f is not None and nullable_ok:
            return self.decode_null(f, var, "ln")
        return [
            "if ln < 0: raise ProtocolError(f'null or negative length {ln} in a non-nullable field')",
            "if True:",
        ]

    def decode_array(self, f: FieldSpec, var: str, compact: bool) -> list[str]:
        elem = f.base_type
        lines = self.decode_length(compact, "_I32", "an")
        lines += self.decode_null(f, var, "an")
        if f.struct is not None:
            esize = max(1, self.struct_min_size(f.struct))
        else:
            esize = self.type_min_size(elem, compact)
        lines.append(
            f"    if an * {esize} > n - pos: raise ProtocolError(f'array of {{an}} elements cannot fit in {{n - pos}} bytes')"
        )
        if f.struct is not None:
            lines += [
                f"    {var} = []",
                "    for _ in range(an):",
                f"        x, pos = d_{f.struct.name}(buf, pos)",
                f"        {var}.append(x)",
            ]
        elif elem in _FIXED_FORMATS:
            code = _FIXED_FORMATS[elem]
            lines += [
                f"    {var} = list(_unpack_from(f'>{{an}}{code}', buf, pos))",
                f"    pos += an * {_FIXED_SIZES[code]}",
            ]
        else:
            inner = self.decode_scalar(elem, "x", compact, None, nullable_ok=False)
            lines += [f"    {var} = []", "    for _ in range(an):"]
            lines += ["        " + line for line in inner]
            lines.append(f"        {var}.append(x)")
        return lines

    def decode_tagged(self, s: StructSpec) -> list[str]:
        tagged = [f for f in s.fields if self.present(f) and self.tagged(f)]
        lines = [f"v_{f.attr} = {self.default_expr(f)}" for f in tagged]
        lines += [
            "unk = None",
            "f = '<tagged fields>'",
            "tn = buf[pos]",
            "if tn < 128: pos += 1",
            "else: tn, pos = _uv(buf, pos)",
            "if tn:",
            "    if tn * 2 > n - pos: raise ProtocolError(f'{tn} tagged fields cannot fit')",
            "    for _ in range(tn):",
            "        tag, pos = _uv(buf, pos)",
            "        size, pos = _uv(buf, pos)",
            "        te = pos + size",
            "        if te > n: raise ProtocolError(f'tagged field {tag} of {size} bytes exceeds the input')",
        ]
        kw = "if"
        for f in tagged:
            lines.append(f"        {kw} tag == {f.tag}:")
            lines.append(f"            f = {f.name!r}")
            inner = self.decode_value(f, f"v_{f.attr}")
            lines += ["            " + line for line in inner]
            lines.append(
                f"            if pos != te: raise ProtocolError(f'tagged field {f.tag} declared {{size}} bytes but used {{pos - te + size}}')"
            )
            kw = "elif"
        if tagged:
            lines.append("        else:")
        else:
            lines.append("        if True:")
        lines += [
            "            if unk is None: unk = []",
            "            unk.append((tag, buf[pos:te]))",
            "            pos = te",
        ]
        return lines

    # -- encoding ------------------------------------------------------------------------

    def gen_encoder(self, s: StructSpec) -> None:
        out = [f"def e_{s.name}(o, out):", "    f = None", "    try:"]
        body: list[str] = []
        fields = s.fields
        i = 0
        while i < len(fields):
            f = fields[i]
            if not self.present(f):
                body += self.check_absent(s, f)
                i += 1
                continue
            if self.tagged(f):
                i += 1
                continue
            if f.type in _FIXED_FORMATS:
                run, i, fmt = self.fixed_run(fields, i)
                st = self.const(struct.Struct(fmt))
                body.append(f"f = {run[0].name!r}")
                body.append(f"out += {st}.pack({', '.join(f'o.{g.attr}' for g in run)})")
                continue
            body.append(f"f = {f.name!r}")
            body += self.encode_value(f, f"o.{f.attr}", "out")
            i += 1
        if self.flexible:
            body += self.encode_tagged(s)
        if not body:
            body.append("pass")
        out += ["        " + b for b in body]
        path = s.path
        out += [
            "    except ProtocolError as e:",
            f"        raise _ctx(e, field=f'{path}.{{f}}' if f else {path!r}) from None",
            "    except (_struct_error, TypeError, ValueError, AttributeError, UnicodeEncodeError, OverflowError) as e:",
            f"        raise EncodeError('cannot encode value: ' + str(e), field=f'{path}.{{f}}') from None",
        ]
        self.lines += out

    def check_absent(self, s: StructSpec, f: FieldSpec) -> list[str]:
        if f.ignorable:
            return []
        cond = self.non_default_cond(f, f"o.{f.attr}")
        return [
            f"if {cond}: raise UnsupportedVersionError("
            f"'attempted to write a non-default {f.name} at version {self.version}', "
            f"field={s.path + '.' + f.name!r})"
        ]

    def non_default_cond(self, f: FieldSpec, expr: str) -> str:
        """A Python condition true when ``expr`` (the field's value) is not its default.

        Struct defaults are checked field by field (``isdef_<Struct>``) rather than by
        building a default instance and comparing, which made encoding Fetch responses
        (three tagged structs per partition) several times slower.
        """
        if f.is_array:
            return f"{expr} is not None" if f.default_text == "null" else expr
        if f.struct is not None:
            if f.default_text == "null":
                return f"{expr} is not None"
            return f"not {self.gen_isdef(f.struct)}({expr})"
        return f"{expr} != {self.const(f.default())}"

    def gen_isdef(self, s: StructSpec) -> str:
        """Name of a function telling whether a struct holds only default values."""
        name = f"isdef_{s.name}"
        if name in self.isdef_done:
            return name
        self.isdef_done.add(name)
        conds = [f"not {self.non_default_cond(f, f'o.{f.attr}')}" for f in s.fields]
        conds.append("not o._unknown_tagged_fields")
        self.lines += [f"def {name}(o):", f"    return {' and '.join(conds)}"]
        return name

    def encode_length(self, compact: bool, fmt: str, expr: str, out: str) -> str:
        if compact:
            return f"{out} += _uvb({expr} + 1)"
        return f"{out} += {fmt}.pack({expr})"

    def encode_null(self, f: FieldSpec, compact: bool, fmt: str, out: str) -> list[str]:
        if self.nullable(f):
            null = (
                "b'\\x00'"
                if compact
                else ("b'\\xff\\xff'" if fmt == "_I16" else "b'\\xff\\xff\\xff\\xff'")
            )
            return ["if x is None:", f"    {out} += {null}", "else:"]
        return [
            f"if x is None: raise EncodeError('null in non-nullable field at version {self.version}')",
            "if True:",
        ]

    def encode_value(self, f: FieldSpec, expr: str, out: str) -> list[str]:
        compact = self.compact(f)
        lines = [f"x = {expr}"]
        if f.is_array:
            lines += self.encode_null(f, compact, "_I32", out)
            lines.append("    " + self.encode_length(compact, "_I32", "len(x)", out))
            elem = f.base_type
            if f.struct is not None:
                lines += ["    for y in x:", f"        e_{f.struct.name}(y, {out})"]
            elif elem in _FIXED_FORMATS:
                code = _FIXED_FORMATS[elem]
                lines.append(f"    {out} += _pack(f'>{{len(x)}}{code}', *x)")
            else:
                lines.append("    for y in x:")
                lines += ["        " + line for line in self.encode_scalar(elem, "y", compact, out)]
            return lines
        if f.struct is not None:
            fn = f"e_{f.struct.name}"
            if self.nullable(f):
                return [
                    *lines,
                    "if x is None:",
                    f"    {out} += b'\\xff'",
                    "else:",
                    f"    {out} += b'\\x01'",
                    f"    {fn}(x, {out})",
                ]
            return [*lines, f"{fn}(x, {out})"]
        if f.type in _FIXED_FORMATS or f.type == "uuid":
            return lines + self.encode_scalar(f.type, "x", compact, out)
        fmt = "_I16" if f.type == "string" else "_I32"
        if self.nullable(f):
            lines += self.encode_null(f, compact, fmt, out)
        else:
            # A null string/bytes goes out empty in the versions that cannot carry null
            # (the default of a field nullable only in later versions is None).
            empty = "''" if f.type == "string" else "b''"
            lines += [f"if x is None: x = {empty}", "if True:"]
        lines += ["    " + line for line in self.encode_scalar(f.type, "x", compact, out)]
        return lines

    def encode_scalar(self, ftype: str, var: str, compact: bool, out: str) -> list[str]:
        if ftype in _FIXED_FORMATS:
            st = self.const(struct.Struct(">" + _FIXED_FORMATS[ftype]))
            return [f"{out} += {st}.pack({var})"]
        if ftype == "uuid":
            return [f"{out} += {var}.bytes"]
        if ftype == "string":
            return [
                f"b = {var}.encode('utf-8')",
                self.encode_length(compact, "_I16", "len(b)", out),
                f"{out} += b",
            ]
        return [self.encode_length(compact, "_I32", f"len({var})", out), f"{out} += {var}"]

    def encode_tagged(self, s: StructSpec) -> list[str]:
        tagged = sorted(
            (f for f in s.fields if self.present(f) and self.tagged(f)),
            key=lambda f: f.tag if f.tag is not None else -1,
        )
        lines = ["tg = None"]
        for f in tagged:
            cond = self.non_default_cond(f, "x")
            lines += [f"f = {f.name!r}", f"x = o.{f.attr}", f"if {cond}:", "    t = bytearray()"]
            lines += ["    " + line for line in self.encode_value(f, "x", "t")]
            lines += ["    if tg is None: tg = []", f"    tg.append(({f.tag}, t))"]
        lines += [
            "u = o._unknown_tagged_fields",
            "if u:",
            "    tg = (tg or []) + list(u)",
            "    tg.sort(key=lambda p: p[0])",
            "if tg is None:",
            "    out += b'\\x00'",
            "else:",
            "    out += _uvb(len(tg))",
            "    for tag, data in tg:",
            "        out += _uvb(tag)",
            "        out += _uvb(len(data))",
            "        out += data",
        ]
        return lines

    def compile(self) -> tuple[DecodeFn, EncodeFn]:
        top = self.spec.struct
        self.gen_struct(top)
        source = "\n".join(self.lines) + "\n"
        code = compile(source, f"<riverbed codec {self.spec.name} v{self.version}>", "exec")
        exec(code, self.ns)
        self.ns["__source__"] = source
        return self.ns[f"d_{top.name}"], self.ns[f"e_{top.name}"]


_compiled: dict[tuple[str, int], tuple[DecodeFn, EncodeFn]] = {}
_compile_lock = threading.Lock()


def compiled(spec: MessageSpec, version: int) -> tuple[DecodeFn, EncodeFn]:
    """The (decoder, encoder) pair for a message at a version, compiled on first use."""
    key = (spec.name, version)
    fns = _compiled.get(key)
    if fns is not None:
        return fns
    if version not in spec.valid_versions:
        raise UnsupportedVersionError(
            f"{spec.name} has no version {version} (valid {spec.valid_versions})",
            api_key=spec.api_key,
            api_version=version,
        )
    with _compile_lock:
        fns = _compiled.get(key)
        if fns is None:
            fns = _Gen(spec, version).compile()
            if len(_compiled) >= COMPILED_CACHE_ENTRIES_MAX:
                _compiled.clear()
            _compiled[key] = fns
    return fns


def source_for(spec: MessageSpec, version: int) -> str:
    """The generated source (for debugging and the curious)."""
    gen = _Gen(spec, version)
    gen.compile()
    return str(gen.ns["__source__"])
