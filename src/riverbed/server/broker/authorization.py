"""The broker's authorizer shell: `authorizer.class.name` set -> every request is checked
against `riverbed.security.api_operations.RULES` before its handler runs.

The decision core is `riverbed.security.authorizer.Authorizer`; this shell gives it the
ACLs of the current metadata image (the index is rebuilt only when the image's ACL map
changes, which replay leaves untouched by any other record) and the "ready" flag (the
image holds metadata.version: the first metadata load is done). Decisions are answered
through a `DecisionCache` made with each authorizer, so they never outlive the ACLs they
were made with, and a client's repeated question (WRITE on its topic, every Produce) costs
one lookup however many ACLs there are.

With ``delete.topic.enable=false`` a DeleteTopics is refused whole before any check
(TOPIC_DELETION_DISABLED, INVALID_REQUEST below v3 through `fit_to_version`), whatever the
principal's ACLs: Kafka's ControllerApis.deleteTopics throws before it resolves or
authorizes a topic, so a principal without DELETE learns that deletion is off. The flag is
the node's own: Kafka's broker forwards DeleteTopics unchecked and its controller's flag
decides, which is this node's on a combined node (riverbed checks on the broker too).

A request whose whole-request check fails (the group of an OffsetCommit, the
transactional id of a Produce) is answered with the check's code in every error field
(`error_response`, Kafka's getErrorResponse). A check for one item of the request's array
(a topic, group, config resource, transactional id) refuses that item alone, as Kafka
does: `split` takes the refused items out, the handler serves the rest, and `with_refused`
adds an entry per refused item with its code (TOPIC_AUTHORIZATION_FAILED, ...). The code
does not depend on whether the resource exists, so a principal without DESCRIBE does not
learn it; with DESCRIBE the handler says UNKNOWN_TOPIC_OR_PARTITION. Metadata and
ListGroups filter instead (`visible_topics`, `visible_groups`): what the principal may not
DESCRIBE is hidden.
"""

from __future__ import annotations

import copy
import functools
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    Message,
    ProduceRequest,
    response_class,
)
from riverbed.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    ResourceType,
    StandardAcl,
    operations_bitfield,
)
from riverbed.security.acl import AclOperation as Op
from riverbed.security.api_operations import ALL_OR_NOTHING, RULES, Action, Rule
from riverbed.security.authorizer import (
    AUTHORIZER_CLASS_NAMES,
    AclIndex,
    Authorizer,
    AuthorizerConfig,
    DecisionCache,
    parse_super_users,
)
from riverbed.server.broker.delete_topics_refusals import refused_deletions
from riverbed.server.broker.error_response import append_entries, error_response, item_errors

if TYPE_CHECKING:
    from riverbed.server.config import ServerConfig
    from riverbed.server.network import RequestContext

log = logging.getLogger(__name__)


