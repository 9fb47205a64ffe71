"""Issue 20: CreateAcls, DescribeAcls and DeleteAcls at every version riverbed
advertises (0-3), over the wire against a real broker.

Version 0 has no pattern type field: a v0 creation is LITERAL, and a v0 filter matches
LITERAL patterns only (the field's default, 3, as Kafka reads it), so a v0 client neither
sees nor deletes a PREFIXED ACL made by a newer one. Versions 1-3 carry the pattern type;
2 and 3 are flexible. Each version creates its own ACLs, finds them, deletes them and then
finds none, and the ACLs another version made are untouched.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from riverbed.testing.cluster import BrokerProcess

from .test_wire_protocol import Client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC, ANY, LITERAL, PREFIXED = 2, 1, 3, 4  # resource type, pattern types
READ, ALLOW = 3, 3


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    proc = BrokerProcess(
        overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        }
    )
    proc.start()
    c = Client(proc.port)
    try:
        yield c
    finally:
        c.close()
        proc.close()


def _create(c: Client, version: int, principal: str, name: str, pattern: int) -> None:
    creation = CreateAclsRequest.AclCreation(
        resource_type=TOPIC,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host="*",
        operation=READ,
        permission_type=ALLOW,
    )
    reply = c.call(ApiKey.CREATE_ACLS, version, CreateAclsRequest(creations=[creation]))
    assert [(r.error_code, r.error_message) for r in reply.results] == [(0, None)]


def _filter(principal: str, pattern: int) -> dict[str, object]:
    return {
        "resource_type_filter": ANY,
        "resource_name_filter": None,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": None,
        "operation": ANY,
        "permission_type": ANY,
    }


def _described(c: Client, version: int, principal: str, pattern: int) -> list[tuple[str, int]]:
    """(resource name, pattern type) of ``principal``'s ACLs, as ``version`` answers them."""
    reply = c.call(
        ApiKey.DESCRIBE_ACLS, version, DescribeAclsRequest(**_filter(principal, pattern))
    )
    assert reply.error_code == 0, reply.error_message
    found = []
    for resource in reply.resources:
        assert [(a.principal, a.host, a.operation, a.permission_type) for a in resource.acls] == [
            (principal, "*", READ, ALLOW)
        ]
        found.append((resource.resource_name, resource.pattern_type))
    return sorted(found)


def _deleted(c: Client, version: int, principal: str, pattern: int) -> list[tuple[str, int]]:
    filters = [DeleteAclsRequest.DeleteAclsFilter(**_filter(principal, pattern))]
    reply = c.call(ApiKey.DELETE_ACLS, version, DeleteAclsRequest(filters=filters))
    [result] = reply.filter_results
    assert result.error_code == 0, result.error_message
    return sorted((m.resource_name, m.pattern_type) for m in result.matching_acls)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_version_with_pattern_types_round_trips_literal_and_prefixed(
    client: Client, version: int
) -> None:
    who = f"User:v{version}"
    _create(client, version, who, f"v{version}-orders", LITERAL)
    _create(client, version, who, f"v{version}-", PREFIXED)
    both = [(f"v{version}-", PREFIXED), (f"v{version}-orders", LITERAL)]
    assert _described(client, version, who, ANY) == both
    assert _described(client, version, who, PREFIXED) == [(f"v{version}-", PREFIXED)]
    assert _deleted(client, version, who, ANY) == both
    assert _described(client, version, who, ANY) == []


def test_version_0_sees_and_deletes_literal_acls_only(client: Client) -> None:
    who = "User:v0"
    # the field is absent at v0 (the codec refuses anything but its default, LITERAL)
    _create(client, 0, who, "v0-orders", LITERAL)
    _create(client, 3, who, "v0-", PREFIXED)  # a newer client's prefix ACL
    assert _described(client, 3, who, ANY) == [("v0-", PREFIXED), ("v0-orders", LITERAL)]
    assert _described(client, 0, who, LITERAL) == [("v0-orders", LITERAL)]
    assert _deleted(client, 0, who, LITERAL) == [("v0-orders", LITERAL)]
    assert _described(client, 3, who, ANY) == [("v0-", PREFIXED)]  # untouched by v0
    assert _deleted(client, 3, who, ANY) == [("v0-", PREFIXED)]
