"""Issue 20, authorization per item: a request that names resources the principal may
use and resources it may not is served for the first and refused for the others, each
with its own error, as Kafka answers (TOPIC_ / GROUP_AUTHORIZATION_FAILED per topic, group
or config resource). And a principal without DESCRIBE on a topic gets the same answer
whether the topic exists or not, so it does not learn which topics exist; with DESCRIBE,
a missing topic is UNKNOWN_TOPIC_OR_PARTITION.

Real clients where librdkafka sends one request for several resources (CreateTopics,
DeleteTopics, DescribeConfigs, IncrementalAlterConfigs, DeleteRecords); riverbed's own
SASL login (`sasl_plain_request`) where librdkafka would split the request or stop at
Metadata first (ListOffsets, Produce, OffsetCommit, DescribeGroups), to see the broker's
exact per-item answer.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    Message,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from riverbed.testing.cluster import scaled_s
from riverbed.testing.secure import (
    AUTHORIZER_OVERRIDES,
    SecureBroker,
    sasl_plain_request,
    start_secure_broker,
)

USERS = {
    "admin": "admin-secret",
    "erin": "erin-pw",
    "frank": "frank-pw",
    "ivy": "ivy-pw",
    "jo": "jo-pw",
    "kim": "kim-pw",
    "lee": "lee-pw",
    "mo": "mo-pw",
}
SCRAM_USERS = {"gina": ("SCRAM-SHA-256", "gina-pw")}
TIMEOUT_S = 30
_ids = itertools.count()
OK = ErrorCode.NONE
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_NOT_YET = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("acl-items")
    broker = start_secure_broker(directory, USERS, SCRAM_USERS, AUTHORIZER_OVERRIDES)
    try:
        yield broker
    finally:
        broker.proc.close()


def _client(secure: SecureBroker, user: str | None) -> dict[str, str]:
    return secure.client_config(None if user is None else (user, USERS[user]))


def _listed(secure: SecureBroker) -> set[str]:
    return set(AdminClient(_client(secure, None)).list_topics(timeout=TIMEOUT_S).topics)


def _only_mine_done(futures: dict[str, Future], mine: str, theirs: str) -> None:
    assert {t: _outcome(f) for t, f in futures.items()} == {
        mine: 0,
        theirs: KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }


def _allow(secure: SecureBroker, rtype, name, user, op, pattern=ResourcePatternType.LITERAL):
    secure.allow(rtype, name, user, op, prefixed=pattern == ResourcePatternType.PREFIXED)


def _topics(secure: SecureBroker, *prefixes: str) -> list[str]:
    return secure.create_topics([f"{p}{next(_ids)}" for p in prefixes])


def _outcome(future) -> int:
    """0 when the future's operation succeeded, else the Kafka error code it failed with."""
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


def _ask(secure: SecureBroker, user: str, body: Message) -> Message:
    return sasl_plain_request(secure.bootstrap("SASL_PLAINTEXT"), user, USERS[user], body)


def _ask_at(secure: SecureBroker, user: str, body: Message, version: int) -> Message:
    address = secure.bootstrap("SASL_PLAINTEXT")
    return sasl_plain_request(address, user, USERS[user], body, version=version)


def test_create_topics_answers_each_topic(secure: SecureBroker) -> None:
    n = next(_ids)
    mine, theirs = f"erin-new-{n}", f"other-new-{n}"
    _allow(secure, ResourceType.TOPIC, "erin-new-", "erin", AclOperation.CREATE,
           ResourcePatternType.PREFIXED)  # fmt: skip
    erin = AdminClient(_client(secure, "erin"))
    _only_mine_done(
        erin.create_topics([NewTopic(mine, 1, 1), NewTopic(theirs, 1, 1)]), mine, theirs
    )
    assert mine in _listed(secure) and theirs not in _listed(secure)
    # CREATE without DESCRIBE_CONFIGS: created, but its configs are not shown (Kafka)
    C = CreateTopicsRequest
    for user, withheld in (("erin", True), ("admin", False)):
        name = f"erin-new-{user}-{n}"
        topic = C.CreatableTopic(name=name, num_partitions=2, replication_factor=1)
        (result,) = _ask(secure, user, C(topics=[topic], timeout_ms=30_000)).topics  # type: ignore[attr-defined]
        assert result.error_code == OK
        if withheld:
            assert result.topic_config_error_code == TOPIC_DENIED
            assert (result.num_partitions, result.configs) == (-1, [])
        else:
            assert result.topic_config_error_code == OK
            assert result.num_partitions == 2 and result.configs


