"""The error response for a request (Kafka's ``AbstractRequest.getErrorResponse``).

When a handler fails unexpectedly, Kafka does not drop the connection: it answers the
request with the error code in every error field of the response, logs the exception,
and keeps serving. Kafka hand-writes that response per API; riverbed derives it from
the message schema instead:

- every top-level ``ErrorCode`` field of the response gets the code;
- every response array of structs that carries an ``ErrorCode`` somewhere inside is
  mirrored from the request array it answers (the request array sharing the most key
  fields: topic name / id, partition index, resource type / name, group id): one
  response entry per request entry, with the key fields copied and the error code set,
  recursively (topics -> partitions);
- a request array of plain strings (DeleteTopics v0-5 ``TopicNames``, a topic's
  ``PartitionIndexes``) mirrors into entries whose key field takes the value;
- a few responses pair their entries with the request's items otherwise (AlterReplicaLogDirs
  per topic across log dirs, AlterUserScramCredentials per user of two arrays,
  AlterClientQuotas per entity, Create/DeleteAcls by position, DescribeUserScramCredentials
  per user without its name): they are built by hand
  (`_BY_HAND`);
- offsets (base offset, high/low watermark, log start, ...) are -1, "unknown", as in
  Kafka's error responses; everything else keeps the schema default.

The error message stays null for UNKNOWN_SERVER_ERROR, as in Kafka (``ApiError``
withholds an internal exception's text from clients); the broker logs it instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    Message,
    OffsetFetchResponse,
    message_spec,
    response_class,
)
from riverbed.protocol.schema import FieldSpec, StructSpec
from riverbed.server.broker.versioning import fit_to_version

#: Request/response field names that name the same key, mapped to one canonical name.
_CANONICAL = {
    "name": "topic",
    "topic": "topic",
    "topic_name": "topic",
    "topic_names": "topic",
    "topics": "topic",
    "partition_index": "partition",
    "partition_indexes": "partition",
    "partition_id": "partition",
    "partition": "partition",
    "index": "partition",
    "partitions": "partition",
    "groups": "group_id",
    "group_id": "group_id",
    "groups_names": "group_id",
    "group_ids": "group_id",
    "transactional_ids": "transactional_id",
    "transactional_id": "transactional_id",
    "coordinator_keys": "key",
    "key": "key",
}
#: Canonical names of the fields that identify an entry (copied from the request).
_KEY_FIELDS = frozenset(
    {
        "topic",
        "topic_id",
        "partition",
        "resource_type",
        "resource_name",
        "group_id",
        "transactional_id",
        "key",
        "producer_id",
    }
)
#: Offsets an error entry reports as unknown (-1), as Kafka's error responses do
#: (INVALID_OFFSET / INVALID_HIGH_WATERMARK / INVALID_LOW_WATERMARK).
_UNKNOWN_OFFSETS = frozenset(
    {
        "base_offset",
        "offset",
        "committed_offset",
        "end_offset",
        "high_watermark",
        "low_watermark",
        "last_stable_offset",
        "log_start_offset",
    }
)
#: Error code fields (AddPartitionsToTxn v3- names its partitions' ``PartitionErrorCode``).
_ERROR_FIELDS = frozenset({"error_code", "partition_error_code"})
#: Nesting bound: Kafka's messages nest arrays three deep at most.
_DEPTH_MAX = 8


def _canon(attr: str) -> str:
    return _CANONICAL.get(attr, attr)


def _has_error_field(spec: StructSpec, depth: int = 0) -> bool:
    if depth > _DEPTH_MAX:
        return False
    for f in spec.fields:
        if f.attr in _ERROR_FIELDS and f.type == "int16":
            return True
        if f.is_struct_array and f.struct is not None and _has_error_field(f.struct, depth + 1):
            return True
    return False


def _key_names(spec: StructSpec) -> set[str]:
    return {_canon(f.attr) for f in spec.fields if not f.is_array and f.struct is None}


def _matching_request_array(
    resp_field: FieldSpec, req_spec: StructSpec, req: Message
) -> FieldSpec | None:
    """The request array ``resp_field`` answers: the one sharing the most key fields.

    Only arrays the request fills count (DeleteTopics has ``TopicNames`` up to v5 and
    ``Topics`` from v6); ties go to the field declared first (Fetch's ``Topics`` before
    ``ForgottenTopicsData``).
    """
    assert resp_field.struct is not None
    resp_keys = _key_names(resp_field.struct) & _KEY_FIELDS
    best: FieldSpec | None = None
    best_score = 0
    for f in req_spec.fields:
        if not f.is_array or not getattr(req, f.attr, None):
            continue
        if f.struct is not None:
            score = len(resp_keys & _key_names(f.struct))
        else:
            score = 1 if _canon(f.attr) in resp_keys else 0
        if score > best_score:
            best, best_score = f, score
    return best


def _fill(
    resp: Message,
    resp_spec: StructSpec,
    req: Message,
    req_spec: StructSpec,
    code: int,
    *,
    top: bool = True,
) -> None:
    """``top`` False: only the arrays (a request's refused items; the request as a whole
    keeps no error)."""
    for f in resp_spec.fields:
        if f.attr in _ERROR_FIELDS and f.type == "int16":
            if top:
                setattr(resp, f.attr, code)
            continue
        if f.attr in _UNKNOWN_OFFSETS and f.type == "int64":
            if top:
                setattr(resp, f.attr, -1)
            continue
        if not f.is_struct_array or f.struct is None or not _has_error_field(f.struct):
            continue
        match = _matching_request_array(f, req_spec, req)
        if match is None:
            continue
        items = getattr(req, match.attr)
        entries = []
        for item in items:
            entry = f.struct.cls()
            if match.struct is None:
                # A plain value (a topic name): it goes into the entry's key field.
                for rf in f.struct.fields:
                    if rf.attr in _ERROR_FIELDS and rf.type == "int16":
                        setattr(entry, rf.attr, code)
                    elif rf.attr in _UNKNOWN_OFFSETS and rf.type == "int64":
                        setattr(entry, rf.attr, -1)
                    elif _canon(rf.attr) == _canon(match.attr) and rf.type == match.base_type:
                        setattr(entry, rf.attr, item)
            else:
                _copy_keys(entry, f.struct, item, match.struct)
                _fill(entry, f.struct, item, match.struct, code)
            entries.append(entry)
        setattr(resp, f.attr, entries)


def _copy_keys(
    entry: Message, entry_spec: StructSpec, item: Message, item_spec: StructSpec
) -> None:
    sources = {
        _canon(f.attr): f
        for f in item_spec.fields
        if not f.is_array and f.struct is None and _canon(f.attr) in _KEY_FIELDS
    }
    for f in entry_spec.fields:
        src = sources.get(_canon(f.attr))
        if src is None or src.type != f.type or f.is_array:
            continue
        value = getattr(item, src.attr)
        if value is not None:  # a null key (DeleteTopics by id) keeps the response default
            setattr(entry, f.attr, value)


#: An error response built from its request and the code.
ErrorAnswer = Callable[[Message, int], Message]
RequestT = TypeVar("RequestT", bound=Message)


def _for(request_type: type[RequestT], build: Callable[[RequestT, int], Message]) -> ErrorAnswer:
    """``build`` for requests of ``request_type`` (the table is keyed by api key)."""

    def answer(request: Message, code: int) -> Message:
        assert isinstance(request, request_type), (type(request), request_type)
        return build(request, code)

    return answer


def _alter_replica_log_dirs(req: AlterReplicaLogDirsRequest, code: int) -> Message:
    """Each partition of each log dir, answered per topic."""
    A = AlterReplicaLogDirsResponse
    partitions: dict[str, list[int]] = {}
    for d in req.dirs:
        for t in d.topics:
            partitions.setdefault(t.name, []).extend(t.partitions)
    P = A.AlterReplicaLogDirPartitionResult
    return A(
        results=[
            A.AlterReplicaLogDirTopicResult(
                topic_name=name, partitions=[P(partition_index=i, error_code=code) for i in indexes]
            )
            for name, indexes in partitions.items()
        ]
    )


def _alter_user_scram_credentials(req: AlterUserScramCredentialsRequest, code: int) -> Message:
    """Each user of the deletions and upsertions, once, in name order (Kafka's)."""
    users = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
    R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    return AlterUserScramCredentialsResponse(results=[R(user=u, error_code=code) for u in users])


def _alter_client_quotas(req: AlterClientQuotasRequest, code: int) -> Message:
    """Each entry, with its entity."""
    Q = AlterClientQuotasResponse
    return Q(
        entries=[
            Q.EntryData(
                error_code=code,
                entity=[
                    Q.EntityData(entity_type=d.entity_type, entity_name=d.entity_name)
                    for d in e.entity
                ],
            )
            for e in req.entries
        ]
    )


def _describe_user_scram_credentials(
    req: DescribeUserScramCredentialsRequest, code: int
) -> Message:
    """The code, and a result per requested user with it: Kafka's error response names no
    user in them (``User`` keeps its default, ""); describing every user (null) has none."""
    D = DescribeUserScramCredentialsResponse
    R = D.DescribeUserScramCredentialsResult
    return D(error_code=code, results=[R(error_code=code) for _ in req.users or ()])


def _create_acls(req: CreateAclsRequest, code: int) -> Message:
    """One result per creation, in order (results carry no key: clients count them)."""
    R = CreateAclsResponse.AclCreationResult
    return CreateAclsResponse(results=[R(error_code=code) for _ in req.creations])


def _delete_acls(req: DeleteAclsRequest, code: int) -> Message:
    """One filter result per filter, in order (no key either)."""
    F = DeleteAclsResponse.DeleteAclsFilterResult
    return DeleteAclsResponse(filter_results=[F(error_code=code) for _ in req.filters])


#: Responses whose entries answer request items the schema cannot pair by key fields
#: (items spread over several request arrays, keyed under another name, or not at all):
#: hand-built per item, as Kafka's getErrorResponse, so a client finds each item's error.
_BY_HAND: dict[int, ErrorAnswer] = {
    ApiKey.CREATE_ACLS: _for(CreateAclsRequest, _create_acls),
    ApiKey.DELETE_ACLS: _for(DeleteAclsRequest, _delete_acls),
    ApiKey.ALTER_REPLICA_LOG_DIRS: _for(AlterReplicaLogDirsRequest, _alter_replica_log_dirs),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _for(
        AlterUserScramCredentialsRequest, _alter_user_scram_credentials
    ),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _for(
        DescribeUserScramCredentialsRequest, _describe_user_scram_credentials
    ),
    ApiKey.ALTER_CLIENT_QUOTAS: _for(AlterClientQuotasRequest, _alter_client_quotas),
}


def error_response(api_key: int, request: Message, version: int, code: ErrorCode | int) -> Message:
    """The response to ``request`` (api ``api_key`` at ``version``) with every error = code."""
    by_hand = _BY_HAND.get(api_key)
    if by_hand is not None:
        return fit_to_version(by_hand(request, int(code)), version)
    resp_cls = response_class(api_key)
    response = resp_cls()
    _fill(response, message_spec(resp_cls).struct, request, message_spec(request).struct, int(code))
    if api_key == ApiKey.OFFSET_FETCH and version >= 2:  # Kafka: the partitions up to v1 only
        response.topics = []  # type: ignore[attr-defined]
        _group_errors_alone(response)
    return fit_to_version(response, version)


def _group_errors_alone(response: Message) -> None:
    """OffsetFetch v8+: a group answered an error carries no topics (Kafka's groupError)."""
    assert isinstance(response, OffsetFetchResponse)
    for group in response.groups or ():
        group.topics = []


def item_errors(api_key: int, request: Message, version: int, code: ErrorCode | int) -> Message:
    """The response to ``request`` with only its arrays' entries answered ``code``: the
    entries for a request's refused items (Kafka answers a topic it refuses alone)."""
    resp_cls = response_class(api_key)
    response = resp_cls()
    spec = message_spec(request).struct
    _fill(response, message_spec(resp_cls).struct, request, spec, int(code), top=False)
    if api_key == ApiKey.OFFSET_FETCH:
        _group_errors_alone(response)
    return fit_to_version(response, version)


def append_entries(response: Message, extra: Message) -> None:
    """Append ``extra``'s array entries (`item_errors`) to ``response``'s arrays."""
    for f in message_spec(response).struct.fields:
        entries = getattr(extra, f.attr) if f.is_struct_array else None
        if entries:
            current = getattr(response, f.attr)
            setattr(response, f.attr, [*(current or ()), *entries])


def error_code_of(exc: BaseException) -> ErrorCode:
    """The Kafka error a handler's exception stands for.

    Storage and coordinator errors carry ``error_code`` (Kafka's number), controller
    errors ``code``; a
    metadata append on a node that is not the quorum leader is NOT_CONTROLLER (the client
    refreshes its metadata and retries); an operation too large for the metadata log's
    append queue is POLICY_VIOLATION when it is too large alone (Kafka refuses overly
    large user operations) and REQUEST_TIMED_OUT (retriable) when other operations fill
    the queue; anything else is UNKNOWN_SERVER_ERROR.
    """
    from riverbed.metadata.control_common import ControllerError
    from riverbed.raft.node import AppendQueueFullError, NotLeaderError
    from riverbed.server.coordinator import CoordinatorError
    from riverbed.storage.errors import StorageError

    if isinstance(exc, StorageError | CoordinatorError):
        return ErrorCode.of(exc.error_code)
    if isinstance(exc, ControllerError):
        return exc.code
    if isinstance(exc, NotLeaderError):
        return ErrorCode.NOT_CONTROLLER
    if isinstance(exc, AppendQueueFullError):
        return ErrorCode.POLICY_VIOLATION if exc.alone_too_large else ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR
