"""KIP-848 group configs (ConfigResource GROUP) on a real broker, with kafka-python's admin
client: IncrementalAlterConfigs stores a group's consumer.session.timeout.ms /
consumer.heartbeat.interval.ms, DescribeConfigs shows them, a value outside the broker's
group.consumer.min/max bounds is refused in Kafka's words, and the group coordinator hands
the group's heartbeat interval to its members (another group keeps the broker's)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka.admin import ConfigResource, KafkaAdminClient

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    FindCoordinatorRequest,
    Message,
)
from riverbed.testing.cluster import BrokerProcess, scaled_s
from riverbed.testing.secure import wire_request

pytestmark = pytest.mark.integration

SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
DEFAULT, OWN = "DEFAULT_CONFIG", "DYNAMIC_GROUP_CONFIG"  # kafka-python's name of source 8


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        yield client
    finally:
        client.close()


def _ask(bootstrap: str, body: Message, version: int) -> Message:
    return wire_request(bootstrap.split(",")[0], body, version=version, timeout_s=scaled_s(10))


def _join_interval(bootstrap: str, group: str) -> int:
    """A new member's heartbeat interval, once the coordinator is loaded."""
    request = ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="", member_epoch=0, rebalance_timeout_ms=5000,
        subscribed_topic_names=["none"], topic_partitions=[],
    )  # fmt: skip
    deadline = time.monotonic() + scaled_s(30)
    # FindCoordinator creates __consumer_offsets (the heartbeat alone does not)
    _ask(bootstrap, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
    while True:
        answer = _ask(bootstrap, request, 0)
        assert isinstance(answer, ConsumerGroupHeartbeatResponse)
        code = answer.error_code
        if code == 0:
            return int(answer.heartbeat_interval_ms)
        assert code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE), code  # fmt: skip
        assert time.monotonic() < deadline, code
        time.sleep(0.2)


def _described(admin: KafkaAdminClient, group: str) -> dict[str, tuple[str, str]]:
    found = admin.describe_configs([ConfigResource("GROUP", group)], config_filter="all")
    rows = found["group"][group]
    return {name: (row["value"], row["config_source"]) for name, row in rows.items()}


def _altered(admin: KafkaAdminClient, group: str, configs: dict[str, str]) -> object:
    resource = ConfigResource("GROUP", group, configs=configs)
    return admin.alter_configs([resource], incremental=True, raise_on_unknown=False)


def test_group_configs_are_set_described_and_given_to_members(
    broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    assert _described(admin, "cfg-a") == {SESSION: ("45000", DEFAULT), HEARTBEAT: ("5000", DEFAULT)}
    assert _altered(admin, "cfg-a", {SESSION: "50000", HEARTBEAT: "7000"}) == {
        "group": {"cfg-a": "OK"}
    }
    refused = _altered(admin, "cfg-a", {SESSION: "60001"})
    assert refused == {"group": {"cfg-a": "[Error 40] InvalidConfigurationError: "
        f"{SESSION} must be less than or equal to group.consumer.max.session.timeout.ms"}}  # fmt: skip
    assert _described(admin, "cfg-a") == {SESSION: ("50000", OWN), HEARTBEAT: ("7000", OWN)}
    assert _described(admin, "cfg-b") == {SESSION: ("45000", DEFAULT), HEARTBEAT: ("5000", DEFAULT)}
    assert _join_interval(broker.bootstrap, "cfg-a") == 7000
    assert _join_interval(broker.bootstrap, "cfg-b") == 5000
