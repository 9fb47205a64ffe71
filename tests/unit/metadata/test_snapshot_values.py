"""A snapshot's values (``iter_image_values``, partitions encoded by the C fast path
straight from their registrations) are the generic encoding of ``iter_image_records``; an
image loaded from them equals the image written, and holds its partitions out of the
garbage collector's way."""

from __future__ import annotations

import gc
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.metadata.image import (
    MetadataImage,
    iter_image_records,
    iter_image_values,
    replay_all,
)
from riverbed.metadata.records import RECORD_VERSIONS, ResourceType, decode_record
from riverbed.protocol.messages import (
    ConfigRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from riverbed.protocol.metadata_records import encode_metadata_record_generic

BROKER_LISTS = st.lists(st.integers(0, 5), max_size=4)


@st.composite
def images(draw: st.DrawFn) -> MetadataImage:
    records: list = [FeatureLevelRecord(name="metadata.version", feature_level=21)]
    records += [
        RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b + 1), broker_epoch=b)
        for b in range(draw(st.integers(0, 3)))
    ]
    topic_ids = draw(st.lists(st.integers(1, 2**128 - 1), max_size=4, unique=True))
    for t, tid_int in enumerate(topic_ids):
        tid = uuid.UUID(int=tid_int)
        records.append(TopicRecord(name=f"t{t}", topic_id=tid))
        partitions = draw(st.integers(0, 5))
        for p in range(partitions):
            records.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=tid,
                    replicas=draw(BROKER_LISTS),
                    isr=draw(BROKER_LISTS),
                    removing_replicas=draw(BROKER_LISTS),
                    adding_replicas=draw(BROKER_LISTS),
                    leader=draw(st.integers(-1, 5)),
                    leader_recovery_state=draw(st.integers(0, 1)),
                    leader_epoch=draw(st.integers(0, 2**30)),
                    partition_epoch=draw(st.integers(0, 2**30)),
                )
            )
        if partitions and draw(st.booleans()):
            records.append(
                PartitionChangeRecord(
                    partition_id=0, topic_id=tid, isr=draw(BROKER_LISTS), leader=1
                )
            )
        if draw(st.booleans()):
            records.append(
                ConfigRecord(
                    resource_type=ResourceType.TOPIC, resource_name=f"t{t}", name="x", value="1"
                )
            )
    return replay_all(MetadataImage.EMPTY, records, offset=len(records))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image=images())
def test_image_values_are_the_generic_encoding_of_its_records(image: MetadataImage) -> None:
    values = list(iter_image_values(image))
    assert values == [
        encode_metadata_record_generic(r, RECORD_VERSIONS[type(r).__name__])
        for r in iter_image_records(image)
    ]
    loaded = replay_all(MetadataImage.EMPTY, (decode_record(v) for v in values), offset=1)
    assert loaded == image
    for topic in loaded.topics_by_id.values():
        for reg in topic.partitions.values():
            assert not gc.is_tracked(reg)


def test_loaded_partitions_share_their_replica_tuples() -> None:
    tid = uuid.uuid4()
    records = [TopicRecord(name="t", topic_id=tid)] + [
        PartitionRecord(partition_id=p, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=1)
        for p in range(3)
    ]
    values = [encode_metadata_record_generic(r, 0) for r in records]
    loaded = replay_all(MetadataImage.EMPTY, (decode_record(v) for v in values))
    regs = list(loaded.topics_by_id[tid].partitions.values())
    assert all(r.replicas is regs[0].replicas and r.isr is regs[0].replicas for r in regs)
