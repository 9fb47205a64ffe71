"""The table of what each API needs covers every API a broker listener serves."""

from __future__ import annotations

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import InitProducerIdRequest, ProduceRequest
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.security.acl import AclOperation as Op
from riverbed.security.acl import ResourceType
from riverbed.security.api_operations import RULES, Action
from riverbed.server.broker.dispatch import HANDLERS


def test_every_served_api_has_a_rule():
    assert set(HANDLERS) - set(RULES) == set()


def _produce(transactional_id: str, *, transactional: bool) -> ProduceRequest:
    batch = build_batch(
        [SimpleRecord(b"v")], producer_id=7, producer_epoch=0, is_transactional=transactional
    )
    P = ProduceRequest
    partition = P.PartitionProduceData(index=0, records=batch)
    topic = P.TopicProduceData(name="t", partition_data=[partition])
    return P(transactional_id=transactional_id, topic_data=[topic])


def test_transactional_produce_checks_the_transactional_id_before_the_topics():
    req = _produce("tx", transactional=True)
    checks = RULES[ApiKey.PRODUCE](req, lambda _: None)
    assert [c.error for c in checks] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ]
    assert checks[1].actions == (Action(ResourceType.TOPIC, "t", Op.WRITE),)


def test_a_produce_of_idempotent_batches_does_not_check_its_transactional_id():
    """Kafka's hasTransactionalRecords: the id is checked for transactional batches only."""
    checks = RULES[ApiKey.PRODUCE](_produce("tx", transactional=False), lambda _: None)
    assert [c.actions for c in checks] == [(Action(ResourceType.TOPIC, "t", Op.WRITE),)]


def test_idempotent_init_producer_id_needs_idempotent_write_or_some_topic_write():
    (check,) = RULES[ApiKey.INIT_PRODUCER_ID](
        InitProducerIdRequest(transactional_id=None), lambda _: None
    )
    assert check.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert {a.operation for a in check.actions} == {Op.IDEMPOTENT_WRITE, Op.WRITE}


def test_every_controller_listener_api_has_a_rule():
    from riverbed.security.api_operations import CONTROLLER_RULES
    from riverbed.server.quorum import CONTROLLER_API_VERSIONS

    assert set(CONTROLLER_API_VERSIONS) - set(CONTROLLER_RULES) == set()


def test_controller_listener_raft_and_registration_need_cluster_action():
    from riverbed.protocol.messages import BrokerRegistrationRequest, VoteRequest
    from riverbed.security.api_operations import CONTROLLER_RULES

    cluster_action = Action(ResourceType.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)
    for key, req in (
        (ApiKey.VOTE, VoteRequest()),
        (ApiKey.BROKER_REGISTRATION, BrokerRegistrationRequest()),
    ):
        (check,) = CONTROLLER_RULES[key](req, lambda _: None)
        assert check.actions == (cluster_action,)
        assert check.error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_cluster_action_creates_internal_topics_on_the_controller_and_nothing_else():
    """A node's coordinator creates its internal topic as the node (CLUSTER_ACTION); any
    other topic, as any other metadata write, needs the operation's own ACL, whoever sends
    it (a broker forwards its clients' writes in Envelopes, checked as theirs)."""
    from riverbed.protocol.messages import CreateAclsRequest, CreateTopicsRequest
    from riverbed.security.api_operations import CONTROLLER_RULES

    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(topics=[T(name="t"), T(name="__consumer_offsets")])
    user_topic, internal = CONTROLLER_RULES[ApiKey.CREATE_TOPICS](req, lambda _: None)
    create = {(ResourceType.CLUSTER, Op.CREATE), (ResourceType.TOPIC, Op.CREATE)}
    assert {(a.resource_type, a.operation) for a in user_topic.actions} == create
    assert {(a.resource_type, a.operation) for a in internal.actions} == create | {
        (ResourceType.CLUSTER, Op.CLUSTER_ACTION)
    }
    (acls,) = CONTROLLER_RULES[ApiKey.CREATE_ACLS](CreateAclsRequest(), lambda _: None)
    assert acls.actions == (Action(ResourceType.CLUSTER, "kafka-cluster", Op.ALTER),)
