"""API keys and the versions riverbed advertises in ApiVersions responses.

Wire format: ApiVersionsResponse lists (api_key int16, min_version int16, max_version int16)
for every entry of ``SUPPORTED_VERSIONS``. The maxima are Apache Kafka 4.1's (a broker's
ApiVersions); a lower maximum carries its reason on its line. The minima stay at 0 where
Kafka 4.0 raised them (KIP-896 removed Fetch v0-3, ListOffsets v0, OffsetCommit v0-1, ...):
riverbed still serves those versions with their behaviour, and old clients such as
librdkafka 2.0 only enable features when the ranges contain specific old versions (Kafka
itself keeps advertising Produce v0-2 for that reason, KAFKA-18659). The message specs of
the versions the reference directory predates are Kafka 4.1's, in
``scripts/kafka-specs/message/``.

Each listener advertises exactly what it serves (Kafka's ``ApiKeys.apisForListener``): the
APIs whose request spec names its listener type (the ``listeners`` field of
``message/*Request.json``: ``broker`` for client listeners, ``controller`` for the
``controller.listener.names``) among those it has a handler for; see
`listener_api_versions`. A request for any other API closes the connection, as Kafka's
socket server does for an API not enabled on the listener.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import IntEnum
from functools import lru_cache
from typing import TYPE_CHECKING

from riverbed.protocol.schemas.generated import SCHEMAS

if TYPE_CHECKING:
    from riverbed.protocol.messages import ApiVersionsResponse


class ApiKey(IntEnum):
    """Every Kafka API key (the int16 ``request_api_key`` in the request header)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CLIENT_METRICS_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87


SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    # v10: NOT_LEADER_OR_FOLLOWER names the leader (KIP-951); v11: TRANSACTION_ABORTABLE;
    # v12: under transaction.version 2 the leader adds the partition to the transaction
    # (KIP-890 part 2); v13: topics by id (KIP-516).
    ApiKey.PRODUCE: (0, 13),
    # v13+: topics by id; v16: node endpoints (KIP-951); v17/v18: KRaft-only fields.
    ApiKey.FETCH: (0, 18),
    # v8: -4 earliest local, v9: -5 latest tiered (KIP-1005), v10: timeout (KIP-1075).
    ApiKey.LIST_OFFSETS: (0, 10),
    # v13: a top-level error code (KIP-1102; riverbed never needs a rebootstrap).
    ApiKey.METADATA: (0, 13),
    # OffsetCommit/OffsetFetch v9: member epochs of KIP-848 consumer groups.
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    # FindCoordinator v5 (KIP-890: may answer TRANSACTION_ABORTABLE, which riverbed's never
    # does) and v6 (KIP-932: key type 2, share groups, answered INVALID_REQUEST: none here)
    # have v4's fields.
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    # v6: GROUP_ID_NOT_FOUND with a message for an unknown group (KIP-1043).
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    # v4: features of minimum level 0 are listed (below v4 they are left out, KAFKA-17492).
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    # v5: TV2 clients (KIP-890); v6: KIP-939 two-phase commit (Enable2Pc, KeepPreparedTxn),
    # which the Spark sink's tasks and driver use (Kafka 4.1 has v6 as unstable).
    ApiKey.INIT_PRODUCER_ID: (0, 6),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    # v1: AllowReplicationFactorChange (KIP-860).
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    # finalized feature levels (transaction.version); v2: no per-feature results.
    ApiKey.UPDATE_FEATURES: (0, 2),
    # v2: IncludeFencedBrokers / IsFenced (KIP-1073).
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    # Transactions (issue 19): v0 stays (aiokafka speaks only v0 of every transactional
    # API, librdkafka v0 of AddPartitionsToTxn / AddOffsetsToTxn).
    # AddPartitionsToTxn v4-5: batched, from brokers (KIP-890); EndTxn v5: TV2.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    # coordinator -> partition leaders (v1 flexible, what Kafka 4.x's coordinators send)
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    # v5: under transaction.version 2 the group's partition is added to the transaction
    # by the broker (KIP-890 part 2; the client sends no AddOffsetsToTxn).
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    # v1: duration filter (KIP-994); v2: transactional id pattern (KIP-1152).
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    # KIP-966: topics described a page of partitions at a time (Kafka 4.x's admin client).
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    # KIP-848; v1 adds SubscribedTopicRegex
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    # v1: each member's MemberType (KIP-1099).
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # cluster-internal (controller quorum and broker <-> controller)
    # Kafka 4.1 has v2 (KIP-996 pre-vote); riverbed's Raft has no pre-vote phase.
    ApiKey.VOTE: (0, 1),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.ALTER_PARTITION: (0, 3),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
    ApiKey.BROKER_REGISTRATION: (0, 4),
    ApiKey.BROKER_HEARTBEAT: (0, 1),
    ApiKey.UNREGISTER_BROKER: (0, 0),
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
    # a client's CreateTopics / DeleteTopics / CreatePartitions forwarded by a broker
    ApiKey.ENVELOPE: (0, 0),
}

