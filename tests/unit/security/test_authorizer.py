"""The authorizer against a small reference model of Kafka's StandardAuthorizer rule
(hypothesis), and the rule's corners one by one; its decision cache (per ACL set) against
the same model while the ACLs change."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.metadata.image import MetadataImage, acl_record, replay_all
from riverbed.metadata.records import METADATA_VERSION_FEATURE
from riverbed.protocol.messages import FeatureLevelRecord, Message
from riverbed.security.acl import (
    AclOperation as Op,
)
from riverbed.security.acl import (
    PatternType,
    PermissionType,
    ResourceType,
    StandardAcl,
)
from riverbed.security.authorizer import (
    AclIndex,
    Authorizer,
    AuthorizerConfig,
    DecisionCache,
    parse_super_users,
)
from riverbed.server.broker.authorization import BrokerAuthorizer

ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
IMPLIES = {
    Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
}


def _model_implied(a: StandardAcl, op: int) -> bool:
    return a.permission_type == ALLOW and a.operation in IMPLIES.get(op, set())


NAMES = st.sampled_from(["", "a", "ab", "abc", "abd", "b", "*", "ba"])
OPS = st.sampled_from(
    [
        Op.ALL,
        Op.READ,
        Op.WRITE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.CREATE,
        Op.ALTER_CONFIGS,
        Op.DESCRIBE_CONFIGS,
        Op.CLUSTER_ACTION,
    ]
)
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
ACLS = st.builds(
    StandardAcl,
    resource_type=st.sampled_from([TOPIC, GROUP]),
    resource_name=NAMES.filter(bool),
    pattern_type=st.sampled_from([LIT, PRE]),
    principal=PRINCIPALS,
    host=HOSTS,
    operation=OPS,
    permission_type=st.sampled_from([ALLOW, DENY]),
)


def _reference(acls, principal, host, op, rtype, name, supers, everyone) -> bool:
    if principal in supers:
        return True
    on_resource = [
        a
        for a in acls
        if a.resource_type == rtype
        and (
            (a.pattern_type == LIT and a.resource_name in (name, "*"))
            or (a.pattern_type == PRE and name.startswith(a.resource_name))
        )
    ]
    matching = [
        a
        for a in on_resource
        if a.principal in (principal, "User:*")
        and a.host in (host, "*")
        and (a.operation in (Op.ALL, op) or _model_implied(a, op))
    ]
    if any(a.permission_type == DENY for a in matching):
        return False
    if any(a.permission_type == ALLOW for a in matching):
        return True
    return everyone and not on_resource


@settings(max_examples=600, deadline=None)
@given(
    acls=st.lists(ACLS, max_size=12),
    principal=st.sampled_from(["User:alice", "User:bob", "User:root"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    op=OPS.filter(lambda o: o != Op.ALL),
    rtype=st.sampled_from([TOPIC, GROUP]),
    name=NAMES.filter(bool),
    everyone=st.booleans(),
)
def test_authorizer_agrees_with_the_reference_model(
    acls, principal, host, op, rtype, name, everyone
):
    supers = frozenset({"User:root"})
    auth = Authorizer(AuthorizerConfig(supers, everyone), AclIndex.build(acls), ready=True)
    expected = _reference(acls, principal, host, op, rtype, name, supers, everyone)
    assert auth.authorize(principal, host, op, rtype, name) == expected


def _auth(*acls: StandardAcl, everyone: bool = False, ready: bool = True) -> Authorizer:
    cfg = AuthorizerConfig(frozenset({"User:admin"}), everyone)
    return Authorizer(cfg, AclIndex.build(acls), ready=ready)


def acl(name, op, perm=ALLOW, pattern=LIT, principal="User:alice", host="*", rtype=TOPIC):
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


def test_deny_beats_allow_and_allow_implies_describe_but_deny_does_not():
    a = _auth(acl("t", Op.READ), acl("t", Op.WRITE, DENY))
    assert a.authorize("User:alice", "h", Op.READ, TOPIC, "t")
    assert not a.authorize("User:alice", "h", Op.WRITE, TOPIC, "t")
    assert a.authorize("User:alice", "h", Op.DESCRIBE, TOPIC, "t")  # READ implies it
    b = _auth(acl("t", Op.READ, DENY), acl("t", Op.DESCRIBE))
    assert b.authorize("User:alice", "h", Op.DESCRIBE, TOPIC, "t")  # DENY READ implies nothing


def test_prefixed_wildcard_and_literal_patterns():
    a = _auth(acl("pay", Op.WRITE, pattern=PRE), acl("*", Op.READ), acl("exact", Op.DELETE))
    assert a.authorize("User:alice", "h", Op.WRITE, TOPIC, "payments")
    assert not a.authorize("User:alice", "h", Op.WRITE, TOPIC, "pa")
    assert a.authorize("User:alice", "h", Op.READ, TOPIC, "anything")
    assert a.authorize("User:alice", "h", Op.DELETE, TOPIC, "exact")
    assert not a.authorize("User:alice", "h", Op.DELETE, TOPIC, "exactly")  # literal, not prefix
    assert not a.authorize("User:alice", "h", Op.READ, GROUP, "anything")  # other type


def test_host_and_wildcard_principal():
    a = _auth(acl("t", Op.READ, principal="User:*", host="10.0.0.1"))
    assert a.authorize("User:bob", "10.0.0.1", Op.READ, TOPIC, "t")
    assert not a.authorize("User:bob", "10.0.0.2", Op.READ, TOPIC, "t")


def test_super_users_not_ready_and_allow_everyone():
    assert parse_super_users("User:admin; User:broker;") == {"User:admin", "User:broker"}
    not_ready = _auth(acl("t", Op.READ), ready=False)
    assert not not_ready.authorize("User:alice", "h", Op.READ, TOPIC, "t")
    assert not_ready.authorize("User:admin", "h", Op.DELETE, TOPIC, "t")
    everyone = _auth(acl("t", Op.READ), everyone=True)
    assert everyone.authorize("User:bob", "h", Op.WRITE, TOPIC, "other")  # no ACLs there
    assert not everyone.authorize("User:bob", "h", Op.WRITE, TOPIC, "t")  # t has ACLs
    assert not _auth().authorize("User:bob", "h", Op.WRITE, TOPIC, "other")  # default false


def test_authorize_any_topic_write_for_idempotence():
    assert _auth(acl("pay", Op.WRITE, pattern=PRE)).authorize_any(
        "User:alice", "h", Op.WRITE, TOPIC
    )
    covered = _auth(acl("payx", Op.WRITE), acl("pay", Op.WRITE, DENY, PRE))
    assert not covered.authorize_any("User:alice", "h", Op.WRITE, TOPIC)
    assert not _auth(acl("t", Op.READ)).authorize_any("User:alice", "h", Op.WRITE, TOPIC)


def _some_name_allowed(acls, principal, host, op, rtype, supers, everyone) -> bool:
    """Reference for authorize_any (Kafka's authorizeByResourceType): is there a resource
    name the rule allows? Tried: every ACL's name, each extended, and a fresh name."""
    names = {"fresh-name", "hardcode"}
    for a in acls:
        if a.resource_name != "*" or a.pattern_type == PRE:  # LITERAL * matches all names
            names |= {a.resource_name, a.resource_name + "z", a.resource_name + "zz"}
    return any(_reference(acls, principal, host, op, rtype, n, supers, everyone) for n in names)


@settings(max_examples=600, deadline=None)
@given(
    acls=st.lists(ACLS, max_size=10),
    principal=st.sampled_from(["User:alice", "User:bob", "User:root"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    # operations no other implies (Kafka's authorizeByResourceType matches ACL operations
    # exactly: it is asked for WRITE, by an idempotent InitProducerId)
    op=st.sampled_from([Op.WRITE, Op.READ, Op.DELETE]),
    everyone=st.booleans(),
)
def test_authorize_any_agrees_with_some_name_allowed(acls, principal, host, op, everyone):
    supers = frozenset({"User:root"})
    auth = Authorizer(AuthorizerConfig(supers, everyone), AclIndex.build(acls), ready=True)
    expected = _some_name_allowed(acls, principal, host, op, TOPIC, supers, everyone)
    assert auth.authorize_any(principal, host, op, TOPIC) == expected


def _image(acls: list[StandardAcl], *, ready: bool = True) -> MetadataImage:
    """An image holding ``acls`` (a new ACL map each time, as replay makes one per change)."""
    records: list[Message] = [acl_record(uuid.UUID(int=i + 1), a) for i, a in enumerate(acls)]
    if ready:
        records.insert(0, FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=21))
    return replay_all(MetadataImage.EMPTY, records)


QUERIES = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:root"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    OPS.filter(lambda o: o != Op.ALL),
    st.sampled_from([TOPIC, GROUP]),
    NAMES.filter(bool),
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.lists(ACLS, max_size=8), st.lists(QUERIES, min_size=1, max_size=6)),
        min_size=1,
        max_size=4,
    ),
    everyone=st.booleans(),
)
def test_cached_decisions_agree_with_the_reference_model_while_acls_change(steps, everyone):
    """The broker's authorizer shell answers from its decision cache; after each ACL
    change (a new image) every answer, the repeated ones too, is the model's for the ACLs
    of that moment: no decision outlives the ACL set it was made for."""
    supers = frozenset({"User:root"})
    authz = BrokerAuthorizer(AuthorizerConfig(supers, everyone))
    asked = [q for _, queries in steps for q in queries]
    for acls, _ in steps:
        image = _image(acls)
        for principal, host, op, rtype, name in asked + asked:  # again: from the cache
            expected = _reference(acls, principal, host, op, rtype, name, supers, everyone)
            got = authz.authorizer(image).authorize(principal, host, op, rtype, name)
            assert got == expected, (acls, principal, host, op, rtype, name)


