"""GROUP config resources (KIP-848 group configs) and CLIENT_METRICS ones in the
controller's config operations, against Kafka 4.x's GroupConfig / ConfigHelper."""

from riverbed.metadata.config_defs import ConfigSource, ConfigType
from riverbed.metadata.controller import OP_DELETE, OP_SET
from riverbed.metadata.image import replay_all
from riverbed.metadata.records import ResourceType
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

from .conftest import cluster_image, make_controller

IA = IncrementalAlterConfigsRequest
DC = DescribeConfigsRequest
GROUP = ResourceType.GROUP
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def _alter(controller, image, rtype, name, *ops):
    res = IA.AlterConfigsResource(
        resource_type=rtype,
        resource_name=name,
        configs=[IA.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops],
    )
    result = controller.incremental_alter_configs(image, IA(resources=[res]), 0)
    (row,) = result.response.responses
    return row, replay_all(image, result.records)


def _describe(controller, image, rtype, name, synonyms=False):
    res = DC.DescribeConfigsResource(resource_type=rtype, resource_name=name)
    req = DC(resources=[res], include_synonyms=synonyms, include_documentation=True)
    (result,) = controller.describe_configs(image, req).results
    return result


def test_a_group_with_no_configs_describes_the_brokers_values():
    c = make_controller(static_broker_config={"group.consumer.session.timeout.ms": "50000"})
    image = cluster_image(c)
    result = _describe(c, image, GROUP, "g", synonyms=True)
    assert result.error_code == 0
    rows = {r.name: r for r in result.configs}
    assert sorted(rows) == [HEARTBEAT, SESSION]
    session, heartbeat = rows[SESSION], rows[HEARTBEAT]
    assert (session.value, session.config_source) == ("50000", ConfigSource.STATIC_BROKER_CONFIG)
    assert (heartbeat.value, heartbeat.config_source) == ("5000", ConfigSource.DEFAULT_CONFIG)
    assert session.config_type == ConfigType.INT and not session.read_only
    assert [(s.name, s.value, s.source) for s in session.synonyms] == [
        ("group.consumer.session.timeout.ms", "50000", ConfigSource.STATIC_BROKER_CONFIG),
        ("group.consumer.session.timeout.ms", "45000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert session.documentation


def test_group_configs_are_stored_as_config_records_and_described():
    c = make_controller()
    image = cluster_image(c)
    row, image = _alter(
        c, image, GROUP, "g", (SESSION, OP_SET, "50000"), (HEARTBEAT, OP_SET, "6000")
    )
    assert (row.error_code, row.error_message) == (0, None)
    assert image.configs[(GROUP, "g")] == {SESSION: "50000", HEARTBEAT: "6000"}
    rows = {r.name: r for r in _describe(c, image, GROUP, "g", synonyms=True).configs}
    assert (rows[SESSION].value, rows[SESSION].config_source) == (
        "50000",
        ConfigSource.GROUP_CONFIG,
    )
    assert rows[SESSION].synonyms[0].source == ConfigSource.GROUP_CONFIG
    assert rows[HEARTBEAT].value == "6000"
    # another group keeps the broker's values
    other = {r.name: r.value for r in _describe(c, image, GROUP, "h").configs}
    assert other == {SESSION: "45000", HEARTBEAT: "5000"}
    row, image = _alter(c, image, GROUP, "g", (HEARTBEAT, OP_DELETE, None))
    assert row.error_code == 0
    assert image.configs[(GROUP, "g")] == {SESSION: "50000"}


def test_group_configs_are_validated_in_kafkas_words():
    c = make_controller()
    image = cluster_image(c)
    bad = {
        (SESSION, "44999"): f"{SESSION} must be greater than or equal to "
        "group.consumer.min.session.timeout.ms",
        (SESSION, "60001"): f"{SESSION} must be less than or equal to "
        "group.consumer.max.session.timeout.ms",
        (HEARTBEAT, "4999"): f"{HEARTBEAT} must be greater than or equal to "
        "group.consumer.min.heartbeat.interval.ms",
        (HEARTBEAT, "15001"): f"{HEARTBEAT} must be less than or equal to "
        "group.consumer.max.heartbeat.interval.ms",
        (SESSION, "0"): f"Invalid value 0 for configuration {SESSION}: Value must be at least 1",
        (HEARTBEAT, "x"): f"Invalid value x for configuration {HEARTBEAT}: "
        "Not a number of type INT",
        ("share.session.timeout.ms", "45000"): "Unknown group config name: "
        "share.session.timeout.ms (riverbed has no share groups)",
        ("retention.ms", "1"): "Unknown group config name: retention.ms",
    }
    for (name, value), message in bad.items():
        row, after = _alter(c, image, GROUP, "g", (name, OP_SET, value))
        assert (row.error_code, row.error_message) == (ErrorCode.INVALID_CONFIG, message)
        assert (GROUP, "g") not in after.configs
    # the session timeout must stay above the heartbeat interval, the group's set as a whole
    c = make_controller(static_broker_config={"group.consumer.min.session.timeout.ms": "1000"})
    row, image = _alter(c, cluster_image(c), GROUP, "g", (SESSION, OP_SET, "5000"))
    assert (row.error_code, row.error_message) == (
        ErrorCode.INVALID_CONFIG,
        f"{SESSION} must be greater than {HEARTBEAT}",
    )
    row, _ = _alter(c, image, GROUP, "", (SESSION, OP_SET, "50000"))
    assert (row.error_code, row.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "Default group resources are not allowed.",
    )


def test_legacy_alter_configs_sets_a_groups_configs():
    c = make_controller()
    image = cluster_image(c)
    AC = AlterConfigsRequest
    res = AC.AlterConfigsResource(
        resource_type=GROUP,
        resource_name="g",
        configs=[AC.AlterableConfig(name=SESSION, value="46000")],
    )
    result = c.alter_configs(image, AC(resources=[res]), 0)
    assert result.response.responses[0].error_code == 0
    assert replay_all(image, result.records).configs[(GROUP, "g")] == {SESSION: "46000"}


def test_an_empty_group_name_and_client_metrics_are_invalid_requests():
    c = make_controller()
    image = cluster_image(c)
    empty = _describe(c, image, GROUP, "")
    assert (empty.error_code, empty.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "Group name must not be empty",
    )
    metrics = _describe(c, image, ResourceType.CLIENT_METRICS, "sub")
    assert metrics.error_code == ErrorCode.INVALID_REQUEST
    assert "CLIENT_METRICS resources are not supported" in metrics.error_message
    row, after = _alter(c, image, ResourceType.CLIENT_METRICS, "sub", ("interval.ms", 0, "1000"))
    assert row.error_code == ErrorCode.INVALID_REQUEST
    assert row.error_message == metrics.error_message
    assert after.configs == image.configs
