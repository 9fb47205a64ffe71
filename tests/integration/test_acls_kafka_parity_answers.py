"""Authorization answers that must be exactly Kafka 4.x's, each where riverbed used to
differ (after `test_acls_kafka_parity`): the transactional id of a Produce is checked
only for transactional batches (``RequestUtils.hasTransactionalRecords``); a refused
follower Fetch errors its partitions, not the response (``handleFetchRequest``); a config
resource of an unknown type is INVALID_REQUEST, not an authorization question
(``ConfigHelper``, ``ConfigAdminManager.preprocess``); a topic refused deletion by id
keeps its name for a principal that may describe it (``ControllerApis.deleteTopics``);
a refused DescribeUserScramCredentials has a result per user (its getErrorResponse).

Each request goes through riverbed's own SASL login (`sasl_plain_request`) to see the
broker's exact answer.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    FetchRequest,
    FetchResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.testing.secure import (
    AUTHORIZER_OVERRIDES,
    SecureBroker,
    running_secure_broker,
    sasl_plain_request,
)

USERS = {"admin": "admin-secret", "ada": "ada-pw", "bo": "bo-pw", "cy": "cy-pw", "di": "di-pw"}
_ids = itertools.count()
OK = ErrorCode.NONE
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
INVALID = ErrorCode.INVALID_REQUEST


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("acl-answers"), USERS, {}, AUTHORIZER_OVERRIDES
    ) as broker:
        yield broker


def _topic(secure: SecureBroker, prefix: str) -> str:
    return secure.create_topics([f"{prefix}{next(_ids)}"])[0]


def _ask(secure: SecureBroker, user: str, body: Message, version: int | None = None) -> Message:
    address = secure.bootstrap("SASL_PLAINTEXT")
    return sasl_plain_request(address, user, USERS[user], body, version=version)


# --- Produce: WRITE on the transactional id only for transactional batches ------------------


def _produce(topic: str, txn_id: str, batch: bytes) -> ProduceRequest:
    P = ProduceRequest
    return P(transactional_id=txn_id, acks=-1, timeout_ms=30_000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(
            index=0, records=batch)])])  # fmt: skip


def _produced(secure: SecureBroker, user: str, request: ProduceRequest) -> int:
    answer = _ask(secure, user, request, version=11)
    assert isinstance(answer, ProduceResponse)
    (part,) = answer.responses[0].partition_responses
    return part.error_code


def test_produce_checks_the_transactional_id_only_for_transactional_batches(
    secure: SecureBroker,
) -> None:
    """Kafka's handleProduceRequest checks WRITE on the transactional id only when a
    partition's first batch is transactional: a plain batch sent with an id the principal
    may not WRITE is appended; a transactional one is refused."""
    topic = _topic(secure, "ada-produce-")
    secure.allow(ResourceType.TOPIC, topic, "ada", AclOperation.WRITE)
    txn_id = f"ada-tx-{next(_ids)}"  # ada has no ACL on it
    plain = build_batch([SimpleRecord(b"v")])
    assert _produced(secure, "ada", _produce(topic, txn_id, plain)) == OK
    transactional = build_batch(
        [SimpleRecord(b"t")], producer_id=4000, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    )  # fmt: skip
    denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _produced(secure, "ada", _produce(topic, txn_id, transactional)) == denied


# --- Fetch: a follower without CLUSTER_ACTION: each partition refused, the response not -----


def test_refused_follower_fetch_errors_each_partition_not_the_response(
    secure: SecureBroker,
) -> None:
    one, two = _topic(secure, "bo-ff-"), _topic(secure, "bo-ff-")
    secure.allow(ResourceType.TOPIC, one, "bo", AclOperation.READ)  # a consumer's grant only
    F = FetchRequest
    fetch = F(replica_id=1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_epoch=-1,
              topics=[F.FetchTopic(topic=t, partitions=[F.FetchPartition(
                  partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
                  for t in (one, two)])  # fmt: skip
    answer = _ask(secure, "bo", fetch, version=12)
    assert isinstance(answer, FetchResponse)
    assert answer.error_code == OK
    got = {
        (t.topic, p.partition_index, p.error_code, p.high_watermark)
        for t in answer.responses
        for p in t.partitions
    }
    assert got == {(one, 0, TOPIC_DENIED, -1), (two, 0, TOPIC_DENIED, -1)}


# --- Configs: an unknown resource type is INVALID_REQUEST, whatever the ACLs ---------------

UNKNOWN_TYPE = 99


def test_describe_configs_of_an_unknown_resource_type_is_an_invalid_request(
    secure: SecureBroker,
) -> None:
    """Kafka's ConfigHelper throws InvalidRequestException while authorizing: the whole
    request is answered by its error response, each resource INVALID_REQUEST with the
    error's message (the describable topic too)."""
    topic = _topic(secure, "cy-dc-")
    secure.allow(ResourceType.TOPIC, topic, "cy", AclOperation.DESCRIBE_CONFIGS)
    R = DescribeConfigsRequest.DescribeConfigsResource
    resources = [R(resource_type=t, resource_name=n, configuration_keys=None)
                 for t, n in ((2, topic), (UNKNOWN_TYPE, "x"))]  # fmt: skip
    answer = _ask(secure, "cy", DescribeConfigsRequest(resources=resources))
    assert isinstance(answer, DescribeConfigsResponse)
    got = [(r.resource_type, r.resource_name, r.error_code, r.error_message, r.configs)
           for r in answer.results]  # fmt: skip
    message = ErrorCode.INVALID_REQUEST.message
    assert got == [(2, topic, INVALID, message, []), (UNKNOWN_TYPE, "x", INVALID, message, [])]
    alone = _ask(secure, "cy", DescribeConfigsRequest(resources=resources[:1]))
    assert isinstance(alone, DescribeConfigsResponse)
    assert alone.results[0].error_code == OK and alone.results[0].configs


