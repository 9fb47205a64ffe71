"""ACLs in the metadata log: CreateAcls (30) and DeleteAcls (31), controller writes, and
DescribeAcls (29), read from any image.

Kafka's AclControlManager:
- a creation is checked (`riverbed.security.acl.validate_new_acl`; INVALID_REQUEST with
  Kafka's text); an ACL equal to one that exists (or to an earlier creation of the same
  request) is accepted without a new record; otherwise it becomes an
  AccessControlEntryRecord with a new random id;
- a deletion filter with an UNKNOWN field is INVALID_REQUEST; else every ACL it matches
  becomes a RemoveAccessControlEntryRecord (an ACL matched by two filters is removed
  once and reported by the first), at most ``REQUEST_ITEMS_MAX`` per request (Kafka's
  MAX_RECORDS_PER_USER_OP: "too many ACLs match");
- DescribeAcls answers the ACLs its filter matches grouped by resource pattern.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from riverbed.metadata.control_common import REQUEST_ITEMS_MAX, ControllerBase, ControllerResult
from riverbed.metadata.image import MetadataImage, acl_record
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    Message,
    RemoveAccessControlEntryRecord,
)
from riverbed.security.acl import AclError, AclFilter, StandardAcl, validate_new_acl

CreationResult = CreateAclsResponse.AclCreationResult
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
MatchingAcl = DeleteAclsResponse.DeleteAclsMatchingAcl


def acl_of_creation(c: CreateAclsRequest.AclCreation) -> StandardAcl:
    return StandardAcl(
        c.resource_type,
        c.resource_name,
        c.resource_pattern_type,
        c.principal,
        c.host,
        c.operation,
        c.permission_type,
    )


def acl_filter(f: DescribeAclsRequest | DeleteAclsRequest.DeleteAclsFilter) -> AclFilter:
    return AclFilter(
        f.resource_type_filter,
        f.resource_name_filter,
        f.pattern_type_filter,
        f.principal_filter,
        f.host_filter,
        f.operation,
        f.permission_type,
    )


class AclControl(ControllerBase):
    _uuid_factory: Callable[[], uuid.UUID]

    def create_acls(
        self, image: MetadataImage, request: CreateAclsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        existing = set(image.acls.values())
        records: list[Message] = []
        results = []
        for creation in request.creations:
            acl = acl_of_creation(creation)
            try:
                validate_new_acl(acl)
            except AclError as exc:
                code = int(ErrorCode.INVALID_REQUEST)
                results.append(CreationResult(error_code=code, error_message=str(exc)))
                continue
            if acl not in existing:
                existing.add(acl)
                records.append(acl_record(self._new_acl_id(image), acl))
            results.append(CreationResult(error_code=0, error_message=None))
        return ControllerResult(records, CreateAclsResponse(results=results))

    def _new_acl_id(self, image: MetadataImage) -> uuid.UUID:
        while True:
            acl_id = self._uuid_factory()
            if acl_id not in image.acls and acl_id.int != 0:
                return acl_id

    def delete_acls(
        self, image: MetadataImage, request: DeleteAclsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        removed: set[uuid.UUID] = set()
        records: list[Message] = []
        results = []
        for f in request.filters:
            flt = acl_filter(f)
            try:
                flt.validate()
            except AclError as exc:
                code = int(ErrorCode.INVALID_REQUEST)
                results.append(FilterResult(error_code=code, error_message=str(exc)))
                continue
            matched = [
                (i, a) for i, a in sorted(image.acls.items()) if i not in removed and flt.matches(a)
            ]
            if len(removed) + len(matched) > REQUEST_ITEMS_MAX:
                results.append(
                    FilterResult(
                        error_code=int(ErrorCode.INVALID_REQUEST),
                        error_message=f"too many ACLs match (more than {REQUEST_ITEMS_MAX})",
                    )
                )
                continue
            for acl_id, _ in matched:
                removed.add(acl_id)
                records.append(RemoveAccessControlEntryRecord(id=acl_id))
            results.append(
                FilterResult(error_code=0, matching_acls=[_matching(a) for _, a in matched])
            )
        return ControllerResult(records, DeleteAclsResponse(filter_results=results))


def _matching(acl: StandardAcl) -> MatchingAcl:
    return MatchingAcl(
        error_code=0,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission_type,
    )


def describe_acls(image: MetadataImage, request: DescribeAclsRequest) -> DescribeAclsResponse:
    flt = acl_filter(request)
    try:
        flt.validate()
    except AclError as exc:
        return DescribeAclsResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(exc)
        )
    groups: dict[tuple[int, str, int], list[DescribeAclsResponse.AclDescription]] = {}
    for acl in sorted(image.acls.values(), key=_order):
        if flt.matches(acl):
            groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                DescribeAclsResponse.AclDescription(
                    principal=acl.principal,
                    host=acl.host,
                    operation=acl.operation,
                    permission_type=acl.permission_type,
                )
            )
    resources = [
        DescribeAclsResponse.DescribeAclsResource(
            resource_type=t, resource_name=n, pattern_type=p, acls=acls
        )
        for (t, n, p), acls in groups.items()
    ]
    return DescribeAclsResponse(error_code=0, resources=resources)


def _order(acl: StandardAcl) -> tuple[int, str, int, str, str, int, int]:
    return (
        acl.resource_type,
        acl.resource_name,
        acl.pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission_type,
    )
