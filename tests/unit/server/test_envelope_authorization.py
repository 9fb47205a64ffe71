"""A client metadata write a broker forwards in an Envelope is decided by the controller
exactly as the same write sent by that client straight to the controller listener
(`ControllerApis.handle`, Kafka's ControllerApis with an Envelope's principal and client
address): same answer, same items served, the controller's own ACLs; and only a sender
holding CLUSTER_ACTION may vouch for a client at all.

The quorum is a stand-in that records what it is asked to serve and answers every item
NONE: the property is about which items reach it and what the client is told, for any
ACL set, principal, host and request."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.metadata.image import MetadataImage, acl_record, replay_all
from riverbed.metadata.records import METADATA_VERSION_FEATURE
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import (
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    EnvelopeResponse,
    FeatureLevelRecord,
    IncrementalAlterConfigsRequest,
    Message,
    TopicRecord,
    encode,
)
from riverbed.security.acl import (
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    StandardAcl,
)
from riverbed.security.authorizer import AuthorizerConfig
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.broker.authorization import BrokerAuthorizer
from riverbed.server.broker.error_response import item_errors
from riverbed.server.controller_apis import ControllerApis
from riverbed.server.forwarding import Origin, unwrap_response, wrap_request
from riverbed.server.network import RequestContext

TOPICS = {"orders": uuid.UUID(int=1), "payments": uuid.UUID(int=2)}
BROKER = KafkaPrincipal("User", "broker")
HOSTS = ["10.0.0.1", "10.0.0.2"]


@dataclass
class RecordingQuorum:
    """What `ControllerApis` needs of the quorum: its image, and the requests it serves."""

    image: MetadataImage
    served: list[tuple[int, bytes, str]] = field(default_factory=list)

    async def handle_controller_request(
        self, api_key: int, body: Message, origin: Origin
    ) -> Message:
        version = origin.api_version
        self.served.append((api_key, encode(body, version), origin.principal.name))
        return item_errors(api_key, body, version, ErrorCode.NONE)


acls = st.builds(
    StandardAcl,
    st.sampled_from([ResourceType.TOPIC, ResourceType.CLUSTER]),
    st.sampled_from(["orders", "pay", "*", "kafka-cluster"]),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(["User:alice", "User:bob", "User:*", "User:broker"]),
    st.sampled_from(["*", *HOSTS]),
    st.sampled_from(
        [
            AclOperation.CREATE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.ALTER_CONFIGS,
            AclOperation.CLUSTER_ACTION,
            AclOperation.ALL,
        ]
    ),
    st.sampled_from([PermissionType.ALLOW, PermissionType.DENY]),
)


def _requests() -> st.SearchStrategy[tuple[int, Message]]:
    names = st.lists(st.sampled_from([*TOPICS, "new-topic"]), min_size=1, max_size=3, unique=True)
    create = names.map(
        lambda ns: CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                for n in ns
            ],
            timeout_ms=1000,
        )
    )
    delete = names.map(lambda ns: DeleteTopicsRequest(topic_names=ns, timeout_ms=1000))
    partitions = names.map(
        lambda ns: CreatePartitionsRequest(
            topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=3) for n in ns],
            timeout_ms=1000,
        )
    )
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    alter = names.map(
        lambda ns: IncrementalAlterConfigsRequest(
            resources=[R(resource_type=2, resource_name=n, configs=[]) for n in ns]
        )
    )
    C = CreateAclsRequest.AclCreation
    create_acls = st.just(
        CreateAclsRequest(
            creations=[
                C(
                    resource_type=2,
                    resource_name="orders",
                    resource_pattern_type=3,
                    principal="User:eve",
                    host="*",
                    operation=4,
                    permission_type=3,
                )
            ]
        )
    )
    return st.one_of(
        create.map(lambda r: (ApiKey.CREATE_TOPICS, r)),
        delete.map(lambda r: (ApiKey.DELETE_TOPICS, r)),
        partitions.map(lambda r: (ApiKey.CREATE_PARTITIONS, r)),
        alter.map(lambda r: (ApiKey.INCREMENTAL_ALTER_CONFIGS, r)),
        create_acls.map(lambda r: (ApiKey.CREATE_ACLS, r)),
    )


#: The version each request is sent at (one both sides can encode).
VERSIONS: dict[int, int] = {
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 5,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.CREATE_ACLS: 3,
}


def _controller(acl_list: list[StandardAcl]) -> tuple[ControllerApis, RecordingQuorum]:
    records: list[Message] = [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=21)]
    records += [TopicRecord(name=n, topic_id=t) for n, t in TOPICS.items()]
    records += [acl_record(uuid.UUID(int=100 + i), a) for i, a in enumerate(acl_list)]
    quorum = RecordingQuorum(replay_all(MetadataImage.EMPTY, records))
    apis = ControllerApis(lambda: quorum)  # type: ignore[arg-type, return-value]
    apis.authorizer = BrokerAuthorizer(AuthorizerConfig())
    return apis, quorum


def _ctx(api_key: int, version: int, principal: KafkaPrincipal, host: str) -> RequestContext:
    return RequestContext(
        header=RequestHeader(api_key, version, 7, "client-1"),
        peer=f"{host}:40000",
        listener_name="CONTROLLER",
        connection_id=1,
        received_ms=0,
        principal=principal,
    )


@settings(max_examples=150, deadline=None)
@given(
    acl_list=st.lists(acls, max_size=8),
    request=_requests(),
    user=st.sampled_from(["alice", "bob", "carol"]),
    host=st.sampled_from(HOSTS),
)
def test_an_enveloped_write_is_decided_as_the_client_sending_it_itself(
    acl_list: list[StandardAcl], request: tuple[int, Message], user: str, host: str
) -> None:
    api_key, body = request
    version = VERSIONS[api_key]
    client = KafkaPrincipal("User", user)
    broker_may_vouch = StandardAcl(
        ResourceType.CLUSTER,
        "kafka-cluster",
        PatternType.LITERAL,
        "User:broker",
        "*",
        AclOperation.CLUSTER_ACTION,
        PermissionType.ALLOW,
    )
    acl_list = [*acl_list, broker_may_vouch]
    direct_apis, direct_quorum = _controller(acl_list)
    direct = asyncio.run(direct_apis.handle(_ctx(api_key, version, client, host), body))
    forwarded_apis, forwarded_quorum = _controller(acl_list)
    origin = Origin(client, "client-1", version, host)
    envelope = wrap_request(api_key, body, origin)
    # the broker's own connection: another host, the broker's principal
    answer = asyncio.run(
        forwarded_apis.handle(_ctx(ApiKey.ENVELOPE, 0, BROKER, "10.9.9.9"), envelope)
    )
    assert isinstance(answer, EnvelopeResponse)
    assert answer.error_code == 0
    forwarded = unwrap_response(api_key, origin, answer)
    assert encode(forwarded, version) == encode(direct, version)
    assert forwarded_quorum.served == direct_quorum.served
    assert all(name == user for _, _, name in forwarded_quorum.served)


@settings(max_examples=60, deadline=None)
@given(acl_list=st.lists(acls, max_size=8), request=_requests())
def test_only_a_cluster_action_holder_may_vouch_for_a_client(
    acl_list: list[StandardAcl], request: tuple[int, Message]
) -> None:
    """Kafka's ControllerApis.handleEnvelopeRequest: CLUSTER_ACTION on the cluster, else
    the envelope is refused CLUSTER_AUTHORIZATION_FAILED and nothing is served, whatever
    the client it names may do."""
    api_key, body = request
    version = VERSIONS[api_key]
    may_all = StandardAcl(
        ResourceType.TOPIC,
        "*",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.ALL,
        PermissionType.ALLOW,
    )
    no_vouching = [
        a
        for a in [*acl_list, may_all]
        if a.operation not in (AclOperation.CLUSTER_ACTION, AclOperation.ALL)
        or a.resource_type != ResourceType.CLUSTER
        or a.permission_type == PermissionType.DENY
    ]
    apis, quorum = _controller(no_vouching)
    origin = Origin(KafkaPrincipal("User", "alice"), "client-1", version, HOSTS[0])
    answer = asyncio.run(
        apis.handle(
            _ctx(ApiKey.ENVELOPE, 0, BROKER, "10.9.9.9"), wrap_request(api_key, body, origin)
        )
    )
    assert isinstance(answer, EnvelopeResponse)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert quorum.served == []
