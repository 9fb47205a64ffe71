"""Property: controller output replayed from the records alone gives the same image, and
image -> records -> image is the identity."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.metadata.controller import OP_APPEND, OP_DELETE, OP_SET
from riverbed.metadata.image import MetadataImage, image_to_records, replay_all
from riverbed.metadata.records import ResourceType, decode_record, encode_record
from riverbed.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)

from .conftest import cluster_image, make_controller

NAMES = st.sampled_from(["a", "b", "c.d", "c_d", "e-1", "", ".."])
CONFIGS = st.dictionaries(
    st.sampled_from(["retention.ms", "segment.ms", "cleanup.policy", "bogus"]),
    st.sampled_from(["1000", "delete", "compact", "x"]),
    max_size=2,
)

create_op = st.tuples(
    st.just("create"),
    st.lists(
        st.tuples(NAMES, st.integers(-1, 4), st.integers(-1, 3), CONFIGS), min_size=1, max_size=3
    ),
    st.booleans(),
)
delete_op = st.tuples(st.just("delete"), st.lists(NAMES, min_size=1, max_size=2))
partitions_op = st.tuples(st.just("partitions"), NAMES, st.integers(0, 6))
alter_op = st.tuples(
    st.just("alter"),
    NAMES,
    st.lists(
        st.tuples(
            st.sampled_from(["retention.ms", "cleanup.policy", "segment.bytes"]),
            st.sampled_from([OP_SET, OP_DELETE, OP_APPEND]),
            st.sampled_from(["2000", "compact", "1048576", "nope"]),
        ),
        max_size=3,
    ),
)
OPS = st.lists(st.one_of(create_op, delete_op, partitions_op, alter_op), max_size=12)


def run(controller, image, op):
    kind = op[0]
    if kind == "create":
        CT = CreateTopicsRequest
        req = CT(
            topics=[
                CT.CreatableTopic(
                    name=n,
                    num_partitions=p,
                    replication_factor=r,
                    configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in cfg.items()],
                )
                for n, p, r, cfg in op[1]
            ],
            validate_only=op[2],
        )
        return controller.create_topics(image, req, 0)
    if kind == "delete":
        return controller.delete_topics(image, DeleteTopicsRequest(topic_names=op[1]), 0)
    if kind == "partitions":
        CP = CreatePartitionsRequest
        req = CP(topics=[CP.CreatePartitionsTopic(name=op[1], count=op[2])])
        return controller.create_partitions(image, req, 0)
    IA = IncrementalAlterConfigsRequest
    req = IA(
        resources=[
            IA.AlterConfigsResource(
                resource_type=ResourceType.TOPIC,
                resource_name=op[1],
                configs=[
                    IA.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in op[2]
                ],
            )
        ]
    )
    return controller.incremental_alter_configs(image, req, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, brokers=st.integers(1, 3))
def test_replay_of_log_equals_live_image(ops, brokers):
    controller = make_controller()
    image = cluster_image(controller, brokers)
    log = list(image_to_records(image))
    for op in ops:
        result = run(controller, image, op)
        image = replay_all(image, result.records)
        log.extend(result.records)
        # every topic stays internally consistent
        for t in image.topics_by_id.values():
            assert image.topics_by_name[t.name] is t
            assert sorted(t.partitions) == list(range(len(t.partitions)))
            for p in t.partitions.values():
                assert p.leader in p.replicas and set(p.isr) <= set(p.replicas)
    assert replay_all(MetadataImage.EMPTY, log) == image
    # the same through the on-disk encoding
    decoded = [decode_record(encode_record(r)) for r in log]
    assert replay_all(MetadataImage.EMPTY, decoded) == image
    assert replay_all(MetadataImage.EMPTY, image_to_records(image)) == image
