import uuid

from riverbed.metadata.config_defs import ConfigSource
from riverbed.metadata.controller import OP_APPEND, OP_DELETE, OP_SET
from riverbed.metadata.image import MetadataImage, image_to_records, replay_all
from riverbed.metadata.records import ResourceType
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

from .conftest import cluster_image, make_controller, register_live

CT = CreateTopicsRequest


def topic(name, partitions=-1, rf=-1, configs=None, assignments=None):
    return CT.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=[
            CT.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in enumerate(assignments or [])
        ],
        configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )


def create(controller, image, *topics, validate_only=False):
    res = controller.create_topics(
        image, CT(topics=list(topics), validate_only=validate_only), now_ms=0
    )
    return res, replay_all(image, res.records)


def test_create_topic_writes_records_and_image(controller, image):
    res, after = create(controller, image, topic("orders", 3, configs={"retention.ms": "1000"}))
    (r,) = res.response.topics
    assert r.error_code == 0
    assert r.num_partitions == 3 and r.replication_factor == 1
    names = [type(x).__name__ for x in res.records]
    assert names == ["TopicRecord", "ConfigRecord"] + ["PartitionRecord"] * 3
    t = after.topic("orders")
    assert t is not None and t.topic_id == r.topic_id
    assert sorted(t.partitions) == [0, 1, 2]
    p0 = t.partitions[0]
    assert p0.replicas == (1,) and p0.isr == (1,) and p0.leader == 1 and p0.leader_epoch == 0
    assert after.topic_config("orders") == {"retention.ms": "1000"}
    rows = {c.name: c for c in r.configs}
    assert rows["retention.ms"].value == "1000"
    assert rows["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert rows["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG


def test_defaults_come_from_config():
    c = make_controller(num_partitions=4)
    image = cluster_image(c)
    _res, after = create(c, image, topic("t"))
    assert len(after.topic("t").partitions) == 4


def test_validate_only_writes_nothing(controller, image):
    res, after = create(controller, image, topic("x", 2), validate_only=True)
    assert res.records == []
    assert res.response.topics[0].error_code == 0
    assert after.topic("x") is None


def test_topic_name_rules(controller, image):
    bad = ["", ".", "..", "a" * 250, "has space", "emoji✓"]
    res, _ = create(controller, image, *[topic(n) for n in bad])
    codes = [t.error_code for t in res.response.topics]
    assert codes == [ErrorCode.INVALID_TOPIC_EXCEPTION] * len(bad)
    assert res.records == []
    ok, _after = create(controller, image, topic("a" * 249), topic("A-b_c.9"))
    assert [t.error_code for t in ok.response.topics] == [0, 0]


def test_already_exists_and_collision(controller, image):
    _, image = create(controller, image, topic("a.b"))
    res, _ = create(controller, image, topic("a.b"), topic("a_b"))
    e1, e2 = res.response.topics
    assert e1.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert e2.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides" in e2.error_message


def test_duplicate_names_in_one_request(controller, image):
    res, _ = create(controller, image, topic("d"), topic("d"))
    assert [t.error_code for t in res.response.topics] == [ErrorCode.INVALID_REQUEST] * 2
    assert res.records == []


def test_partition_and_replication_errors(controller, image):
    res, _ = create(
        controller, image, topic("p0", 0), topic("p-2", -2), topic("rf0", 1, 0), topic("rf2", 1, 2)
    )
    codes = [t.error_code for t in res.response.topics]
    assert codes == [
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_REPLICATION_FACTOR,
        ErrorCode.INVALID_REPLICATION_FACTOR,
    ]
    assert "only 1 broker" in res.response.topics[3].error_message


def test_too_many_partitions_is_refused_without_allocating(controller, image):
    res, _ = create(controller, image, topic("huge", 2**31 - 1))
    assert res.response.topics[0].error_code == ErrorCode.POLICY_VIOLATION
    assert res.records == []
    # the limit is per request (Kafka's 10,000), so the whole request fails
    res, _ = create(controller, image, topic("a", 6000), topic("b", 5000))
    assert [t.error_code for t in res.response.topics] == [ErrorCode.POLICY_VIOLATION] * 2
    res, after = create(controller, image, topic("a", 6000), topic("b", 4000))
    assert [t.error_code for t in res.response.topics] == [0, 0]
    CP = CreatePartitionsRequest
    grow = controller.create_partitions(
        after, CP(topics=[CP.CreatePartitionsTopic(name="a", count=16001)]), 0
    )
    assert grow.response.results[0].error_code == ErrorCode.POLICY_VIOLATION


def test_oversized_requests_fail_whole(controller, image):
    names = [f"t{i}" for i in range(10_001)]
    res = controller.delete_topics(image, DeleteTopicsRequest(topic_names=names), 0)
    assert {r.error_code for r in res.response.responses} == {ErrorCode.POLICY_VIOLATION}
    assert res.records == []


def test_invalid_configs(controller, image):
    res, _ = create(
        controller,
        image,
        topic("u", configs={"no.such.config": "1"}),
        topic("v", configs={"retention.ms": "soon"}),
        topic("w", configs={"cleanup.policy": "delete,shred"}),
        topic("n", configs={"retention.ms": None}),
    )
    for t in res.response.topics:
        assert t.error_code == ErrorCode.INVALID_CONFIG, t
    assert "Unknown topic config name: no.such.config" in res.response.topics[0].error_message
    # TopicConfigErrorCode is only about configs missing from a successful answer
    assert all(t.topic_config_error_code == 0 for t in res.response.topics)
    assert res.records == []


def test_replica_assignments():
    c = make_controller()
    image = cluster_image(c, brokers=3)
    res, after = create(c, image, topic("m", assignments=[[2, 3], [3, 1]]))
    assert res.response.topics[0].error_code == 0
    t = after.topic("m")
    assert t.partitions[0].replicas == (2, 3) and t.partitions[0].leader == 2
    assert t.partitions[1].replicas == (3, 1)
    bad, _ = create(
        c,
        image,
        topic("x1", assignments=[[1, 1]]),
        topic("x2", assignments=[[9]]),
        topic("x3", assignments=[[1], [2, 3]]),
        topic("x4", 2, assignments=[[1]]),
    )
    codes = [t.error_code for t in bad.response.topics]
    assert codes == [
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REQUEST,
    ]


def test_placement_spreads_leaders():
    c = make_controller()
    image = cluster_image(c, brokers=3)
    _, after = create(c, image, topic("s", 3, 2))
    leaders = [p.leader for p in after.topic("s").partitions.values()]
    assert sorted(leaders) == [1, 2, 3]
    for p in after.topic("s").partitions.values():
        assert len(set(p.replicas)) == 2


def test_placement_is_rack_aware():
    # brokers 1-6 on racks a, a, b, b, c, c: every partition's 3 replicas on 3 racks
    c = make_controller()
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records())
    for b, rack in zip(range(1, 7), "aabbcc", strict=True):
        image = register_live(c, image, b, rack)
    _, after = create(c, image, topic("r", 6, 3))
    rack_of = {b: "aabbcc"[b - 1] for b in range(1, 7)}
    parts = after.topic("r").partitions.values()
    for p in parts:
        assert len({rack_of[r] for r in p.replicas}) == 3, p.replicas
    assert sorted(p.leader for p in parts) == [1, 2, 3, 4, 5, 6]