def test_alter_configs_of_an_unknown_resource_type_is_an_invalid_request(
    secure: SecureBroker,
) -> None:
    """Kafka's ConfigAdminManager.preprocess answers that resource alone, before any
    authorization: INVALID_REQUEST 'Unknown resource type N' (legacy AlterConfigs knows
    no BROKER_LOGGER, 8); the other resources are served."""
    topic = _topic(secure, "cy-ac-")
    secure.allow(ResourceType.TOPIC, topic, "cy", AclOperation.ALTER_CONFIGS)
    C = IncrementalAlterConfigsRequest
    incremental = C(validate_only=True, resources=[
        C.AlterConfigsResource(resource_type=t, resource_name=n, configs=[C.AlterableConfig(
            name="retention.ms", config_operation=0, value="60000")])
        for t, n in ((2, topic), (UNKNOWN_TYPE, "x"))])  # fmt: skip
    answer = _ask(secure, "cy", incremental)
    assert isinstance(answer, IncrementalAlterConfigsResponse)
    got = {(r.resource_type, r.error_code, r.error_message) for r in answer.responses}
    assert got == {(2, OK, None), (UNKNOWN_TYPE, INVALID, f"Unknown resource type {UNKNOWN_TYPE}")}
    A = AlterConfigsRequest
    legacy = A(validate_only=True, resources=[A.AlterConfigsResource(
        resource_type=t, resource_name=n, configs=[A.AlterableConfig(name="k", value="v")])
        for t, n in ((8, "1"), (UNKNOWN_TYPE, "x"))])  # fmt: skip
    for user in ("cy", "admin"):  # the ACLs do not matter
        old = _ask(secure, user, legacy)
        assert isinstance(old, AlterConfigsResponse)
        got = {(r.resource_type, r.error_code, r.error_message) for r in old.responses}
        assert got == {(t, INVALID, f"Unknown resource type {t}") for t in (8, UNKNOWN_TYPE)}


# --- DeleteTopics by id: the name of a topic the principal may describe ---------------------


def _topic_ids(secure: SecureBroker, *names: str) -> list[uuid.UUID]:
    R = MetadataRequest
    request = R(topics=[R.MetadataRequestTopic(name=n) for n in names],
                allow_auto_topic_creation=False)  # fmt: skip
    answer = _ask(secure, "admin", request, version=12)
    assert isinstance(answer, MetadataResponse)
    ids = {t.name: t.topic_id for t in answer.topics}
    return [ids[n] for n in names]


