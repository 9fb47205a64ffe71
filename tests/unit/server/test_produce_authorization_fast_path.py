"""A Produce's authorization answered by the decision cache alone
(`authorization._all_topics_writable`) says what the table's rule says, for every mix of
allowed, refused, wildcard and prefixed ACLs, topic ids naming no topic, transactional ids
and principals (the table's path is taken with a copy of `RULES`)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from riverbed.metadata.image import MetadataImage, acl_record, replay_all
from riverbed.metadata.records import METADATA_VERSION_FEATURE
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import FeatureLevelRecord, Message, ProduceRequest, TopicRecord
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.security.acl import (
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    StandardAcl,
)
from riverbed.security.api_operations import RULES
from riverbed.security.authorizer import AuthorizerConfig, ConnectionDecisions
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.broker.authorization import ALLOWED, BrokerAuthorizer
from riverbed.server.broker.dispatch import Broker
from riverbed.server.network import RequestContext

TOPICS = ["orders", "orders-eu", "payments", "team-a-x"]
TOPIC_IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(TOPICS)}

acls = st.builds(
    StandardAcl,
    st.just(ResourceType.TOPIC),
    st.sampled_from(["orders", "orders-", "payments", "team-", "*"]),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.just("*"),
    st.sampled_from([AclOperation.WRITE, AclOperation.ALL, AclOperation.READ]),
    st.sampled_from([PermissionType.ALLOW, PermissionType.DENY]),
)


def image_with(acl_list: list[StandardAcl]) -> MetadataImage:
    records: list[Message] = [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=21)]
    records += [TopicRecord(name=n, topic_id=t) for n, t in TOPIC_IDS.items()]
    records += [acl_record(uuid.UUID(int=100 + i), a) for i, a in enumerate(acl_list)]
    return replay_all(MetadataImage.EMPTY, records)


def produce(
    topics: list[tuple[str, bool]], transactional_id: str | None, *, transactional: bool = True
) -> ProduceRequest:
    """(name, by id) per topic; a name not in TOPICS sent by id is an id naming no topic.
    With a transactional id each topic carries a batch, transactional unless told (Kafka
    checks the id for transactional batches only)."""
    P = ProduceRequest
    parts = []
    if transactional_id:
        batch = build_batch([SimpleRecord(b"v")], producer_id=7, is_transactional=transactional)
        parts = [P.PartitionProduceData(index=0, records=batch)]
    data = []
    for name, by_id in topics:
        if by_id:
            topic_id = TOPIC_IDS.get(name, uuid.UUID(int=999))
            data.append(P.TopicProduceData(name="", topic_id=topic_id, partition_data=parts))
        else:
            data.append(P.TopicProduceData(name=name, partition_data=parts))
    return ProduceRequest(
        acks=1, timeout_ms=1000, topic_data=data, transactional_id=transactional_id
    )


@given(
    acl_list=st.lists(acls, max_size=8),
    topics=st.lists(
        st.tuples(st.sampled_from([*TOPICS, "unknown"]), st.booleans()), min_size=1, max_size=4
    ),
    user=st.sampled_from(["alice", "bob", "carol"]),
    transactional_id=st.sampled_from([None, "", "tx"]),
    allow_if_no_acl=st.booleans(),
)
def test_the_fast_path_answers_as_the_table(
    acl_list: list[StandardAcl],
    topics: list[tuple[str, bool]],
    user: str,
    transactional_id: str | None,
    allow_if_no_acl: bool,
) -> None:
    image = image_with(acl_list)
    body = produce(topics, transactional_id)
    header = RequestHeader(ApiKey.PRODUCE, 13, 1, "c")
    ctx = RequestContext(header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, KafkaPrincipal("User", user))
    config = AuthorizerConfig(allow_everyone_if_no_acl_found=allow_if_no_acl)
    fast = BrokerAuthorizer(config).verdict(image, ctx, body)
    table = BrokerAuthorizer(config).verdict(image, ctx, body, dict(RULES))
    assert fast == table
    assert (fast is ALLOWED) == (table == ALLOWED)


def test_an_allowed_produce_takes_the_fast_path() -> None:
    acl = StandardAcl(
        ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
        AclOperation.WRITE, PermissionType.ALLOW,
    )  # fmt: skip
    image = image_with([acl])
    header = RequestHeader(ApiKey.PRODUCE, 9, 1, "c")
    ctx = RequestContext(header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, KafkaPrincipal.user("alice"))
    authz = BrokerAuthorizer(AuthorizerConfig())
    assert authz.verdict(image, ctx, produce([("orders", False)], None)) is ALLOWED
    refused = authz.verdict(image, ctx, produce([("orders", False), ("payments", False)], None))
    assert refused.refused == {1: refused.refused[1]} and refused.array == "topic_data"


def test_each_connection_is_checked_against_its_own_host_and_principal() -> None:
    """The host and principal string are kept per peer / principal (`client_host`'s cache,
    `KafkaPrincipal.text`): two connections of one client, from other hosts or as other
    users, each get their own answer, asked in turn."""
    acls = [
        StandardAcl(
            ResourceType.TOPIC,
            "orders",
            PatternType.LITERAL,
            "User:alice",
            host,
            AclOperation.WRITE,
            PermissionType.ALLOW,
        )
        for host in ("10.0.0.1", "::1")
    ]
    image = image_with(acls)
    authz = BrokerAuthorizer(AuthorizerConfig())
    body = produce([("orders", False)], None)
    header = RequestHeader(ApiKey.PRODUCE, 9, 1, "c")
    cases = [
        ("10.0.0.1:5000", "alice", True),
        ("10.0.0.2:5000", "alice", False),
        ("10.0.0.1:5001", "bob", False),
        ("::1:5002", "alice", True),
        ("[::1]:5003", "alice", True),
        ("10.0.0.11:5000", "alice", False),
    ]
    for _ in range(2):  # the second time from the caches
        for peer, user, allowed in cases:
            ctx = RequestContext(header, peer, "PLAINTEXT", 1, 0, KafkaPrincipal.user(user))
            assert (authz.verdict(image, ctx, body) is ALLOWED) is allowed, (peer, user)


def test_a_principal_is_its_type_and_name() -> None:
    alice = KafkaPrincipal.parse("User:alice")
    assert str(alice) == "User:alice" == str(KafkaPrincipal.user("alice"))
    assert alice == KafkaPrincipal("User", "alice") and hash(alice) == hash(
        KafkaPrincipal.user("alice")
    )
    assert alice != KafkaPrincipal.user("bob") and str(KafkaPrincipal("Group", "x")) == "Group:x"
    assert repr(alice) == "KafkaPrincipal(type='User', name='alice')"


def _alice_ctx(decisions: ConnectionDecisions) -> RequestContext:
    header = RequestHeader(ApiKey.PRODUCE, 9, 1, "c")
    return RequestContext(
        header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, KafkaPrincipal.user("alice"),
        decisions=decisions,
    )  # fmt: skip


def _acl(name: str, permission: int) -> StandardAcl:
    return StandardAcl(
        ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*",
        AclOperation.WRITE, permission,
    )  # fmt: skip


def test_an_acl_change_takes_effect_on_the_next_request_of_an_open_connection() -> None:
    """The connection remembers the topics it may write (one set lookup per topic for
    each Produce after the first), for the ACL set they were decided under: a DENY added,
    an ALLOW removed, then the ALLOW back, each decides the very next request."""
    allow = _acl("orders", PermissionType.ALLOW)
    decisions = ConnectionDecisions()
    ctx = _alice_ctx(decisions)
    authz = BrokerAuthorizer(AuthorizerConfig())
    body = produce([("orders", False)], None)
    allowed = image_with([allow])
    assert authz.verdict(allowed, ctx, body) is ALLOWED
    assert decisions.writable == {"orders"}  # remembered on the connection
    assert authz.verdict(allowed, ctx, body) is ALLOWED
    denied = image_with([allow, _acl("orders", PermissionType.DENY)])
    assert authz.verdict(denied, ctx, body).refused == {0: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert decisions.writable == set()
    removed = image_with([])
    assert authz.verdict(removed, ctx, body).refused == {0: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert authz.verdict(allowed, ctx, body) is ALLOWED
    assert decisions.writable == {"orders"}


def test_a_connection_remembers_only_names_and_forgets_another_principal() -> None:
    """Topic ids are not remembered (the id's topic may be deleted: the table then says
    so); a re-authenticated connection's other principal is decided afresh."""
    decisions = ConnectionDecisions()
    authz = BrokerAuthorizer(AuthorizerConfig())
    image = image_with([_acl("orders", PermissionType.ALLOW)])
    ctx = _alice_ctx(decisions)
    assert authz.verdict(image, ctx, produce([("orders", True)], None)) is ALLOWED
    assert decisions.writable == set()
    assert authz.verdict(image, ctx, produce([("orders", False)], None)) is ALLOWED
    bob = RequestContext(
        ctx.header, ctx.peer, "PLAINTEXT", 1, 0, KafkaPrincipal.user("bob"), decisions=decisions
    )
    assert authz.verdict(image, bob, produce([("orders", False)], None)) is not ALLOWED


