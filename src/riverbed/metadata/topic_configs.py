"""Kafka's topic-level configs: names, defaults, validation and broker synonyms.

A topic config's effective value comes from, in order: the topic's dynamic override (a
ConfigRecord for resource type TOPIC; source DYNAMIC_TOPIC_CONFIG), the first of its broker
synonyms that is set, each taken from its most specific layer (this broker's dynamic config
DYNAMIC_BROKER_CONFIG, the cluster's dynamic default DYNAMIC_DEFAULT_BROKER_CONFIG, or
server.properties STATIC_BROKER_CONFIG; e.g. `retention.ms` <-
`log.retention.ms` <- `log.retention.minutes` <- `log.retention.hours`, converted to the
topic key's unit), then the default (source DEFAULT_CONFIG).  That is the value
DescribeConfigs reports and storage's LogConfig reads (`effective_topic_config`).  The
synonyms DescribeConfigs lists are Kafka's: the topic override, then per layer (dynamic
broker, dynamic default, static) the broker keys set there, then the broker keys' own
defaults as DEFAULT_CONFIG (`log.retention.hours=168` for `retention.ms`); a topic key
without a broker synonym lists none but its override.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from riverbed.metadata.config_defs import (
    LONG_MAX,
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    ConfigValueError,
    Validator,
    at_least,
    between,
    defs_by_name,
    one_of,
)

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage

_L = ConfigType.LONG
_I = ConfigType.INT
MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker key whose value (times `multiplier`) stands in for a topic key."""

    name: str
    multiplier: int = 1


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    definition: ConfigDef
    synonyms: tuple[BrokerSynonym, ...]

    @property
    def name(self) -> str:
        return self.definition.name


def _t(
    name: str,
    type_: ConfigType,
    default: str,
    synonyms: tuple[BrokerSynonym, ...] | str | None,
    validator: Validator | None = None,
    doc: str = "",
) -> TopicConfigDef:
    if isinstance(synonyms, str):
        synonyms = (BrokerSynonym(synonyms),)
    return TopicConfigDef(ConfigDef(name, type_, default, doc, validator), synonyms or ())


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    _t("cleanup.policy", ConfigType.LIST, "delete", "log.cleanup.policy",
       one_of("delete", "compact")),
    _t("compression.type", ConfigType.STRING, "producer", "compression.type",
       one_of(*_COMPRESSION, case_sensitive=False)),
    _t("compression.gzip.level", _I, "-1", "compression.gzip.level", between(-1, 9)),
    _t("compression.lz4.level", _I, "9", "compression.lz4.level", between(1, 17)),
    _t("compression.zstd.level", _I, "3", "compression.zstd.level", between(-131072, 22)),
    _t("delete.retention.ms", _L, "86400000", "log.cleaner.delete.retention.ms", at_least(0)),
    _t("file.delete.delay.ms", _L, "60000", "log.segment.delete.delay.ms", at_least(0)),
    _t("flush.messages", _L, str(LONG_MAX), "log.flush.interval.messages", at_least(1)),
    _t("flush.ms", _L, str(LONG_MAX),
       (BrokerSynonym("log.flush.interval.ms"), BrokerSynonym("log.flush.scheduler.interval.ms")),
       at_least(0)),
    _t("follower.replication.throttled.replicas", ConfigType.LIST, "", None),
    _t("index.interval.bytes", _I, "4096", "log.index.interval.bytes", at_least(0)),
    _t("leader.replication.throttled.replicas", ConfigType.LIST, "", None),
    _t("local.retention.bytes", _L, "-2", "log.local.retention.bytes", at_least(-2)),
    _t("local.retention.ms", _L, "-2", "log.local.retention.ms", at_least(-2)),
    _t("max.compaction.lag.ms", _L, str(LONG_MAX), "log.cleaner.max.compaction.lag.ms",
       at_least(1)),
    _t("max.message.bytes", _I, "1048588", "message.max.bytes", at_least(0)),
    _t("message.timestamp.after.max.ms", _L, "3600000", "log.message.timestamp.after.max.ms",
       at_least(0)),
    _t("message.timestamp.before.max.ms", _L, str(LONG_MAX),
       "log.message.timestamp.before.max.ms", at_least(0)),
    _t("message.timestamp.type", ConfigType.STRING, "CreateTime", "log.message.timestamp.type",
       one_of("CreateTime", "LogAppendTime")),
    _t("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio",
       between(0, 1)),
    _t("min.compaction.lag.ms", _L, "0", "log.cleaner.min.compaction.lag.ms", at_least(0)),
    _t("min.insync.replicas", _I, "1", "min.insync.replicas", at_least(1)),
    _t("preallocate", ConfigType.BOOLEAN, "false", "log.preallocate"),
    _t("remote.storage.enable", ConfigType.BOOLEAN, "false", None),
    _t("retention.bytes", _L, "-1", "log.retention.bytes"),
    _t("retention.ms", _L, "604800000",
       (BrokerSynonym("log.retention.ms"), BrokerSynonym("log.retention.minutes", MS_PER_MINUTE),
        BrokerSynonym("log.retention.hours", MS_PER_HOUR)),
       at_least(-1)),
    _t("segment.bytes", _I, "1073741824", "log.segment.bytes", at_least(14)),
    _t("segment.index.bytes", _I, "10485760", "log.index.size.max.bytes", at_least(4)),
    _t("segment.jitter.ms", _L, "0",
       (BrokerSynonym("log.roll.jitter.ms"), BrokerSynonym("log.roll.jitter.hours", MS_PER_HOUR)),
       at_least(0)),
    _t("segment.ms", _L, "604800000",
       (BrokerSynonym("log.roll.ms"), BrokerSynonym("log.roll.hours", MS_PER_HOUR)), at_least(1)),
    _t("unclean.leader.election.enable", ConfigType.BOOLEAN, "false",
       "unclean.leader.election.enable"),
)  # fmt: skip

