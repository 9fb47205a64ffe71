"""Kafka's StandardAuthorizer decision rule, sans-I/O: (principal, host, operation,
resource) + the ACLs -> allowed or denied.

The rule (Kafka's ``StandardAuthorizerData.authorize``), in order:

1. a principal named in ``super.users`` (``User:alice;User:bob``) is allowed everything;
2. before the first metadata load the authorizer is not ready: everyone else is denied
   (Kafka throws AuthorizerNotReadyException);
3. the ACLs that apply to the resource are those of its type whose pattern matches its
   name: LITERAL with the same name, LITERAL ``*`` (wildcard), PREFIXED with a name the
   resource's name starts with. Of those, an ACL matches the request when its principal
   is the request's or ``User:*``, its host is the client's address or ``*``, and its
   operation is the requested one or ALL; an ALLOW ACL for READ, WRITE, DELETE or ALTER
   also matches DESCRIBE, and one for ALTER_CONFIGS also DESCRIBE_CONFIGS (DENY ACLs
   imply nothing);
4. any matching DENY -> denied (DENY beats ALLOW); else any matching ALLOW -> allowed;
5. no ACL matched: if the resource has ACLs at all (any principal, host, operation)
   denied; if it has none, ``allow.everyone.if.no.acl.found`` (default false) decides.

`AclIndex` keeps the ACLs by (resource type, literal name) and (resource type, prefix),
with the prefix lengths in use, so a decision costs a few dict lookups however many ACLs
there are (Kafka scans a sorted set from the resource name; the effect is the same).
`DecisionCache` remembers the decisions of one `Authorizer` (one ACL set, one readiness):
a client repeats the same few questions with every request (WRITE on its topic for each
Produce), so the common case is one dict lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from riverbed.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    PatternType,
    PermissionType,
    StandardAcl,
)

#: The class names `authorizer.class.name` accepts (Kafka's KRaft authorizer, riverbed's).
AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "riverbed.security.authorizer.StandardAuthorizer",
    }
)

_IMPLIES_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (Kafka's form), blanks ignored;
    ValueError for one that is not ``<type>:<name>`` (Kafka's parseKafkaPrincipal: a
    bare name would match no principal, so nobody would be the super user meant)."""
    principals = frozenset(p.strip() for p in text.split(";") if p.strip())
    for principal in sorted(principals):
        kind, sep, _name = principal.partition(":")
        if not sep or not kind.strip():
            raise ValueError(
                f"super.users: expected a string in format principalType:principalName "
                f"(User:alice) but got {principal}"
            )
    return principals


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def acl_result(acl: StandardAcl, principal: str, host: str, operation: int) -> bool | None:
    """What one ACL (whose pattern matches the resource) says: True allow, False deny,
    None when it does not match (Kafka's ``findResult``)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    allow = acl.permission_type == PermissionType.ALLOW
    if acl.operation != AclOperation.ALL and acl.operation != operation:
        if not allow:
            return None
        if operation == AclOperation.DESCRIBE:
            if acl.operation not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return allow


@dataclass(frozen=True, slots=True)
class AclIndex:
    """The ACLs by pattern: literal names (``*`` included) and prefixes per resource type."""

    literal: dict[tuple[int, str], tuple[StandardAcl, ...]] = field(default_factory=dict)
    prefixed: dict[tuple[int, str], tuple[StandardAcl, ...]] = field(default_factory=dict)
    #: resource type -> the lengths of its PREFIXED names (ascending)
    prefix_lengths: dict[int, tuple[int, ...]] = field(default_factory=dict)
    by_type: dict[int, tuple[StandardAcl, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, acls: Iterable[StandardAcl]) -> AclIndex:
        literal: dict[tuple[int, str], list[StandardAcl]] = {}
        prefixed: dict[tuple[int, str], list[StandardAcl]] = {}
        lengths: dict[int, set[int]] = {}
        by_type: dict[int, list[StandardAcl]] = {}
        for acl in acls:
            key = (acl.resource_type, acl.resource_name)
            by_type.setdefault(acl.resource_type, []).append(acl)
            if acl.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            else:
                literal.setdefault(key, []).append(acl)
        return cls(
            literal={k: tuple(v) for k, v in literal.items()},
            prefixed={k: tuple(v) for k, v in prefixed.items()},
            prefix_lengths={t: tuple(sorted(n)) for t, n in lengths.items()},
            by_type={t: tuple(v) for t, v in by_type.items()},
        )

    def applicable(self, resource_type: int, name: str) -> list[tuple[StandardAcl, ...]]:
        """The groups of ACLs whose pattern matches the resource."""
        found = []
        exact = self.literal.get((resource_type, name))
        if exact:
            found.append(exact)
        if name != WILDCARD:
            wild = self.literal.get((resource_type, WILDCARD))
            if wild:
                found.append(wild)
        for n in self.prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            group = self.prefixed.get((resource_type, name[:n]))
            if group:
                found.append(group)
        return found


EMPTY_INDEX = AclIndex()


@dataclass(frozen=True, slots=True)
class Authorizer:
    """One decision function over a config, an index and the ready flag."""

    config: AuthorizerConfig
    index: AclIndex = EMPTY_INDEX
    ready: bool = False

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.config.super_users:
            return True
        if not self.ready:
            return False
        has_resource_acls = False
        allowed = False
        for group in self.index.applicable(resource_type, name):
            has_resource_acls = True
            for acl in group:
                result = acl_result(acl, principal, host, operation)
                if result is False:
                    return False
                if result:
                    allowed = True
        if allowed:
            return True
        if has_resource_acls:
            return False
        return self.config.allow_everyone_if_no_acl_found

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """May the principal do ``operation`` on SOME resource of the type (Kafka's
        ``Authorizer.authorizeByResourceType``, used by InitProducerId without a
        transactional id: IDEMPOTENT_WRITE or WRITE on any topic)? An ALLOW that a DENY
        (LITERAL of the same name, or PREFIXED of a prefix of it) does not cover."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefix: list[str] = []
        allows: list[StandardAcl] = []
        for acl in self.index.by_type.get(resource_type, ()):
            if not _entry_matches(acl, principal, host, operation):
                continue
            if acl.permission_type == PermissionType.DENY:
                if acl.pattern_type == PatternType.PREFIXED:
                    deny_prefix.append(acl.resource_name)
                elif acl.resource_name == WILDCARD:
                    return False
                else:
                    deny_literal.add(acl.resource_name)
            else:
                allows.append(acl)
        for acl in allows:
            name = acl.resource_name
            if acl.pattern_type == PatternType.LITERAL and name == WILDCARD:
                return True
            if acl.pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name.startswith(p) for p in deny_prefix):
                return True
        return False