@given(
    steps=st.lists(
        st.tuples(
            st.lists(acls, max_size=6),
            st.lists(
                st.tuples(st.sampled_from([*TOPICS, "unknown"]), st.booleans()),
                min_size=1,
                max_size=3,
            ),
            st.sampled_from(["alice", "bob"]),
        ),
        min_size=1,
        max_size=8,
    ),
    allow_if_no_acl=st.booleans(),
)
def test_the_connections_memory_answers_as_the_table_while_acls_change(
    steps: list[tuple[list[StandardAcl], list[tuple[str, bool]], str]], allow_if_no_acl: bool
) -> None:
    """One open connection (one `ConnectionDecisions`, one `BrokerAuthorizer`) through a
    run of ACL sets, principals and Produce requests: each verdict is the table's, made
    afresh by an authorizer with no memory of the earlier steps."""
    config = AuthorizerConfig(allow_everyone_if_no_acl_found=allow_if_no_acl)
    authz = BrokerAuthorizer(config)
    decisions = ConnectionDecisions()
    header = RequestHeader(ApiKey.PRODUCE, 13, 1, "c")
    principals = {u: KafkaPrincipal.user(u) for u in ("alice", "bob")}
    for acl_list, topics, user in steps:
        image = image_with(acl_list)
        body = produce(topics, None)
        ctx = RequestContext(
            header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, principals[user], decisions=decisions
        )
        fresh = RequestContext(header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, principals[user])
        for _ in range(2):  # the second time from the connection's memory
            got = authz.verdict(image, ctx, body)
            assert got == BrokerAuthorizer(config).verdict(image, fresh, body, dict(RULES))


