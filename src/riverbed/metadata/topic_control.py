"""Topic operations: CreateTopics (and auto-creation), DeleteTopics.

A mixin of `riverbed.metadata.controller.Controller`. Kafka's rules: a new topic's name is
legal and collides with no existing one, nor with an earlier topic of the same request
(`topic_names.TakenTopics`), its configs are valid topic configs, and its id is fresh;
a request naming one topic twice fails that topic; a deletion names a topic by name or by
id, not both, and is refused when ``delete.topic.enable`` is off.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping

from riverbed.metadata.config_control import check_tiering_allowed, check_topic_configs
from riverbed.metadata.control_common import (
    ControllerError,
    ControllerResult,
    check_partitions_per_request,
    check_request_items,
)
from riverbed.metadata.image import MetadataImage
from riverbed.metadata.partition_creation import PartitionCreationControl
from riverbed.metadata.records import METADATA_TOPIC_ID, ZERO_UUID, ResourceType
from riverbed.metadata.topic_configs import describe_topic_config
from riverbed.metadata.topic_names import TakenTopics
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ConfigRecord,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    Message,
    RemoveTopicRecord,
    TopicRecord,
)


class TopicControl(PartitionCreationControl):
    """Creates and deletes topics (see module docstring)."""

    #: makes new topic ids (set by Controller.__init__)
    _uuid_factory: Callable[[], uuid.UUID]

    def _new_topic_id(self, taken: TakenTopics) -> uuid.UUID:
        for _ in range(100):
            candidate = self._uuid_factory()
            # Kafka avoids ids whose base64 form starts with '-' (they look like CLI flags).
            if (
                candidate not in (ZERO_UUID, METADATA_TOPIC_ID)
                and not taken.id_taken(candidate)
                and candidate.bytes[0] >> 2 != 62
            ):
                return candidate
        raise RuntimeError("uuid factory keeps returning unusable topic ids")

    def _topic_config_rows(
        self, image: MetadataImage, overrides: Mapping[str, str]
    ) -> list[CreateTopicsResponse.CreatableTopicConfigs]:
        rows = describe_topic_config(
            overrides,
            self.config.static_broker_config,
            dynamic_default=image.broker_config(""),
            dynamic_broker=image.broker_config(self.config.node_id),
        )
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

    # ------------------------------------------------------------------ create topics
    def create_topics(
        self, image: MetadataImage, request: CreateTopicsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        topics = list(request.topics)
        counts = Counter(t.name for t in topics)
        total_partitions = sum(self._requested_partitions(t) for t in topics)
        taken = TakenTopics(image)
        records: list[Message] = []
        results = []
        for t in topics:
            result = CreateTopicsResponse.CreatableTopicResult(name=t.name)
            try:
                check_request_items(len(topics))
                check_partitions_per_request(total_partitions)
                if counts[t.name] > 1:
                    raise ControllerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                topic_records, topic_id, num_partitions, rf, overrides = self._create_topic(
                    image, taken, t
                )
            except ControllerError as err:
                result.error_code = int(err.code)
                result.error_message = err.message
                results.append(result)
                continue
            result.topic_id = topic_id
            result.num_partitions = num_partitions
            result.replication_factor = rf
            result.configs = self._topic_config_rows(image, overrides)
            results.append(result)
            taken.add(t.name, topic_id)
            records.extend(topic_records)
        response = CreateTopicsResponse(throttle_time_ms=0, topics=results)
        return ControllerResult([] if request.validate_only else records, response)

    def _requested_partitions(self, t: CreateTopicsRequest.CreatableTopic) -> int:
        if t.assignments:
            return len(t.assignments)
        return self.config.num_partitions if t.num_partitions == -1 else max(0, t.num_partitions)

    def _create_topic(
        self, image: MetadataImage, taken: TakenTopics, t: CreateTopicsRequest.CreatableTopic
    ) -> tuple[list[Message], uuid.UUID, int, int, dict[str, str]]:
        """One topic's records; ``image`` is the state before the request (placement and
        ISR depend only on its brokers), ``taken`` adds the request's earlier topics."""
        taken.check_new_name(t.name)
        configs: dict[str, str | None] = {}
        for c in t.configs:
            if c.name in configs:
                raise ControllerError(ErrorCode.INVALID_CONFIG, f"Duplicate config {c.name}")
            configs[c.name] = c.value
        check_topic_configs(configs)
        check_tiering_allowed(configs, self.config.static_broker_config)
        overrides = {k: v for k, v in configs.items() if v is not None}
        if t.assignments:
            assignment = self._manual_assignment(image, t)
        else:
            assignment = self._placed_assignment(image, t)
        topic_id = self._new_topic_id(taken)
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
        return records, topic_id, len(assignment), len(assignment[0]), overrides

    def _manual_assignment(
        self, image: MetadataImage, t: CreateTopicsRequest.CreatableTopic
    ) -> list[list[int]]:
        """CreateTopics' replica assignment, checked as Kafka's controller checks it."""
        if t.num_partitions != -1:
            raise ControllerError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        if t.replication_factor != -1:
            raise ControllerError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but replicationFactor was "
                "not set to -1.",
            )
        by_index = {}
        for a in t.assignments:
            if a.partition_index in by_index:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Found multiple manual partition assignments for partition "
                    f"{a.partition_index}",
                )
            by_index[a.partition_index] = self._check_assignment(image, a.broker_ids)
        for index in range(len(by_index)):
            if index not in by_index:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partitions should be a consecutive 0-based integer sequence, "
                    f"but missing partition {index}",
                )
        if len({len(v) for v in by_index.values()}) != 1:
            raise ControllerError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "All partitions in the manual partition assignment must have the same "
                "number of replicas.",
            )
        return [by_index[i] for i in range(len(by_index))]

    def _placed_assignment(
        self, image: MetadataImage, t: CreateTopicsRequest.CreatableTopic
    ) -> list[list[int]]:
        """The replicas of every partition as the placement picks them (defaults: -1)."""
        num_partitions = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        rf = (
            self.config.default_replication_factor
            if t.replication_factor == -1
            else t.replication_factor
        )
        if num_partitions <= 0:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        if rf <= 0:
            raise ControllerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        return self._place(image, 0, num_partitions, rf)

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
            (name, None) for name in request.topic_names or []
        ]
        for state in request.topics or []:
            topic_id = state.topic_id if state.topic_id != ZERO_UUID else None
            wanted.append((state.name, topic_id))
        records: list[Message] = []
        results = []
        seen: set[uuid.UUID] = set()
        for name, topic_id in wanted:
            result = DeleteTopicsResponse.DeletableTopicResult(
                name=name, topic_id=topic_id or ZERO_UUID
            )
            results.append(result)
            try:
                check_request_items(len(wanted))
                if not self.config.delete_topic_enable:
                    raise ControllerError(
                        ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
                    )
                if name is not None and topic_id is not None:
                    raise ControllerError(
                        ErrorCode.INVALID_REQUEST, "Both topic name and topic id were given."
                    )
                if topic_id is not None:
                    topic = image.topic_by_id(topic_id)
                    if topic is None:
                        raise ControllerError(
                            ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
                        )
                elif name is not None:
                    topic = image.topic(name)
                    if topic is None:
                        raise ControllerError(
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition.",
                        )
                else:
                    raise ControllerError(
                        ErrorCode.INVALID_REQUEST, "Neither topic name nor id was given."
                    )
                if topic.topic_id in seen:
                    raise ControllerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name or id.")
            except ControllerError as err:
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
