"""The metadata image: an immutable view of the cluster built only by replaying records.

`MetadataImage` holds topics (by id and by name) with their partition registrations,
dynamic config overrides by (ResourceType, name), registered brokers, finalized features
and the next producer-id block.  It never changes; `MetadataDelta(image)` collects the
effect of replayed records and `apply(offset)` returns a new image.  Log replay at start,
snapshot load and the controller's own writes all go through `MetadataDelta.replay`, so
there is exactly one way state changes.  `image_to_records` is the inverse used to write
snapshots: replaying its output into `MetadataImage.EMPTY` gives an equal image (it and
its record order are :mod:`riverbed.metadata.image_records`'s; one partition's
registration and its merge rule are :mod:`riverbed.metadata.partition_registration`'s,
both importable from here as before).

SCRAM credentials (UserScramCredentialRecord / RemoveUserScramCredentialRecord) are kept
by (user, mechanism id): salt, StoredKey, ServerKey, iterations, never a password.

ACLs (AccessControlEntryRecord / RemoveAccessControlEntryRecord) are kept by their id as
`riverbed.security.acl.StandardAcl`; the authorizer indexes them.

Client quotas (ClientQuotaRecord) are kept by entity (`riverbed.security.client_quotas.
QuotaEntity`: sorted (type, name) pairs, None naming the default) as key -> value; a
removal of an entity's last key removes the entity, as Kafka's ClientQuotaControlManager.

Records riverbed does not model yet (delegation tokens, transaction
markers, ZK migration) are accepted and ignored so that logs written by newer code load.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from riverbed.metadata.image_records import acl_record as acl_record  # re-exported
from riverbed.metadata.image_records import client_quota_record as client_quota_record
from riverbed.metadata.image_records import image_to_records as image_to_records
from riverbed.metadata.image_records import iter_image_records as iter_image_records
from riverbed.metadata.image_records import iter_image_values as iter_image_values
from riverbed.metadata.partition_registration import NO_LEADER as NO_LEADER  # re-exported
from riverbed.metadata.partition_registration import NO_LEADER_CHANGE as NO_LEADER_CHANGE
from riverbed.metadata.partition_registration import (
    PartitionRegistration as PartitionRegistration,
)
from riverbed.metadata.records import METADATA_VERSION_FEATURE, ResourceType
from riverbed.protocol.fastpath import fast
from riverbed.protocol.messages import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    Message,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from riverbed.security.acl import StandardAcl
from riverbed.security.client_quotas import QuotaEntity

K = TypeVar("K")
V = TypeVar("V")


class MetadataReplayError(ValueError):
    """A record that does not fit the image it is replayed into (a corrupt or foreign log)."""


def _frozen(d: dict[K, V]) -> Mapping[K, V]:
    return MappingProxyType(d)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: _frozen({}))

    def partition(self, index: int) -> PartitionRegistration | None:
        return self.partitions.get(index)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0  # Kafka's SecurityProtocol id; 0 = PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[BrokerEndpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    #: Offset of the metadata batch that holds this registration's RegisterBrokerRecord
    #: (the snapshot's end for one loaded from a snapshot; -1 in scratch images): the
    #: broker is unfenced only once its heartbeat shows it has applied that far (Kafka's
    #: ``registerBrokerRecordOffset``). Not part of equality, as ``MetadataImage.offset``.
    registered_offset: int = field(default=-1, compare=False)

    def endpoint(self, name: str) -> BrokerEndpoint | None:
        for ep in self.endpoints:
            if ep.name == name:
                return ep
        return None

    def to_record(self) -> Message:
        return RegisterBrokerRecord(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.broker_epoch,
            end_points=[
                RegisterBrokerRecord.BrokerEndpoint(
                    name=ep.name, host=ep.host, port=ep.port, security_protocol=ep.security_protocol
                )
                for ep in self.endpoints
            ],
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
        )


@dataclass(frozen=True, slots=True)
class ScramCredentialImage:
    """One user's credential for one SCRAM mechanism (what UserScramCredentialRecord holds)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class MetadataImage:
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _frozen({}))
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _frozen({}))
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(
        default_factory=lambda: _frozen({})
    )
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _frozen({}))
    features: Mapping[str, int] = field(default_factory=lambda: _frozen({}))
    next_producer_id: int = 0
    #: (user name, SCRAM mechanism id: 1 SHA-256, 2 SHA-512) -> credential
    scram_credentials: Mapping[tuple[str, int], ScramCredentialImage] = field(
        default_factory=lambda: _frozen({})
    )
    #: ACL id -> ACL (AccessControlEntryRecord)
    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=lambda: _frozen({}))
    #: client quota entity -> {quota key: value} (ClientQuotaRecord)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(
        default_factory=lambda: _frozen({})
    )
    #: Offset of the last record applied; not part of equality (a snapshot of the same
    #: state loaded at another offset is the same image).
    offset: int = field(default=-1, compare=False)

    EMPTY: ClassVar[MetadataImage]

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def partition(self, name: str, index: int) -> PartitionRegistration | None:
        topic = self.topics_by_name.get(name)
        return None if topic is None else topic.partitions.get(index)

    def topic_config(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ResourceType.TOPIC, name), _EMPTY_MAP)

    def broker_is_active(self, broker_id: int) -> bool:
        """May ``broker_id`` lead (Kafka's ``ClusterControlManager.isActive``): registered,
        unfenced and not in a controlled shutdown. The one rule every election uses."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def broker_config(self, broker_id: int | str) -> Mapping[str, str]:
        return self.configs.get((ResourceType.BROKER, str(broker_id)), _EMPTY_MAP)

    @property
    def metadata_version(self) -> int:
        return self.features.get(METADATA_VERSION_FEATURE, 0)

    def is_empty(self) -> bool:
        return not (self.topics_by_id or self.configs or self.brokers or self.features)


_EMPTY_MAP: Mapping[str, str] = _frozen({})
MetadataImage.EMPTY = MetadataImage()


class MetadataDelta:
    """Accumulates replayed records on top of a base image; `apply` freezes the result."""

    def __init__(self, image: MetadataImage) -> None:
        self.base = image
        self._topics: dict[uuid.UUID, TopicImage] | None = None
        self._names: dict[str, uuid.UUID] | None = None
        self._partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}
        self._configs: dict[tuple[int, str], dict[str, str]] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._features: dict[str, int] | None = None
        self._next_producer_id = image.next_producer_id
        self._scram: dict[tuple[str, int], ScramCredentialImage] | None = None
        self._acls: dict[uuid.UUID, StandardAcl] | None = None
        self._quotas: dict[QuotaEntity, dict[str, float]] | None = None
        self.changed_topics: set[uuid.UUID] = set()
        self.deleted_topics: dict[uuid.UUID, TopicImage] = {}
        # The partitions changed or added per changed topic of the base image (a topic
        # created here has all of them new: not tracked, a snapshot's million cost nothing)
        # so that a broker applies a delta in O(changed partitions).
        self._new_topics: set[uuid.UUID] = set()
        self._changed_ids: dict[uuid.UUID, set[int]] = {}
        self._registered: set[int] = set()  # brokers whose RegisterBrokerRecord is here
        # The partitions of the topic of the last partition record, by its id object: a
        # topic's records come one after another (a snapshot's million in runs of their
        # topic's partitions), and hashing a UUID runs Python code.
        self._last_topic_id: uuid.UUID | None = None
        self._last_parts: dict[int, PartitionRegistration] = {}
        self._last_ids: set[int] | None = None
        self._shared: dict[tuple[int, ...], tuple[int, ...]] = {}  # replica tuples, shared

    # ----- copy-on-write accessors
    def _topics_w(self) -> dict[uuid.UUID, TopicImage]:
        if self._topics is None:
            self._topics = dict(self.base.topics_by_id)
        return self._topics

    def _names_w(self) -> dict[str, uuid.UUID]:
        # Name index for replay, so a TopicRecord costs O(1), not a scan of all topics.
        if self._names is None:
            self._names = {name: t.topic_id for name, t in self.base.topics_by_name.items()}
        return self._names

    def _changed_partitions(self, topic_id: uuid.UUID) -> dict[int, PartitionRegistration]:
        """``_partitions_w(topic_id)``, the topic marked changed."""
        if topic_id is self._last_topic_id:
            return self._last_parts
        parts = self._partitions_w(topic_id)
        self.changed_topics.add(topic_id)
        ids = (
            None if topic_id in self._new_topics else self._changed_ids.setdefault(topic_id, set())
        )
        self._last_topic_id, self._last_parts, self._last_ids = topic_id, parts, ids
        return parts

    def changed_partition_ids(self, topic_id: uuid.UUID) -> Set[int] | None:
        """The partitions of changed topic ``topic_id`` that records of this delta created
        or changed; None for a topic created in this delta (all of its partitions are)."""
        if topic_id in self._new_topics:
            return None
        return self._changed_ids.get(topic_id, frozenset())

    def _partitions_w(self, topic_id: uuid.UUID) -> dict[int, PartitionRegistration]:
        parts = self._partitions.get(topic_id)
        if parts is None:
            topic = self._topics_w().get(topic_id)
            if topic is None:
                raise MetadataReplayError(f"partition record for unknown topic id {topic_id}")
            parts = dict(topic.partitions)
            self._partitions[topic_id] = parts
        return parts

    def _configs_w(self) -> dict[tuple[int, str], dict[str, str]]:
        if self._configs is None:
            self._configs = {k: dict(v) for k, v in self.base.configs.items()}
        return self._configs

    def _brokers_w(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.base.brokers)
        return self._brokers

    def _features_w(self) -> dict[str, int]:
        if self._features is None:
            self._features = dict(self.base.features)
        return self._features

    # ----- replay
    def replay(self, record: Message) -> None:
        handler = _HANDLERS.get(type(record).__name__)
        if handler is not None:
            handler(self, record)

    def _topic_record(self, rec: TopicRecord) -> None:
        topics = self._topics_w()
        names = self._names_w()
        if rec.topic_id in topics:
            raise MetadataReplayError(f"TopicRecord for existing topic id {rec.topic_id}")
        if rec.name in names:
            raise MetadataReplayError(f"TopicRecord for existing topic name {rec.name!r}")
        topics[rec.topic_id] = TopicImage(rec.name, rec.topic_id)
        names[rec.name] = rec.topic_id
        self._partitions[rec.topic_id] = {}
        self.changed_topics.add(rec.topic_id)
        self._new_topics.add(rec.topic_id)
        self._last_topic_id = None

    def _partition_record(self, rec: PartitionRecord) -> None:
        if rec.partition_id < 0:
            raise MetadataReplayError(f"PartitionRecord with partition id {rec.partition_id}")
        parts = self._changed_partitions(rec.topic_id)
        reg = None if fast is None else fast.registration(PartitionRegistration, self._shared, rec)
        if reg is None:
            reg = PartitionRegistration.from_record(rec, self._shared)
        parts[rec.partition_id] = reg
        if self._last_ids is not None:
            self._last_ids.add(rec.partition_id)

    def _partition_change_record(self, rec: PartitionChangeRecord) -> None:
        parts = self._changed_partitions(rec.topic_id)
        current = parts.get(rec.partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for unknown partition {rec.topic_id}-{rec.partition_id}"
            )
        parts[rec.partition_id] = current.merge(rec)
        if self._last_ids is not None:
            self._last_ids.add(rec.partition_id)

    def _remove_topic_record(self, rec: RemoveTopicRecord) -> None:
        topics = self._topics_w()
        topic = topics.pop(rec.topic_id, None)
        if topic is None:
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {rec.topic_id}")
        self._partitions.pop(rec.topic_id, None)
        self._last_topic_id = None
        self._names_w().pop(topic.name, None)
        self.changed_topics.discard(rec.topic_id)
        self._changed_ids.pop(rec.topic_id, None)
        self._new_topics.discard(rec.topic_id)
        self.deleted_topics[rec.topic_id] = topic
        # Kafka drops a deleted topic's dynamic configs with it.
        self._configs_w().pop((ResourceType.TOPIC, topic.name), None)

    def _config_record(self, rec: ConfigRecord) -> None:
        configs = self._configs_w()
        key = (int(rec.resource_type), rec.resource_name)
        if rec.value is None:
            entry = configs.get(key)
            if entry is not None:
                entry.pop(rec.name, None)
                if not entry:
                    del configs[key]
        else:
            configs.setdefault(key, {})[rec.name] = rec.value

    def _register_broker_record(self, rec: RegisterBrokerRecord) -> None:
        self._brokers_w()[rec.broker_id] = BrokerRegistration(
            broker_id=rec.broker_id,
            incarnation_id=rec.incarnation_id,
            broker_epoch=rec.broker_epoch,
            endpoints=tuple(
                BrokerEndpoint(ep.name, ep.host, ep.port, ep.security_protocol)
                for ep in rec.end_points
            ),
            rack=rec.rack,
            fenced=rec.fenced,
            in_controlled_shutdown=rec.in_controlled_shutdown,
        )
        self._registered.add(rec.broker_id)

    def _broker(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        broker = self._brokers_w().get(broker_id)
        if broker is None:
            raise MetadataReplayError(f"{what} for unregistered broker {broker_id}")
        if broker.broker_epoch != epoch:
            raise MetadataReplayError(
                f"{what} for broker {broker_id} epoch {epoch}, registered epoch is "
                f"{broker.broker_epoch}"
            )
        return broker

    def _unregister_broker_record(self, rec: UnregisterBrokerRecord) -> None:
        self._broker(rec.broker_id, rec.broker_epoch, "UnregisterBrokerRecord")
        del self._brokers_w()[rec.broker_id]

    def _fence(self, rec: FenceBrokerRecord | UnfenceBrokerRecord, fenced: bool) -> None:
        name = "FenceBrokerRecord" if fenced else "UnfenceBrokerRecord"
        broker = self._broker(rec.id, rec.epoch, name)
        self._brokers_w()[rec.id] = replace(broker, fenced=fenced)

    def _registration_change_record(self, rec: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(rec.broker_id, rec.broker_epoch, "BrokerRegistrationChangeRecord")
        fenced = {1: True, -1: False}.get(rec.fenced, broker.fenced)
        shutdown = broker.in_controlled_shutdown
        if rec.in_controlled_shutdown == 1:
            shutdown = True
        self._brokers_w()[rec.broker_id] = replace(
            broker, fenced=fenced, in_controlled_shutdown=shutdown
        )

    def _feature_level_record(self, rec: FeatureLevelRecord) -> None:
        features = self._features_w()
        if rec.feature_level == 0:
            features.pop(rec.name, None)
        else:
            features[rec.name] = rec.feature_level

    def _producer_ids_record(self, rec: ProducerIdsRecord) -> None:
        if rec.next_producer_id < self._next_producer_id:
            raise MetadataReplayError(
                f"ProducerIdsRecord moves next producer id back to {rec.next_producer_id}"
            )
        self._next_producer_id = rec.next_producer_id

    def _scram_w(self) -> dict[tuple[str, int], ScramCredentialImage]:
        if self._scram is None:
            self._scram = dict(self.base.scram_credentials)
        return self._scram

    def _user_scram_credential_record(self, rec: UserScramCredentialRecord) -> None:
        self._scram_w()[(rec.name, rec.mechanism)] = ScramCredentialImage(
            bytes(rec.salt), bytes(rec.stored_key), bytes(rec.server_key), rec.iterations
        )

    def _remove_user_scram_credential_record(self, rec: RemoveUserScramCredentialRecord) -> None:
        if self._scram_w().pop((rec.name, rec.mechanism), None) is None:
            raise MetadataReplayError(
                f"RemoveUserScramCredentialRecord for unknown credential {rec.name}/{rec.mechanism}"
            )

    def _acls_w(self) -> dict[uuid.UUID, StandardAcl]:
        if self._acls is None:
            self._acls = dict(self.base.acls)
        return self._acls

    def _access_control_entry_record(self, rec: AccessControlEntryRecord) -> None:
        acls = self._acls_w()
        if rec.id in acls:
            raise MetadataReplayError(f"AccessControlEntryRecord: an ACL with id {rec.id} exists")
        acls[rec.id] = StandardAcl(
            rec.resource_type,
            rec.resource_name,
            rec.pattern_type,
            rec.principal,
            rec.host,
            rec.operation,
            rec.permission_type,
        )

    def _remove_access_control_entry_record(self, rec: RemoveAccessControlEntryRecord) -> None:
        if self._acls_w().pop(rec.id, None) is None:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord for unknown ACL {rec.id}")

    def _client_quota_record(self, rec: ClientQuotaRecord) -> None:
        if self._quotas is None:
            self._quotas = {k: dict(v) for k, v in self.base.client_quotas.items()}
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in rec.entity))
        if rec.remove:
            values = self._quotas.get(entity)
            if values is not None:
                values.pop(rec.key, None)
                if not values:
                    del self._quotas[entity]
        else:
            self._quotas.setdefault(entity, {})[rec.key] = rec.value

    # ----- apply
    def apply(self, offset: int | None = None) -> MetadataImage:
        base = self.base
        if self._topics is None and not self._partitions:
            topics_by_id = base.topics_by_id
            topics_by_name = base.topics_by_name
        else:
            topics = self._topics_w()
            for topic_id, parts in self._partitions.items():
                topic = topics.get(topic_id)
                if topic is not None:
                    topics[topic_id] = replace(
                        topic, partitions=_frozen(dict(sorted(parts.items())))
                    )
            topics_by_id = _frozen(topics)
            topics_by_name = _frozen({t.name: t for t in topics.values()})
        configs = (
            base.configs
            if self._configs is None
            else _frozen({k: _frozen(v) for k, v in self._configs.items()})
        )
        return MetadataImage(
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            configs=configs,
            brokers=base.brokers if self._brokers is None else _frozen(self._registrations(offset)),
            features=base.features if self._features is None else _frozen(self._features),
            next_producer_id=self._next_producer_id,
            scram_credentials=base.scram_credentials
            if self._scram is None
            else _frozen(self._scram),
            acls=base.acls if self._acls is None else _frozen(self._acls),
            client_quotas=base.client_quotas
            if self._quotas is None
            else _frozen({k: _frozen(v) for k, v in self._quotas.items()}),
            offset=base.offset if offset is None else offset,
        )

    def _registrations(self, offset: int | None) -> dict[int, BrokerRegistration]:
        brokers = self._brokers_w()
        if offset is not None:
            for broker_id in self._registered:
                reg = brokers.get(broker_id)
                if reg is not None:
                    brokers[broker_id] = replace(reg, registered_offset=offset)
        return brokers


_HANDLERS: dict[str, Any] = {
    "TopicRecord": MetadataDelta._topic_record,
    "PartitionRecord": MetadataDelta._partition_record,
    "PartitionChangeRecord": MetadataDelta._partition_change_record,
    "RemoveTopicRecord": MetadataDelta._remove_topic_record,
    "ConfigRecord": MetadataDelta._config_record,
    "RegisterBrokerRecord": MetadataDelta._register_broker_record,
    "UnregisterBrokerRecord": MetadataDelta._unregister_broker_record,
    "FenceBrokerRecord": lambda d, r: d._fence(r, True),
    "UnfenceBrokerRecord": lambda d, r: d._fence(r, False),
    "BrokerRegistrationChangeRecord": MetadataDelta._registration_change_record,
    "FeatureLevelRecord": MetadataDelta._feature_level_record,
    "ProducerIdsRecord": MetadataDelta._producer_ids_record,
    "UserScramCredentialRecord": MetadataDelta._user_scram_credential_record,
    "RemoveUserScramCredentialRecord": MetadataDelta._remove_user_scram_credential_record,
    "AccessControlEntryRecord": MetadataDelta._access_control_entry_record,
    "RemoveAccessControlEntryRecord": MetadataDelta._remove_access_control_entry_record,
    "ClientQuotaRecord": MetadataDelta._client_quota_record,
}


def replay(image: MetadataImage, record: Message, offset: int | None = None) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.replay(record)
    return delta.apply(offset)


def replay_all(
    image: MetadataImage, records: Iterable[Message], offset: int | None = None
) -> MetadataImage:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(offset)