class _Gate(Broker):
    """A `Broker` with only what `Broker._handle` reads before a handler runs (its
    authorizer, its current image): `ask` says which way the dispatcher took a request,
    "remembered" (the connection's memory, no `verdict`), "allowed" (by `verdict`) or
    "refused"."""

    def __init__(self, authz: BrokerAuthorizer) -> None:  # not Broker's: no node around it
        self.authz = authz
        self.metadata = SimpleNamespace(image=MetadataImage.EMPTY)  # type: ignore[assignment]
        self.verdicts = 0
        decide = authz.verdict

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.verdicts += 1
            return decide(*args, **kwargs)

        authz.verdict = counted  # type: ignore[method-assign]

    async def _run(
        self, handler: Any, ctx: RequestContext, body: Message, version: int, spent_ns: int = 0
    ) -> Any:
        return "ran"

    async def _handle_refused(self, *args: Any) -> Any:
        return "refused"

    def ask(self, image: MetadataImage, ctx: RequestContext, body: Message) -> str:
        self.metadata.image = image
        verdicts = self.verdicts
        coro = self._handle(None, ctx, body)  # type: ignore[arg-type]
        try:
            coro.send(None)
        except StopIteration as done:
            if done.value == "refused":
                return "refused"
            return "remembered" if self.verdicts == verdicts else "allowed"
        raise AssertionError("the gate awaited something")


def test_the_dispatcher_remembers_only_what_verdict_let_this_connection_write() -> None:
    """`Broker._handle` answers a Produce from the connection's memory (no `verdict`)
    only when `verdict` already let this connection's principal write its every topic
    under the broker's current image; an ACL change, another principal, a topic id, a
    transactional id or a topic not yet decided all go to `verdict`, which decides them."""
    decisions = ConnectionDecisions()
    ctx = _alice_ctx(decisions)
    gate = _Gate(BrokerAuthorizer(AuthorizerConfig()))
    allowed = image_with(
        [_acl("orders", PermissionType.ALLOW), _acl("payments", PermissionType.ALLOW)]
    )
    orders = produce([("orders", False)], None)
    assert gate.ask(allowed, ctx, orders) == "allowed"  # never decided
    assert gate.ask(allowed, ctx, orders) == "remembered"
    both = produce([("orders", False), ("payments", False)], None)
    assert gate.ask(allowed, ctx, both) == "allowed"  # payments not decided yet
    assert gate.ask(allowed, ctx, both) == "remembered"
    assert gate.ask(allowed, ctx, produce([("orders", True)], None)) == "allowed"  # an id
    # a transactional id: `verdict` asks WRITE on it too (alice has none)
    assert gate.ask(allowed, ctx, produce([("orders", False)], "tx")) == "refused"
    # ... for transactional batches only, but `verdict` decides it still
    plain = produce([("orders", False)], "tx", transactional=False)
    assert gate.ask(allowed, ctx, plain) == "allowed"
    assert gate.ask(allowed, ctx, plain) == "allowed"
    bob = RequestContext(
        ctx.header, ctx.peer, "PLAINTEXT", 1, 0, KafkaPrincipal.user("bob"), decisions=decisions
    )
    assert gate.ask(allowed, bob, orders) == "refused"
    assert gate.ask(allowed, ctx, orders) == "allowed"  # alice again: decided afresh
    denied = image_with([_acl("orders", PermissionType.ALLOW), _acl("orders", PermissionType.DENY)])
    assert gate.ask(denied, ctx, orders) == "refused"  # a new ACL set: decided again
    assert gate.ask(denied, ctx, orders) == "refused"
    same_acls = replay_all(allowed, [TopicRecord(name="new", topic_id=uuid.UUID(int=77))])
    assert gate.ask(same_acls, ctx, orders) == "allowed"  # a new image: decided once
    assert gate.ask(same_acls, ctx, orders) == "remembered"
    no_memory = RequestContext(ctx.header, ctx.peer, "PLAINTEXT", 1, 0, ctx.principal)
    assert gate.ask(same_acls, no_memory, orders) == "allowed"
    assert gate.ask(same_acls, no_memory, orders) == "allowed"