def test_configs_and_delete_topics_answer_each_topic(secure: SecureBroker) -> None:
    mine, theirs = _topics(secure, "erin-cfg-", "other-cfg-")
    _allow(secure, ResourceType.TOPIC, mine, "erin", AclOperation.ALTER_CONFIGS)
    erin = AdminClient(_client(secure, "erin"))
    res = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in (mine, theirs)]
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    described = erin.describe_configs(res)
    assert [_outcome(described[r]) for r in res] == [0, KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert described[res[0]].result()["retention.ms"].value is not None
    for r in res:
        r.add_incremental_config(ConfigEntry("retention.ms", "3600000",
                                             incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    altered = erin.incremental_alter_configs(res)
    assert [_outcome(altered[r]) for r in res] == [0, KafkaError.TOPIC_AUTHORIZATION_FAILED]
    _allow(secure, ResourceType.TOPIC, mine, "erin", AclOperation.DELETE)
    _only_mine_done(erin.delete_topics([mine, theirs]), mine, theirs)
    assert mine not in _listed(secure) and theirs in _listed(secure)


def test_delete_records_answers_each_topic(secure: SecureBroker) -> None:
    mine, theirs = _topics(secure, "erin-dr-", "other-dr-")
    _allow(secure, ResourceType.TOPIC, mine, "erin", AclOperation.DELETE)
    _allow(secure, ResourceType.TOPIC, theirs, "erin", AclOperation.READ)  # visible, not DELETE
    erin = AdminClient(_client(secure, "erin"))
    futures = erin.delete_records([TopicPartition(mine, 0, 0), TopicPartition(theirs, 0, 0)])
    outcomes = {tp.topic: _outcome(f) for tp, f in futures.items()}
    assert outcomes == {mine: 0, theirs: KafkaError.TOPIC_AUTHORIZATION_FAILED}


def _list_offsets(*names: str) -> ListOffsetsRequest:
    R = ListOffsetsRequest
    return R(
        replica_id=-1,
        topics=[
            R.ListOffsetsTopic(name=n, partitions=[R.ListOffsetsPartition(partition_index=0, timestamp=-1)])
            for n in names
        ],
    )  # fmt: skip


def _errors(response: Message) -> dict[str, int]:
    assert isinstance(response, ListOffsetsResponse | OffsetCommitResponse)
    return {t.name: t.partitions[0].error_code for t in response.topics}


def test_list_offsets_answers_each_topic_and_hides_what_exists(secure: SecureBroker) -> None:
    (mine, theirs) = _topics(secure, "frank-lo-", "other-lo-")
    n = next(_ids)
    missing_mine, missing_theirs = f"frank-lo-missing-{n}", f"other-lo-missing-{n}"
    _allow(secure, ResourceType.TOPIC, "frank-lo-", "frank", AclOperation.DESCRIBE,
           ResourcePatternType.PREFIXED)  # fmt: skip
    answer = _ask(secure, "frank", _list_offsets(mine, theirs, missing_mine, missing_theirs))
    assert _errors(answer) == {
        mine: OK,
        # no DESCRIBE: the same answer whether the topic exists or not
        theirs: TOPIC_DENIED,
        missing_theirs: TOPIC_DENIED,
        # DESCRIBE: told that it does not exist
        missing_mine: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert isinstance(answer, ListOffsetsResponse)
    assert {t.name: t.partitions[0].offset for t in answer.topics}[mine] == 0


def test_offset_commit_answers_each_topic_under_the_group(secure: SecureBroker) -> None:
    mine, theirs = _topics(secure, "frank-oc-", "other-oc-")
    group = f"frank-group-{next(_ids)}"
    R = OffsetCommitRequest

    def commit(user: str = "frank") -> Message:
        return _ask(secure, user, R(
            group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[R.OffsetCommitRequestTopic(name=t, partitions=[
                R.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)
            ]) for t in (mine, theirs)],
        ))  # fmt: skip

    _allow(secure, ResourceType.TOPIC, mine, "frank", AclOperation.READ)
    # without READ on the group the whole commit is refused
    assert set(_errors(commit()).values()) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    _allow(secure, ResourceType.GROUP, group, "frank", AclOperation.READ)
    # FindCoordinator creates __consumer_offsets; its coordinator then loads
    deadline = time.monotonic() + scaled_s(TIMEOUT_S)
    found = _ask(secure, "frank", FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
    errors = _errors(commit())
    while errors[mine] in _NOT_YET and time.monotonic() < deadline:
        time.sleep(0.2)
        found = _ask(secure, "frank", FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        errors = _errors(commit())
    assert errors == {mine: OK, theirs: TOPIC_DENIED}, found
    assert _errors(commit("admin")) == {mine: OK, theirs: OK}
    # fetching all of the group's offsets shows only the topics the principal may describe
    F = OffsetFetchRequest
    fetch_all = F(groups=[F.OffsetFetchRequestGroup(group_id=group, topics=None)])
    for user, shown in (("frank", {mine}), ("admin", {mine, theirs})):
        fetched = _ask(secure, user, fetch_all)
        assert isinstance(fetched, OffsetFetchResponse)
        assert {t.name for t in fetched.groups[0].topics} == shown
    # naming both: each topic answered alone within the group
    named = [F.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in (mine, theirs)]
    fetched = _ask(
        secure, "frank", F(groups=[F.OffsetFetchRequestGroup(group_id=group, topics=named)])
    )
    assert isinstance(fetched, OffsetFetchResponse) and fetched.groups[0].error_code == 0
    answers = {t.name: t.partitions[0] for t in fetched.groups[0].topics}
    assert {t: p.error_code for t, p in answers.items()} == {mine: OK, theirs: TOPIC_DENIED}
    assert answers[mine].committed_offset == 0


def test_describe_groups_answers_each_group(secure: SecureBroker) -> None:
    n = next(_ids)
    mine, theirs = f"frank-dg-{n}", f"other-dg-{n}"
    _allow(secure, ResourceType.GROUP, mine, "frank", AclOperation.DESCRIBE)
    answer = _ask(secure, "frank", DescribeGroupsRequest(groups=[mine, theirs]))
    assert isinstance(answer, DescribeGroupsResponse)
    assert {g.group_id: g.error_code for g in answer.groups} == {
        # asked at DescribeGroups v6: a group that does not exist is GROUP_ID_NOT_FOUND
        # (KIP-1043), one the principal may not describe refused whatever its existence
        mine: ErrorCode.GROUP_ID_NOT_FOUND,
        theirs: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    }


# --- KIP-430: authorized operations, computed from the ACLs -------------------------------


def _ops(found) -> set[str]:
    assert found is not None
    return {op.name for op in found}


def test_authorized_operations_of_topics_cluster_and_groups(secure: SecureBroker) -> None:
    from confluent_kafka import TopicCollection

    wide, narrow = _topics(secure, "ivy-wide-", "ivy-narrow-")
    group = f"ivy-group-{next(_ids)}"
    deny = AclBinding(ResourceType.TOPIC, wide, ResourcePatternType.LITERAL, "User:ivy", "*",
                      AclOperation.DELETE, AclPermissionType.DENY)  # fmt: skip
    admin = AdminClient(_client(secure, None))  # held: a collected client fails its futures
    for f in admin.create_acls([deny]).values():
        f.result(timeout=TIMEOUT_S)
    _allow(secure, ResourceType.TOPIC, wide, "ivy", AclOperation.ALL)
    _allow(secure, ResourceType.TOPIC, narrow, "ivy", AclOperation.READ)
    _allow(secure, ResourceType.BROKER, "kafka-cluster", "ivy", AclOperation.DESCRIBE)
    _allow(secure, ResourceType.BROKER, "kafka-cluster", "ivy", AclOperation.IDEMPOTENT_WRITE)
    _allow(secure, ResourceType.GROUP, group, "ivy", AclOperation.DELETE)
    ivy = AdminClient(_client(secure, "ivy"))

    described = ivy.describe_topics(TopicCollection([wide, narrow]),
                                    include_authorized_operations=True)  # fmt: skip
    ops = {t: _ops(f.result(timeout=TIMEOUT_S).authorized_operations) for t, f in described.items()}
    assert ops == {
        # ALL, except the DENY
        wide: {"READ", "WRITE", "CREATE", "DESCRIBE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
        narrow: {"READ", "DESCRIBE"},  # READ implies DESCRIBE
    }
    cluster = ivy.describe_cluster(include_authorized_operations=True).result(timeout=TIMEOUT_S)
    assert _ops(cluster.authorized_operations) == {"DESCRIBE", "IDEMPOTENT_WRITE"}
    assert _ops(_described_group(ivy, group).authorized_operations) == {"DELETE", "DESCRIBE"}
    # a super user may do everything the resource types support
    admin = AdminClient(_client(secure, "admin"))  # SASL, not ANONYMOUS
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=TIMEOUT_S)
    assert _ops(cluster.authorized_operations) == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
        "ALTER", "DESCRIBE",
    }  # fmt: skip


def _described_group(admin: AdminClient, group: str):
    """DescribeGroups of ``group``, asked again while its coordinator is still loading
    (the first group request of a broker creates __consumer_offsets, and Kafka answers
    COORDINATOR_LOAD_IN_PROGRESS until the partition is loaded; librdkafka hands that
    answer back rather than retrying it)."""
    deadline = time.monotonic() + scaled_s(TIMEOUT_S)
    while True:
        (future,) = admin.describe_consumer_groups(
            [group], include_authorized_operations=True
        ).values()
        try:
            return future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            loading = exc.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS
            if not loading or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


# --- transactional ids ----------------------------------------------------------------------


def _committed_transaction(secure: SecureBroker, txn_id: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(_client(secure, None) | {"transactional.id": txn_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"v")
    producer.commit_transaction(TIMEOUT_S)


def test_transactions_listed_and_described_only_with_describe(secure: SecureBroker) -> None:
    (topic,) = _topics(secure, "jo-txn-")
    n = next(_ids)
    mine, theirs = f"jo-tx-{n}", f"other-tx-{n}"
    for txn_id in (mine, theirs):
        _committed_transaction(secure, txn_id, topic)
    _allow(secure, ResourceType.TRANSACTIONAL_ID, "jo-tx-", "jo", AclOperation.DESCRIBE,
           ResourcePatternType.PREFIXED)  # fmt: skip
    listed = _ask(secure, "jo", ListTransactionsRequest())
    assert isinstance(listed, ListTransactionsResponse) and listed.error_code == 0
    ids = {t.transactional_id for t in listed.transaction_states}
    assert mine in ids and theirs not in ids
    everything = _ask(secure, "admin", ListTransactionsRequest())
    assert isinstance(everything, ListTransactionsResponse)
    assert {mine, theirs} <= {t.transactional_id for t in everything.transaction_states}
    described = _ask(secure, "jo", DescribeTransactionsRequest(transactional_ids=[mine, theirs]))
    assert isinstance(described, DescribeTransactionsResponse)
    assert {(t.transactional_id, t.error_code) for t in described.transaction_states} == {
        (mine, OK),
        (theirs, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    }


def test_idempotent_producer_needs_idempotent_write_or_some_topic_write(
    secure: SecureBroker,
) -> None:
    def init() -> int:
        answer = _ask(secure, "kim", InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        ))  # fmt: skip
        assert isinstance(answer, InitProducerIdResponse)
        return answer.error_code

    assert init() == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    (topic,) = _topics(secure, "kim-")
    _allow(secure, ResourceType.TOPIC, topic, "kim", AclOperation.WRITE)
    assert init() == OK


def test_fetch_serves_the_readable_topic_and_refuses_the_other(secure: SecureBroker) -> None:
    from confluent_kafka import Consumer, Producer

    mine, theirs = _topics(secure, "lee-fetch-", "other-fetch-")
    producer = Producer(_client(secure, None))
    for t in (mine, theirs):
        producer.produce(t, t.encode())
    assert producer.flush(TIMEOUT_S) == 0
    _allow(secure, ResourceType.TOPIC, mine, "lee", AclOperation.READ)
    _allow(secure, ResourceType.TOPIC, theirs, "lee", AclOperation.DESCRIBE)  # seen, not read
    # the broker's answer: mine's record, theirs TOPIC_AUTHORIZATION_FAILED
    F = FetchRequest
    fetch = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_epoch=-1,
              topics=[F.FetchTopic(topic=t, partitions=[F.FetchPartition(
                  partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
                  for t in (mine, theirs)])  # fmt: skip
    answer = _ask_at(secure, "lee", fetch, version=12)
    assert isinstance(answer, FetchResponse) and answer.error_code == 0
    parts = {t.topic: t.partitions[0] for t in answer.responses}
    assert {t: p.error_code for t, p in parts.items()} == {mine: OK, theirs: TOPIC_DENIED}
    assert parts[mine].high_watermark == 1 and parts[mine].records
    # a real consumer assigned both reads what it may
    consumer = Consumer(_client(secure, "lee") | {
        "group.id": "lee-unused", "enable.auto.commit": "false",
    })  # fmt: skip
    consumer.assign([TopicPartition(mine, 0, 0), TopicPartition(theirs, 0, 0)])
    try:
        deadline = time.monotonic() + scaled_s(TIMEOUT_S)
        msg = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                break
    finally:
        consumer.close()
    assert msg is not None and msg.error() is None
    assert (msg.topic(), msg.value()) == (mine, mine.encode())


def test_consumer_group_apis_need_describe_on_the_topics(secure: SecureBroker) -> None:
    """Kafka 4.0 (KAFKA-18813): ConsumerGroupHeartbeat subscribing to a topic the member may
    not DESCRIBE is refused TOPIC_AUTHORIZATION_FAILED; ConsumerGroupDescribe of a group
    using such a topic answers TOPIC_AUTHORIZATION_FAILED instead of its members."""
    from confluent_kafka import Consumer

    (topic,) = _topics(secure, "mo-cg-")
    group = f"mo-group-{next(_ids)}"
    _allow(secure, ResourceType.GROUP, group, "mo", AclOperation.READ)  # implies DESCRIBE
    H = ConsumerGroupHeartbeatRequest
    beat = H(group_id=group, member_id="m-mo", member_epoch=0, rebalance_timeout_ms=30_000,
             subscribed_topic_names=[topic], topic_partitions=[])  # fmt: skip
    answer = _ask(secure, "mo", beat)
    assert answer.error_code == TOPIC_DENIED  # type: ignore[attr-defined]
    # a member (a super user's consumer) makes the group use the topic
    member = Consumer(_client(secure, None) | {"group.id": group, "group.protocol": "consumer"})
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + scaled_s(TIMEOUT_S)
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        request = ConsumerGroupDescribeRequest(group_ids=[group])
        (hidden,) = _ask(secure, "mo", request).groups  # type: ignore[attr-defined]
        assert (hidden.error_code, hidden.members) == (TOPIC_DENIED, [])
        _allow(secure, ResourceType.TOPIC, topic, "mo", AclOperation.DESCRIBE)
        (shown,) = _ask(secure, "mo", request).groups  # type: ignore[attr-defined]
        assert shown.error_code == OK and len(shown.members) == 1
        assert _ask(secure, "mo", beat).error_code == OK  # type: ignore[attr-defined]
    finally:
        member.close()
