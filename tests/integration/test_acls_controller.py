"""Issue 20: the controller listener authorizes too (Kafka's ControllerApis).

One combined node (the only voter) and one broker-only node, with Kafka's StandardAuthorizer
configured and the controller listener on SASL_PLAINTEXT (PLAIN). The voter logs in as
``User:controller`` (a super user); the broker-only node as ``User:broker2``, which is no
super user and holds only ALLOW CLUSTER_ACTION on the cluster: that is enough for it to
register, heartbeat, follow the metadata log and forward its clients' metadata writes (in
Envelopes, which need CLUSTER_ACTION; the controller checks each embedded write as its
client's), but not to make a metadata write of its own. ``User:mallory``
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
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateAclsRequest,
    CreateAclsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeQuorumRequest,
    EnvelopeResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Message,
    VoteRequest,
)
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.forwarding import Origin, unwrap_response, wrap_request
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


def _grant_mallory(
    cluster: QuorumCluster, topic: str, pattern: ResourcePatternType, op: AclOperation
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    grant = AclBinding(ResourceType.TOPIC, topic, pattern, "User:mallory", "*", op,
                       AclPermissionType.ALLOW)  # fmt: skip
    for f in admin.create_acls([grant]).values():
        f.result(timeout=TIMEOUT_S)


def test_a_create_topics_on_the_controller_is_answered_per_topic(cluster: QuorumCluster) -> None:
    _grant_mallory(cluster, "mallory-ok-", ResourcePatternType.PREFIXED, AclOperation.CREATE)
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


def test_a_delete_topics_on_the_controller_says_unknown_only_to_who_may_describe(
    cluster: QuorumCluster,
) -> None:
    """ControllerApis.deleteTopics: an absent topic named by name is
    UNKNOWN_TOPIC_OR_PARTITION for a principal that may DESCRIBE it (though not DELETE),
    TOPIC_AUTHORIZATION_FAILED for one that may not."""
    _grant_mallory(cluster, "mallory-gone-1", ResourcePatternType.LITERAL, AclOperation.DESCRIBE)
    D = DeleteTopicsRequest
    names = ("mallory-gone-1", "mallory-hidden-1")
    deleted = _ask(cluster.controller(1), "mallory", ApiKey.DELETE_TOPICS,
                   D(topics=[D.DeleteTopicState(name=n) for n in names], timeout_ms=10_000))  # fmt: skip
    assert isinstance(deleted, DeleteTopicsResponse)
    assert {t.name: t.error_code for t in deleted.responses} == {
        "mallory-gone-1": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "mallory-hidden-1": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }


def _acl_creation(principal: str, host: str = "*") -> CreateAclsRequest:
    C = CreateAclsRequest.AclCreation
    return CreateAclsRequest(
        creations=[C(resource_type=ResourceType.TOPIC.value, resource_name="x-",
                     resource_pattern_type=ResourcePatternType.PREFIXED.value,
                     principal=principal, host=host, operation=AclOperation.READ.value,
                     permission_type=AclPermissionType.ALLOW.value)]
    )  # fmt: skip


def _acl_principals(cluster: QuorumCluster) -> set[str]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    from confluent_kafka.admin import AclBindingFilter

    every = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    return {b.principal for b in admin.describe_acls(every).result(timeout=TIMEOUT_S)}


def test_cluster_action_makes_no_metadata_write_of_its_own(cluster: QuorumCluster) -> None:
    """Kafka's ControllerApis checks a metadata write sent bare against its sender's own
    ACLs: a broker's CLUSTER_ACTION registers, follows and forwards, nothing more."""
    controller = cluster.controller(1)
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    acls = _ask(controller, "broker2", ApiKey.CREATE_ACLS, _acl_creation("User:broker2-own"))
    assert isinstance(acls, CreateAclsResponse)
    assert [r.error_code for r in acls.results] == [refused]
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    A = IncrementalAlterConfigsRequest.AlterableConfig
    configs = _ask(controller, "broker2", ApiKey.INCREMENTAL_ALTER_CONFIGS,
                   IncrementalAlterConfigsRequest(resources=[R(
                       resource_type=4, resource_name="",
                       configs=[A(name="log.retention.ms", config_operation=0, value="1")])]))  # fmt: skip
    assert isinstance(configs, IncrementalAlterConfigsResponse)
    assert [r.error_code for r in configs.responses] == [refused]
    Q = AlterClientQuotasRequest
    quotas = _ask(controller, "broker2", ApiKey.ALTER_CLIENT_QUOTAS, Q(entries=[Q.EntryData(
        entity=[Q.EntityData(entity_type="user", entity_name="broker2")],
        ops=[Q.OpData(key="producer_byte_rate", value=1e9, remove=False)])]))  # fmt: skip
    assert isinstance(quotas, AlterClientQuotasResponse)
    assert [e.error_code for e in quotas.entries] == [refused]
    assert "User:broker2-own" not in _acl_principals(cluster)