#: ACLs that decide a Produce of the model check's topics (WRITE on them, or none).
write_acls = st.builds(
    StandardAcl,
    st.just(ResourceType.TOPIC),
    st.sampled_from(["orders", "payments", "*"]),
    st.just(PatternType.LITERAL),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.just("*"),
    st.sampled_from([AclOperation.WRITE, AclOperation.ALL]),
    st.sampled_from([PermissionType.ALLOW, PermissionType.ALLOW, PermissionType.DENY]),
)


_ALLOW, _DENY = _acl("orders", PermissionType.ALLOW), _acl("orders", PermissionType.DENY)
_ORDERS = [("orders", False)]


@settings(max_examples=300)
# each breaks one condition of the connection's memory in `Broker._handle`: the image's ACLs changed (with and
# without another request deciding in between), another principal, a transactional id
@example(
    [[_ALLOW], [_ALLOW, _DENY]], [(0, _ORDERS, "alice", None), (1, _ORDERS, "alice", None)], False
)
@example(
    [[_ALLOW], [_ALLOW, _DENY]],
    [(0, _ORDERS, "alice", None), (1, _ORDERS, "alice", "tx"), (1, _ORDERS, "alice", None)],
    False,
)
@example([[_ALLOW]], [(0, _ORDERS, "alice", None), (0, _ORDERS, "bob", None)], False)
@example([[_ALLOW]], [(0, _ORDERS, "alice", None), (0, _ORDERS, "alice", "tx")], False)
@given(
    acl_sets=st.lists(st.lists(write_acls, max_size=4), min_size=1, max_size=3),
    steps=st.lists(
        st.tuples(
            st.integers(0, 2),  # which ACL set (image) this request meets
            st.lists(
                st.tuples(st.sampled_from(["orders", "payments", "unknown"]), st.booleans()),
                min_size=1,
                max_size=2,
            ),
            st.sampled_from(["alice", "bob"]),
            st.sampled_from([None, None, None, "tx"]),
        ),
        min_size=1,
        max_size=16,
    ),
    allow_if_no_acl=st.booleans(),
)
def test_the_dispatcher_never_lets_through_what_the_table_refuses(
    acl_sets: list[list[StandardAcl]],
    steps: list[tuple[int, list[tuple[str, bool]], str, str | None]],
    allow_if_no_acl: bool,
) -> None:
    """A model check of `Broker._handle`'s authorization over one connection's requests
    while the broker's image (ACLs) and the principal change: a request it lets through
    is one the table's rule allows, a refused one is refused by the rule, and a
    producer's repeated request is answered from the connection's memory. The examples
    are the cases that need each condition of that memory (the image, the principal, the
    transactional id): with any one dropped, a refused request gets through."""
    config = AuthorizerConfig(allow_everyone_if_no_acl_found=allow_if_no_acl)
    gate = _Gate(BrokerAuthorizer(config))
    decisions = ConnectionDecisions()
    principals = {u: KafkaPrincipal.user(u) for u in ("alice", "bob")}  # a connection's own
    header = RequestHeader(ApiKey.PRODUCE, 13, 1, "c")
    images: dict[int, MetadataImage] = {}
    for which, topics, user, transactional_id in steps:
        index = which % len(acl_sets)
        image = images.get(index) or images.setdefault(index, image_with(acl_sets[index]))
        ctx = RequestContext(
            header, "10.0.0.1:5000", "PLAINTEXT", 1, 0, principals[user], decisions=decisions
        )
        body = produce(topics, transactional_id)
        table = BrokerAuthorizer(config).verdict(image, ctx, body, dict(RULES))
        path = gate.ask(image, ctx, body)
        assert (path != "refused") == (table == ALLOWED)
        if (
            path == "allowed"
            and not transactional_id
            and all(name for name, by_id in topics if not by_id)
            and not any(by_id for _, by_id in topics)
        ):
            assert gate.ask(image, ctx, body) == "remembered"  # the next one is
