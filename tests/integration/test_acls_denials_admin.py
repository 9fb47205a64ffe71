"""Issue 20, "Denials, each with the exact client-visible error": the two admin requests
the other ACL tests did not refuse. CreatePartitions needs ALTER on the topic (Kafka's
ControllerApis: TOPIC_AUTHORIZATION_FAILED per topic), DeleteAcls needs ALTER on the
cluster (AclApis: CLUSTER_AUTHORIZATION_FAILED for every filter). Each refusal is what
confluent-kafka's AdminClient raises; the grant is then shown to change the outcome and
the refused request to have changed nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from riverbed.testing.secure import AUTHORIZER_OVERRIDES, SecureBroker, running_secure_broker

USERS = {"admin": "admin-secret", "carol": "carol-pw", "dora": "dora-pw"}
TIMEOUT_S = 30
CLUSTER = (ResourceType.BROKER, "kafka-cluster")
_ids = itertools.count()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("acl-admin"), USERS, {}, AUTHORIZER_OVERRIDES
    ) as broker:
        yield broker


def _admin(secure: SecureBroker, user: str | None = None) -> AdminClient:
    """The PLAINTEXT listener's super user without ``user``, else ``user`` over SASL."""
    return AdminClient(secure.client_config(None if user is None else (user, USERS[user])))


def _outcome(future) -> int:
    """0 when the future's operation succeeded, else the Kafka error code it failed with."""
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


def _partitions(secure: SecureBroker, topic: str) -> int:
    return len(_admin(secure).list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)


def test_create_partitions_needs_alter_on_the_topic(secure: SecureBroker) -> None:
    (topic,) = secure.create_topics([f"carol-grow-{next(_ids)}"])
    carol = _admin(secure, "carol")  # held: a collected client fails its futures

    def grow_to_3() -> int:
        (future,) = carol.create_partitions([NewPartitions(topic, 3)]).values()
        return _outcome(future)

    assert grow_to_3() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # READ implies DESCRIBE, not ALTER: still refused
    secure.allow(ResourceType.TOPIC, topic, "carol", AclOperation.READ)
    assert grow_to_3() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _partitions(secure, topic) == 1  # the refusals added nothing
    secure.allow(ResourceType.TOPIC, topic, "carol", AclOperation.ALTER)
    assert grow_to_3() == 0
    assert _partitions(secure, topic) == 3


def _bob_reads(topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip


def _filter(topic: str) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def _acls_on(secure: SecureBroker, topic: str) -> list[AclBinding]:
    admin = _admin(secure)  # held: a collected client fails its futures
    return list(admin.describe_acls(_filter(topic)).result(timeout=TIMEOUT_S))


def test_delete_acls_needs_alter_on_the_cluster(secure: SecureBroker) -> None:
    topic = f"dora-acl-{next(_ids)}"
    admin = _admin(secure)
    for future in admin.create_acls([_bob_reads(topic)]).values():
        future.result(timeout=TIMEOUT_S)
    dora = _admin(secure, "dora")

    (future,) = dora.delete_acls([_filter(topic)]).values()
    assert _outcome(future) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # DESCRIBE on the cluster lets her list ACLs, not delete them
    secure.allow(*CLUSTER, "dora", AclOperation.DESCRIBE)
    (future,) = dora.delete_acls([_filter(topic)]).values()
    assert _outcome(future) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _acls_on(secure, topic) == [_bob_reads(topic)]  # nothing deleted

    secure.allow(*CLUSTER, "dora", AclOperation.ALTER)
    (future,) = dora.delete_acls([_filter(topic)]).values()
    assert future.result(timeout=TIMEOUT_S) == [_bob_reads(topic)]
    assert _acls_on(secure, topic) == []
