"""Issue 20, authorization: a real broker with Kafka's StandardAuthorizer name configured,
ACLs created with confluent-kafka's admin client (CreateAcls through a super user), and
real clients logging in over SASL_PLAINTEXT (PLAIN) as ordinary users. Each denial is the
exact error a client sees; each grant is shown to change the outcome.

The PLAINTEXT listener's principal (User:ANONYMOUS) and User:admin are super users: the
test harness sets up through them, and the broker's own connections use them.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.secure import (
    AUTHORIZER_OVERRIDES,
    NO_INITIAL_REBALANCE_DELAY,
    SecureBroker,
    running_secure_broker,
)

SCRAM_USERS = {"dave": ("SCRAM-SHA-256", "dave-pw")}
USERS = {"admin": "admin-secret", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
TIMEOUT_S = 30
_ids = itertools.count()

#: KIP-848 members heartbeat every 0.5 s, not 5 s: a regex subscription is resolved
#: again (with the member's new ACLs) at its next heartbeat.
CONSUMER_HEARTBEAT = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    overrides = AUTHORIZER_OVERRIDES | NO_INITIAL_REBALANCE_DELAY | CONSUMER_HEARTBEAT
    with running_secure_broker(
        tmp_path_factory.mktemp("acls"), USERS, SCRAM_USERS, overrides
    ) as broker:
        load_group_coordinators(broker.bootstrap("PLAINTEXT"))
        yield broker


def _conf(secure: SecureBroker, user: str | None) -> dict[str, str]:
    return secure.client_config(None if user is None else (user, USERS[user]))


def _admin(secure: SecureBroker, user: str | None = None) -> AdminClient:
    return AdminClient(_conf(secure, user))


def _acl(restype, name, principal, op, perm=ALLOW, pattern=LITERAL) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, perm)


def _add(secure: SecureBroker, *bindings: AclBinding) -> None:
    admin = _admin(secure)  # held: a collected client fails its futures
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=TIMEOUT_S)


def _topic(secure: SecureBroker, prefix: str) -> str:
    name = f"{prefix}{next(_ids)}"
    admin = _admin(secure)
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=TIMEOUT_S)
    return name


def _produce(secure: SecureBroker, user: str, topic: str) -> KafkaError | None:
    """Produce one record; the delivery error (None when delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(_conf(secure, user) | {"message.timeout.ms": "10000"})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1
    return outcome[0]


def _consume(secure: SecureBroker, user: str, topic: str, group: str) -> KafkaError | bytes:
    """The first record read in ``group``, or the first error the consumer reports."""
    consumer = Consumer(_conf(secure, user) | {"group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error()
            return msg.value()
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()


def test_produce_denied_until_a_literal_write_acl(secure: SecureBroker) -> None:
    topic = _topic(secure, "lit-")
    err = _produce(secure, "alice", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _add(secure, _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE))
    assert _produce(secure, "alice", topic) is None


def test_consume_needs_read_on_the_group_too_prefixed(secure: SecureBroker) -> None:
    topic = _topic(secure, "cons-")
    assert _produce(secure, "admin", topic) is None
    _add(secure, _acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ))
    err = _consume(secure, "alice", topic, "alice-group-1")
    assert isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    _add(
        secure,
        _acl(ResourceType.GROUP, "alice-", "User:alice", AclOperation.READ, pattern=PREFIXED),
    )
    assert _consume(secure, "alice", topic, "alice-group-2") == b"v"


def test_group_commit_denied_without_group_read(secure: SecureBroker) -> None:
    topic = _topic(secure, "commit-")
    # DESCRIBE on the group finds its coordinator; committing needs READ
    _add(
        secure,
        _acl(ResourceType.TOPIC, topic, "User:carol", AclOperation.READ),
        _acl(ResourceType.GROUP, "carol-commit", "User:carol", AclOperation.DESCRIBE),
    )
    consumer = Consumer(_conf(secure, "carol") | {"group.id": "carol-commit"})
    try:
        from confluent_kafka import TopicPartition

        with pytest.raises(KafkaException) as info:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_deny_overrides_a_wildcard_allow(secure: SecureBroker) -> None:
    allowed, denied = _topic(secure, "open-"), _topic(secure, "closed-")
    _add(
        secure,
        _acl(ResourceType.TOPIC, "*", "User:bob", AclOperation.WRITE),
        _acl(ResourceType.TOPIC, "closed-", "User:bob", AclOperation.WRITE, DENY, PREFIXED),
    )
    assert _produce(secure, "bob", allowed) is None
    err = _produce(secure, "bob", denied)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_topics_without_describe(secure: SecureBroker) -> None:
    mine, secret = _topic(secure, "carolvis-"), _topic(secure, "secret-")
    _add(secure, _acl(ResourceType.TOPIC, mine, "User:carol", AclOperation.READ))
    topics = _admin(secure, "carol").list_topics(timeout=TIMEOUT_S).topics
    assert mine in topics
    assert secret not in topics
    assert secret in _admin(secure).list_topics(timeout=TIMEOUT_S).topics


def test_topic_create_delete_and_configs_denied(secure: SecureBroker) -> None:
    existing = _topic(secure, "admin-only-")
    carol = _admin(secure, "carol")
    create = carol.create_topics([NewTopic(f"carol-new-{next(_ids)}", 1, 1)])
    for future in create.values():
        with pytest.raises(KafkaException) as info:
            future.result(timeout=TIMEOUT_S)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    for future in carol.delete_topics([existing]).values():
        with pytest.raises(KafkaException) as info:
            future.result(timeout=TIMEOUT_S)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    resource = ConfigResource(ConfigResource.Type.TOPIC, existing)
    for future in carol.describe_configs([resource]).values():
        with pytest.raises(KafkaException) as info:
            future.result(timeout=TIMEOUT_S)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert existing in _admin(secure).list_topics(timeout=TIMEOUT_S).topics  # still there


def test_transactional_id_denied(secure: SecureBroker) -> None:
    producer = Producer(_conf(secure, "carol") | {"transactional.id": "carol-tx"})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _add(secure, _acl(ResourceType.TRANSACTIONAL_ID, "carol-tx", "User:carol", AclOperation.WRITE))
    granted = Producer(_conf(secure, "carol") | {"transactional.id": "carol-tx"})
    granted.init_transactions(TIMEOUT_S)  # raises if still refused


def test_acl_admin_needs_alter_on_the_cluster(secure: SecureBroker) -> None:
    binding = _acl(ResourceType.TOPIC, "x", "User:carol", AclOperation.READ)
    carol = _admin(secure, "carol")
    for future in carol.create_acls([binding]).values():
        with pytest.raises(KafkaException) as info:
            future.result(timeout=TIMEOUT_S)
        assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    flt = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    admin = _admin(secure)
    described = admin.describe_acls(flt).result(timeout=TIMEOUT_S)
    assert {(b.name, b.permission_type) for b in described} >= {("*", ALLOW), ("closed-", DENY)}


def _cli(secure: SecureBroker, tmp_path, *args: str) -> str:
    """``riverbed acls ...`` as carol's admin would run it: a Kafka client properties file
    for SASL_PLAINTEXT/PLAIN with the admin login."""
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=admin\nsasl.password=admin-secret\n"
    )
    cmd = [sys.executable, "-m", "riverbed.cli.main", "acls", *args]
    cmd += [
        "--bootstrap-server",
        secure.bootstrap("SASL_PLAINTEXT"),
        "--command-config",
        str(props),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_add_list_remove_with_kafka_acls_flags(secure: SecureBroker, tmp_path) -> None:
    import json

    topic = _topic(secure, "cli-")
    err = _produce(secure, "carol", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _cli(secure, tmp_path, "add", "--allow-principal", "User:carol", "--operation", "Write",
         "--operation", "describe", "--topic", topic, "--json")  # fmt: skip
    assert _produce(secure, "carol", topic) is None
    listed = json.loads(_cli(secure, tmp_path, "list", "--topic", topic, "--json"))
    assert sorted((r["principal"], r["operation"]) for r in listed) == [
        ("User:carol", "DESCRIBE"),
        ("User:carol", "WRITE"),
    ]
    # as kafka-acls --remove: no --operation is operation All, which carol does not hold
    carol = ("remove", "--allow-principal", "User:carol", "--topic", topic, "--json")
    assert json.loads(_cli(secure, tmp_path, *carol)) == []
    assert len(json.loads(_cli(secure, tmp_path, "list", "--topic", topic, "--json"))) == 2
    ops = ("--operation", "Write", "--operation", "Describe")
    removed = json.loads(_cli(secure, tmp_path, *carol, *ops))
    assert sorted(r["operation"] for r in removed) == ["DESCRIBE", "WRITE"]
    assert json.loads(_cli(secure, tmp_path, "list", "--topic", topic, "--json")) == []
    err = _produce(secure, "carol", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acl_apis_answer_security_disabled_without_an_authorizer() -> None:
    from riverbed.cli.wire import WireClient
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import DescribeAclsRequest, DescribeAclsResponse
    from riverbed.testing.cluster import start_broker

    with start_broker() as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        flt = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        for future in admin.delete_acls([flt]).values():
            with pytest.raises(KafkaException) as info:
                future.result(timeout=TIMEOUT_S)
            assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED
        # confluent-kafka's describe_acls did not raise on the top-level error: read it raw
        with WireClient(proc.bootstrap) as wire:
            described = wire.request(ApiKey.DESCRIBE_ACLS, DescribeAclsRequest(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            ))  # fmt: skip
        assert isinstance(described, DescribeAclsResponse)
        assert described.error_code == KafkaError.SECURITY_DISABLED
        binding = _acl(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ)
        for future in admin.create_acls([binding]).values():
            with pytest.raises(KafkaException) as info:
                future.result(timeout=TIMEOUT_S)
            assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED
        # `riverbed acls list` says so too (not an empty table), as `add` and kafka-acls do
        listed = subprocess.run(
            [sys.executable, "-m", "riverbed.cli.main", "acls", "list", "-b", proc.bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 1, listed.stdout
        assert "SECURITY_DISABLED: No Authorizer is configured." in listed.stderr


def test_a_regex_subscription_resolves_only_to_describable_topics(secure: SecureBroker) -> None:
    """KIP-848 (Kafka 4): a SubscribedTopicRegex matches only the topics the member's
    principal may DESCRIBE; a topic it may not is not assigned to it. (The client could
    not name such a topic, its Metadata hides it: the group's own view, from a super
    user's ConsumerGroupDescribe, shows what the coordinator assigned.)"""
    seen = _topic(secure, "rxacl-seen-")
    hidden = _topic(secure, "rxacl-hidden-")
    group = f"rxacl-group-{next(_ids)}"
    _add(
        secure,
        _acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ),
        _acl(ResourceType.TOPIC, seen, "User:alice", AclOperation.READ),  # implies DESCRIBE
    )
    consumer = Consumer(_conf(secure, "alice") | {"group.id": group, "group.protocol": "consumer"})
    admin = _admin(secure, "admin")

    def coordinator_assigned() -> set[str]:
        described = admin.describe_consumer_groups([group])[group].result(timeout=TIMEOUT_S)
        return {tp.topic for m in described.members for tp in m.assignment.topic_partitions}

    def poll_until(wanted: set[str]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while {tp.topic for tp in consumer.assignment()} != wanted:
            assert time.monotonic() < deadline, f"assigned {consumer.assignment()}, not {wanted}"
            consumer.poll(0.2)

    try:
        consumer.subscribe(["^rxacl-.*"])
        poll_until({seen})
        # both topics existed before the subscription: its resolution is this
        assert coordinator_assigned() == {seen}
        _add(secure, _acl(ResourceType.TOPIC, hidden, "User:alice", AclOperation.DESCRIBE))
        poll_until({seen, hidden})
        assert coordinator_assigned() == {seen, hidden}
    finally:
        consumer.close()