def test_the_shell_forgets_decisions_when_acls_or_readiness_change():
    authz = BrokerAuthorizer(AuthorizerConfig())
    allow = acl("t", Op.WRITE)
    args = ("User:alice", "10.0.0.1", Op.WRITE, TOPIC, "t")
    assert not authz.authorizer(_image([allow], ready=False)).authorize(*args)  # not ready
    assert authz.authorizer(_image([allow])).authorize(*args)
    assert not authz.authorizer(_image([allow, acl("t", Op.WRITE, DENY)])).authorize(*args)
    assert authz.authorizer(_image([allow])).authorize(*args)  # the DENY removed
    assert not authz.authorizer(_image([])).authorize(*args)
    cache = authz.authorizer(_image([allow]))
    assert cache.authorize_any("User:alice", "10.0.0.1", Op.WRITE, TOPIC)
    assert not authz.authorizer(_image([])).authorize_any("User:alice", "10.0.0.1", Op.WRITE, TOPIC)


def test_decision_cache_is_bounded_and_still_right():
    auth = _auth(acl("a", Op.READ), acl("b", Op.READ, DENY))
    cache = DecisionCache(auth, entries_max=2)
    for _ in range(2):
        for name, allowed in (("a", True), ("b", False), ("c", False), ("a", True)):
            assert cache.authorize("User:alice", "h", Op.READ, TOPIC, name) is allowed
            assert len(cache) <= 2
    assert cache.authorize_any("User:alice", "h", Op.READ, TOPIC)
    assert len(cache) <= 2
