"""``delete.topic.enable=false`` on a real broker: every deletion is refused and the topic
stays, with the error each DeleteTopics version's clients know (TOPIC_DELETION_DISABLED from
v3, INVALID_REQUEST before, as Kafka's controller answers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.secure import wire_request

pytestmark = pytest.mark.integration

TOPIC = "kept"


@pytest.fixture(scope="module")
def no_delete_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(overrides={"delete.topic.enable": "false"}) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(timeout=30)
        yield proc


def test_a_client_is_refused_topic_deletion_disabled(no_delete_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": no_delete_broker.bootstrap})
    future = admin.delete_topics([TOPIC], operation_timeout=10)[TOPIC]
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    error = info.value.args[0]
    assert isinstance(error, KafkaError)
    assert error.code() == KafkaError.TOPIC_DELETION_DISABLED
    assert TOPIC in admin.list_topics(timeout=10).topics  # still there


@pytest.mark.parametrize(
    ("version", "code"),
    [
        (1, ErrorCode.INVALID_REQUEST),
        (2, ErrorCode.INVALID_REQUEST),
        (3, ErrorCode.TOPIC_DELETION_DISABLED),
        (6, ErrorCode.TOPIC_DELETION_DISABLED),
    ],
)
def test_each_version_gets_an_error_it_knows(
    no_delete_broker: BrokerProcess, version: int, code: ErrorCode
) -> None:
    request = DeleteTopicsRequest(topic_names=[TOPIC], timeout_ms=5000)
    if version >= 6:
        request = DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=TOPIC)], timeout_ms=5000
        )
    answer = wire_request(
        no_delete_broker.bootstrap, request, api_key=ApiKey.DELETE_TOPICS, version=version
    )
    assert isinstance(answer, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in answer.responses] == [(TOPIC, code)]