TOPIC_CONFIG_DEFS: dict[str, TopicConfigDef] = {t.name: t for t in TOPIC_CONFIGS}
assert len(defs_by_name([t.definition for t in TOPIC_CONFIGS])) == len(TOPIC_CONFIGS)

#: Longest topic config value we accept; bounds what a client can make us store.
TOPIC_CONFIG_VALUE_BYTES_MAX = 32_768


def validate_topic_config(name: str, value: str | None) -> str | None:
    """Return Kafka's error text for an invalid topic config (None when valid)."""
    tdef = TOPIC_CONFIG_DEFS.get(name)
    if tdef is None:
        return f"Unknown topic config name: {name}"
    if value is None:
        return f"Null value not supported for topic configs: {name}"
    if len(value) > TOPIC_CONFIG_VALUE_BYTES_MAX:
        return f"Value of {name} is longer than {TOPIC_CONFIG_VALUE_BYTES_MAX} characters"
    try:
        tdef.definition.parse(value)
    except ConfigValueError as exc:
        return str(exc)
    return None


#: Broker layers, most specific first: (values, source).
BrokerLayers = tuple[tuple[Mapping[str, str], ConfigSource], ...]


def broker_layers(
    static_broker_config: Mapping[str, str],
    dynamic_default: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
) -> BrokerLayers:
    return (
        (dynamic_broker or {}, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dynamic_default or {}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static_broker_config, ConfigSource.STATIC_BROKER_CONFIG),
    )


def _converted(syn: BrokerSynonym, raw: str) -> str | None:
    raw = raw.strip()
    if syn.multiplier == 1:
        return raw
    try:
        return str(int(raw) * syn.multiplier)
    except ValueError:
        return None


def _broker_default(name: str) -> str | None:
    # Imported here: broker_configs builds its dynamic-key set from this module's table.
    from riverbed.metadata.broker_configs import CONFIG_DEFS

    cdef = CONFIG_DEFS.get(name)
    return None if cdef is None else cdef.default


def _synonyms(
    tdef: TopicConfigDef, overrides: Mapping[str, str], layers: BrokerLayers
) -> tuple[ConfigSynonym, ...]:
    """Kafka's synonym list for a topic key (``ConfigHelper.createTopicConfigEntry``).

    The topic override first, then per layer (dynamic broker, dynamic default, static)
    every broker synonym set there, then the broker synonyms' own defaults
    (DEFAULT_CONFIG, e.g. ``log.retention.hours=168``): each broker key with its own
    value, not converted to the topic key's unit.
    """
    out: list[ConfigSynonym] = []
    if tdef.name in overrides:
        out.append(
            ConfigSynonym(tdef.name, overrides[tdef.name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
        )
    for values, source in layers:
        out.extend(
            ConfigSynonym(syn.name, values[syn.name], source)
            for syn in tdef.synonyms
            if syn.name in values
        )
    for syn in tdef.synonyms:
        default = _broker_default(syn.name)
        if default is not None:
            out.append(ConfigSynonym(syn.name, default, ConfigSource.DEFAULT_CONFIG))
    return tuple(out)


def _resolve(
    tdef: TopicConfigDef, overrides: Mapping[str, str], layers: BrokerLayers
) -> tuple[str | None, ConfigSource]:
    if tdef.name in overrides:
        return overrides[tdef.name], ConfigSource.DYNAMIC_TOPIC_CONFIG
    # As Kafka: each broker key takes its most specific layer, then the first synonym
    # (log.retention.ms before .minutes before .hours) that is set anywhere wins.
    for syn in tdef.synonyms:
        for values, source in layers:
            if syn.name in values:
                value = _converted(syn, values[syn.name])
                if value is not None:
                    return value, source
                break
    return tdef.definition.default, ConfigSource.DEFAULT_CONFIG


def effective_topic_config(
    overrides: Mapping[str, str],
    static_broker_config: Mapping[str, str],
    *,
    dynamic_default: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every topic config key with the value the broker uses for this topic."""
    layers = broker_layers(static_broker_config, dynamic_default, dynamic_broker)
    out: dict[str, str] = {}
    for tdef in TOPIC_CONFIGS:
        value, _source = _resolve(tdef, overrides, layers)
        out[tdef.name] = "" if value is None else value
    return out


def describe_topic_config(
    overrides: Mapping[str, str],
    static_broker_config: Mapping[str, str],
    names: set[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
    *,
    dynamic_default: Mapping[str, str] | None = None,
    dynamic_broker: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs rows for one topic (all keys, or only `names`), sorted by name."""
    layers = broker_layers(static_broker_config, dynamic_default, dynamic_broker)
    entries: list[ConfigEntry] = []
    for tdef in TOPIC_CONFIGS:
        if names is not None and tdef.name not in names:
            continue
        value, source = _resolve(tdef, overrides, layers)
        entries.append(
            ConfigEntry(
                name=tdef.name,
                value=value,
                source=source,
                read_only=False,
                sensitive=False,
                synonyms=_synonyms(tdef, overrides, layers) if include_synonyms else (),
                config_type=tdef.definition.type,
                documentation=tdef.definition.doc if include_documentation else None,
            )
        )
    return entries


def topic_config_for(
    image: MetadataImage, topic: str, node_id: int, static_broker_config: Mapping[str, str]
) -> dict[str, str]:
    """The effective config of `topic` on broker `node_id`: what its partition logs use."""
    return effective_topic_config(
        image.topic_config(topic),
        static_broker_config,
        dynamic_default=image.broker_config(""),
        dynamic_broker=image.broker_config(node_id),
    )
