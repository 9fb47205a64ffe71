"""Issue 20, "Metadata and ListGroups hide what the principal may not describe" and the
KIP-430 "authorized-operations bitfields ... in DescribeCluster", against a real broker
with Kafka's StandardAuthorizer.

ListGroups (confluent-kafka's list_consumer_groups) lists only the groups the principal
may DESCRIBE, or every group for one that may DESCRIBE the cluster (Kafka's
KafkaApis.handleListGroupsRequest). DescribeCluster (API key 60) is sent raw through
riverbed's own SASL login, because librdkafka's describe_cluster asks Metadata instead:
Kafka's AuthHelper.computeDescribeClusterResponse answers INT32_MIN without the include
flag, 0 to a principal that may not DESCRIBE the cluster, else bit i set for each
AclOperation code i the principal may perform among the cluster's supported operations.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType

from riverbed.protocol.messages import DescribeClusterRequest, DescribeClusterResponse
from riverbed.testing.secure import (
    AUTHORIZER_OVERRIDES,
    SecureBroker,
    running_secure_broker,
    sasl_plain_request,
)

USERS = {
    "admin": "admin-secret",
    "erin": "erin-pw",
    "frank": "frank-pw",
    "gus": "gus-pw",
    "hana": "hana-pw",
    "ivan": "ivan-pw",
    "jo": "jo-pw",
}
TIMEOUT_S = 30
CLUSTER = (ResourceType.BROKER, "kafka-cluster")
_ids = itertools.count()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("acl-describe"), USERS, {}, AUTHORIZER_OVERRIDES
    ) as broker:
        yield broker


def _committed_group(secure: SecureBroker, topic: str, prefix: str) -> str:
    """A new (Empty, classic) group holding one committed offset, made by the PLAINTEXT
    listener's super user."""
    group = f"{prefix}{next(_ids)}"
    consumer = Consumer(secure.client_config() | {"group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    return group


def _listed_groups(secure: SecureBroker, user: str) -> set[str]:
    admin = AdminClient(secure.client_config((user, USERS[user])))
    result = admin.list_consumer_groups().result(timeout=TIMEOUT_S)
    assert not result.errors, result.errors
    return {g.group_id for g in result.valid}


def test_list_groups_shows_only_describable_groups(secure: SecureBroker) -> None:
    (topic,) = secure.create_topics([f"lg-topic-{next(_ids)}"])
    shown = _committed_group(secure, topic, "lg-shown-")
    hidden = _committed_group(secure, topic, "lg-hidden-")
    secure.allow(ResourceType.GROUP, shown, "erin", AclOperation.DESCRIBE)
    assert _listed_groups(secure, "erin") == {shown}
    assert _listed_groups(secure, "frank") == set()
    # DESCRIBE on the cluster lists every group (the only two this broker has)
    secure.allow(*CLUSTER, "gus", AclOperation.DESCRIBE)
    assert _listed_groups(secure, "gus") == {shown, hidden}


def _bits(*ops: AclOperation) -> int:
    """KIP-430's bitfield: bit i for AclOperation code i."""
    return sum(1 << op.value for op in ops)


def _cluster_ops(secure: SecureBroker, user: str, include: bool = True) -> int:
    request = DescribeClusterRequest(include_cluster_authorized_operations=include)
    address = secure.bootstrap("SASL_PLAINTEXT")
    answer = sasl_plain_request(address, user, USERS[user], request)
    assert isinstance(answer, DescribeClusterResponse)
    assert answer.error_code == 0
    return answer.cluster_authorized_operations


def test_describe_cluster_authorized_operations_bitfield(secure: SecureBroker) -> None:
    A = AclOperation
    # a super user: every operation the cluster resource supports
    every = _bits(A.CREATE, A.CLUSTER_ACTION, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS,
                  A.IDEMPOTENT_WRITE, A.ALTER, A.DESCRIBE)  # fmt: skip
    assert every == 8096
    assert _cluster_ops(secure, "admin") == every
    assert _cluster_ops(secure, "admin", include=False) == -(2**31)  # not asked: INT32_MIN
    assert _cluster_ops(secure, "hana") == 0  # no ACL
    secure.allow(*CLUSTER, "hana", A.DESCRIBE)
    secure.allow(*CLUSTER, "hana", A.ALTER)
    assert _cluster_ops(secure, "hana") == _bits(A.ALTER, A.DESCRIBE) == 384
    # ALTER alone implies DESCRIBE
    secure.allow(*CLUSTER, "ivan", A.ALTER)
    assert _cluster_ops(secure, "ivan") == _bits(A.ALTER, A.DESCRIBE)
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS but not DESCRIBE: without DESCRIBE on the
    # cluster Kafka answers 0, not the operations it has
    secure.allow(*CLUSTER, "jo", A.ALTER_CONFIGS)
    assert _cluster_ops(secure, "jo") == 0
    secure.allow(*CLUSTER, "jo", A.DESCRIBE)
    assert _cluster_ops(secure, "jo") == _bits(A.ALTER_CONFIGS, A.DESCRIBE_CONFIGS, A.DESCRIBE)
