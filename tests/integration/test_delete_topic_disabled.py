"""``delete.topic.enable=false`` on a real broker: every deletion is refused and the topic
stays, with the error each DeleteTopics version's clients know (TOPIC_DELETION_DISABLED from
v3, INVALID_REQUEST before, as Kafka's controller answers). With an authorizer the check
comes first, as in Kafka's ControllerApis.deleteTopics: a principal without DELETE is told
deletion is disabled, not TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.secure import (
    AUTHORIZER_OVERRIDES,
    SecureBroker,
    running_secure_broker,
    sasl_plain_request,
    wire_request,
)

pytestmark = pytest.mark.integration

TOPIC = "kept"
#: the error each DeleteTopics version is refused with (TOPIC_DELETION_DISABLED is v3's)
VERSION_CODES = [
    (1, ErrorCode.INVALID_REQUEST),
    (2, ErrorCode.INVALID_REQUEST),
    (3, ErrorCode.TOPIC_DELETION_DISABLED),
    (6, ErrorCode.TOPIC_DELETION_DISABLED),
]


@pytest.fixture(scope="module")
def no_delete_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess(overrides={"delete.topic.enable": "false"}) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(timeout=30)
        yield proc


@pytest.fixture(scope="module")
def no_delete_secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    users = {"admin": "admin-secret", "mallory": "mallory-pw"}  # mallory: no ACL at all
    overrides = AUTHORIZER_OVERRIDES | {"delete.topic.enable": "false"}
    with running_secure_broker(
        tmp_path_factory.mktemp("no-delete-acls"), users, {}, overrides
    ) as broker:
        broker.create_topics([TOPIC])
        yield broker


def _delete_request(version: int) -> DeleteTopicsRequest:
    if version >= 6:
        state = DeleteTopicsRequest.DeleteTopicState(name=TOPIC)
        return DeleteTopicsRequest(topics=[state], timeout_ms=5000)
    return DeleteTopicsRequest(topic_names=[TOPIC], timeout_ms=5000)


def test_a_client_is_refused_topic_deletion_disabled(no_delete_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": no_delete_broker.bootstrap})
    future = admin.delete_topics([TOPIC], operation_timeout=10)[TOPIC]
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    error = info.value.args[0]
    assert isinstance(error, KafkaError)
    assert error.code() == KafkaError.TOPIC_DELETION_DISABLED
    assert TOPIC in admin.list_topics(timeout=10).topics  # still there


@pytest.mark.parametrize(("version", "code"), VERSION_CODES)
def test_each_version_gets_an_error_it_knows(
    no_delete_broker: BrokerProcess, version: int, code: ErrorCode
) -> None:
    request = _delete_request(version)
    answer = wire_request(
        no_delete_broker.bootstrap, request, api_key=ApiKey.DELETE_TOPICS, version=version
    )
    assert isinstance(answer, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in answer.responses] == [(TOPIC, code)]


@pytest.mark.parametrize(("version", "code"), VERSION_CODES)
def test_a_principal_without_delete_is_told_deletion_is_disabled(
    no_delete_secure_broker: SecureBroker, version: int, code: ErrorCode
) -> None:
    address = no_delete_secure_broker.bootstrap("SASL_PLAINTEXT")
    answer = sasl_plain_request(
        address, "mallory", "mallory-pw", _delete_request(version), ApiKey.DELETE_TOPICS, version
    )
    assert isinstance(answer, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in answer.responses] == [(TOPIC, code)]
    admin = AdminClient(no_delete_secure_broker.client_config())  # a super user
    assert TOPIC in admin.list_topics(timeout=10).topics