def authorizer_config(config: ServerConfig) -> AuthorizerConfig | None:
    """None when no authorizer is configured (the ACL APIs answer SECURITY_DISABLED);
    ConfigError naming the key for a class riverbed does not have or a bad super user."""
    from riverbed.server.config import ConfigError

    name = str(config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(
            "authorizer.class.name",
            f"authorizer.class.name={name}: riverbed provides "
            f"{' or '.join(sorted(AUTHORIZER_CLASS_NAMES))}",
        )
    try:
        super_users = parse_super_users(str(config.get("super.users") or ""))
    except ValueError as exc:
        raise ConfigError("super.users", str(exc)) from None
    return AuthorizerConfig(super_users, bool(config.get("allow.everyone.if.no.acl.found")))


def broker_authorizer(authz_config: AuthorizerConfig, config: ServerConfig) -> BrokerAuthorizer:
    """The authorizer shell of a node's listeners (broker and controller alike)."""
    delete_topic_enable = bool(config.get("delete.topic.enable"))
    return BrokerAuthorizer(authz_config, delete_topic_enable=delete_topic_enable)


def client_host(ctx: RequestContext) -> str:
    """The client's address as ACL hosts name it (``peer`` is ``host:port``)."""
    return _host_of(ctx.peer)


#: Connections' peers whose ACL host `client_host` keeps (a connection's requests all
#: ask for the same one: the split was ~20% of an allowed Produce's check).
CLIENT_HOSTS_CACHED = 4096


@functools.lru_cache(maxsize=CLIENT_HOSTS_CACHED)
def _host_of(peer: str) -> str:
    return peer.rpartition(":")[0].strip("[]")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A request refused whole (``whole``), or these items of its array ``array`` (index
    -> code), or allowed (neither)."""

    whole: ErrorCode | None = None
    array: str = ""
    refused: Mapping[int, ErrorCode] = field(default_factory=dict)


ALLOWED = Verdict()


def _all_topics_writable(
    auth: DecisionCache, principal: str, host: str, body: ProduceRequest, image: MetadataImage
) -> bool:
    """A Produce's one rule (WRITE on each topic) without building its checks, for the
    request every producer sends: all topics allowed, answered by the decision cache alone
    (~1 us instead of ~6). Anything else (a refusal, a topic id naming no topic) returns
    False and takes the table's path, which says which items are refused."""
    for topic in body.topic_data:
        name: str | None = topic.name
        if not name:
            by_id = image.topics_by_id.get(topic.topic_id)
            name = None if by_id is None else by_id.name
        if name is None or not auth.authorize(principal, host, Op.WRITE, ResourceType.TOPIC, name):
            return False
    return True


def _produce_writable(
    auth: DecisionCache, ctx: RequestContext, body: ProduceRequest, image: MetadataImage
) -> bool:
    """`_all_topics_writable`, first from the connection's memory (`ConnectionDecisions`)
    of the topic names this authorizer let its principal write: a producer's every
    request after its first is answered by a set lookup per topic."""
    memo = ctx.decisions
    if memo is None:
        return _all_topics_writable(auth, ctx.principal.text, client_host(ctx), body, image)
    writable = memo.writable_for(auth, ctx.principal)
    memo.granted_under = image  # the dispatcher answers from ``writable`` while it is current
    for topic in body.topic_data:
        if topic.name not in writable:
            break
    else:
        return True
    if not _all_topics_writable(auth, ctx.principal.text, client_host(ctx), body, image):
        return False
    writable.update(t.name for t in body.topic_data if t.name)  # not ids: a topic may go
    return True


class BrokerAuthorizer:
    def __init__(self, config: AuthorizerConfig, *, delete_topic_enable: bool = True) -> None:
        self.config = config
        #: the node's ``delete.topic.enable``: false refuses a DeleteTopics before its checks
        self.delete_topic_enable = delete_topic_enable
        self._acls: Mapping[uuid.UUID, StandardAcl] | None = None
        self._index = AclIndex()
        self._current = DecisionCache(Authorizer(config, self._index, ready=False))
        self._image: MetadataImage | None = None

    def authorizer(self, image: MetadataImage) -> DecisionCache:
        """The decisions for the image's ACLs: a new ACL map or readiness starts a new
        authorizer with an empty cache."""
        if image is self._image:  # every request between two metadata changes
            return self._current
        self._image = image
        ready = image.metadata_version > 0
        if image.acls is not self._acls or ready != self._current.ready:
            if image.acls is not self._acls:
                self._index = AclIndex.build(image.acls.values())
                self._acls = image.acls
            self._current = DecisionCache(Authorizer(self.config, self._index, ready=ready))
        return self._current

    def allowed(self, auth: DecisionCache, ctx: RequestContext, action: Action) -> bool:
        principal, host = ctx.principal.text, client_host(ctx)
        if action.name is None:
            return auth.authorize_any(principal, host, action.operation, action.resource_type)
        return auth.authorize(principal, host, action.operation, action.resource_type, action.name)

    def verdict(
        self,
        image: MetadataImage,
        ctx: RequestContext,
        body: Message,
        rules: Mapping[int, Rule] = RULES,
    ) -> Verdict:
        """What the checks of ``rules`` (the broker listeners' table, or the controller
        listener's) say of the request: refused whole (the first failing whole-request
        check's code), or its refused items, or `ALLOWED`."""
        rule = rules.get(ctx.header.api_key)
        if rule is None:
            return Verdict(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        auth = self.authorizer(image)
        if (
            rules is RULES
            and isinstance(body, ProduceRequest)
            and not body.transactional_id
            and _produce_writable(auth, ctx, body, image)
        ):
            return ALLOWED
        if ctx.header.api_key == ApiKey.DELETE_TOPICS and not self.delete_topic_enable:
            return Verdict(ErrorCode.TOPIC_DELETION_DISABLED)  # before authorization, as Kafka
        principal, host = ctx.principal.text, client_host(ctx)

        def topic_name(topic_id: object) -> str | None:
            topic = image.topics_by_id.get(topic_id)  # type: ignore[call-overload]
            return None if topic is None else topic.name

        def allowed(a: Action) -> bool:
            if a.name is None:
                return auth.authorize_any(principal, host, a.operation, a.resource_type)
            return auth.authorize(principal, host, a.operation, a.resource_type, a.name)

        array, refused = "", {}
        for check in rule(body, topic_name):
            if check.item is not None and check.item[1] in refused:
                continue  # an item answers its first failing check
            if any(allowed(a) for a in check.actions):
                continue
            log.info(
                "principal %s from %s denied %s (api key %s)",
                ctx.principal,
                client_host(ctx),
                check.actions,
                ctx.header.api_key,
            )
            if check.item is None:
                return Verdict(check.error)
            array = check.item[0]
            refused[check.item[1]] = check.error
        return Verdict(None, array, refused) if refused else ALLOWED

    def denied(
        self,
        image: MetadataImage,
        ctx: RequestContext,
        body: Message,
        rules: Mapping[int, Rule] = RULES,
    ) -> ErrorCode | None:
        """The code to refuse the whole request with (its first refusal), None if none."""
        v = self.verdict(image, ctx, body, rules)
        return v.whole if v.whole is not None else next(iter(v.refused.values()), None)

    def may(
        self, image: MetadataImage, ctx: RequestContext, op: int, rtype: int, name: str
    ) -> bool:
        return self.allowed(self.authorizer(image), ctx, Action(rtype, name, op))

    def operations(self, image: MetadataImage, ctx: RequestContext, rtype: int, name: str) -> int:
        """KIP-430: the bitfield of the resource type's operations the principal may do on
        the resource (Kafka's AuthHelper.authorizedOperations)."""
        auth = self.authorizer(image)
        principal, host = ctx.principal.text, client_host(ctx)
        return operations_bitfield(
            op
            for op in SUPPORTED_OPERATIONS[rtype]
            if auth.authorize(principal, host, op, rtype, name)
        )

    def named_refusals(
        self,
        image: MetadataImage,
        ctx: RequestContext,
        api_key: int,
        refused: list[tuple[ErrorCode, Message]],
    ) -> list[tuple[ErrorCode, Message]]:
        """`split`'s refused parts, a DeleteTopics' answered as Kafka's
        ControllerApis.deleteTopics does (`refused_deletions`: names shown or hidden by
        DESCRIBE, an absent describable topic UNKNOWN_TOPIC_OR_PARTITION)."""
        if api_key != ApiKey.DELETE_TOPICS:
            return refused

        def may_describe(name: str) -> bool:
            return self.may(image, ctx, Op.DESCRIBE, ResourceType.TOPIC, name)

        return refused_deletions(image, may_describe, refused)

    def may_describe_cluster(self, image: MetadataImage, ctx: RequestContext) -> bool:
        return self.may(image, ctx, Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    def visible_topics(
        self,
        image: MetadataImage,
        ctx: RequestContext,
        names: list[str],
        *,
        explicit: bool,
        auto_create: bool,
    ) -> tuple[list[str], list[str]]:
        """Metadata's topics split into (shown, refused TOPIC_AUTHORIZATION_FAILED): a topic
        the principal may not DESCRIBE is hidden from an all-topics request and refused
        when named; a missing topic that would be auto-created needs CREATE on the
        cluster or the topic (Kafka's handleTopicMetadataRequest)."""
        auth = self.authorizer(image)
        shown: list[str] = []
        refused: list[str] = []
        may_create_all = self.allowed(
            auth, ctx, Action(ResourceType.CLUSTER, CLUSTER_NAME, Op.CREATE)
        )
        for name in names:
            ok = self.allowed(auth, ctx, Action(ResourceType.TOPIC, name, Op.DESCRIBE))
            if ok and auto_create and image.topic(name) is None and not may_create_all:
                ok = self.allowed(auth, ctx, Action(ResourceType.TOPIC, name, Op.CREATE))
            if ok:
                shown.append(name)
            elif explicit:
                refused.append(name)
        return shown, refused


#: APIs whose refusal as a whole Kafka answers in each item only, the response's own
#: error left NONE: a follower's Fetch without CLUSTER_ACTION (KafkaApis.handleFetchRequest
#: answers each partition TOPIC_AUTHORIZATION_FAILED).
_REFUSED_IN_ITEMS = frozenset({ApiKey.FETCH})


def denied_response(api_key: int, body: Message, version: int, code: ErrorCode) -> Message:
    """The answer to a refused request: `error_response` (Kafka's getErrorResponse), or
    for `_REFUSED_IN_ITEMS` the items' errors alone."""
    if api_key in _REFUSED_IN_ITEMS:
        return item_errors(api_key, body, version, code)
    return error_response(api_key, body, version, code)


def split(
    api_key: int, body: Message, verdict: Verdict
) -> tuple[Message | None, list[tuple[ErrorCode, Message]]]:
    """``body`` with only its allowed items (None when none is left), and per error code
    a copy with the items refused with it (`ALL_OR_NOTHING` APIs: every other item is
    then refused OPERATION_NOT_ATTEMPTED)."""
    items = list(getattr(body, verdict.array))
    codes = dict(verdict.refused)
    if api_key in ALL_OR_NOTHING:
        for i in range(len(items)):
            codes.setdefault(i, ErrorCode.OPERATION_NOT_ATTEMPTED)
    allowed = None
    kept = [item for i, item in enumerate(items) if i not in codes]
    if kept:
        allowed = copy.copy(body)
        setattr(allowed, verdict.array, kept)
    refused = []
    for code in dict.fromkeys(codes.values()):
        part = copy.copy(body)
        setattr(part, verdict.array, [item for i, item in enumerate(items) if codes.get(i) == code])
        refused.append((code, part))
    return allowed, refused


def with_refused(
    api_key: int,
    response: Message | None,
    refused: list[tuple[ErrorCode, Message]],
    version: int,
) -> Message:
    """``response`` (to the allowed items; None when there were none) with entries for
    the refused items, each answered its code (Kafka answers such items alone)."""
    if response is None:
        response = response_class(api_key)()
    for code, part in refused:
        entries = item_errors(api_key, part, version, code)
        if api_key == ApiKey.DELETE_TOPICS:  # Kafka's ApiError(error): its own message
            for entry in entries.responses:  # type: ignore[attr-defined]
                entry.error_message = code.message
        append_entries(response, entries)
    return response


def authorized_operations(
    authz: BrokerAuthorizer | None,
    image: MetadataImage,
    ctx: RequestContext,
    rtype: int,
    name: str,
) -> int:
    """KIP-430's bitfield for one resource: every supported operation without an
    authorizer, else what the ACLs allow the principal."""
    if authz is None:
        return operations_bitfield(SUPPORTED_OPERATIONS[rtype])
    return authz.operations(image, ctx, rtype, name)


def cluster_operations(
    authz: BrokerAuthorizer | None, image: MetadataImage, ctx: RequestContext
) -> int:
    """DescribeCluster's (and Metadata v8-10's) cluster bitfield: 0 for a principal that
    may not DESCRIBE the cluster, as Kafka's AuthHelper.computeDescribeClusterResponse."""
    if authz is not None and not authz.may_describe_cluster(image, ctx):
        return 0
    return authorized_operations(authz, image, ctx, ResourceType.CLUSTER, CLUSTER_NAME)
