"""``Message``: the base of every generated message and struct class.

Generated subclasses (``schemas/classes.py``) declare ``__slots__`` with one snake_case
attribute per schema field and a keyword-only ``__init__`` whose defaults are the schema
defaults. Unknown tagged fields met while decoding are kept in ``_unknown_tagged_fields``
as ``[(tag, raw bytes)]`` and written back on encode, so a message passes through riverbed
without losing fields a newer peer added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from riverbed.protocol.schema import StructSpec


class _Missing:
    """Marks "argument not given" so mutable defaults are created per instance."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Message:
    """A Kafka message or one of its structs."""

    __slots__ = ("_unknown_tagged_fields",)
    _SPEC_PATH: ClassVar[str] = ""
    # Bound by riverbed.protocol.messages when the classes are loaded.
    _spec: ClassVar[StructSpec]
    _FIELD_NAMES: ClassVar[tuple[str, ...]] = ()  # attributes in schema order
    _unknown_tagged_fields: list[tuple[int, bytes]] | None

    def _field_names(self) -> tuple[str, ...]:
        return self._FIELD_NAMES

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self._field_names():
            if getattr(self, name) != getattr(other, name):
                return False
        return (self._unknown_tagged_fields or None) == (other._unknown_tagged_fields or None)

    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass with eq

    def __repr__(self) -> str:
        parts = [f"{name}={getattr(self, name)!r}" for name in self._field_names()]
        if self._unknown_tagged_fields:
            parts.append(f"_unknown_tagged_fields={self._unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """Plain data view (nested structs and lists converted), handy for logs and tests."""

        def conv(v: Any) -> Any:
            if isinstance(v, Message):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v

        return {name: conv(getattr(self, name)) for name in self._field_names()}
