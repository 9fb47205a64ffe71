"""Controller operations on configs: AlterConfigs, IncrementalAlterConfigs, DescribeConfigs.

Pure functions of (image, request): alterations return ConfigRecords (value null = delete)
and the response; DescribeConfigs reads the image and the static broker config and reports
each value's source and synonyms.  Resources: TOPIC (topic configs, see
`riverbed.metadata.topic_configs`) and BROKER, either one broker ("<id>") or the cluster
default (""), for the keys in `broker_configs.DYNAMIC_BROKER_CONFIGS`; everything else about
a broker is static (server.properties) and read-only, as the non-dynamic keys are in Kafka.
GROUP: one consumer group's KIP-848 overrides (`riverbed.metadata.group_configs`).
CLIENT_METRICS is refused (INVALID_REQUEST, `CLIENT_METRICS_UNSUPPORTED`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from riverbed.metadata.broker_configs import (
    CONFIG_DEFS,
    DYNAMIC_BROKER_CONFIGS,
    describe_broker_config,
)
from riverbed.metadata.config_defs import (
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    ConfigValueError,
)
from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerResult,
    check_request_items,
)
from riverbed.metadata.control_common import ControllerError as _Err
from riverbed.metadata.group_configs import (
    GROUP_CONFIG_DEFS,
    describe_group_config,
    group_config_problem,
    unknown_key_message,
)
from riverbed.metadata.image import MetadataImage
from riverbed.metadata.records import METADATA_TOPIC, ResourceType
from riverbed.metadata.security_configs import dynamic_listener_key, is_dynamic_tls_key
from riverbed.metadata.topic_configs import (
    TOPIC_CONFIG_DEFS,
    describe_topic_config,
    validate_topic_config,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    ConfigRecord,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Message,
)

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

#: CLIENT_METRICS resources (KIP-714 subscriptions) need the client telemetry APIs, which
#: riverbed does not serve: refused as Kafka refuses a resource type it cannot handle
#: (InvalidRequestException), saying why, rather than stored to no effect.
CLIENT_METRICS_UNSUPPORTED = (
    "CLIENT_METRICS resources are not supported: riverbed does not serve client "
    "telemetry (KIP-714 GetTelemetrySubscriptions / PushTelemetry)."
)


def check_topic_configs(configs: Mapping[str, str | None]) -> None:
    for name, value in configs.items():
        problem = validate_topic_config(name, value)
        if problem is not None:
            raise _Err(ErrorCode.INVALID_CONFIG, problem)
    check_tiering_combination(configs)


def check_tiering_allowed(
    configs: Mapping[str, str | None], static_broker_config: Mapping[str, str]
) -> None:
    """``remote.storage.enable=true`` needs the broker's tiered storage system (Kafka's
    validateRemoteStorageOnlyIfSystemEnabled; the controller's static config decides)."""
    tiered = (configs.get("remote.storage.enable") or "").strip().lower() == "true"
    enabled = static_broker_config.get("remote.log.storage.system.enable", "false")
    if tiered and enabled.strip().lower() != "true":
        raise _Err(
            ErrorCode.INVALID_CONFIG,
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
        )


def check_tiering_combination(configs: Mapping[str, str | None]) -> None:
    """A topic's whole override set: tiering and compaction exclude each other."""
    tiered = (configs.get("remote.storage.enable") or "").strip().lower() == "true"
    if tiered and "compact" in (configs.get("cleanup.policy") or ""):
        # KIP-405: compacted topics have no remote storage support
        raise _Err(
            ErrorCode.INVALID_CONFIG,
            "Remote log storage is unsupported for compacted topics: remote.storage.enable="
            "true cannot be set with cleanup.policy=compact",
        )


