"""A dynamic ``min.insync.replicas`` binds the very next acks=all produce (issue 18, defect 4).

One real broker process, a topic with one replica (ISR [1]), confluent-kafka clients.
Raising ``min.insync.replicas`` to 2 (a topic override, then this broker's dynamic
config) must refuse acks=all with NOT_ENOUGH_REPLICAS as soon as the broker shows
the new value; before the fix the partition core kept the value it had at its last ISR or
leader change and acks=all was still accepted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

WAIT_S = 30.0


def _wait_for(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _alter(admin: AdminClient, resource: ConfigResource) -> None:
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(WAIT_S)


def _resource(rtype: Any, name: str, value: str | None) -> ConfigResource:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry("min.insync.replicas", value or "", incremental_operation=op)
    return ConfigResource(rtype, name, incremental_configs=[entry])


def _min_isr(admin: AdminClient, topic: str) -> str:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return str(admin.describe_configs([res])[res].result(WAIT_S)["min.insync.replicas"].value)


def _produce_error(bootstrap: str, topic: str) -> int | None:
    """One acks=all record, no retries: the broker's answer."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 20000}
    )
    errors: list[Any] = []
    p.produce(topic, b"v", on_delivery=lambda e, m: errors.append(e))
    p.flush(WAIT_S)
    assert len(errors) == 1
    return None if errors[0] is None else int(errors[0].code())


def test_raised_min_insync_replicas_refuses_acks_all_at_once(
    broker: BrokerProcess, topic_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(WAIT_S)
    assert _produce_error(broker.bootstrap, topic_name) is None  # ISR [1], minimum 1
    # (confluent-kafka refuses the cluster default's empty name: the unit test covers it)
    layers = [(ResourceType.TOPIC, topic_name), (ResourceType.BROKER, str(broker.node_id))]
    for rtype, name in layers:
        _alter(admin, _resource(rtype, name, "2"))
        try:
            _wait_for("min.insync.replicas=2", lambda: _min_isr(admin, topic_name) == "2")
            assert _produce_error(broker.bootstrap, topic_name) == KafkaError.NOT_ENOUGH_REPLICAS
        finally:
            _alter(admin, _resource(rtype, name, None))
        _wait_for("min.insync.replicas=1", lambda: _min_isr(admin, topic_name) == "1")
        assert _produce_error(broker.bootstrap, topic_name) is None
