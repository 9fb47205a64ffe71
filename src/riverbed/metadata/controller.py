"""Controller logic: admin requests in, metadata records and a response out.

Every operation is a pure function of (image, request, now_ms): it validates the request
the way Kafka's QuorumController does and returns `ControllerResult(records, response)`.
Nothing here changes state; the caller appends `records` to the metadata log and replays
them (see `riverbed.server.metadata_service`).  Within one request, later items see the effect of
earlier ones (two creations of the same name, or of names that collide): CreateTopics keeps
the names and ids its earlier topics took beside the image (`_TakenTopics`), so a request
of N topics costs O(existing + N).

Requests and responses are the protocol's CreateTopics / DeleteTopics / CreatePartitions /
AlterConfigs / IncrementalAlterConfigs / DescribeConfigs messages; the response fields are
filled for the newest version and the encoder drops what an older version lacks.

Topic operations live here; config operations in `config_control`, broker and partition
leadership/ISR operations in `partition_control`, reassignments in `reassignment`;
`Controller` combines them.

In-sync replicas: a new partition's ISR is every active replica of its assignment
(registered, unfenced, not in controlled shutdown) and its leader the first of them, as in
Kafka, so acks=all works as soon as the topic exists. That is safe because the leader's
high watermark is the least log end over the ISR and it takes a follower's log end as
unknown until that follower fetches: nothing is acknowledged that an ISR member lacks. A
member that never fetches leaves the ISR after ``replica.lag.time.max.ms`` (AlterPartition,
`partition_control`) and joins again once caught up. Every election is from the ISR: when
the ISR's last live member is fenced or shuts down, the partition stays leaderless (-1)
until a member registers again, unless ``unclean.leader.election.enable`` (or an UNCLEAN
ElectLeaders) picks a live replica outside the ISR, accepting the loss of what only the old ISR held.

Broker restarts (`register_broker`, `PartitionControl.unfence_broker`): a new incarnation
is refused while the old one's session lives, starts fenced, and is unfenced once its
heartbeat shows it has applied the metadata up to its registration; after an unclean
shutdown it leaves every ISR, so a log that lost its tail never wins a clean election.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from riverbed.metadata.acl_control import AclControl
from riverbed.metadata.client_quota_control import ClientQuotaControl
from riverbed.metadata.config_control import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    ConfigControl,
    check_tiering_allowed,
    check_topic_configs,
)
from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerConfig,
    ControllerError,
    ControllerResult,
    check_partitions_per_request,
    check_request_items,
)
from riverbed.metadata.feature_control import FeatureControl
from riverbed.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    replay_all,
)
from riverbed.metadata.partition_control import PartitionControl
from riverbed.metadata.placement import assign_replicas
from riverbed.metadata.producer_id_control import ProducerIdControl
from riverbed.metadata.reassignment import ReassignmentControl
from riverbed.metadata.records import (
    METADATA_TOPIC_ID,
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    TRANSACTION_VERSION_FEATURE,
    TRANSACTION_VERSION_LEVEL,
    ZERO_UUID,
    ResourceType,
)
from riverbed.metadata.scram_control import ScramControl
from riverbed.metadata.topic_configs import (
    describe_topic_config,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ConfigRecord,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    FeatureLevelRecord,
    Message,
    RemoveTopicRecord,
    TopicRecord,
)

TOPIC_NAME_LENGTH_MAX = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


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
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def _unify(name: str) -> str:
    # '.' and '_' collide in metric names, so Kafka refuses topics differing only there.
    return name.replace(".", "_")


class _TakenTopics:
    """The topic names and ids a CreateTopics request must not reuse: the image's and
    those of the request's earlier topics. Kafka's collision rule ('.' and '_' unified)
    is a lookup in an index built once per request, so a request of N topics costs
    O(existing + N), not O(N x existing) (a request of 10,000 topics took minutes)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.unified: dict[str, str] = {_unify(n): n for n in image.topics_by_name}
        self.ids: set[uuid.UUID] = set()

    def check_new_name(self, name: str) -> None:
        """Kafka's rules: a valid name, not taken, and no collision with an existing name
        once '.' and '_' are unified (they share metric names)."""
        problem = topic_name_error(name)
        if problem is not None:
            raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        other = self.unified.get(_unify(name))
        if other == name:
            raise ControllerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if other is not None:
            raise ControllerError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {other}",
            )

    def id_taken(self, topic_id: uuid.UUID) -> bool:
        return topic_id in self.image.topics_by_id or topic_id in self.ids

    def add(self, name: str, topic_id: uuid.UUID) -> None:
        self.unified[_unify(name)] = name
        self.ids.add(topic_id)