#: Listener types of Kafka's request specs (the ``listeners`` field).
BROKER_LISTENER = "broker"
CONTROLLER_LISTENER = "controller"

#: api key -> the listener types its request spec names.
API_LISTENERS: dict[int, frozenset[str]] = {
    int(table["apiKey"]): frozenset(table.get("listeners", ()))
    for table in SCHEMAS.values()
    if table["type"] == "request" and "apiKey" in table
}


def listener_api_versions(
    listener_type: str, served: Collection[int]
) -> dict[ApiKey, tuple[int, int]]:
    """What a listener of ``listener_type`` advertises: the APIs of ``served`` (those it has
    handlers for) whose spec lists that listener type, at ``SUPPORTED_VERSIONS``."""
    return {
        key: versions
        for key, versions in SUPPORTED_VERSIONS.items()
        if key in served and listener_type in API_LISTENERS.get(key, ())
    }


#: Versions a broker takes beyond those it advertises (Kafka's followers pick their Fetch
#: version from metadata.version, not from ApiVersions; riverbed's replica fetchers send
#: Fetch v15, which clients are offered too): none today.
INTER_BROKER_VERSIONS: dict[ApiKey, tuple[int, int]] = {}


#: (api key, version) verdicts `is_accepted` remembers (bounded: a peer may send any).
ACCEPTED_CACHE_ENTRIES_MAX = 4096


@lru_cache(maxsize=ACCEPTED_CACHE_ENTRIES_MAX)
def is_accepted(api_key: int, api_version: int) -> bool:
    """Whether a request at ``api_version`` is decoded (advertised, or inter-broker);
    remembered, as the tables are constants and every request asks."""
    try:
        lo, hi = INTER_BROKER_VERSIONS[ApiKey(api_key)]
    except (ValueError, KeyError):
        return is_supported(api_key, api_version)
    return lo <= api_version <= hi


def is_supported(api_key: int, api_version: int) -> bool:
    """Whether riverbed advertises ``api_version`` of ``api_key``."""
    try:
        lo, hi = SUPPORTED_VERSIONS[ApiKey(api_key)]
    except (ValueError, KeyError):
        return False
    return lo <= api_version <= hi


def api_versions_response(
    error_code: int = 0,
    *,
    versions: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
    throttle_time_ms: int = 0,
) -> ApiVersionsResponse:
    """The ApiVersions answer listing ``versions`` (a listener's `listener_api_versions`).

    Pass ``error_code=ErrorCode.UNSUPPORTED_VERSION`` when the client asked an ApiVersions
    version above ours; ``headers.encode_response`` then writes the body at v0.
    """
    from riverbed.protocol.messages import ApiVersionsResponse

    keys = [
        ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(versions.items())
    ]
    return ApiVersionsResponse(
        error_code=error_code, api_keys=keys, throttle_time_ms=throttle_time_ms
    )
