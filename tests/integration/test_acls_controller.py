"""Issue 20: the controller listener authorizes too (Kafka's ControllerApis).

One combined node (the only voter) and one broker-only node, with Kafka's StandardAuthorizer
configured and the controller listener on SASL_PLAINTEXT (PLAIN). The voter logs in as
``User:controller`` (a super user); the broker-only node as ``User:broker2``, which is no
super user and holds only ALLOW CLUSTER_ACTION on the cluster: that is enough for it to
register, heartbeat, follow the metadata log and forward a CreateTopics (in an Envelope,
which needs CLUSTER_ACTION). ``User:mallory``
logs in to the controller listener with the right password but holds no ACL: each of the
controller's APIs refuses it with the error Kafka's ControllerApis gives, until an ACL
grants the operation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeQuorumRequest,
    EnvelopeResponse,
    Message,
    VoteRequest,
)
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.forwarding import Origin, wrap_request
from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.secure import jaas_plain, sasl_plain_request

PASSWORDS = {"controller": "c-secret", "broker2": "b2-secret", "mallory": "m-secret"}
_JAAS = "listener.name.controller.plain.sasl.jaas.config"
TIMEOUT_S = 30


def _overrides(login: str) -> dict[str, str]:
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:controller;User:ANONYMOUS",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        _JAAS: jaas_plain(PASSWORDS, (login, PASSWORDS[login])),
        "connection.failed.authentication.delay.ms": "100",
    }


def _cluster_acl(principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*",
        op, AclPermissionType.ALLOW,
    )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = QuorumCluster(
        tmp_path_factory.mktemp("acl-controller"), 1, overrides=_overrides("controller")
    )
    try:
        c.start(timeout_s=60)
        # the broker-only node's login may act as a broker on the cluster, nothing more
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        for f in admin.create_acls(
            [_cluster_acl("User:broker2", AclOperation.CLUSTER_ACTION)]
        ).values():
            f.result(timeout=TIMEOUT_S)
        c.overrides[_JAAS] = _overrides("broker2")[_JAAS]
        c.add_broker(2, timeout_s=60)  # registers, heartbeats, follows over SASL as broker2
        yield c
    finally:
        c.stop()


def _describe_quorum() -> DescribeQuorumRequest:
    Q = DescribeQuorumRequest
    partition = Q.PartitionData(partition_index=0)
    return Q(topics=[Q.TopicData(topic_name="__cluster_metadata", partitions=[partition])])


def _ask(controller: str, user: str, api_key: ApiKey, body: Message) -> Message:
    """One request on the controller listener, logged in as ``user`` with PLAIN."""
    return sasl_plain_request(
        controller, user, PASSWORDS[user], body, api_key, None, scaled_s(TIMEOUT_S)
    )


def test_broker_only_node_with_cluster_action_registers_and_forwards(
    cluster: QuorumCluster,
) -> None:
    # node 2 is up (the fixture waited for it: registered and unfenced through the
    # controller listener as User:broker2); a topic created through it is forwarded there
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.ports[2][0]}"})
    name = f"via-broker2-{uuid.uuid4().hex[:6]}"
    for f in admin.create_topics([NewTopic(name, 2, 1)]).values():
        f.result(timeout=TIMEOUT_S)
    assert name in admin.list_topics(timeout=TIMEOUT_S).topics
    assert set(admin.list_topics(timeout=TIMEOUT_S).brokers) == {1, 2}


def test_controller_apis_refuse_a_principal_without_acls(cluster: QuorumCluster) -> None:
    controller = cluster.controller(1)
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    for api_key, body in (
        (ApiKey.VOTE, VoteRequest(cluster_id=cluster.cluster_id, voter_id=1, topics=[])),
        (
            ApiKey.BROKER_REGISTRATION,
            BrokerRegistrationRequest(
                broker_id=7,
                cluster_id=cluster.cluster_id,
                incarnation_id=uuid.uuid4(),
                listeners=[],
                features=[],
                rack=None,
            ),
        ),
        (ApiKey.BROKER_HEARTBEAT, BrokerHeartbeatRequest(broker_id=2, broker_epoch=0)),
        (ApiKey.DESCRIBE_QUORUM, _describe_quorum()),
    ):
        answer = _ask(controller, "mallory", api_key, body)
        assert answer.error_code == refused, (api_key, answer)  # type: ignore[attr-defined]
    # a metadata write straight to the controller: checked as Kafka's ControllerApis does
    topic = CreateTopicsRequest.CreatableTopic(
        name="mallory-t", num_partitions=1, replication_factor=1
    )
    created = _ask(controller, "mallory", ApiKey.CREATE_TOPICS, CreateTopicsRequest(
        topics=[topic], timeout_ms=10_000
    ))  # fmt: skip
    assert isinstance(created, CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in created.topics] == [
        ("mallory-t", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    # an Envelope (a broker's forward, API 58) needs CLUSTER_ACTION: mallory cannot pass
    # off a request as a super user's
    forged = wrap_request(
        ApiKey.CREATE_TOPICS,
        CreateTopicsRequest(topics=[topic], timeout_ms=10_000),
        Origin(KafkaPrincipal.user("controller"), "forger", 7),
    )
    enveloped = _ask(controller, "mallory", ApiKey.ENVELOPE, forged)
    assert isinstance(enveloped, EnvelopeResponse)
    assert (enveloped.error_code, enveloped.response_data) == (refused, None)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert "mallory-t" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_an_acl_grants_describe_quorum(cluster: QuorumCluster) -> None:
    controller = cluster.controller(1)
    before = _ask(controller, "broker2", ApiKey.DESCRIBE_QUORUM, _describe_quorum())
    # CLUSTER_ACTION passes a forwarded DescribeQuorum (the broker checked its client)
    assert before.error_code == 0  # type: ignore[attr-defined]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for f in admin.create_acls([_cluster_acl("User:mallory", AclOperation.DESCRIBE)]).values():
        f.result(timeout=TIMEOUT_S)
    described = _ask(controller, "mallory", ApiKey.DESCRIBE_QUORUM, _describe_quorum())
    assert described.error_code == 0  # type: ignore[attr-defined]
    # DESCRIBE does not make mallory a broker
    beat = _ask(controller, "mallory", ApiKey.BROKER_HEARTBEAT, BrokerHeartbeatRequest(broker_id=2))
    assert beat.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # type: ignore[attr-defined]


def test_a_create_topics_on_the_controller_is_answered_per_topic(cluster: QuorumCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    grant = AclBinding(
        ResourceType.TOPIC, "mallory-ok-", ResourcePatternType.PREFIXED, "User:mallory", "*",
        AclOperation.CREATE, AclPermissionType.ALLOW,
    )  # fmt: skip
    for f in admin.create_acls([grant]).values():
        f.result(timeout=TIMEOUT_S)
    C = CreateTopicsRequest
    topics = [
        C.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
        for n in ("mallory-ok-1", "mallory-no-1")
    ]
    created = _ask(cluster.controller(1), "mallory", ApiKey.CREATE_TOPICS,
                   C(topics=topics, timeout_ms=10_000))  # fmt: skip
    assert isinstance(created, CreateTopicsResponse)
    assert {t.name: t.error_code for t in created.topics} == {
        "mallory-ok-1": 0,
        "mallory-no-1": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
