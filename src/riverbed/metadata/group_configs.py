"""A group's dynamic configs (ConfigResource type GROUP, Kafka's GroupConfig, KIP-848).

``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` override, for one
consumer group, the broker's ``group.consumer.session.timeout.ms`` /
``group.consumer.heartbeat.interval.ms``. They are ConfigRecords of resource type GROUP in
the metadata log, set by (Incremental)AlterConfigs and read by DescribeConfigs and by the
KIP-848 group coordinator. Kafka's ``share.*`` group keys are refused: riverbed has no
share groups.

Validation is Kafka's GroupConfigManager.validate: the group's whole resulting set over the
broker's group.consumer.* values, each value an INT of at least 1, then within the broker's
group.consumer.min/max.* bounds, the session timeout above the heartbeat interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from riverbed.metadata.broker_configs import CONFIG_DEFS
from riverbed.metadata.config_defs import (
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigValueError,
)

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
#: Kafka's GroupCoordinatorConfig.GROUP_PREFIX: a group key's broker default is this + key
BROKER_PREFIX = "group."
_DOCS = {
    SESSION: "The timeout to detect client failures when using the consumer group protocol.",
    HEARTBEAT: "The heartbeat interval given to the members of a consumer group.",
}
#: key -> its definition (the broker key's type, default and at-least-1 check)
GROUP_CONFIG_DEFS: dict[str, ConfigDef] = {
    name: dataclasses.replace(CONFIG_DEFS[BROKER_PREFIX + name], name=name, doc=doc)
    for name, doc in _DOCS.items()
}


def unknown_key_message(name: str) -> str:
    """Kafka's GroupConfig.validateNames message (and why, for a share group key)."""
    message = f"Unknown group config name: {name}"
    if name.startswith("share."):
        message += " (riverbed has no share groups)"
    return message


def _broker_value(static: Mapping[str, str], key: str) -> str:
    value = static.get(key, CONFIG_DEFS[key].default)
    assert value is not None  # every group.consumer.* key has a default
    return value


def group_defaults(static: Mapping[str, str]) -> dict[str, str]:
    """Each group key's value where the group sets none: the broker's (Kafka's
    extractConsumerGroupConfigMap)."""
    return {name: _broker_value(static, BROKER_PREFIX + name) for name in GROUP_CONFIG_DEFS}


def group_config_problem(configs: Mapping[str, str], static: Mapping[str, str]) -> str | None:
    """Why a group's resulting config set is invalid (Kafka's GroupConfig.validate and its
    messages), None when it is valid. Unknown keys are refused before this."""
    merged = {**group_defaults(static), **configs}
    try:
        values = {name: GROUP_CONFIG_DEFS[name].parse(merged[name]) for name in GROUP_CONFIG_DEFS}
    except ConfigValueError as exc:
        return str(exc)
    for name in (HEARTBEAT, SESSION):
        value = values[name]
        assert isinstance(value, int)
        low_key, high_key = _bound_keys(name)
        if value < int(_broker_value(static, low_key)):
            return f"{name} must be greater than or equal to {low_key}"
        if value > int(_broker_value(static, high_key)):
            return f"{name} must be less than or equal to {high_key}"
    session, heartbeat = values[SESSION], values[HEARTBEAT]
    assert isinstance(session, int) and isinstance(heartbeat, int)
    if session <= heartbeat:
        return f"{SESSION} must be greater than {HEARTBEAT}"
    return None


def _bound_keys(name: str) -> tuple[str, str]:
    """consumer.session.timeout.ms -> group.consumer.min/max.session.timeout.ms."""
    rest = name.removeprefix("consumer.")
    return f"group.consumer.min.{rest}", f"group.consumer.max.{rest}"


def describe_group_config(
    overrides: Mapping[str, str], static: Mapping[str, str], names: set[str] | None
) -> list[ConfigEntry]:
    """DescribeConfigs rows of one group (Kafka's ConfigHelper.createGroupConfigEntry): its
    own value (GROUP_CONFIG) or the broker's; synonyms the group's value, then the broker
    key's static value and default."""
    entries = []
    for name in sorted(GROUP_CONFIG_DEFS):
        if names is not None and name not in names:
            continue
        cdef = GROUP_CONFIG_DEFS[name]
        broker_key = BROKER_PREFIX + name
        synonyms = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.GROUP_CONFIG))
        if broker_key in static:
            synonyms.append(
                ConfigSynonym(broker_key, static[broker_key], ConfigSource.STATIC_BROKER_CONFIG)
            )
        default = CONFIG_DEFS[broker_key].default
        synonyms.append(ConfigSynonym(broker_key, default, ConfigSource.DEFAULT_CONFIG))
        value = overrides.get(name, _broker_value(static, broker_key))
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=synonyms[0].source,
                synonyms=tuple(synonyms),
                config_type=cdef.type,
                documentation=cdef.doc,
            )
        )
    return entries