def test_delete_topics_by_name_and_id(controller, image):
    _, image = create(controller, image, topic("a", configs={"retention.ms": "5"}), topic("b"))
    b_id = image.topic("b").topic_id
    req = DeleteTopicsRequest(
        topics=[
            DeleteTopicsRequest.DeleteTopicState(name="a"),
            DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=b_id),
            DeleteTopicsRequest.DeleteTopicState(name="zz"),
        ]
    )
    res = controller.delete_topics(image, req, 0)
    codes = [r.error_code for r in res.response.responses]
    assert codes == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert res.response.responses[1].name == "b"
    after = replay_all(image, res.records)
    assert after.topic("a") is None and after.topic("b") is None
    # a deleted topic's dynamic configs go with it
    assert after.topic_config("a") == {}
    assert not after.configs


def test_delete_topics_legacy_names(controller, image):
    _, image = create(controller, image, topic("a"))
    res = controller.delete_topics(image, DeleteTopicsRequest(topic_names=["a", "a"]), 0)
    codes = [r.error_code for r in res.response.responses]
    assert codes == [0, ErrorCode.INVALID_REQUEST]
    assert len(res.records) == 1


def test_create_partitions(controller, image):
    _, image = create(controller, image, topic("cp", 2))
    CP = CreatePartitionsRequest
    req = CP(
        topics=[
            CP.CreatePartitionsTopic(name="cp", count=5),
            CP.CreatePartitionsTopic(name="nope", count=5),
        ]
    )
    res = controller.create_partitions(image, req, 0)
    codes = [r.error_code for r in res.response.results]
    assert codes == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    after = replay_all(image, res.records)
    assert sorted(after.topic("cp").partitions) == [0, 1, 2, 3, 4]
    shrink = controller.create_partitions(
        after, CP(topics=[CP.CreatePartitionsTopic(name="cp", count=3)]), 0
    )
    assert shrink.response.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    same = controller.create_partitions(
        after, CP(topics=[CP.CreatePartitionsTopic(name="cp", count=5)]), 0
    )
    assert same.response.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    vo = controller.create_partitions(
        after, CP(topics=[CP.CreatePartitionsTopic(name="cp", count=6)], validate_only=True), 0
    )
    assert vo.response.results[0].error_code == 0 and vo.records == []