def _entry_matches(acl: StandardAcl, principal: str, host: str, operation: int) -> bool:
    return (
        acl.principal in (principal, WILDCARD_PRINCIPAL)
        and acl.host in (host, WILDCARD)
        and acl.operation in (operation, AclOperation.ALL)
    )


#: Decisions one `DecisionCache` remembers; past this many it starts over (a client
#: naming ever new resources cannot grow it without bound).
DECISION_CACHE_ENTRIES_MAX = 65_536
#: The name slot of an `Authorizer.authorize_any` decision in the cache's keys.
_ANY_RESOURCE = None


class DecisionCache:
    """`Authorizer`'s decisions, remembered: the rule is a pure function of (principal,
    host, operation, resource type, resource name) and the authorizer (its ACLs, config
    and readiness are fixed), so a cache per authorizer is never stale; a new ACL set
    means a new authorizer and so a new, empty cache."""

    __slots__ = ("_decisions", "_entries_max", "authorizer")

    def __init__(
        self, authorizer: Authorizer, entries_max: int = DECISION_CACHE_ENTRIES_MAX
    ) -> None:
        self.authorizer = authorizer
        self._entries_max = entries_max
        self._decisions: dict[tuple[str, str, int, int, str | None], bool] = {}

    @property
    def ready(self) -> bool:
        return self.authorizer.ready

    def __len__(self) -> int:
        return len(self._decisions)

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self.authorizer.authorize(principal, host, operation, resource_type, name)
            self._remember(key, decision)
        return decision

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        key = (principal, host, operation, resource_type, _ANY_RESOURCE)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self.authorizer.authorize_any(principal, host, operation, resource_type)
            self._remember(key, decision)
        return decision

    def _remember(self, key: tuple[str, str, int, int, str | None], decision: bool) -> None:
        if len(self._decisions) >= self._entries_max:
            self._decisions.clear()
        self._decisions[key] = decision


#: Topic names one connection's `ConnectionDecisions` remembers as writable; past this
#: many it starts over (a client producing to ever new topics cannot grow it).
CONNECTION_WRITABLE_TOPICS_MAX = 1024


class ConnectionDecisions:
    """One connection's memory of the topics its Produce requests were allowed to WRITE,
    with the `DecisionCache` (one ACL set, config and readiness) and the principal that
    decided them: a producer asks the same question with every request, and answering
    it from here skips the principal's text, the host and the 5-field key of the shared
    cache. An ACL change makes a new `DecisionCache`, so the next request of an open
    connection finds ``decided_by`` stale and is decided afresh (as is a connection
    re-authenticated as another principal); the host is the connection's, fixed."""

    __slots__ = ("decided_by", "granted_under", "principal", "writable")

    def __init__(self) -> None:
        self.decided_by: DecisionCache | None = None
        #: the metadata image whose authorizer is ``decided_by`` (set when a Produce is
        #: decided): while it is still the broker's image, the dispatcher answers a Produce
        #: naming only ``writable`` topics from here, with no call (`Broker._handle`)
        self.granted_under: object = None
        self.principal: object = None
        self.writable: set[str] = set()

    def writable_for(self, decided_by: DecisionCache, principal: object) -> set[str]:
        """The topics known writable under this authorizer by this principal (emptied
        first when either changed)."""
        if self.decided_by is not decided_by or self.principal is not principal:
            self.decided_by, self.principal = decided_by, principal
            self.granted_under = None
            self.writable = set()
        elif len(self.writable) >= CONNECTION_WRITABLE_TOPICS_MAX:
            self.writable.clear()
        return self.writable
