"""What each API needs (Kafka's "operations and resources on protocols" table, KIP-11 /
the security docs), as one table: api key -> the checks of a request.

A `Check` passes when ANY of its actions is allowed (CreateTopics: CREATE on the
cluster or on the topic; one without actions never passes); a request passes when every
check does, else it is answered with the error code of the first failing check, in the
table's order (a transactional produce: the transactional id before the topics), as
Kafka orders them. A check made
with `each` is for one item of the request's array (a topic of a Produce, a resource of
a DescribeConfigs): when it fails only that item is refused, the others are served, as
Kafka answers those APIs per topic / group / resource:

- Produce: WRITE transactional id (transactional batches only), WRITE each topic;
- Fetch: a follower (replica id >= 0) CLUSTER_ACTION on the cluster (each partition
  answered TOPIC_AUTHORIZATION_FAILED, the response's error NONE, as Kafka), a consumer
  READ each topic;
- ListOffsets, Metadata: DESCRIBE topic (Metadata filters instead:
  `riverbed.server.broker.authorization`); OffsetForLeaderEpoch: CLUSTER_ACTION on the
  cluster or DESCRIBE topic;
- OffsetCommit: READ group, READ each topic; OffsetFetch: DESCRIBE group, DESCRIBE each
  topic; Join/Sync/Heartbeat/LeaveGroup: READ group; ConsumerGroupHeartbeat: READ group,
  DESCRIBE each subscribed topic; DescribeGroups, ConsumerGroupDescribe: DESCRIBE group
  (a described group assigned a topic the principal may not DESCRIBE is answered
  TOPIC_AUTHORIZATION_FAILED: `riverbed.server.broker.consumer_groups`); DeleteGroups:
  DELETE group; OffsetDelete: DELETE group, READ each topic; FindCoordinator: DESCRIBE
  group or transactional id; ListGroups: filtered by DESCRIBE group (or DESCRIBE cluster);
- CreateTopics: CREATE cluster or topic; DeleteTopics: DELETE cluster or topic;
  DeleteRecords: DELETE topic; CreatePartitions: ALTER topic; DescribeConfigs /
  AlterConfigs / IncrementalAlterConfigs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic,
  group, or the cluster for broker keys (an unknown resource type: the handler's
  INVALID_REQUEST, unauthorized);
- InitProducerId: WRITE transactional id, or without one IDEMPOTENT_WRITE on the cluster
  or WRITE on some topic; AddPartitionsToTxn: WRITE transactional id, WRITE each topic
  but an internal one, never added (a broker's verify-only batch: CLUSTER_ACTION);
  AddOffsetsToTxn: WRITE transactional id, READ group; EndTxn: WRITE transactional id;
  TxnOffsetCommit: WRITE transactional id, READ group, READ each topic;
  DescribeTransactions: DESCRIBE transactional id (its topics: filtered by DESCRIBE);
  ListTransactions: filtered by DESCRIBE transactional id; DescribeProducers: READ topic;
- cluster-wide: DescribeAcls, DescribeLogDirs, ListPartitionReassignments,
  DescribeUserScramCredentials, DescribeQuorum: DESCRIBE cluster; CreateAcls, DeleteAcls,
  AlterReplicaLogDirs, ElectLeaders, AlterPartitionReassignments,
  AlterUserScramCredentials, UnregisterBroker: ALTER cluster; WriteTxnMarkers:
  CLUSTER_ACTION or ALTER on the cluster (KIP-664: the admin client's abortTransaction
  sends it);
- ApiVersions, SaslHandshake, SaslAuthenticate, DescribeCluster: nothing.

`CONTROLLER_RULES` is the controller listener's table (Kafka's ``ControllerApis``): the
Raft RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot of the metadata
log), BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds and
Envelope need CLUSTER_ACTION on the cluster. The metadata writes (CreateTopics, CreateAcls,
ElectLeaders, ...) are checked as on a broker, for whoever they act for: their sender, or
the client whose request a broker forwarded in an Envelope (`riverbed.server.forwarding`).
CLUSTER_ACTION lets a node create an internal topic (a group or transaction coordinator's
``__consumer_offsets`` / ``__transaction_state``) and nothing else of these; DescribeQuorum
needs DESCRIBE on the cluster, or CLUSTER_ACTION (a broker passing on its client's).

An API missing from a table is refused (fail closed); a unit test keeps the tables whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from riverbed.metadata.topic_names import INTERNAL_TOPICS
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.record_batch import has_transactional_records
from riverbed.security.acl import CLUSTER_NAME, ResourceType
from riverbed.security.acl import AclOperation as Op

T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
#: Each resource type's denial code.
ERROR_CODES: dict[int, ErrorCode] = {
    T: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    G: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    C: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    X: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
#: ``name`` of an action on any resource of its type (Kafka's authorizeByResourceType).
ANY_RESOURCE = None


@dataclass(frozen=True, slots=True)
class Action:
    resource_type: int
    name: str | None
    operation: int


@dataclass(frozen=True, slots=True)
class Check:
    actions: tuple[Action, ...]
    error: ErrorCode
    #: (request array, index): the item this check is for, answered alone when it fails;
    #: None: the whole request
    item: tuple[str, int] | None = None


#: Topic id -> name (Fetch and Produce v13+ name topics by id); None when unknown.
TopicNames = Callable[[Any], "str | None"]
Rule = Callable[[Any, TopicNames], list[Check]]


def check(rtype: int, name: str | None, op: int, error: ErrorCode | None = None) -> Check:
    return Check((Action(rtype, name, op),), error or ERROR_CODES[rtype])


def cluster(op: int) -> Rule:
    return lambda req, names: [check(C, CLUSTER_NAME, op)]


def nothing(req: Any, names: TopicNames) -> list[Check]:
    return []


def each(rtype: int, op: int, array: str, names: Iterable[str | None]) -> list[Check]:
    """One check per item of the request array ``array`` (``names``: each item's resource
    name; None, a topic id that names no topic, is left to the handler to answer)."""
    error = ERROR_CODES[rtype]
    return [
        Check((Action(rtype, n, op),), error, (array, i))
        for i, n in enumerate(names)
        if n is not None
    ]


def _produce(req: Any, names: TopicNames) -> list[Check]:
    """WRITE on the transactional id only for transactional batches, as Kafka's
    ``hasTransactionalRecords`` (an idempotent batch sent with an id needs none), then
    WRITE on each topic. Transactional batches without an id are the handler's to refuse
    (`riverbed.server.broker.produce`): the dispatcher's fast path takes such a request."""
    checks = []
    if req.transactional_id and has_transactional_records(req.topic_data):
        checks.append(check(X, req.transactional_id, Op.WRITE))
    topic_names = (t.name or names(t.topic_id) for t in req.topic_data)  # v13+: by id
    return checks + each(T, Op.WRITE, "topic_data", topic_names)


