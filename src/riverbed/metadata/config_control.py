"""Controller operations on configs: AlterConfigs, IncrementalAlterConfigs, DescribeConfigs.

Pure functions of (image, request): alterations return ConfigRecords (value null = delete)
and the response; DescribeConfigs reads the image and the static broker config and reports
each value's source and synonyms (see `riverbed.metadata.topic_configs`).  Only topic
resources can be altered; broker configs are static (server.properties) in riverbed.
"""

from __future__ import annotations

from collections.abc import Mapping

from riverbed.metadata.config_defs import ConfigEntry, ConfigSource, ConfigType
from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerResult,
    check_request_items,
)
from riverbed.metadata.control_common import ControllerError as _Err
from riverbed.metadata.image import MetadataImage
from riverbed.metadata.records import METADATA_TOPIC, ResourceType
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


def check_topic_configs(configs: Mapping[str, str | None]) -> None:
    for name, value in configs.items():
        problem = validate_topic_config(name, value)
        if problem is not None:
            raise _Err(ErrorCode.INVALID_CONFIG, problem)


class ConfigControl(ControllerBase):
    # ------------------------------------------------------------------ configs
    def _resource_error(self, image: MetadataImage, rtype: int, rname: str) -> _Err | None:
        if rtype == ResourceType.TOPIC:
            if rname == METADATA_TOPIC:
                return _Err(ErrorCode.INVALID_REQUEST, f"Cannot alter configs of {rname}.")
            if image.topic(rname) is None:
                return _Err(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"The topic '{rname}' does not exist.",
                )
            return None
        if rtype == ResourceType.BROKER:
            return _Err(
                ErrorCode.INVALID_REQUEST,
                "riverbed does not support dynamic broker configs yet; set them in "
                "server.properties.",
            )
        return _Err(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}.")

    def alter_configs(
        self, image: MetadataImage, request: AlterConfigsRequest, now_ms: int
    ) -> ControllerResult:
        """Legacy AlterConfigs: the given set REPLACES the resource's dynamic configs."""
        del now_ms
        records: list[Message] = []
        results = []
        for res in request.resources:
            result = AlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=res.resource_type, resource_name=res.resource_name
            )
            results.append(result)
            try:
                check_request_items(len(request.resources))
                check_request_items(len(res.configs))
                err = self._resource_error(image, res.resource_type, res.resource_name)
                if err is not None:
                    raise err
                wanted: dict[str, str] = {}
                for c in res.configs:
                    if c.name in wanted:
                        raise _Err(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                    if c.value is None:
                        raise _Err(
                            ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}"
                        )
                    wanted[c.name] = c.value
                check_topic_configs(wanted)
                current = image.topic_config(res.resource_name)
                records.extend(self._config_diff(res.resource_name, current, wanted))
            except _Err as err:
                result.error_code = int(err.code)
                result.error_message = err.message
        response = AlterConfigsResponse(throttle_time_ms=0, responses=results)
        return ControllerResult([] if request.validate_only else records, response)

    def incremental_alter_configs(
        self, image: MetadataImage, request: IncrementalAlterConfigsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        records: list[Message] = []
        results = []
        for res in request.resources:
            result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=res.resource_type, resource_name=res.resource_name
            )
            results.append(result)
            try:
                check_request_items(len(request.resources))
                check_request_items(len(res.configs))
                err = self._resource_error(image, res.resource_type, res.resource_name)
                if err is not None:
                    raise err
                current = dict(image.topic_config(res.resource_name))
                wanted = dict(current)
                seen: set[str] = set()
                for c in res.configs:
                    if c.name in seen:
                        raise _Err(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                    seen.add(c.name)
                    self._apply_op(wanted, c.name, c.config_operation, c.value)
                check_topic_configs({k: v for k, v in wanted.items() if k in seen})
                records.extend(self._config_diff(res.resource_name, current, wanted))
            except _Err as err:
                result.error_code = int(err.code)
                result.error_message = err.message
        response = IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
        return ControllerResult([] if request.validate_only else records, response)

    @staticmethod
    def _apply_op(wanted: dict[str, str], name: str, op: int, value: str | None) -> None:
        tdef = TOPIC_CONFIG_DEFS.get(name)
        if tdef is None:
            raise _Err(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if op == OP_SET:
            if value is None:
                raise _Err(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
            wanted[name] = value
        elif op == OP_DELETE:
            wanted.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if tdef.definition.type != ConfigType.LIST:
                raise _Err(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value append is not allowed for config key: {name}",
                )
            base = wanted.get(name, tdef.definition.default or "")
            items = [x.strip() for x in base.split(",") if x.strip()]
            given = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == OP_APPEND:
                items.extend(x for x in given if x not in items)
            else:
                items = [x for x in items if x not in given]
            wanted[name] = ",".join(items)
        else:
            raise _Err(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {name}")

    @staticmethod
    def _config_diff(
        topic: str, current: Mapping[str, str], wanted: Mapping[str, str]
    ) -> list[Message]:
        out: list[Message] = []
        for name in sorted(set(current) | set(wanted)):
            new = wanted.get(name)
            if current.get(name) != new:
                out.append(
                    ConfigRecord(
                        resource_type=int(ResourceType.TOPIC),
                        resource_name=topic,
                        name=name,
                        value=new,
                    )
                )
        return out

    def describe_configs(
        self, image: MetadataImage, request: DescribeConfigsRequest
    ) -> DescribeConfigsResponse:
        results = []
        for res in request.resources:
            keys = None if res.configuration_keys is None else set(res.configuration_keys)
            synonyms = bool(getattr(request, "include_synonyms", False))
            docs = bool(getattr(request, "include_documentation", False))
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
                )
            elif res.resource_type == ResourceType.BROKER:
                if res.resource_name not in ("", str(self.config.node_id)):
                    result.error_code = int(ErrorCode.INVALID_REQUEST)
                    result.error_message = (
                        f"Unexpected broker id, expected {self.config.node_id} or empty "
                        f"string, but received {res.resource_name}"
                    )
                    continue
                # The cluster-default resource ("") has no dynamic defaults in riverbed.
                entries = (
                    []
                    if res.resource_name == ""
                    else [
                        e
                        for e in self.config.broker_config_entries
                        if keys is None or e.name in keys
                    ]
                )
            elif res.resource_type == ResourceType.BROKER_LOGGER:
                entries = []
            else:
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = f"Unsupported resource type {res.resource_type}."
                continue
            result.configs = [self._describe_row(e, synonyms, docs) for e in entries]
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    @staticmethod
    def _describe_row(
        e: ConfigEntry, synonyms: bool, docs: bool
    ) -> DescribeConfigsResponse.DescribeConfigsResourceResult:
        R = DescribeConfigsResponse.DescribeConfigsResourceResult
        return R(
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