def test_an_envelope_is_checked_as_its_clients_request(cluster: QuorumCluster) -> None:
    """The embedded request is authorized for the envelope's principal and client address,
    against the controller's own ACLs (Kafka's ControllerApis.handleEnvelopeRequest)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    grant = AclBinding(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:trudy",
        "10.9.9.9", AclOperation.ALTER, AclPermissionType.ALLOW,
    )  # fmt: skip
    for f in admin.create_acls([grant]).values():
        f.result(timeout=TIMEOUT_S)
    trudy = KafkaPrincipal.user("trudy")
    answers = {}
    for who, host in (("mallory", "10.9.9.9"), ("trudy", "10.9.9.8"), ("trudy", "10.9.9.9")):
        principal = KafkaPrincipal.user(who)
        request = _acl_creation(f"User:{who}-{host}")
        envelope = wrap_request(ApiKey.CREATE_ACLS, request, Origin(principal, "c", 3, host))
        answer = _ask(cluster.controller(1), "broker2", ApiKey.ENVELOPE, envelope)
        assert isinstance(answer, EnvelopeResponse) and answer.error_code == 0, answer
        inner = unwrap_response(ApiKey.CREATE_ACLS, Origin(trudy, "c", 3), answer)
        assert isinstance(inner, CreateAclsResponse)
        answers[(who, host)] = [r.error_code for r in inner.results]
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert answers == {
        ("mallory", "10.9.9.9"): [refused],
        ("trudy", "10.9.9.8"): [refused],  # the ACL's host is the client's, not the broker's
        ("trudy", "10.9.9.9"): [0],
    }
    assert {"User:trudy-10.9.9.9"} <= _acl_principals(cluster)
    assert not {"User:mallory-10.9.9.9", "User:trudy-10.9.9.8"} & _acl_principals(cluster)


def test_clients_metadata_writes_through_a_broker_only_node(cluster: QuorumCluster) -> None:
    """Each kind of metadata write a client sends to the broker-only node reaches the
    controller in an Envelope and is done (its broker, User:broker2, could not do any)."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.ports[2][0]}"})
    name = f"fwd-{uuid.uuid4().hex[:6]}"
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(timeout=TIMEOUT_S)
    for f in admin.create_acls([_cluster_acl(f"User:{name}", AclOperation.DESCRIBE)]).values():
        f.result(timeout=TIMEOUT_S)
    entry = ConfigEntry("retention.ms", "123456",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    resource = ConfigResource("TOPIC", name, incremental_configs=[entry])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(timeout=TIMEOUT_S)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion(name, info, b"pw-" + name.encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(timeout=TIMEOUT_S)
    assert f"User:{name}" in _acl_principals(cluster)
    described = admin.describe_configs([ConfigResource("TOPIC", name)])
    [(_, configs_future)] = described.items()
    assert configs_future.result(timeout=TIMEOUT_S)["retention.ms"].value == "123456"
    described_users = admin.describe_user_scram_credentials([name])
    user = described_users[name].result(timeout=TIMEOUT_S)
    assert [m.mechanism for m in user.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_256]


def test_a_broker_only_node_creates_its_internal_topic_as_itself(cluster: QuorumCluster) -> None:
    """FindCoordinator on the broker-only node creates ``__consumer_offsets``: the node sends
    that CreateTopics as itself (no client behind it), and CLUSTER_ACTION suffices for an
    internal topic on the controller (Kafka's AutoTopicCreationManager without a context)."""
    import time

    from riverbed.protocol.messages import FindCoordinatorRequest

    from .test_wire_protocol import Client

    c = Client(cluster.ports[2][0])
    try:
        deadline = time.monotonic() + scaled_s(TIMEOUT_S)
        codes = []
        while time.monotonic() < deadline:
            req = FindCoordinatorRequest(key_type=0, coordinator_keys=["g-broker2"])
            resp = c.call(ApiKey.FIND_COORDINATOR, 4, req)
            codes.append(resp.coordinators[0].error_code)
            if codes[-1] == 0:
                break
            time.sleep(0.2)
    finally:
        c.close()
    assert codes[-1] == 0, codes
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert "__consumer_offsets" in admin.list_topics(timeout=TIMEOUT_S).topics
