"""ACLs: Kafka's resource types, pattern types, operations and permissions (the wire ids
of CreateAcls / DescribeAcls / DeleteAcls and AccessControlEntryRecord), one ACL
(`StandardAcl`, Kafka's ``StandardAcl``), binding filters and the checks a new ACL must pass.

Kafka's ``AclControlManager.validateNewAcl`` and ``AclApis``: a new ACL's pattern type is
LITERAL or PREFIXED, its operation is neither ANY nor UNKNOWN, its permission is ALLOW or
DENY, its resource name is not empty, its principal is ``Type:name``; the CLUSTER
resource's only name is ``kafka-cluster``. Each failure is INVALID_REQUEST with Kafka's text.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

#: Kafka's ResourcePattern.WILDCARD_RESOURCE and AclEntry's wildcard host / principal.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


#: The operations that apply to each resource type (Kafka's AclEntry.supportedOperations):
#: what a KIP-430 authorized-operations bitfield reports on.
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def operations_bitfield(operations: Iterable[int]) -> int:
    """Kafka's Utils.to32BitField: bit ``op`` set for each operation."""
    return sum(1 << op for op in set(operations))


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL: a resource pattern and an access control entry (ids are the wire ints)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class AclError(ValueError):
    """A new ACL or a filter Kafka refuses (INVALID_REQUEST with this text)."""


def validate_new_acl(acl: StandardAcl) -> None:
    """Kafka's checks of an ACL to create; AclError with Kafka's message otherwise."""
    if acl.resource_type not in _CONCRETE_TYPES:
        raise AclError(f"Invalid resourceType {_name(ResourceType, acl.resource_type)}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {_name(PatternType, acl.pattern_type)}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or acl.operation not in set(
        AclOperation
    ):
        raise AclError(f"Invalid operation {_name(AclOperation, acl.operation)}")
    if acl.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
        raise AclError(f"Invalid permissionType {_name(PermissionType, acl.permission_type)}")
    if not acl.resource_name:
        raise AclError("Resource name should not be empty")
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if ":" not in acl.principal:
        raise AclError(
            f"Could not parse principal from `{acl.principal}` (no colon is present "
            "separating the principal type from the principal name)"
        )


_CONCRETE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}


def _name(enum_type: type[enum.IntEnum], value: int) -> str:
    try:
        return enum_type(value).name
    except ValueError:
        return str(value)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: ANY / None fields match everything; a MATCH pattern type
    matches the patterns that would apply to the named resource."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = PermissionType.ANY

    def validate(self) -> None:
        """UNKNOWN anywhere makes a filter invalid (Kafka's ``findIndefiniteField``)."""
        for value, kind in (
            (self.resource_type, ResourceType),
            (self.pattern_type, PatternType),
            (self.operation, AclOperation),
            (self.permission_type, PermissionType),
        ):
            if value == 0 or value not in set(kind):
                raise AclError(f"Unknown {kind.__name__} {_name(kind, value)} in filter")

    def matches(self, acl: StandardAcl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: StandardAcl) -> bool:
        # Kafka's ResourcePatternFilter.matches
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def _matches_entry(self, acl: StandardAcl) -> bool:
        # Kafka's AccessControlEntryFilter.matches
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and self.operation in (AclOperation.ANY, acl.operation)
            and self.permission_type in (PermissionType.ANY, acl.permission_type)
        )