class _Target:
    """The config set an alteration edits: a topic's overrides or a broker layer."""

    def __init__(self, image: MetadataImage, rtype: int, rname: str) -> None:
        self.rtype = rtype
        self.rname = rname
        if rtype == ResourceType.TOPIC:
            if rname == METADATA_TOPIC:
                raise _Err(ErrorCode.INVALID_REQUEST, f"Cannot alter configs of {rname}.")
            if image.topic(rname) is None:
                raise _Err(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{rname}' does not exist."
                )
        elif rtype == ResourceType.GROUP:
            if rname == "":  # Kafka's ControllerConfigurationValidator.validateGroupName
                raise _Err(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        elif rtype == ResourceType.CLIENT_METRICS:
            raise _Err(ErrorCode.INVALID_REQUEST, CLIENT_METRICS_UNSUPPORTED)
        elif rtype == ResourceType.BROKER:
            if rname != "" and not (rname.isdigit() and len(rname) <= 10):
                raise _Err(ErrorCode.INVALID_REQUEST, f"Invalid broker name {rname!r}.")
            if rname:
                rname = str(int(rname))
                self.rname = rname
        else:
            raise _Err(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}.")
        self.current: dict[str, str] = dict(image.configs.get((rtype, rname), {}))

    @property
    def is_topic(self) -> bool:
        return self.rtype == ResourceType.TOPIC

    def definition(self, name: str) -> ConfigDef:
        if self.rtype == ResourceType.GROUP:
            gdef = GROUP_CONFIG_DEFS.get(name)
            if gdef is None:
                raise _Err(ErrorCode.INVALID_CONFIG, unknown_key_message(name))
            return gdef
        if self.is_topic:
            tdef = TOPIC_CONFIG_DEFS.get(name)
            if tdef is None:
                raise _Err(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            return tdef.definition
        if is_dynamic_tls_key(name):
            if not self.rname:
                raise _Err(
                    ErrorCode.INVALID_REQUEST,
                    "Cannot update these configs at default cluster level, broker id must be "
                    f"specified: {name}",
                )
            listener_key = dynamic_listener_key(name)
            if listener_key is None:
                return CONFIG_DEFS[name]
            return dataclasses.replace(CONFIG_DEFS[listener_key[1]], name=name)
        cdef = CONFIG_DEFS.get(name)
        if cdef is None:
            raise _Err(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {name}")
        if name not in DYNAMIC_BROKER_CONFIGS:
            raise _Err(
                ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {name}"
            )
        return cdef

    def validate(
        self, changed: Mapping[str, str], wanted: Mapping[str, str], static: Mapping[str, str]
    ) -> None:
        """``changed`` keys' values, and for a group its whole resulting set ``wanted``
        over the broker's ``static`` config (Kafka validates a group's configs together)."""
        if self.is_topic:
            check_topic_configs(changed)
            return
        for name, value in changed.items():
            try:
                self.definition(name).parse(value)
            except ConfigValueError as exc:
                raise _Err(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if self.rtype == ResourceType.GROUP:
            problem = group_config_problem(wanted, static)
            if problem is not None:
                raise _Err(ErrorCode.INVALID_CONFIG, problem)

    def diff(self, wanted: Mapping[str, str]) -> list[Message]:
        out: list[Message] = []
        for name in sorted(set(self.current) | set(wanted)):
            new = wanted.get(name)
            if self.current.get(name) != new:
                out.append(
                    ConfigRecord(
                        resource_type=int(self.rtype),
                        resource_name=self.rname,
                        name=name,
                        value=new,
                    )
                )
        return out


def _alter_each(
    image: MetadataImage,
    request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
    result_cls: Any,
    changes: Callable[[_Target, Any], list[Message]],
) -> tuple[list[Any], list[Message]]:
    """Each resource of an (Incremental)AlterConfigs request: its result row (error code
    and message when it fails) and the ConfigRecords ``changes`` makes of it."""
    records: list[Message] = []
    results = []
    for res in request.resources:
        result = result_cls(resource_type=res.resource_type, resource_name=res.resource_name)
        results.append(result)
        try:
            check_request_items(len(request.resources))
            check_request_items(len(res.configs))
            records.extend(changes(_Target(image, res.resource_type, res.resource_name), res))
        except _Err as err:
            result.error_code = int(err.code)
            result.error_message = err.message
    return results, records


class ConfigControl(ControllerBase):
    def alter_configs(
        self, image: MetadataImage, request: AlterConfigsRequest, now_ms: int
    ) -> ControllerResult:
        """Legacy AlterConfigs: the given set REPLACES the resource's dynamic configs."""
        del now_ms

        def replace(target: _Target, res: Any) -> list[Message]:
            wanted: dict[str, str] = {}
            for c in res.configs:
                if c.name in wanted:
                    raise _Err(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                if c.value is None:
                    raise _Err(
                        ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}"
                    )
                target.definition(c.name)
                wanted[c.name] = c.value
            target.validate(wanted, wanted, self.config.static_broker_config)
            if target.is_topic:
                check_tiering_allowed(wanted, self.config.static_broker_config)
            return target.diff(wanted)

        results, records = _alter_each(
            image, request, AlterConfigsResponse.AlterConfigsResourceResponse, replace
        )
        response = AlterConfigsResponse(throttle_time_ms=0, responses=results)
        return ControllerResult([] if request.validate_only else records, response)

    def incremental_alter_configs(
        self, image: MetadataImage, request: IncrementalAlterConfigsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms

        def apply_ops(target: _Target, res: Any) -> list[Message]:
            wanted = dict(target.current)
            seen: set[str] = set()
            for c in res.configs:
                if c.name in seen:
                    raise _Err(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                seen.add(c.name)
                _apply_op(target.definition(c.name), wanted, c.config_operation, c.value)
            changed = {k: v for k, v in wanted.items() if k in seen}
            target.validate(changed, wanted, self.config.static_broker_config)
            if target.is_topic:
                check_tiering_combination(wanted)
                check_tiering_allowed(wanted, self.config.static_broker_config)
            return target.diff(wanted)

        results, records = _alter_each(
            image, request, IncrementalAlterConfigsResponse.AlterConfigsResourceResponse, apply_ops
        )
        response = IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
        return ControllerResult([] if request.validate_only else records, response)

    def describe_configs(
        self, image: MetadataImage, request: DescribeConfigsRequest
    ) -> DescribeConfigsResponse:
        results = []
        node = str(self.config.node_id)
        for res in request.resources:
            # Kafka's ConfigHelperUtils.buildConfigEntries: a null OR empty key list
            # means every key; only a non-empty list filters.
            keys = set(res.configuration_keys) if res.configuration_keys else None
            synonyms = request.include_synonyms
            docs = request.include_documentation
            result = DescribeConfigsResponse.DescribeConfigsResult(
                error_code=0,
                error_message=None,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=[],
            )
            results.append(result)
            entries: list[ConfigEntry]
            if res.resource_type == ResourceType.TOPIC:
                if image.topic(res.resource_name) is None:
                    result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    result.error_message = f"The topic '{res.resource_name}' does not exist."
                    continue
                entries = describe_topic_config(
                    image.topic_config(res.resource_name),
                    self.config.static_broker_config,
                    keys,
                    include_synonyms=synonyms,
                    include_documentation=docs,
                    dynamic_default=image.broker_config(""),
                    dynamic_broker=image.broker_config(node),
                )
            elif res.resource_type == ResourceType.BROKER:
                if res.resource_name == "":
                    # The cluster-wide default resource: only what is set dynamically there.
                    entries = [
                        ConfigEntry(
                            name=k,
                            value=v,
                            source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                            config_type=CONFIG_DEFS[k].type,
                        )
                        for k, v in sorted(image.broker_config("").items())
                        if keys is None or k in keys
                    ]
                elif res.resource_name == node:
                    entries = describe_broker_config(
                        self.config.static_broker_config,
                        image.broker_config(""),
                        image.broker_config(node),
                        keys,
                    ) + _dynamic_listener_entries(image.broker_config(node), keys)
                else:
                    result.error_code = int(ErrorCode.INVALID_REQUEST)
                    result.error_message = (
                        f"Unexpected broker id, expected {node} or empty string, but "
                        f"received {res.resource_name}"
                    )
                    continue
            elif res.resource_type == ResourceType.BROKER_LOGGER:
                entries = []
            elif res.resource_type == ResourceType.GROUP:
                if not res.resource_name:
                    result.error_code = int(ErrorCode.INVALID_REQUEST)
                    result.error_message = "Group name must not be empty"
                    continue
                entries = describe_group_config(
                    image.configs.get((ResourceType.GROUP, res.resource_name), {}),
                    self.config.static_broker_config,
                    keys,
                )
            elif res.resource_type == ResourceType.CLIENT_METRICS:
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = CLIENT_METRICS_UNSUPPORTED
                continue
            else:
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = f"Unsupported resource type {res.resource_type}."
                continue
            result.configs = [_describe_row(e, synonyms, docs) for e in entries]
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _dynamic_listener_entries(
    dynamic: Mapping[str, str], keys: set[str] | None
) -> list[ConfigEntry]:
    """A broker's dynamic ``listener.name.<l>.ssl.*`` configs, as Kafka lists them
    (passwords and inline keys sensitive: no value)."""
    out = []
    for name, value in sorted(dynamic.items()):
        found = dynamic_listener_key(name)
        if found is None or (keys is not None and name not in keys):
            continue
        ctype = CONFIG_DEFS[found[1]].type
        sensitive = ctype == ConfigType.PASSWORD
        out.append(
            ConfigEntry(
                name=name,
                value=None if sensitive else value,
                source=ConfigSource.DYNAMIC_BROKER_CONFIG,
                sensitive=sensitive,
                config_type=ctype,
            )
        )
    return out


def _apply_op(cdef: ConfigDef, wanted: dict[str, str], op: int, value: str | None) -> None:
    name = cdef.name
    if op == OP_SET:
        if value is None:
            raise _Err(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
        wanted[name] = value
    elif op == OP_DELETE:
        wanted.pop(name, None)
    elif op in (OP_APPEND, OP_SUBTRACT):
        if cdef.type != ConfigType.LIST:
            raise _Err(
                ErrorCode.INVALID_CONFIG,
                f"Config value append is not allowed for config key: {name}",
            )
        base = wanted.get(name, cdef.default or "")
        items = [x.strip() for x in base.split(",") if x.strip()]
        given = [x.strip() for x in (value or "").split(",") if x.strip()]
        if op == OP_APPEND:
            items.extend(x for x in given if x not in items)
        else:
            items = [x for x in items if x not in given]
        wanted[name] = ",".join(items)
    else:
        raise _Err(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {name}")


def _describe_row(
    e: ConfigEntry, synonyms: bool, docs: bool
) -> DescribeConfigsResponse.DescribeConfigsResourceResult:
    return DescribeConfigsResponse.DescribeConfigsResourceResult(
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        is_default=e.source == ConfigSource.DEFAULT_CONFIG,
        config_source=int(e.source),
        is_sensitive=e.sensitive,
        synonyms=[
            DescribeConfigsResponse.DescribeConfigsSynonym(
                name=s.name, value=s.value, source=int(s.source)
            )
            for s in (e.synonyms if synonyms else ())
        ],
        config_type=int(e.config_type),
        documentation=e.documentation if docs else None,
    )