def test_delete_topics_by_id_names_a_refused_topic_the_principal_may_describe(
    secure: SecureBroker,
) -> None:
    """Kafka's ControllerApis.deleteTopics answers a topic named by id that may be
    described but not deleted with its name, one that may not be described without;
    both TOPIC_AUTHORIZATION_FAILED with the error's message. Neither is deleted."""
    seen, unseen = _topic(secure, "di-del-"), _topic(secure, "di-del-")
    secure.allow(ResourceType.TOPIC, seen, "di", AclOperation.DESCRIBE)
    seen_id, unseen_id = _topic_ids(secure, seen, unseen)
    D = DeleteTopicsRequest
    request = D(timeout_ms=30_000, topics=[D.DeleteTopicState(name=None, topic_id=i)
                                           for i in (seen_id, unseen_id)])  # fmt: skip
    answer = _ask(secure, "di", request, version=6)
    assert isinstance(answer, DeleteTopicsResponse)
    got = {(r.topic_id, r.name, r.error_code, r.error_message) for r in answer.responses}
    message = TOPIC_DENIED.message
    assert got == {(seen_id, seen, TOPIC_DENIED, message), (unseen_id, None, TOPIC_DENIED, message)}
    assert _topic_ids(secure, seen, unseen) == [seen_id, unseen_id]  # still there


def _deleted_by_name(secure: SecureBroker, version: int, *names: str) -> dict[str, tuple]:
    D = DeleteTopicsRequest
    if version >= 6:
        request = D(timeout_ms=30_000, topics=[D.DeleteTopicState(name=n) for n in names])
    else:
        request = D(timeout_ms=30_000, topic_names=list(names))
    answer = _ask(secure, "di", request, version=version)
    assert isinstance(answer, DeleteTopicsResponse)
    return {r.name: (r.error_code, r.error_message) for r in answer.responses}


@pytest.mark.parametrize("version", [5, 6])
def test_delete_topics_by_name_says_unknown_for_an_absent_topic_the_principal_may_describe(
    secure: SecureBroker, version: int
) -> None:
    """Kafka's ControllerApis.deleteTopics checks a topic named by name in this order: not
    describable -> TOPIC_AUTHORIZATION_FAILED; absent -> the controller's
    UNKNOWN_TOPIC_OR_PARTITION; not deletable -> TOPIC_AUTHORIZATION_FAILED. So a principal
    with DESCRIBE but not DELETE learns that a topic does not exist (it could anyway, from
    Metadata), one without DESCRIBE does not."""
    absent_seen, absent_unseen = (f"di-gone-{next(_ids)}" for _ in range(2))
    present_seen = _topic(secure, "di-kept-")
    for name in (absent_seen, present_seen):
        secure.allow(ResourceType.TOPIC, name, "di", AclOperation.DESCRIBE)
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert unknown.message == "This server does not host this topic-partition."  # Kafka's
    assert _deleted_by_name(secure, version, absent_seen, absent_unseen, present_seen) == {
        absent_seen: (unknown, unknown.message),
        absent_unseen: (TOPIC_DENIED, TOPIC_DENIED.message),
        present_seen: (TOPIC_DENIED, TOPIC_DENIED.message),
    }
    assert _topic_ids(secure, present_seen)  # still there


# --- DescribeUserScramCredentials refused: a result per requested user ---------------------


def test_refused_describe_user_scram_credentials_answers_each_user(secure: SecureBroker) -> None:
    """Kafka's getErrorResponse: the error, and one result per requested user carrying it
    (its ``User`` left empty, as Kafka's)."""
    U = DescribeUserScramCredentialsRequest
    request = U(users=[U.UserName(name=n) for n in ("vic", "wyn")])
    answer = _ask(secure, "di", request)
    assert isinstance(answer, DescribeUserScramCredentialsResponse)
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert answer.error_code == denied
    got = [(r.user, r.error_code, r.credential_infos) for r in answer.results]
    assert got == [("", denied, []), ("", denied, [])]
