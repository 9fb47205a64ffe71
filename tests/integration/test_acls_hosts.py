"""Issue 20, authorization "principal and host matching" / "host restrictions": an ACL's
host is the address a real client connects from. On Linux every 127.0.0.x address is
local, so a raw client logged in as alice (SASL_PLAINTEXT, PLAIN) binds its source address
to 127.0.0.1, .2 or .3 before connecting to the broker's 127.0.0.1 listener, and produces:

- ALLOW alice WRITE from host 127.0.0.1 only: the produce from .1 is appended, the same
  from .2 gets TOPIC_AUTHORIZATION_FAILED;
- ALLOW alice WRITE from any host and DENY alice WRITE from 127.0.0.2: only .2 is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from riverbed.protocol.errors import ErrorCode
from riverbed.testing.secure import AUTHORIZER_OVERRIDES, SecureBroker, running_secure_broker
from riverbed.testing.secure_clients import Wire

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("acl-hosts"), USERS, {}, AUTHORIZER_OVERRIDES
    ) as broker:
        yield broker


def _acls(secure: SecureBroker, topic: str, *entries: tuple[AclPermissionType, str]) -> None:
    """WRITE ACLs for User:alice on ``topic``, (permission, host) each, created by the
    PLAINTEXT listener's super user."""
    admin = AdminClient(secure.client_config())
    bindings = [
        AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", host,
            AclOperation.WRITE, permission,
        )
        for permission, host in entries
    ]  # fmt: skip
    for future in admin.create_acls(bindings).values():
        future.result(timeout=TIMEOUT_S)


def _produce_from(secure: SecureBroker, source_ip: str, topic: str) -> int:
    """alice's produce to ``topic`` from ``source_ip``: the partition's error code."""
    wire = Wire(secure.ports["SASL_PLAINTEXT"], source_ip=source_ip)
    try:
        wire.plain_login("alice", USERS["alice"])
        reply = wire.produce(topic, 100)
        return reply.responses[0].partition_responses[0].error_code
    finally:
        wire.sock.close()


def test_an_allow_for_one_host_refuses_the_others(secure: SecureBroker) -> None:
    topic = secure.create_topics(["hosts-allow-one"])[0]
    _acls(secure, topic, (AclPermissionType.ALLOW, "127.0.0.1"))
    assert _produce_from(secure, "127.0.0.1", topic) == ErrorCode.NONE
    assert _produce_from(secure, "127.0.0.2", topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_a_deny_for_one_host_beats_an_allow_for_all(secure: SecureBroker) -> None:
    topic = secure.create_topics(["hosts-deny-one"])[0]
    _acls(secure, topic, (AclPermissionType.ALLOW, "*"), (AclPermissionType.DENY, "127.0.0.2"))
    assert _produce_from(secure, "127.0.0.1", topic) == ErrorCode.NONE
    assert _produce_from(secure, "127.0.0.2", topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _produce_from(secure, "127.0.0.3", topic) == ErrorCode.NONE