class Controller(
    ConfigControl,
    PartitionControl,
    ReassignmentControl,
    ProducerIdControl,
    ScramControl,
    AclControl,
    ClientQuotaControl,
    FeatureControl,
    ControllerBase,
):
    """Pure controller operations over a MetadataImage (see module docstring)."""

    def __init__(
        self,
        config: ControllerConfig,
        uuid_factory: Callable[[], uuid.UUID] = uuid.uuid4,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._uuid_factory = uuid_factory
        # draws the start broker and replica shift of new topics (`placement`)
        self._rng = rng if rng is not None else random.Random()

    # ------------------------------------------------------------------ helpers
    def _new_topic_id(self, taken: _TakenTopics) -> uuid.UUID:
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

    @staticmethod
    def usable_brokers(image: MetadataImage) -> list[int]:
        return sorted(b.broker_id for b in image.brokers.values() if not b.fenced)

    def _place(
        self, image: MetadataImage, start: int, count: int, rf: int, first_leader: int = -1
    ) -> list[list[int]]:
        """Kafka's placement (`placement`): random start broker and replica shift for a
        new topic; for added partitions both are partition 0's leader's index."""
        brokers = self.usable_brokers(image)
        if rf > len(brokers):
            raise ControllerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {rf} time(s): The target replication "
                f"factor of {rf} cannot be reached because only {len(brokers)} broker(s) "
                "are registered.",
            )
        n = len(brokers)
        if first_leader >= 0:
            # Kafka: the index of the first broker >= partition 0's first replica
            fixed = next((i for i, b in enumerate(brokers) if b >= first_leader), 0)
            start_index, shift = fixed, fixed
        else:
            start_index, shift = self._rng.randrange(n), self._rng.randrange(n)
        racks = {b: reg.rack for b in brokers if (reg := image.brokers.get(b)) is not None}
        return assign_replicas(
            brokers,
            racks,
            count,
            rf,
            start_partition=start,
            start_index=start_index,
            replica_shift=shift,
        )

    def _check_assignment(self, image: MetadataImage, broker_ids: Sequence[int]) -> list[int]:
        if not broker_ids:
            raise ControllerError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen: set[int] = set()
        for broker_id in broker_ids:
            if broker_id in seen:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker_id} more "
                    "than once.",
                )
            seen.add(broker_id)
            if broker_id not in image.brokers:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker_id}, but no "
                    "such broker is registered.",
                )
        return list(broker_ids)

    def _new_partition(self, image: MetadataImage, replicas: list[int]) -> PartitionRegistration:
        """A new partition's ISR is every active replica (registered, unfenced, not in
        controlled shutdown) and its leader the first of them, as Kafka's
        ReplicationControlManager creates partitions (``replicas.filter(isActive)``):
        acks=all works at once. A follower that has not fetched yet holds back the high
        watermark (its leader takes its log end as unknown until it fetches) and leaves
        the ISR after ``replica.lag.time.max.ms`` if it never does. With no active
        replica the first one is the ISR, so the partition gets a leader as soon as
        that broker registers."""
        active = [
            r
            for r in replicas
            if (b := image.brokers.get(r)) is not None
            and not b.fenced
            and not b.in_controlled_shutdown
        ]
        return PartitionRegistration(
            replicas=tuple(replicas),
            isr=tuple(active) if active else (replicas[0],),
            leader=active[0] if active else -1,
            leader_epoch=0,
            partition_epoch=0,
        )

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

    # ------------------------------------------------------------------ bootstrap
    @staticmethod
    def bootstrap_records() -> list[Message]:
        """The records a new metadata log starts with."""
        return [
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION_LEVEL),
            FeatureLevelRecord(
                name=TRANSACTION_VERSION_FEATURE, feature_level=TRANSACTION_VERSION_LEVEL
            ),
        ]

    def register_broker(
        self,
        image: MetadataImage,
        broker_id: int,
        incarnation_id: uuid.UUID,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None,
        now_ms: int,
        *,
        session_live: bool = False,
        previous_broker_epoch: int = -1,
    ) -> ControllerResult:
        """Register (or re-register after a restart) a broker, fenced.

        Kafka's ClusterControlManager.registerBroker: a new incarnation while the current
        registration's session is live (``session_live``, the shell's heartbeat clock) is
        refused with DUPLICATE_BROKER_REGISTRATION; the broker retries until the old
        session expires and the controller has fenced it (which takes it out of every ISR
        it is not the last member of), so a restarted process never inherits the old one's
        ISR seats. The registration is fenced: `unfence_broker` lifts that once a
        heartbeat shows the broker has applied the metadata up to this registration.

        An unclean shutdown (``previous_broker_epoch``, BrokerRegistration v3's
        PreviousBrokerEpoch from the clean-shutdown marker, differs from the registered
        epoch: the log may have lost its unflushed tail) takes the broker out of every ISR
        in the same batch, the last seat included (`leave_isrs_after_unclean_shutdown`).
        An old registration still unfenced (its session expired, the fencing not yet
        written) is fenced in the same batch first.

        The new broker epoch is above every epoch this broker had and above the image's
        offset, so a stale incarnation's requests are recognisable.
        """
        del now_ms
        previous = image.brokers.get(broker_id)
        new_incarnation = previous is None or previous.incarnation_id != incarnation_id
        if previous is not None and new_incarnation and session_live and not previous.fenced:
            raise ControllerError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"Another broker is registered with that broker id ({broker_id}).",
            )
        records: list[Message] = []
        if previous is not None and not previous.fenced:
            records += self.fence_broker(image, broker_id, 0).records
        epoch = max(image.offset + 1, previous.broker_epoch + 1 if previous else 0)
        registration = BrokerRegistration(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            endpoints=tuple(endpoints),
            rack=rack,
            fenced=True,
        )
        records.append(registration.to_record())
        clean = previous is not None and previous.broker_epoch == previous_broker_epoch
        if new_incarnation and not clean:
            records += self.leave_isrs_after_unclean_shutdown(replay_all(image, records), broker_id)
        response = replay_all(image, records).brokers[broker_id]
        return ControllerResult(records, response)

    # ------------------------------------------------------------------ create topics
    def create_topics(
        self, image: MetadataImage, request: CreateTopicsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        topics = list(request.topics)
        counts = Counter(t.name for t in topics)
        total_partitions = sum(self._requested_partitions(t) for t in topics)
        taken = _TakenTopics(image)
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
        self, image: MetadataImage, taken: _TakenTopics, t: CreateTopicsRequest.CreatableTopic
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

    # ------------------------------------------------------------------ create partitions
    def create_partitions(
        self, image: MetadataImage, request: CreatePartitionsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        topics = list(request.topics)
        counts = Counter(t.name for t in topics)
        added = 0
        for t in topics:
            current = image.topic(t.name)
            added += max(0, t.count - (len(current.partitions) if current else 0))
        records: list[Message] = []
        results = []
        for t in topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name)
            results.append(result)
            try:
                check_request_items(len(topics))
                check_partitions_per_request(added)
                if counts[t.name] > 1:
                    raise ControllerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                records.extend(self._create_partitions(image, t))
            except ControllerError as err:
                result.error_code = int(err.code)
                result.error_message = err.message
        response = CreatePartitionsResponse(throttle_time_ms=0, results=results)
        return ControllerResult([] if request.validate_only else records, response)

    def _create_partitions(
        self, image: MetadataImage, t: CreatePartitionsRequest.CreatePartitionsTopic
    ) -> list[Message]:
        topic = image.topic(t.name)
        if topic is None:
            raise ControllerError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        current = len(topic.partitions)
        if t.count < current:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {t.name} currently has {current} partition(s); {t.count} would "
                "not be an increase.",
            )
        if t.count == current:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
            )
        added = t.count - current
        first = topic.partitions.get(0)
        rf = len(first.replicas) if first is not None else self.config.default_replication_factor
        if t.assignments:
            if len(t.assignments) != added:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(t.assignments)} assignment(s) were specified.",
                )
            assignment = [self._check_assignment(image, a.broker_ids) for a in t.assignments]
        else:
            leader0 = first.replicas[0] if first is not None and first.replicas else -1
            assignment = self._place(image, current, added, rf, leader0)
        return [
            self._new_partition(image, replicas).to_record(topic.topic_id, current + i)
            for i, replicas in enumerate(assignment)
        ]


__all__ = [
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "Controller",
    "ControllerConfig",
    "ControllerError",
    "ControllerResult",
    "topic_name_error",
]