def _fetch(req: Any, names: TopicNames) -> list[Check]:
    replica = req.replica_id if req.replica_id >= 0 else req.replica_state.replica_id
    if replica >= 0:
        return [check(C, CLUSTER_NAME, Op.CLUSTER_ACTION, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    return each(T, Op.READ, "topics", (t.topic or names(t.topic_id) for t in req.topics))


def _offset_for_leader_epoch(req: Any, names: TopicNames) -> list[Check]:
    """CLUSTER_ACTION on the cluster (a follower), else DESCRIBE on each topic (KIP-320: a
    consumer), whatever replica id the request names: Kafka looks at the principal only."""
    replicas = Action(C, CLUSTER_NAME, Op.CLUSTER_ACTION)
    return [
        Check((replicas, Action(T, t.topic, Op.DESCRIBE)), ERROR_CODES[T], ("topics", i))
        for i, t in enumerate(req.topics)
    ]


def _group_then_topics(group_op: int, topic_op: int) -> Rule:
    def rule(req: Any, names: TopicNames) -> list[Check]:
        group = check(G, req.group_id, group_op)
        return [group, *each(T, topic_op, "topics", (t.name for t in req.topics))]

    return rule


def _group(op: int) -> Rule:
    return lambda req, names: [check(G, req.group_id, op)]


def _consumer_group_heartbeat(req: Any, names: TopicNames) -> list[Check]:
    """READ group, then DESCRIBE each subscribed topic name (Kafka 4.0, KAFKA-18813: a
    member may not subscribe to a topic it may not see; the whole heartbeat is refused)."""
    return [check(G, req.group_id, Op.READ)] + [
        check(T, t, Op.DESCRIBE) for t in dict.fromkeys(req.subscribed_topic_names or ())
    ]


def _offset_fetch(req: Any, names: TopicNames) -> list[Check]:
    """v8+ names groups: each group answered alone (its topics are checked by the handler,
    `riverbed.server.broker.groups`, each answered alone within its group); before, the
    group for the whole request, each topic alone."""
    if req.groups:
        return each(G, Op.DESCRIBE, "groups", (g.group_id for g in req.groups))
    return [
        check(G, req.group_id, Op.DESCRIBE),
        *each(T, Op.DESCRIBE, "topics", (t.name for t in req.topics or ())),
    ]


def _find_coordinator(req: Any, names: TopicNames) -> list[Check]:
    rtype = X if req.key_type == 1 else G
    if req.coordinator_keys:  # v4+: batched, each key answered alone
        return each(rtype, Op.DESCRIBE, "coordinator_keys", req.coordinator_keys)
    return [check(rtype, req.key, Op.DESCRIBE)]


def _create_topics(req: Any, names: TopicNames) -> list[Check]:
    return [
        Check(
            (Action(C, CLUSTER_NAME, Op.CREATE), Action(T, t.name, Op.CREATE)),
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            ("topics", i),
        )
        for i, t in enumerate(req.topics)
    ]


def _delete_topics(req: Any, names: TopicNames) -> list[Check]:
    """DELETE on the cluster or on the topic (Kafka's ControllerApis: DELETE on the
    cluster deletes any topic, as CREATE on it creates any)."""
    if req.topics:
        array, topics = "topics", [t.name or names(t.topic_id) for t in req.topics]
    else:
        array, topics = "topic_names", req.topic_names
    on_cluster = Action(C, CLUSTER_NAME, Op.DELETE)
    return [
        Check(
            (on_cluster, Action(T, t, Op.DELETE)), ErrorCode.TOPIC_AUTHORIZATION_FAILED, (array, i)
        )
        for i, t in enumerate(topics)
        if t is not None
    ]


#: ConfigResource type (Kafka's ConfigResource.Type ids: TOPIC, BROKER, BROKER_LOGGER,
#: CLIENT_METRICS, GROUP) -> the ACL resource type its configs are authorized on. Another
#: type is not authorized: the handler answers it INVALID_REQUEST (Kafka's ConfigHelper
#: and ConfigAdminManager.preprocess refuse it before any authorization).
CONFIG_RESOURCES: dict[int, int] = {2: T, 4: C, 8: C, 16: C, 32: G}
#: Legacy AlterConfigs has no BROKER_LOGGER (Kafka: "Unknown resource type 8").
LEGACY_ALTER_CONFIG_RESOURCES = {k: v for k, v in CONFIG_RESOURCES.items() if k != 8}


def _configs(op: int, known: dict[int, int] = CONFIG_RESOURCES) -> Rule:
    def rule(req: Any, names: TopicNames) -> list[Check]:
        out = []
        for i, r in enumerate(req.resources):
            rtype = known.get(r.resource_type)
            if rtype is None:
                continue  # answered INVALID_REQUEST by the handler, as Kafka
            name = CLUSTER_NAME if rtype == C else r.resource_name
            out.append(Check((Action(rtype, name, op),), ERROR_CODES[rtype], ("resources", i)))
        return out

    return rule


def _describe_configs(req: Any, names: TopicNames) -> list[Check]:
    """A resource of an unknown type makes Kafka refuse the whole request INVALID_REQUEST
    (ConfigHelper throws while authorizing): the handler answers it, nothing to check."""
    if any(r.resource_type not in CONFIG_RESOURCES for r in req.resources):
        return []
    return _configs(Op.DESCRIBE_CONFIGS)(req, names)


def _init_producer_id(req: Any, names: TopicNames) -> list[Check]:
    """Kafka 4.x: WRITE on the transactional id (and TWO_PHASE_COMMIT on it for a KIP-939
    two-phase-commit producer); an idempotent producer IDEMPOTENT_WRITE on the cluster
    or WRITE on some topic (KIP-679: WRITE is enough)."""
    if req.transactional_id:
        checks = [check(X, req.transactional_id, Op.WRITE)]
        if req.enable2_pc:
            checks.append(check(X, req.transactional_id, Op.TWO_PHASE_COMMIT))
        return checks
    return [
        Check(
            (Action(C, CLUSTER_NAME, Op.IDEMPOTENT_WRITE), Action(T, ANY_RESOURCE, Op.WRITE)),
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        )
    ]


def _add_partitions_to_txn(req: Any, names: TopicNames) -> list[Check]:
    """v3-: the transactional id for the whole request, each topic alone (and then the
    rest OPERATION_NOT_ATTEMPTED: `ALL_OR_NOTHING`); an internal topic is refused whatever
    the ACLs, as Kafka leaves it out of the topics it authorizes."""
    if req.transactions:  # v4+: brokers verifying for their produce requests
        return [check(C, CLUSTER_NAME, Op.CLUSTER_ACTION)]
    topics = [t.name for t in req.v3_and_below_topics]
    never = ERROR_CODES[T]
    return [
        check(X, req.v3_and_below_transactional_id, Op.WRITE),
        *(
            Check((), never, ("v3_and_below_topics", i))
            for i, t in enumerate(topics)
            if t in INTERNAL_TOPICS
        ),
        *each(T, Op.WRITE, "v3_and_below_topics", topics),
    ]


def _write_txn_markers(req: Any, names: TopicNames) -> list[Check]:
    """Sent by transaction coordinators (CLUSTER_ACTION), and by an admin aborting a
    hanging transaction (ALTER), as Kafka allows either."""
    return [
        Check(
            (Action(C, CLUSTER_NAME, Op.ALTER), Action(C, CLUSTER_NAME, Op.CLUSTER_ACTION)),
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        )
    ]


def _add_offsets_to_txn(req: Any, names: TopicNames) -> list[Check]:
    return [check(X, req.transactional_id, Op.WRITE), check(G, req.group_id, Op.READ)]


def _txn_offset_commit(req: Any, names: TopicNames) -> list[Check]:
    return [
        check(X, req.transactional_id, Op.WRITE),
        *_group_then_topics(Op.READ, Op.READ)(req, names),
    ]


#: APIs whose request is not run at all when an item is refused: the other items are
#: answered OPERATION_NOT_ATTEMPTED (Kafka's AddPartitionsToTxn v3-).
ALL_OR_NOTHING: frozenset[int] = frozenset({ApiKey.ADD_PARTITIONS_TO_TXN})


RULES: dict[int, Rule] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: lambda r, n: each(T, Op.DESCRIBE, "topics", (t.name for t in r.topics)),
    ApiKey.METADATA: nothing,  # filtered: undescribable topics are hidden
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: nothing,  # filtered, as Metadata
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.API_VERSIONS: nothing,
    ApiKey.SASL_HANDSHAKE: nothing,
    ApiKey.SASL_AUTHENTICATE: nothing,
    ApiKey.DESCRIBE_CLUSTER: nothing,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: lambda r, n: each(T, Op.ALTER, "topics", (t.name for t in r.topics)),
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, LEGACY_ALTER_CONFIG_RESOURCES),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS),
    ApiKey.DELETE_RECORDS: lambda r, n: each(T, Op.DELETE, "topics", (t.name for t in r.topics)),
    ApiKey.DESCRIBE_LOG_DIRS: cluster(Op.DESCRIBE),
    ApiKey.ALTER_REPLICA_LOG_DIRS: cluster(Op.ALTER),
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.OFFSET_COMMIT: _group_then_topics(Op.READ, Op.READ),
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.DESCRIBE_GROUPS: lambda r, n: each(G, Op.DESCRIBE, "groups", r.groups),
    ApiKey.DELETE_GROUPS: lambda r, n: each(G, Op.DELETE, "groups_names", r.groups_names),
    ApiKey.JOIN_GROUP: _group(Op.READ),
    ApiKey.SYNC_GROUP: _group(Op.READ),
    ApiKey.HEARTBEAT: _group(Op.READ),
    ApiKey.LEAVE_GROUP: _group(Op.READ),
    ApiKey.LIST_GROUPS: nothing,  # filtered: groups the principal may not describe
    ApiKey.OFFSET_DELETE: _group_then_topics(Op.DELETE, Op.READ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: lambda r, n: each(G, Op.DESCRIBE, "group_ids", r.group_ids),
    ApiKey.DESCRIBE_PRODUCERS: lambda r, n: each(T, Op.READ, "topics", (t.name for t in r.topics)),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
    ApiKey.END_TXN: lambda r, n: [check(X, r.transactional_id, Op.WRITE)],
    ApiKey.DESCRIBE_TRANSACTIONS: lambda r, n: each(
        X, Op.DESCRIBE, "transactional_ids", r.transactional_ids
    ),
    ApiKey.LIST_TRANSACTIONS: nothing,  # filtered: ids the principal may not DESCRIBE
    ApiKey.ELECT_LEADERS: cluster(Op.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: cluster(Op.ALTER),
    ApiKey.UPDATE_FEATURES: cluster(Op.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: cluster(Op.DESCRIBE),
    ApiKey.DESCRIBE_QUORUM: cluster(Op.DESCRIBE),
    ApiKey.UNREGISTER_BROKER: cluster(Op.ALTER),
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: cluster(Op.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: cluster(Op.ALTER),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: cluster(Op.ALTER_CONFIGS),
    ApiKey.DESCRIBE_ACLS: cluster(Op.DESCRIBE),
    ApiKey.CREATE_ACLS: cluster(Op.ALTER),
    ApiKey.DELETE_ACLS: cluster(Op.ALTER),
}


def _forwarded(rule: Rule) -> Rule:
    """``rule``, or CLUSTER_ACTION on the cluster (a broker forwarding what it authorized)."""
    by_broker = Action(C, CLUSTER_NAME, Op.CLUSTER_ACTION)

    def forwarded_rule(req: Any, names: TopicNames) -> list[Check]:
        return [Check((*c.actions, by_broker), c.error, c.item) for c in rule(req, names)]

    return forwarded_rule


def _create_topics_by_node_or_client(req: Any, names: TopicNames) -> list[Check]:
    """`_create_topics`, or CLUSTER_ACTION for an internal topic (a node's coordinator
    creating its own topic, Kafka's AutoTopicCreationManager sending it as the broker)."""
    by_node = Action(C, CLUSTER_NAME, Op.CLUSTER_ACTION)
    internal = {i for i, t in enumerate(req.topics) if t.name in INTERNAL_TOPICS}
    return [
        Check((*c.actions, by_node), c.error, c.item)
        if c.item is not None and c.item[1] in internal
        else c
        for c in _create_topics(req, names)
    ]


#: Sent by brokers and controllers only (Kafka's ControllerApis: CLUSTER_ACTION).
_INTER_NODE_APIS = (
    ApiKey.FETCH,
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT,
    ApiKey.ALTER_PARTITION,
    ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.ENVELOPE,
)
#: The metadata writes clients send, which brokers forward to the active controller (in
#: Envelopes: `riverbed.server.forwarding`).
CLIENT_METADATA_WRITES: frozenset[int] = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.UNREGISTER_BROKER,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.UPDATE_FEATURES,
    }
)
CONTROLLER_RULES: dict[int, Rule] = {
    ApiKey.API_VERSIONS: nothing,
    ApiKey.SASL_HANDSHAKE: nothing,
    ApiKey.SASL_AUTHENTICATE: nothing,
    ApiKey.DESCRIBE_QUORUM: _forwarded(cluster(Op.DESCRIBE)),
    **{k: cluster(Op.CLUSTER_ACTION) for k in _INTER_NODE_APIS},
    **{k: RULES[k] for k in CLIENT_METADATA_WRITES},
    ApiKey.CREATE_TOPICS: _create_topics_by_node_or_client,
}
