"""Controller logic: admin requests in, metadata records and a response out.

Every operation is a pure function of (image, request, now_ms): it validates the request
the way Kafka's QuorumController does and returns `ControllerResult(records, response)`.
Nothing here changes state; the caller appends `records` to the metadata log and replays
them (see `riverbed.metadata.service`).  Within one request, later items see the effect of
earlier ones (two creations of the same name, partitions of a topic created just before)
because each item's records are replayed into a scratch image before the next is checked.

Requests and responses are the protocol's CreateTopics / DeleteTopics / CreatePartitions /
AlterConfigs / IncrementalAlterConfigs / DescribeConfigs messages; the response fields are
filled for the newest version and the encoder drops what an older version lacks.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from riverbed.metadata.config_defs import ConfigEntry, ConfigSource, ConfigType
from riverbed.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    replay_all,
)
from riverbed.metadata.records import (
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    ZERO_UUID,
    ResourceType,
)
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
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    FeatureLevelRecord,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Message,
    PartitionChangeRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)

TOPIC_NAME_LENGTH_MAX = 249
#: Partitions one topic may have; bounds what one CreateTopics can make us allocate.
TOPIC_PARTITIONS_MAX = 100_000
#: Items (topics, resources, configs) handled per request.
REQUEST_ITEMS_MAX = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    node_id: int
    num_partitions: int = 1
    default_replication_factor: int = 1
    #: server.properties keys explicitly set (STATIC_BROKER_CONFIG source), as strings.
    static_broker_config: Mapping[str, str] = field(default_factory=dict)
    #: DescribeConfigs rows for this broker (from ServerConfig.describe()).
    broker_config_entries: tuple[ConfigEntry, ...] = ()
    delete_topic_enable: bool = True


@dataclass(frozen=True, slots=True)
class ControllerResult:
    records: list[Message]
    response: object


class _Err(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate: None when `name` is a legal topic name."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return (
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def _unify(name: str) -> str:
    # '.' and '_' collide in metric names, so Kafka refuses topics differing only there.
    return name.replace(".", "_")


class Controller:
    """Pure controller operations over a MetadataImage (see module docstring)."""

    def __init__(
        self, config: ControllerConfig, uuid_factory: Callable[[], uuid.UUID] = uuid.uuid4
    ) -> None:
        self.config = config
        self._uuid_factory = uuid_factory

    # ------------------------------------------------------------------ helpers
    def _new_topic_id(self, image: MetadataImage) -> uuid.UUID:
        for _ in range(100):
            candidate = self._uuid_factory()
            # Kafka avoids ids whose base64 form starts with '-' (they look like CLI flags).
            if (
                candidate not in (ZERO_UUID, METADATA_TOPIC_ID)
                and candidate not in image.topics_by_id
                and candidate.bytes[0] >> 2 != 62
            ):
                return candidate
        raise RuntimeError("uuid factory keeps returning unusable topic ids")

    @staticmethod
    def usable_brokers(image: MetadataImage) -> list[int]:
        return sorted(b.broker_id for b in image.brokers.values() if not b.fenced)

    def _place(self, image: MetadataImage, start: int, count: int, rf: int) -> list[list[int]]:
        brokers = self.usable_brokers(image)
        if rf > len(brokers):
            raise _Err(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {rf} time(s): The target replication "
                f"factor of {rf} cannot be reached because only {len(brokers)} broker(s) "
                "are registered.",
            )
        n = len(brokers)
        return [[brokers[(p + i) % n] for i in range(rf)] for p in range(start, start + count)]

    def _check_assignment(self, image: MetadataImage, broker_ids: Sequence[int]) -> list[int]:
        if not broker_ids:
            raise _Err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen: set[int] = set()
        for broker_id in broker_ids:
            if broker_id in seen:
                raise _Err(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker_id} more "
                    "than once.",
                )
            seen.add(broker_id)
            if broker_id not in image.brokers:
                raise _Err(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker_id}, but no "
                    "such broker is registered.",
                )
        return list(broker_ids)

    def _new_partition(self, image: MetadataImage, replicas: list[int]) -> PartitionRegistration:
        live = [r for r in replicas if (b := image.brokers.get(r)) is not None and not b.fenced]
        return PartitionRegistration(
            replicas=tuple(replicas),
            isr=tuple(live),
            leader=live[0] if live else -1,
            leader_epoch=0,
            partition_epoch=0,
        )

    @staticmethod
    def _check_topic_configs(configs: Mapping[str, str | None]) -> None:
        for name, value in configs.items():
            problem = validate_topic_config(name, value)
            if problem is not None:
                raise _Err(ErrorCode.INVALID_CONFIG, problem)

    def _topic_config_rows(
        self, overrides: Mapping[str, str]
    ) -> list[CreateTopicsResponse.CreatableTopicConfigs]:
        rows = describe_topic_config(overrides, self.config.static_broker_config)
        return [
            CreateTopicsResponse.CreatableTopicConfigs(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.sensitive,
            )
            for e in rows
        ]

    # ------------------------------------------------------------------ bootstrap
    @staticmethod
    def bootstrap_records() -> list[Message]:
        """The records a new metadata log starts with."""
        return [
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION_LEVEL)
        ]

    def register_broker(
        self,
        image: MetadataImage,
        broker_id: int,
        incarnation_id: uuid.UUID,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None,
        now_ms: int,
    ) -> ControllerResult:
        """Register (or re-register after a restart) a broker and unfence it.

        The new broker epoch is above every epoch this broker had and above the image's
        offset, so a stale incarnation's requests are recognisable.  Partitions left
        leaderless with this broker in their ISR get it back as leader.
        """
        del now_ms
        previous = image.brokers.get(broker_id)
        epoch = max(image.offset + 1, previous.broker_epoch + 1 if previous else 0)
        registration = BrokerRegistration(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            endpoints=tuple(endpoints),
            rack=rack,
            fenced=True,
        )
        records: list[Message] = [
            registration.to_record(),
            UnfenceBrokerRecord(id=broker_id, epoch=epoch),
        ]
        for topic in image.topics_by_id.values():
            for index, part in topic.partitions.items():
                if part.leader == -1 and broker_id in part.isr:
                    records.append(
                        PartitionChangeRecord(
                            partition_id=index, topic_id=topic.topic_id, leader=broker_id
                        )
                    )
        response = BrokerRegistration(
            broker_id, incarnation_id, epoch, tuple(endpoints), rack, fenced=False
        )
        return ControllerResult(records, response)

    # ------------------------------------------------------------------ create topics
    def create_topics(
        self, image: MetadataImage, request: CreateTopicsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        topics = list(request.topics)[:REQUEST_ITEMS_MAX]
        counts: dict[str, int] = {}
        for t in topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        scratch = image
        records: list[Message] = []
        results = []
        for t in topics:
            result = CreateTopicsResponse.CreatableTopicResult(name=t.name)
            try:
                if counts[t.name] > 1:
                    raise _Err(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                topic_records, topic_id, num_partitions, rf, overrides = self._create_topic(
                    scratch, t
                )
            except _Err as err:
                result.error_code = int(err.code)
                result.error_message = err.message
                results.append(result)
                continue
            result.topic_id = topic_id
            result.num_partitions = num_partitions
            result.replication_factor = rf
            result.configs = self._topic_config_rows(overrides)
            results.append(result)
            scratch = replay_all(scratch, topic_records)
            records.extend(topic_records)
        response = CreateTopicsResponse(throttle_time_ms=0, topics=results)
        return ControllerResult([] if request.validate_only else records, response)

    def _create_topic(
        self, image: MetadataImage, t: CreateTopicsRequest.CreatableTopic
    ) -> tuple[list[Message], uuid.UUID, int, int, dict[str, str]]:
        problem = topic_name_error(t.name)
        if problem is not None:
            raise _Err(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if t.name in image.topics_by_name:
            raise _Err(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        unified = _unify(t.name)
        for other in image.topics_by_name:
            if _unify(other) == unified:
                raise _Err(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{t.name}' collides with existing topic: {other}",
                )
        configs: dict[str, str | None] = {}
        for c in t.configs:
            if c.name in configs:
                raise _Err(ErrorCode.INVALID_CONFIG, f"Duplicate config {c.name}")
            configs[c.name] = c.value
        self._check_topic_configs(configs)
        overrides = {k: v for k, v in configs.items() if v is not None}
        if t.assignments:
            if t.num_partitions != -1:
                raise _Err(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions was not "
                    "set to -1.",
                )
            if t.replication_factor != -1:
                raise _Err(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but replicationFactor was "
                    "not set to -1.",
                )
            by_index = {}
            for a in t.assignments:
                if a.partition_index in by_index:
                    raise _Err(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Found multiple manual partition assignments for partition "
                        f"{a.partition_index}",
                    )
                by_index[a.partition_index] = self._check_assignment(image, a.broker_ids)
            if len(by_index) > TOPIC_PARTITIONS_MAX:
                raise _Err(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Number of partitions {len(by_index)} exceeds the limit "
                    f"{TOPIC_PARTITIONS_MAX}.",
                )
            for index in range(len(by_index)):
                if index not in by_index:
                    raise _Err(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partitions should be a consecutive 0-based integer sequence, "
                        f"but missing partition {index}",
                    )
            rfs = {len(v) for v in by_index.values()}
            if len(rfs) != 1:
                raise _Err(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "All partitions in the manual partition assignment must have the same "
                    "number of replicas.",
                )
            assignment = [by_index[i] for i in range(len(by_index))]
            rf = rfs.pop()
        else:
            num_partitions = (
                self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
            )
            rf = (
                self.config.default_replication_factor
                if t.replication_factor == -1
                else t.replication_factor
            )
            if num_partitions <= 0:
                raise _Err(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if num_partitions > TOPIC_PARTITIONS_MAX:
                raise _Err(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Number of partitions {num_partitions} exceeds the limit "
                    f"{TOPIC_PARTITIONS_MAX}.",
                )
            if rf <= 0:
                raise _Err(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            assignment = self._place(image, 0, num_partitions, rf)
        topic_id = self._new_topic_id(image)
        records: list[Message] = [TopicRecord(name=t.name, topic_id=topic_id)]
        for name in sorted(overrides):
            records.append(
                ConfigRecord(
                    resource_type=int(ResourceType.TOPIC),
                    resource_name=t.name,
                    name=name,
                    value=overrides[name],
                )
            )
        for index, replicas in enumerate(assignment):
            records.append(self._new_partition(image, replicas).to_record(topic_id, index))
        return records, topic_id, len(assignment), rf, overrides

    def auto_create_topic(
        self,
        image: MetadataImage,
        name: str,
        now_ms: int,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
    ) -> ControllerResult:
        """Create one topic with broker defaults (Metadata auto-creation, internal topics)."""
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=name,
                    num_partitions=num_partitions,
                    replication_factor=replication_factor,
                    assignments=[],
                    configs=[
                        CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                        for k, v in (configs or {}).items()
                    ],
                )
            ],
            timeout_ms=0,
            validate_only=False,
        )
        return self.create_topics(image, request, now_ms)

    # ------------------------------------------------------------------ delete topics
    def delete_topics(
        self, image: MetadataImage, request: DeleteTopicsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        wanted: list[tuple[str | None, uuid.UUID | None]] = [
            (name, None) for name in (getattr(request, "topic_names", None) or [])
        ]
        for state in getattr(request, "topics", None) or []:
            topic_id = state.topic_id if state.topic_id != ZERO_UUID else None
            wanted.append((state.name, topic_id))
        wanted = wanted[:REQUEST_ITEMS_MAX]
        records: list[Message] = []
        results = []
        seen: set[uuid.UUID] = set()
        for name, topic_id in wanted:
            result = DeleteTopicsResponse.DeletableTopicResult(
                name=name, topic_id=topic_id or ZERO_UUID
            )
            results.append(result)
            try:
                if not self.config.delete_topic_enable:
                    raise _Err(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
                if name is not None and topic_id is not None:
                    raise _Err(
                        ErrorCode.INVALID_REQUEST, "Both topic name and topic id were given."
                    )
                if topic_id is not None:
                    topic = image.topic_by_id(topic_id)
                    if topic is None:
                        raise _Err(
                            ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
                        )
                elif name is not None:
                    topic = image.topic(name)
                    if topic is None:
                        raise _Err(
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition.",
                        )
                else:
                    raise _Err(ErrorCode.INVALID_REQUEST, "Neither topic name nor id was given.")
                if topic.topic_id in seen:
                    raise _Err(ErrorCode.INVALID_REQUEST, "Duplicate topic name or id.")
            except _Err as err:
                result.error_code = int(err.code)
                result.error_message = err.message
                continue
            seen.add(topic.topic_id)
            result.name = topic.name
            result.topic_id = topic.topic_id
            records.append(RemoveTopicRecord(topic_id=topic.topic_id))
        return ControllerResult(
            records, DeleteTopicsResponse(throttle_time_ms=0, responses=results)
        )

    # ------------------------------------------------------------------ create partitions
    def create_partitions(
        self, image: MetadataImage, request: CreatePartitionsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        topics = list(request.topics)[:REQUEST_ITEMS_MAX]
        counts: dict[str, int] = {}
        for t in topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        records: list[Message] = []
        results = []
        for t in topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name)
            results.append(result)
            try:
                if counts[t.name] > 1:
                    raise _Err(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                records.extend(self._create_partitions(image, t))
            except _Err as err:
                result.error_code = int(err.code)
                result.error_message = err.message
        response = CreatePartitionsResponse(throttle_time_ms=0, results=results)
        return ControllerResult([] if request.validate_only else records, response)

    def _create_partitions(
        self, image: MetadataImage, t: CreatePartitionsRequest.CreatePartitionsTopic
    ) -> list[Message]:
        topic = image.topic(t.name)
        if topic is None:
            raise _Err(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        current = len(topic.partitions)
        if t.count < current:
            raise _Err(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {t.name} currently has {current} partition(s); {t.count} would "
                "not be an increase.",
            )
        if t.count == current:
            raise _Err(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if t.count > TOPIC_PARTITIONS_MAX:
            raise _Err(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {t.count} exceeds the limit {TOPIC_PARTITIONS_MAX}.",
            )
        added = t.count - current
        first = topic.partitions.get(0)
        rf = len(first.replicas) if first is not None else self.config.default_replication_factor
        if t.assignments:
            if len(t.assignments) != added:
                raise _Err(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(t.assignments)} assignment(s) were specified.",
                )
            assignment = [self._check_assignment(image, a.broker_ids) for a in t.assignments]
        else:
            assignment = self._place(image, current, added, rf)
        return [
            self._new_partition(image, replicas).to_record(topic.topic_id, current + i)
            for i, replicas in enumerate(assignment)
        ]

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
        for res in list(request.resources)[:REQUEST_ITEMS_MAX]:
            result = AlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=res.resource_type, resource_name=res.resource_name
            )
            results.append(result)
            try:
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
                self._check_topic_configs(wanted)
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
        for res in list(request.resources)[:REQUEST_ITEMS_MAX]:
            result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=res.resource_type, resource_name=res.resource_name
            )
            results.append(result)
            try:
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
                self._check_topic_configs({k: v for k, v in wanted.items() if k in seen})
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
        for res in list(request.resources)[:REQUEST_ITEMS_MAX]:
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
