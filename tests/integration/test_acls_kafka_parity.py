"""Authorization checks that must be exactly Kafka 4.x's (``KafkaApis`` / ``ControllerApis``),
each where riverbed used to differ: a grant Kafka honours (ALTER on the cluster for
WriteTxnMarkers, DELETE on the cluster for DeleteTopics, CLUSTER_ACTION or DESCRIBE for
OffsetForLeaderEpoch whatever the replica id), a refusal Kafka makes (an internal topic in
a client's AddPartitionsToTxn), and what a principal may not DESCRIBE kept from it (the
topics of a described transaction, a topic's name behind its id in Metadata), and what it
may (a ConsumerGroupDescribe checks the assigned topics, not the subscribed names).

Each request goes through riverbed's own SASL login (`sasl_plain_request`) to see the
broker's exact per-item answer, or a real confluent-kafka client where one sends it.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
)

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    FindCoordinatorRequest,
    Message,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from riverbed.testing.cluster import scaled_s
from riverbed.testing.secure import (
    AUTHORIZER_OVERRIDES,
    SecureBroker,
    running_secure_broker,
    sasl_plain_request,
)

USERS = {
    "admin": "admin-secret",
    "nia": "nia-pw",
    "olu": "olu-pw",
    "pat": "pat-pw",
    "quinn": "quinn-pw",
    "rae": "rae-pw",
    "sam": "sam-pw",
    "tao": "tao-pw",
    "uma": "uma-pw",
}
TIMEOUT_S = 30
_ids = itertools.count()
OK = ErrorCode.NONE
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
CLUSTER = (ResourceType.BROKER, "kafka-cluster")
_NOT_YET = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("acl-parity"), USERS, {}, AUTHORIZER_OVERRIDES
    ) as broker:
        yield broker


def _client(secure: SecureBroker, user: str | None) -> dict[str, str]:
    return secure.client_config(None if user is None else (user, USERS[user]))


def _topics(secure: SecureBroker, *prefixes: str) -> list[str]:
    return secure.create_topics([f"{p}{next(_ids)}" for p in prefixes])


def _ask(secure: SecureBroker, user: str, body: Message, version: int | None = None) -> Message:
    address = secure.bootstrap("SASL_PLAINTEXT")
    return sasl_plain_request(address, user, USERS[user], body, version=version)


def _open_transaction(secure: SecureBroker, txn_id: str, *topics: str) -> Producer:
    """A super user's transaction left open with one record in each of ``topics``."""
    producer = Producer(_client(secure, None) | {"transactional.id": txn_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for topic in topics:
        producer.produce(topic, b"v")
    assert producer.flush(TIMEOUT_S) == 0
    return producer


# --- WriteTxnMarkers: ALTER on the cluster (KIP-664's abort of a hanging transaction) ------


def _open_producer_state(
    secure: SecureBroker, topic: str
) -> DescribeProducersResponse.ProducerState:
    R = DescribeProducersRequest
    answer = _ask(secure, "admin", R(topics=[R.TopicRequest(name=topic, partition_indexes=[0])]))
    assert isinstance(answer, DescribeProducersResponse)
    (state,) = answer.topics[0].partitions[0].active_producers
    assert state.current_txn_start_offset >= 0  # the transaction is open
    return state


def _abort_marker(secure: SecureBroker, prefix: str) -> tuple[str, WriteTxnMarkersRequest]:
    """A topic with a transaction left open, and the WriteTxnMarkers that aborts it."""
    (topic,) = _topics(secure, prefix)
    _PRODUCERS.append(_open_transaction(secure, f"{prefix}tx-{next(_ids)}", topic))
    state = _open_producer_state(secure, topic)
    W = WriteTxnMarkersRequest
    return topic, W(markers=[W.WritableTxnMarker(
        producer_id=state.producer_id, producer_epoch=state.producer_epoch,
        transaction_result=False, coordinator_epoch=state.coordinator_epoch,
        topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
    )])  # fmt: skip


#: producers whose transactions the tests leave open (kept: closing one would end it)
_PRODUCERS: list[Producer] = []


def _marker_errors(secure: SecureBroker, user: str, request: WriteTxnMarkersRequest) -> list:
    response = _ask(secure, user, request)
    assert isinstance(response, WriteTxnMarkersResponse)
    return [
        (m.producer_id, t.name, p.partition_index, p.error_code)
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    ]


def test_refused_write_txn_markers_answers_each_partition(secure: SecureBroker) -> None:
    """Kafka's refusal names every partition of every marker with the error (the admin
    client's abortTransaction reads its one partition's answer)."""
    topic, abort = _abort_marker(secure, "nia-refused-")
    pid = abort.markers[0].producer_id
    assert _marker_errors(secure, "nia", abort) == [(pid, topic, 0, CLUSTER_DENIED)]


def test_write_txn_markers_is_allowed_with_alter_on_the_cluster(secure: SecureBroker) -> None:
    """Kafka answers WriteTxnMarkers to a principal with ALTER or CLUSTER_ACTION on the
    cluster: the admin client's abortTransaction (kafka-transactions.sh abort) sends it."""
    topic, abort = _abort_marker(secure, "olu-hang-")
    pid = abort.markers[0].producer_id
    assert _marker_errors(secure, "olu", abort) == [(pid, topic, 0, CLUSTER_DENIED)]
    secure.allow(*CLUSTER, "olu", AclOperation.ALTER)
    assert _marker_errors(secure, "olu", abort) == [(pid, topic, 0, OK)]
    R = DescribeProducersRequest
    after = _ask(secure, "admin", R(topics=[R.TopicRequest(name=topic, partition_indexes=[0])]))
    assert isinstance(after, DescribeProducersResponse)
    (state,) = after.topics[0].partitions[0].active_producers
    assert state.current_txn_start_offset == -1  # aborted: no transaction open any more


# --- DescribeTransactions: only the topics the principal may DESCRIBE -----------------------


def test_describe_transactions_shows_only_describable_topics(secure: SecureBroker) -> None:
    seen, unseen = _topics(secure, "uma-seen-", "uma-unseen-")
    txn_id = f"uma-tx-{next(_ids)}"
    producer = _open_transaction(secure, txn_id, seen, unseen)
    try:
        secure.allow(ResourceType.TRANSACTIONAL_ID, txn_id, "uma", AclOperation.DESCRIBE)
        secure.allow(ResourceType.TOPIC, seen, "uma", AclOperation.DESCRIBE)
        request = DescribeTransactionsRequest(transactional_ids=[txn_id])
        for user, shown in (("admin", {seen, unseen}), ("uma", {seen})):
            answer = _ask(secure, user, request)
            assert isinstance(answer, DescribeTransactionsResponse)
            (state,) = answer.transaction_states
            assert state.error_code == OK and state.transaction_state == "Ongoing"
            assert {t.topic for t in state.topics} == shown, user
    finally:
        producer.abort_transaction(TIMEOUT_S)


# --- DeleteTopics: DELETE on the cluster deletes any topic (ControllerApis) ----------------


def test_delete_topics_is_allowed_by_delete_on_the_cluster(secure: SecureBroker) -> None:
    (topic,) = _topics(secure, "pat-del-")
    pat = AdminClient(_client(secure, "pat"))

    def delete() -> int:
        (future,) = pat.delete_topics([topic], operation_timeout=TIMEOUT_S).values()
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            return exc.args[0].code()
        return 0

    assert delete() == TOPIC_DENIED
    secure.allow(*CLUSTER, "pat", AclOperation.DELETE)
    assert delete() == 0
    admin = AdminClient(_client(secure, None))
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics


# --- OffsetForLeaderEpoch: CLUSTER_ACTION, else DESCRIBE on each topic ---------------------


def _epochs(secure: SecureBroker, user: str, replica_id: int, *topics: str) -> dict[str, int]:
    R = OffsetForLeaderEpochRequest
    request = R(replica_id=replica_id, topics=[R.OffsetForLeaderTopic(topic=t, partitions=[
        R.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)
    ]) for t in topics])  # fmt: skip
    answer = _ask(secure, user, request)
    assert isinstance(answer, OffsetForLeaderEpochResponse)
    return {t.topic: t.partitions[0].error_code for t in answer.topics}


def test_offset_for_leader_epoch_needs_cluster_action_or_describe(secure: SecureBroker) -> None:
    """Kafka (KIP-320) serves every topic to CLUSTER_ACTION on the cluster, and otherwise
    each topic the principal may DESCRIBE, whatever replica id the request carries."""
    mine, theirs = _topics(secure, "quinn-ole-", "other-ole-")
    secure.allow(ResourceType.TOPIC, mine, "quinn", AclOperation.DESCRIBE)
    for replica_id in (-1, 1):  # a consumer's, a follower's
        got = _epochs(secure, "quinn", replica_id, mine, theirs)
        assert got == {mine: OK, theirs: TOPIC_DENIED}, replica_id
    secure.allow(*CLUSTER, "rae", AclOperation.CLUSTER_ACTION)  # no topic ACL at all
    for replica_id in (-1, 1):
        assert _epochs(secure, "rae", replica_id, mine, theirs) == {mine: OK, theirs: OK}


# --- AddPartitionsToTxn v3-: an internal topic is never a client's to add ------------------


def test_add_partitions_to_txn_refuses_internal_topics(secure: SecureBroker) -> None:
    """Kafka leaves internal topics out of the topics a client may WRITE in a transaction
    (even with WRITE on every topic): TOPIC_AUTHORIZATION_FAILED, the rest not attempted."""
    (topic,) = _topics(secure, "sam-apt-")
    txn_id = f"sam-tx-{next(_ids)}"
    secure.allow(ResourceType.TRANSACTIONAL_ID, txn_id, "sam", AclOperation.WRITE)
    secure.allow(ResourceType.TOPIC, "*", "sam", AclOperation.WRITE)
    R = AddPartitionsToTxnRequest
    request = R(v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=1000,
                v3_and_below_producer_epoch=0, v3_and_below_topics=[
                    R.AddPartitionsToTxnTopic(name=t, partitions=[0])
                    for t in ("__consumer_offsets", topic)])  # fmt: skip
    answer = _ask(secure, "sam", request, version=3)
    assert isinstance(answer, AddPartitionsToTxnResponse)
    codes = {t.name: t.results_by_partition[0].partition_error_code
             for t in answer.results_by_topic_v3_and_below}  # fmt: skip
    assert codes == {"__consumer_offsets": TOPIC_DENIED, topic: ErrorCode.OPERATION_NOT_ATTEMPTED}


# --- ConsumerGroupDescribe: the assigned topics are checked, not the subscribed names -------


def test_consumer_group_describe_checks_the_assigned_topics(secure: SecureBroker) -> None:
    """Kafka (KAFKA-18813) refuses to describe a group whose members' assignments (current
    or target) hold a topic the principal may not DESCRIBE, with a message; a subscribed
    name no member is assigned (a topic that does not exist) does not hide the group."""
    (topic,) = _topics(secure, "tao-cg-")
    absent = f"tao-absent-{next(_ids)}"
    group = f"tao-group-{next(_ids)}"
    H = ConsumerGroupHeartbeatRequest
    beat = H(group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
             rebalance_timeout_ms=30_000, subscribed_topic_names=[topic, absent],
             topic_partitions=[])  # fmt: skip
    deadline = time.monotonic() + scaled_s(TIMEOUT_S)
    while (code := _ask(secure, "admin", beat).error_code) != OK:  # type: ignore[attr-defined]
        assert code in _NOT_YET
        assert time.monotonic() < deadline
        # FindCoordinator creates __consumer_offsets; its coordinator then loads
        _ask(secure, "admin", FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        time.sleep(0.2)
    secure.allow(ResourceType.GROUP, group, "tao", AclOperation.DESCRIBE)
    request = ConsumerGroupDescribeRequest(group_ids=[group])

    def described() -> ConsumerGroupDescribeResponse.DescribedGroup:
        answer = _ask(secure, "tao", request)
        assert isinstance(answer, ConsumerGroupDescribeResponse)
        return answer.groups[0]

    hidden = described()  # assigned a topic tao may not describe
    assert (hidden.error_code, hidden.members) == (TOPIC_DENIED, [])
    assert hidden.error_message == (
        "The group has described topic(s) that the client is not authorized to describe."
    )
    secure.allow(ResourceType.TOPIC, topic, "tao", AclOperation.DESCRIBE)
    shown = described()
    assert shown.error_code == OK, shown
    assert set(shown.members[0].subscribed_topic_names) == {topic, absent}


# --- Metadata by topic id: the name of a topic the principal may not DESCRIBE stays hidden --


def _metadata_by_id(secure: SecureBroker, user: str, *ids: uuid.UUID) -> list:
    R = MetadataRequest
    request = R(topics=[R.MetadataRequestTopic(name=None, topic_id=i) for i in ids],
                allow_auto_topic_creation=False)  # fmt: skip
    answer = _ask(secure, user, request, version=12)
    assert isinstance(answer, MetadataResponse)
    return answer.topics


def test_metadata_by_topic_id_hides_the_name_of_a_refused_topic(secure: SecureBroker) -> None:
    """Kafka answers a topic id the principal may not DESCRIBE TOPIC_AUTHORIZATION_FAILED
    with the id and no name, and an unknown id UNKNOWN_TOPIC_ID."""
    secret, mine = _topics(secure, "secret-md-", "nia-md-")
    secure.allow(ResourceType.TOPIC, mine, "nia", AclOperation.DESCRIBE)
    ids = {t.name: t.topic_id for t in _metadata_by_id_names(secure, secret, mine)}
    unknown = uuid.uuid4()
    answers = _metadata_by_id(secure, "nia", ids[secret], ids[mine], unknown)
    got = {(t.topic_id, t.name, t.error_code) for t in answers}
    assert got == {
        (ids[secret], None, TOPIC_DENIED),
        (ids[mine], mine, OK),
        (unknown, None, ErrorCode.UNKNOWN_TOPIC_ID),
    }


def _metadata_by_id_names(secure: SecureBroker, *names: str) -> list:
    R = MetadataRequest
    request = R(topics=[R.MetadataRequestTopic(name=n) for n in names],
                allow_auto_topic_creation=False)  # fmt: skip
    answer = _ask(secure, "admin", request, version=12)
    assert isinstance(answer, MetadataResponse)
    return answer.topics


# --- Refusals answer every partition of the request, as Kafka's error responses ------------


def test_describe_producers_refuses_each_partition(secure: SecureBroker) -> None:
    """A topic the principal may not READ is answered TOPIC_AUTHORIZATION_FAILED in each
    of its partitions (the admin client's describeProducers waits for its partitions)."""
    mine, theirs = _topics(secure, "nia-dp-", "other-dp-")
    secure.allow(ResourceType.TOPIC, mine, "nia", AclOperation.READ)
    R = DescribeProducersRequest
    request = R(topics=[R.TopicRequest(name=t, partition_indexes=[0]) for t in (mine, theirs)])
    answer = _ask(secure, "nia", request)
    assert isinstance(answer, DescribeProducersResponse)
    got = {(t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions}
    assert got == {(mine, 0, OK), (theirs, 0, TOPIC_DENIED)}


def test_alter_replica_log_dirs_refuses_each_partition(secure: SecureBroker) -> None:
    """Without ALTER on the cluster every partition is answered CLUSTER_AUTHORIZATION_FAILED
    (the admin client's alterReplicaLogDirs reads each replica's answer)."""
    one, two = _topics(secure, "nia-ard-", "nia-ard-")
    A = AlterReplicaLogDirsRequest
    request = A(dirs=[
        A.AlterReplicaLogDir(path="/a", topics=[A.AlterReplicaLogDirTopic(name=one, partitions=[0])]),
        A.AlterReplicaLogDir(path="/b", topics=[A.AlterReplicaLogDirTopic(name=two, partitions=[0])]),
    ])  # fmt: skip
    answer = _ask(secure, "nia", request)
    assert isinstance(answer, AlterReplicaLogDirsResponse)
    got = {
        (t.topic_name, p.partition_index, p.error_code)
        for t in answer.results
        for p in t.partitions
    }
    assert got == {(one, 0, CLUSTER_DENIED), (two, 0, CLUSTER_DENIED)}


def test_alter_user_scram_credentials_refuses_each_user(secure: SecureBroker) -> None:
    """Without ALTER on the cluster each user of the request is answered
    CLUSTER_AUTHORIZATION_FAILED (confluent-kafka's future per user)."""
    from confluent_kafka.admin._scram import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    nia = AdminClient(_client(secure, "nia"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = nia.alter_user_scram_credentials([
        UserScramCredentialUpsertion("vic", info, b"vic-pw"),
        UserScramCredentialDeletion("wyn", ScramMechanism.SCRAM_SHA_256),
    ])  # fmt: skip
    assert set(futures) == {"vic", "wyn"}
    for user, future in futures.items():
        with pytest.raises(KafkaException) as info_:
            future.result(timeout=TIMEOUT_S)
        assert info_.value.args[0].code() == CLUSTER_DENIED, user


def test_alter_client_quotas_refuses_each_entity(secure: SecureBroker) -> None:
    """Without ALTER_CONFIGS on the cluster each entity of the request is answered
    CLUSTER_AUTHORIZATION_FAILED with its entity (the admin client reads each)."""
    Q = AlterClientQuotasRequest
    request = Q(entries=[Q.EntryData(
        entity=[Q.EntityData(entity_type="user", entity_name=name)],
        ops=[Q.OpData(key="producer_byte_rate", value=1024.0, remove=False)],
    ) for name in ("vic", "wyn")])  # fmt: skip
    answer = _ask(secure, "nia", request)
    assert isinstance(answer, AlterClientQuotasResponse)
    got = [
        (e.error_code, [(d.entity_type, d.entity_name) for d in e.entity]) for e in answer.entries
    ]
    assert got == [(CLUSTER_DENIED, [("user", "vic")]), (CLUSTER_DENIED, [("user", "wyn")])]


def test_offset_fetch_refusals_per_topic_and_per_group(secure: SecureBroker) -> None:
    """Up to v7 a topic the principal may not DESCRIBE is answered in each partition
    (TOPIC_AUTHORIZATION_FAILED, offset -1); from v8 a group it may not DESCRIBE is
    answered by the group's error alone, as Kafka's groupError."""
    mine, theirs = _topics(secure, "nia-of-", "other-of-")
    group, other = f"nia-ofg-{next(_ids)}", f"other-ofg-{next(_ids)}"
    secure.allow(ResourceType.GROUP, group, "nia", AclOperation.DESCRIBE)
    secure.allow(ResourceType.TOPIC, mine, "nia", AclOperation.DESCRIBE)
    F = OffsetFetchRequest
    topics = [F.OffsetFetchRequestTopic(name=t, partition_indexes=[0]) for t in (mine, theirs)]
    deadline = time.monotonic() + scaled_s(TIMEOUT_S)
    while True:  # the first group request creates __consumer_offsets, then it loads
        old = _ask(secure, "nia", F(group_id=group, topics=topics), version=7)
        assert isinstance(old, OffsetFetchResponse)
        if old.error_code not in _NOT_YET or time.monotonic() > deadline:
            break
        _ask(secure, "nia", FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        time.sleep(0.2)
    assert old.error_code == OK
    got = {(t.name, p.partition_index, p.error_code, p.committed_offset)
           for t in old.topics for p in t.partitions}  # fmt: skip
    assert got == {(mine, 0, OK, -1), (theirs, 0, TOPIC_DENIED, -1)}
    G = F.OffsetFetchRequestGroup
    named = [F.OffsetFetchRequestTopics(name=mine, partition_indexes=[0])]
    new = _ask(secure, "nia", F(groups=[G(group_id=g, topics=named) for g in (group, other)]))
    assert isinstance(new, OffsetFetchResponse)
    answers = {g.group_id: (g.error_code, [t.name for t in g.topics]) for g in new.groups}
    assert answers == {group: (OK, [mine]), other: (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])}
