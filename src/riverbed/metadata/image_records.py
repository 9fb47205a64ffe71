"""The metadata image as records: the inverse of replay, and a snapshot's content.

Replay order: finalized features (``metadata.version`` first, as new logs and snapshots
begin with it), brokers by id and the next producer-id block; then every topic by name,
each followed by its partitions by index; then SCRAM credentials, ACLs, client quotas
(by entity, then key) and dynamic configs by (resource type, name), then key. Replaying
`image_to_records(image)` into `MetadataImage.EMPTY` gives an image equal to ``image``.
`iter_image_values` yields the same records encoded, the partitions straight from their
registrations through the C fast path (a large snapshot is nearly all partitions).
`acl_record` and `client_quota_record` build one record each for the controller's writes
too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from riverbed.metadata.records import METADATA_VERSION_FEATURE, encode_record
from riverbed.protocol.fastpath import fast
from riverbed.protocol.messages import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    Message,
    ProducerIdsRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from riverbed.security.acl import StandardAcl
from riverbed.security.client_quotas import QuotaEntity

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage


def image_to_records(image: MetadataImage) -> list[Message]:
    """The records that rebuild `image` from EMPTY (snapshot content), in replay order."""
    return list(iter_image_records(image))


def iter_image_records(image: MetadataImage) -> Iterator[Message]:
    """`image_to_records` lazily: safe on any thread, since the image never changes."""
    yield from _head_records(image)
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        yield TopicRecord(name=topic.name, topic_id=topic.topic_id)
        for index in sorted(topic.partitions):
            yield topic.partitions[index].to_record(topic.topic_id, index)
    yield from _tail_records(image)


def iter_image_values(image: MetadataImage) -> Iterator[bytes]:
    """``encode_record(r) for r in iter_image_records(image)``, the same bytes: a
    snapshot's values. The partitions (nearly all of a large image) are encoded straight
    from their registrations by the C fast path (``riverbed.protocol.fastpath``), without
    a PartitionRecord object each; without it, or for a registration it does not take,
    through the record."""
    for record in _head_records(image):
        yield encode_record(record)
    encode_partition = fast.encode_partition if fast is not None else None
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        topic_id, parts = topic.topic_id, topic.partitions
        yield encode_record(TopicRecord(name=topic.name, topic_id=topic_id))
        for index in sorted(parts):
            part = parts[index]
            value = None if encode_partition is None else encode_partition(index, topic_id, *part)
            yield encode_record(part.to_record(topic_id, index)) if value is None else value
    for record in _tail_records(image):
        yield encode_record(record)


def _head_records(image: MetadataImage) -> Iterator[Message]:
    """Features, brokers and the producer id block: what comes before the topics."""
    features = dict(image.features)
    # New logs and snapshots begin with metadata.version (see FeatureLevelRecord.json).
    if METADATA_VERSION_FEATURE in features:
        yield (
            FeatureLevelRecord(
                name=METADATA_VERSION_FEATURE,
                feature_level=features.pop(METADATA_VERSION_FEATURE),
            )
        )
    for name in sorted(features):
        yield FeatureLevelRecord(name=name, feature_level=features[name])
    for broker_id in sorted(image.brokers):
        yield image.brokers[broker_id].to_record()
    if image.next_producer_id:
        # The broker epoch in the record is informational for replay.
        yield (
            ProducerIdsRecord(
                broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id
            )
        )


def _tail_records(image: MetadataImage) -> Iterator[Message]:
    """SCRAM credentials, ACLs and configs: what comes after the topics."""
    for (user, mechanism), cred in sorted(image.scram_credentials.items()):
        yield UserScramCredentialRecord(
            name=user,
            mechanism=mechanism,
            salt=cred.salt,
            stored_key=cred.stored_key,
            server_key=cred.server_key,
            iterations=cred.iterations,
        )
    for acl_id, acl in sorted(image.acls.items()):
        yield acl_record(acl_id, acl)
    for entity, values in sorted(image.client_quotas.items(), key=lambda kv: repr(kv[0])):
        for key in sorted(values):
            yield client_quota_record(entity, key, values[key])
    for rtype, rname in sorted(image.configs):
        entries = image.configs[(rtype, rname)]
        for name in sorted(entries):
            yield (
                ConfigRecord(
                    resource_type=rtype, resource_name=rname, name=name, value=entries[name]
                )
            )


def acl_record(acl_id: uuid.UUID, acl: StandardAcl) -> AccessControlEntryRecord:
    """The record that adds ``acl`` under ``acl_id`` (controller writes and snapshots)."""
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission_type,
    )


def client_quota_record(entity: QuotaEntity, key: str, value: float | None) -> ClientQuotaRecord:
    """The record that sets (``value``) or removes (None) ``key`` of ``entity``."""
    return ClientQuotaRecord(
        entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        key=key,
        value=0.0 if value is None else value,
        remove=value is None,
    )
