"""ACLs as metadata records: CreateAcls / DeleteAcls produce records, only replay changes
the image, snapshots carry the ACLs; DescribeAcls filters (Kafka's AclControlManager)."""

from __future__ import annotations

import itertools
import uuid

import pytest

from riverbed.metadata.acl_control import describe_acls
from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import (
    MetadataImage,
    MetadataReplayError,
    image_to_records,
    replay,
    replay_all,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AccessControlEntryRecord,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    RemoveAccessControlEntryRecord,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.acl import PatternType, PermissionType, ResourceType, StandardAcl

Creation = CreateAclsRequest.AclCreation
Filter = DeleteAclsRequest.DeleteAclsFilter


def _controller() -> Controller:
    ids = (uuid.UUID(int=i) for i in itertools.count(100))
    return Controller(ControllerConfig(node_id=1), uuid_factory=lambda: next(ids))


def creation(name: str, op: int = Op.READ, pattern: int = PatternType.LITERAL, **kw) -> Creation:
    fields = dict(
        resource_type=ResourceType.TOPIC,
        resource_name=name,
        resource_pattern_type=pattern,
        principal="User:alice",
        host="*",
        operation=op,
        permission_type=PermissionType.ALLOW,
    )
    fields.update(kw)
    return Creation(**fields)


def _apply(image: MetadataImage, records) -> MetadataImage:
    return replay_all(image, records)


def test_create_gives_records_and_only_replay_changes_the_image():
    c = _controller()
    image = MetadataImage.EMPTY
    result = c.create_acls(image, CreateAclsRequest(creations=[creation("t"), creation("t")]), 0)
    assert [r.error_code for r in result.response.results] == [0, 0]
    assert len(result.records) == 1  # the duplicate in the request adds nothing
    assert isinstance(result.records[0], AccessControlEntryRecord)
    assert image.acls == {}  # the operation itself changed nothing
    image = _apply(image, result.records)
    assert list(image.acls.values()) == [
        StandardAcl(2, "t", 3, "User:alice", "*", Op.READ, PermissionType.ALLOW)
    ]
    again = c.create_acls(image, CreateAclsRequest(creations=[creation("t")]), 0)
    assert again.records == [] and again.response.results[0].error_code == 0


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (creation("", Op.READ), "Resource name should not be empty"),
        (creation("t", Op.ANY), "Invalid operation ANY"),
        (creation("t", pattern=PatternType.MATCH), "Invalid patternType MATCH"),
        (creation("t", principal="alice"), "Could not parse principal"),
        (creation("x", resource_type=ResourceType.CLUSTER), "only valid name for the CLUSTER"),
        (creation("t", permission_type=PermissionType.ANY), "Invalid permissionType ANY"),
    ],
)
def test_invalid_creations_are_invalid_request(bad: Creation, text: str):
    result = _controller().create_acls(MetadataImage.EMPTY, CreateAclsRequest(creations=[bad]), 0)
    assert result.records == []
    (r,) = result.response.results
    assert r.error_code == ErrorCode.INVALID_REQUEST and text in r.error_message


def test_delete_by_filter_removes_each_match_once_and_snapshot_round_trips():
    c = _controller()
    made = c.create_acls(
        MetadataImage.EMPTY,
        CreateAclsRequest(
            creations=[
                creation("pay", Op.WRITE, PatternType.PREFIXED),
                creation("payments", Op.READ),
                creation("other", Op.READ),
            ]
        ),
        0,
    )
    image = _apply(MetadataImage.EMPTY, made.records)
    assert replay_all(MetadataImage.EMPTY, image_to_records(image)) == image
    match = Filter(
        resource_type_filter=ResourceType.TOPIC,
        resource_name_filter="payments",
        pattern_type_filter=PatternType.MATCH,
        operation=Op.ANY,
        permission_type=PermissionType.ANY,
    )
    anything = Filter(
        resource_type_filter=ResourceType.ANY,
        pattern_type_filter=PatternType.ANY,
        operation=Op.ANY,
        permission_type=PermissionType.ANY,
        principal_filter="User:alice",
    )
    result = c.delete_acls(image, DeleteAclsRequest(filters=[match, anything]), 0)
    first, second = result.response.filter_results
    assert sorted(m.resource_name for m in first.matching_acls) == ["pay", "payments"]
    assert [m.resource_name for m in second.matching_acls] == ["other"]
    assert all(isinstance(r, RemoveAccessControlEntryRecord) for r in result.records)
    assert len(result.records) == 3
    assert _apply(image, result.records).acls == {}


def test_describe_filters_and_unknown_filter_is_invalid_request():
    c = _controller()
    made = c.create_acls(
        MetadataImage.EMPTY,
        CreateAclsRequest(
            creations=[creation("a"), creation("g", resource_type=ResourceType.GROUP)]
        ),
        0,
    )
    image = _apply(MetadataImage.EMPTY, made.records)
    req = DescribeAclsRequest(
        resource_type_filter=ResourceType.GROUP,
        pattern_type_filter=PatternType.ANY,
        operation=Op.ANY,
        permission_type=PermissionType.ANY,
    )
    (res,) = describe_acls(image, req).resources
    assert (res.resource_type, res.resource_name) == (ResourceType.GROUP, "g")
    bad = DescribeAclsRequest(
        resource_type_filter=0, operation=Op.ANY, permission_type=PermissionType.ANY
    )
    assert describe_acls(image, bad).error_code == ErrorCode.INVALID_REQUEST


def test_replay_refuses_a_duplicate_id_and_an_unknown_removal():
    rec = AccessControlEntryRecord(
        id=uuid.UUID(int=7),
        resource_type=2,
        resource_name="t",
        pattern_type=3,
        principal="User:a",
        host="*",
        operation=3,
        permission_type=3,
    )
    image = replay(MetadataImage.EMPTY, rec)
    with pytest.raises(MetadataReplayError):
        replay(image, rec)
    with pytest.raises(MetadataReplayError):
        replay(image, RemoveAccessControlEntryRecord(id=uuid.UUID(int=8)))