def test_incremental_alter_configs(controller, image):
    _, image = create(controller, image, topic("c", configs={"retention.ms": "5"}))
    IA = IncrementalAlterConfigsRequest
    req = IA(
        resources=[
            IA.AlterConfigsResource(
                resource_type=ResourceType.TOPIC,
                resource_name="c",
                configs=[
                    IA.AlterableConfig(name="retention.ms", config_operation=OP_DELETE),
                    IA.AlterableConfig(name="segment.ms", config_operation=OP_SET, value="99"),
                    IA.AlterableConfig(
                        name="cleanup.policy", config_operation=OP_APPEND, value="compact"
                    ),
                ],
            ),
            IA.AlterConfigsResource(
                resource_type=ResourceType.TOPIC,
                resource_name="c",
                configs=[IA.AlterableConfig(name="segment.ms", config_operation=OP_SET, value="x")],
            ),
            IA.AlterConfigsResource(resource_type=ResourceType.TOPIC, resource_name="missing"),
        ]
    )
    res = controller.incremental_alter_configs(image, req, 0)
    codes = [r.error_code for r in res.response.responses]
    assert codes == [0, ErrorCode.INVALID_CONFIG, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    after = replay_all(image, res.records)
    assert dict(after.topic_config("c")) == {
        "segment.ms": "99",
        "cleanup.policy": "delete,compact",
    }


def test_legacy_alter_configs_replaces_set(controller, image):
    _, image = create(controller, image, topic("c", configs={"retention.ms": "5"}))
    AC = AlterConfigsRequest
    req = AC(
        resources=[
            AC.AlterConfigsResource(
                resource_type=ResourceType.TOPIC,
                resource_name="c",
                configs=[AC.AlterableConfig(name="segment.bytes", value="1048576")],
            )
        ]
    )
    res = controller.alter_configs(image, req, 0)
    assert res.response.responses[0].error_code == 0
    after = replay_all(image, res.records)
    assert dict(after.topic_config("c")) == {"segment.bytes": "1048576"}


def test_describe_configs_sources_and_synonyms():
    c = make_controller(static_broker_config={"log.retention.hours": "2"})
    image = cluster_image(c)
    _, image = create(c, image, topic("d", configs={"segment.ms": "1000"}))
    DC = DescribeConfigsRequest
    req = DC(
        resources=[
            DC.DescribeConfigsResource(
                resource_type=ResourceType.TOPIC, resource_name="d", configuration_keys=None
            ),
            DC.DescribeConfigsResource(
                resource_type=ResourceType.TOPIC, resource_name="nope", configuration_keys=None
            ),
        ],
        include_synonyms=True,
    )
    resp = c.describe_configs(image, req)
    ok, missing = resp.results
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    rows = {r.name: r for r in ok.configs}
    assert rows["segment.ms"].value == "1000"
    assert rows["segment.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert rows["retention.ms"].value == str(2 * 3_600_000)
    assert rows["retention.ms"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    # Kafka's list: broker keys per layer, then the broker key's own default (168 h).
    assert [(s.name, s.value, s.source) for s in rows["retention.ms"].synonyms] == [
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert [(s.name, s.source) for s in rows["segment.ms"].synonyms] == [
        ("segment.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.roll.hours", ConfigSource.DEFAULT_CONFIG),
    ]
    assert [(s.name, s.value, s.source) for s in rows["max.message.bytes"].synonyms] == [
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)
    ]
    assert rows["remote.storage.enable"].synonyms == []  # no broker synonym in Kafka
    assert rows["cleanup.policy"].config_source == ConfigSource.DEFAULT_CONFIG
    only = c.describe_configs(
        image,
        DC(
            resources=[
                DC.DescribeConfigsResource(
                    resource_type=ResourceType.TOPIC,
                    resource_name="d",
                    configuration_keys=["segment.ms"],
                )
            ]
        ),
    )
    assert [r.name for r in only.results[0].configs] == ["segment.ms"]


def test_a_reregistered_broker_is_fenced_until_caught_up_then_leads_again(controller, image):
    _, image = create(controller, image, topic("r", 1))
    t = image.topic("r")
    from riverbed.protocol.messages import PartitionChangeRecord

    image = replay_all(
        image, [PartitionChangeRecord(topic_id=t.topic_id, partition_id=0, leader=-1)]
    )
    assert image.partition("r", 0).leader == -1
    assert image.partition("r", 0).leader_epoch == 1

    res = controller.register_broker(image, 1, uuid.uuid4(), [], None, 0)
    fenced = replay_all(image, res.records, offset=7)
    # Kafka: a registration starts fenced; nothing is elected to it yet
    assert fenced.brokers[1].fenced and fenced.brokers[1].registered_offset == 7
    assert fenced.partition("r", 0).leader == -1
    assert fenced.brokers[1].broker_epoch > image.brokers[1].broker_epoch
    epoch = fenced.brokers[1].broker_epoch
    # a heartbeat from before the registration's offset does not unfence it
    behind = controller.unfence_broker(fenced, 1, epoch, 0, metadata_offset=6)
    assert behind.records == [] and behind.response.fenced
    res = controller.unfence_broker(fenced, 1, epoch, 0, metadata_offset=7)
    after = replay_all(fenced, res.records)
    assert not after.brokers[1].fenced
    # the only replica (nothing else holds the partition) leads again
    assert after.partition("r", 0).leader == 1
    assert after.partition("r", 0).leader_epoch == 2


def test_image_to_records_roundtrip(controller, image):
    _, image = create(controller, image, topic("a", 3, configs={"retention.ms": "5"}), topic("b"))
    rebuilt = replay_all(type(image).EMPTY, image_to_records(image))
    assert rebuilt == image


def _incremental(controller, image, rtype, name, *ops):
    IA = IncrementalAlterConfigsRequest
    req = IA(
        resources=[
            IA.AlterConfigsResource(
                resource_type=rtype,
                resource_name=name,
                configs=[
                    IA.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops
                ],
            )
        ]
    )
    return controller.incremental_alter_configs(image, req, 0)


def test_dynamic_broker_configs_layer_over_static():
    from riverbed.metadata.topic_configs import topic_config_for

    c = make_controller(static_broker_config={"log.retention.hours": "2"})
    image = cluster_image(c)
    _, image = create(c, image, topic("d"))
    # cluster-wide default, then this broker's own value
    res = _incremental(c, image, ResourceType.BROKER, "", ("log.retention.ms", OP_SET, "5000"))
    assert res.response.responses[0].error_code == 0
    image = replay_all(image, res.records)
    assert topic_config_for(image, "d", 1, {"log.retention.hours": "2"})["retention.ms"] == "5000"
    res = _incremental(c, image, ResourceType.BROKER, "1", ("log.retention.ms", OP_SET, "7000"))
    image = replay_all(image, res.records)
    assert topic_config_for(image, "d", 1, {"log.retention.hours": "2"})["retention.ms"] == "7000"
    DC = DescribeConfigsRequest
    resp = c.describe_configs(
        image,
        DC(
            resources=[
                DC.DescribeConfigsResource(
                    resource_type=ResourceType.TOPIC, resource_name="d", configuration_keys=None
                ),
                DC.DescribeConfigsResource(
                    resource_type=ResourceType.BROKER, resource_name="1", configuration_keys=None
                ),
                DC.DescribeConfigsResource(
                    resource_type=ResourceType.BROKER, resource_name="", configuration_keys=None
                ),
            ],
            include_synonyms=True,
        ),
    )
    topic_rows = {r.name: r for r in resp.results[0].configs}
    assert topic_rows["retention.ms"].value == "7000"
    assert topic_rows["retention.ms"].config_source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in topic_rows["retention.ms"].synonyms] == [
        ("log.retention.ms", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG),
    ]
    broker_rows = {r.name: r for r in resp.results[1].configs}
    assert broker_rows["log.retention.ms"].value == "7000"
    assert broker_rows["log.retention.ms"].config_source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert not broker_rows["log.retention.ms"].read_only
    assert broker_rows["num.io.threads"].read_only
    assert [(r.name, r.value) for r in resp.results[2].configs] == [("log.retention.ms", "5000")]
    # deleting the broker's value falls back to the cluster default
    res = _incremental(c, image, ResourceType.BROKER, "1", ("log.retention.ms", OP_DELETE, None))
    image = replay_all(image, res.records)
    assert topic_config_for(image, "d", 1, {})["retention.ms"] == "5000"


def test_dynamic_broker_config_errors():
    c = make_controller()
    image = cluster_image(c)
    cases = [
        ("1", ("num.io.threads", OP_SET, "4"), ErrorCode.INVALID_REQUEST),  # static only
        ("1", ("no.such.key", OP_SET, "4"), ErrorCode.INVALID_CONFIG),
        ("1", ("log.retention.ms", OP_SET, "soon"), ErrorCode.INVALID_CONFIG),
        ("1", ("log.segment.bytes", OP_SET, "3"), ErrorCode.INVALID_CONFIG),  # below minimum
        ("x", ("log.retention.ms", OP_SET, "1"), ErrorCode.INVALID_REQUEST),
    ]
    for name, op, code in cases:
        res = _incremental(c, image, ResourceType.BROKER, name, op)
        assert res.response.responses[0].error_code == code, (name, op)
        assert res.records == []


def test_dynamic_listener_tls_configs_are_per_broker_only():
    """Kafka's dynamic listener SSL configs: a broker's own resource takes them (the
    broker validated the store); the cluster default refuses them."""
    c = make_controller()
    image = cluster_image(c)
    key = "listener.name.ssl.ssl.keystore.location"
    res = _incremental(c, image, ResourceType.BROKER, "1", (key, OP_SET, "/new.pem"))
    assert res.response.responses[0].error_code == 0
    changed = replay_all(image, res.records)
    assert changed.broker_config("1") == {key: "/new.pem"}
    secret = "listener.name.ssl.ssl.keystore.password"
    res = _incremental(c, changed, ResourceType.BROKER, "1", (secret, OP_SET, "s3cret"))
    changed = replay_all(changed, res.records)
    DC = DescribeConfigsRequest
    resource = DC.DescribeConfigsResource(
        resource_type=ResourceType.BROKER, resource_name="1", configuration_keys=None
    )
    described = c.describe_configs(changed, DC(resources=[resource]))
    rows = {r.name: r for r in described.results[0].configs}
    assert rows[key].value == "/new.pem"
    assert rows[key].config_source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert rows[secret].value is None and rows[secret].is_sensitive  # never shown
    res = _incremental(c, image, ResourceType.BROKER, "", (key, OP_SET, "/new.pem"))
    assert res.response.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert "broker id must be specified" in res.response.responses[0].error_message
    # key / trust stores and ssl.client.auth are dynamic per listener, not the others
    other = "listener.name.ssl.ssl.principal.mapping.rules"
    res = _incremental(c, image, ResourceType.BROKER, "1", (other, OP_SET, "DEFAULT"))
    assert res.response.responses[0].error_code == ErrorCode.INVALID_CONFIG


def test_ssl_client_auth_is_a_per_broker_dynamic_config():
    """Kafka documents ssl.client.auth as per-broker dynamic (DynamicListenerConfig's
    ReconfigurableConfigs, in PerBrokerConfigs): per listener or plain, on a broker's own
    resource; the cluster default refuses it; its values stay checked."""
    c = make_controller()
    image = cluster_image(c)
    for key in ("listener.name.ssl.ssl.client.auth", "ssl.client.auth"):
        res = _incremental(c, image, ResourceType.BROKER, "1", (key, OP_SET, "required"))
        assert res.response.responses[0].error_code == 0, key
        assert replay_all(image, res.records).broker_config("1") == {key: "required"}
        res = _incremental(c, image, ResourceType.BROKER, "", (key, OP_SET, "required"))
        assert res.response.responses[0].error_code == ErrorCode.INVALID_REQUEST, key
        assert "broker id must be specified" in res.response.responses[0].error_message
        res = _incremental(c, image, ResourceType.BROKER, "1", (key, OP_SET, "always"))
        assert res.response.responses[0].error_code == ErrorCode.INVALID_CONFIG, key


def test_describe_configs_empty_key_list_means_every_key():
    """Kafka's ConfigHelperUtils.buildConfigEntries keeps every config when
    configurationKeys is null OR empty; only a non-empty list filters."""
    c = make_controller()
    image = cluster_image(c)
    _, image = create(c, image, topic("e", configs={"segment.ms": "1000"}))
    DC = DescribeConfigsRequest

    def described(resource_type, name, keys):
        res = DC.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=keys
        )
        (result,) = c.describe_configs(image, DC(resources=[res])).results
        assert result.error_code == 0
        return [r.name for r in result.configs]

    for resource_type, name in ((ResourceType.TOPIC, "e"), (ResourceType.BROKER, "1")):
        every = described(resource_type, name, None)
        assert len(every) > 10
        assert described(resource_type, name, []) == every
    assert "segment.ms" in described(ResourceType.TOPIC, "e", [])
