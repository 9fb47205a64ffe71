"""Typed configuration definitions shared by broker and topic configs.

A `ConfigDef` is Kafka's `ConfigDef.ConfigKey` in small: a name, a type, a default in the
string form Kafka shows in DescribeConfigs, and a validator.  Values travel as strings
(server.properties, CreateTopics configs, ConfigRecord) and are parsed by `ConfigDef.parse`
into Python values; a bad value raises `ConfigValueError` whose message follows Kafka's
"Invalid value X for configuration Y: reason".

`ConfigType` numbers are DescribeConfigs' ConfigType field (v3+); `ConfigSource` numbers
are DescribeConfigs' ConfigSource field.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
SHORT_MAX = 2**15 - 1
SHORT_MIN = -(2**15)


class ConfigType(enum.IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigValueError(ValueError):
    """A config value that does not parse or validate; `.key` names the config."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value} for configuration {key}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


_INT_RANGES: dict[ConfigType, tuple[int, int]] = {
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
}

Validator = Callable[[object], str | None]


def at_least(minimum: float) -> Validator:
    def check(value: object) -> str | None:
        assert isinstance(value, int | float)
        return None if value >= minimum else f"Value must be at least {minimum}"

    return check


def between(minimum: float, maximum: float) -> Validator:
    def check(value: object) -> str | None:
        assert isinstance(value, int | float)
        if minimum <= value <= maximum:
            return None
        return f"Value must be between {minimum} and {maximum}"

    return check


def one_of(*allowed: str, case_sensitive: bool = True) -> Validator:
    folded = set(allowed) if case_sensitive else {a.lower() for a in allowed}

    def check(value: object) -> str | None:
        items = value if isinstance(value, list) else [value]
        for item in items:
            assert isinstance(item, str)
            probe = item if case_sensitive else item.lower()
            if probe not in folded:
                return f"String must be one of: {', '.join(allowed)}"
        return None

    return check


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    doc: str = ""
    validator: Validator | None = None
    #: None allowed when the value is null (Kafka: default null, no value set).
    nullable: bool = False

    def parse(self, raw: str | None) -> object:
        """Parse a string value into its typed form, validating it."""
        if raw is None:
            if self.nullable or self.default is None:
                return None
            raise ConfigValueError(self.name, raw, "value must not be null")
        text = raw.strip()
        value: object
        if self.type == ConfigType.BOOLEAN:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ConfigValueError(self.name, raw, "Expected value to be either true or false")
            value = lowered == "true"
        elif self.type in _INT_RANGES:
            try:
                number = int(text)
            except ValueError:
                raise ConfigValueError(
                    self.name, raw, "Not a number of type " + self.type.name
                ) from None
            low, high = _INT_RANGES[self.type]
            if not low <= number <= high:
                raise ConfigValueError(self.name, raw, f"Not a number of type {self.type.name}")
            value = number
        elif self.type == ConfigType.DOUBLE:
            try:
                value = float(text)
            except ValueError:
                raise ConfigValueError(self.name, raw, "Not a number of type DOUBLE") from None
        elif self.type == ConfigType.LIST:
            value = [item.strip() for item in text.split(",") if item.strip()]
        else:
            value = text
        if self.validator is not None:
            problem = self.validator(value)
            if problem is not None:
                raise ConfigValueError(self.name, raw, problem)
        return value

    def default_value(self) -> object:
        return self.parse(self.default) if self.default is not None else None


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = field(default_factory=tuple)
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None


def defs_by_name(defs: Sequence[ConfigDef]) -> dict[str, ConfigDef]:
    table: dict[str, ConfigDef] = {}
    for d in defs:
        assert d.name not in table, f"duplicate config definition {d.name}"
        table[d.name] = d
    return table
