"""Controller mutation quotas (KIP-599) on CreateTopics, CreatePartitions and DeleteTopics,
enforced once for the whole cluster, by the active controller.

Kafka's ControllerApis gives each of these requests a quota of the client (principal,
client id): strict from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3, whose
clients know THROTTLING_QUOTA_EXCEEDED; permissive below ("older versions are throttled
instead"). The controller applies it per topic once the topic passed validation
(``context.applyPartitionChangeQuota(numPartitions)``): a new topic's partitions, a
deleted topic's partitions, the partitions CreatePartitions adds. A refused topic gets
THROTTLING_QUOTA_EXCEEDED; the response carries the quota's throttle time
(``sendResponseMaybeThrottleWithControllerQuota``: the larger of it and the request-time
throttle), and the client's connection is muted for it by the broker it is connected to.

The active controller's buckets (`ControllerMutationQuotas`, Kafka's ControllerServer
owns its ControllerMutationQuotaManager) count every broker's clients together: a broker
that is not the active controller forwards the request in an Envelope with the client's
principal, client id and request version (`riverbed.server.forwarding`), and the active
controller runs it through `run_with_quota` against its own image: a topic the
controller will refuse anyway (unknown, already existing, no increase) takes no permits,
and the permits of a topic the controller then refused are given back, so that, as in
Kafka, only mutations that happen are counted.

Who else pays, as in Kafka:

- a Metadata auto-creation: the asking client (Kafka's KRaft broker forwards it in an
  Envelope with that client's principal and client id at CreateTopics' latest version,
  so strict; `QuorumMetadata.auto_create_topic`). Over the quota the topic is not
  created and the client is told it is unknown; its connection is not muted (the
  throttle is in the broker's CreateTopics answer, not the client's Metadata);
- a CreateTopics, DeleteTopics or CreatePartitions sent straight to a controller listener
  (an admin client bootstrapped from the controllers): its sender, at its version, muted
  for the throttle (ControllerApis' ``newQuotaFor(request)``). FindCoordinator's creation
  of ``__consumer_offsets`` / ``__transaction_state`` is such a request from the broker
  itself (Kafka sends it without a client's context), counted against the principal and
  client id the broker connects to the controller with; created in-process by the active
  controller itself (a combined node) it counts against no one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    Message,
)
from riverbed.security.client_quotas import CONTROLLER_MUTATION_RATE, QuotaBook, QuotaWindows
from riverbed.security.mutation_quotas import MutationQuotaManager

#: the first version of each API whose quota is strict (ControllerApis' strictSinceVersion)
STRICT_SINCE_CREATE_TOPICS = 6
STRICT_SINCE_DELETE_TOPICS = 5
STRICT_SINCE_CREATE_PARTITIONS = 3

THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED
THROTTLED_MESSAGE = "The throttling quota has been exceeded."


@dataclass
class RequestMutationQuota:
    """One request's quota (Kafka's Strict- / PermissiveControllerMutationQuota)."""

    manager: MutationQuotaManager
    book: QuotaBook
    user: str
    client_id: str
    strict: bool
    _throttle_ms: int = 0
    _throttled_at_ms: int = 0
    #: permits recorded per item key, to give back those the controller refused
    recorded: dict[object, int] = field(default_factory=dict)

    def admit(self, key: object, permits: int, now_ms: int) -> bool:
        """Record ``permits`` for ``key``; False when a strict quota refuses them."""
        if permits <= 0:
            return True  # the controller refuses it before its quota (Kafka's order)
        if self.strict:
            throttle = self.manager.try_record(
                self.book, self.user, self.client_id, permits, now_ms
            )
        else:
            throttle = self.manager.record(self.book, self.user, self.client_id, permits, now_ms)
        if throttle > 0:
            self._throttle_ms, self._throttled_at_ms = throttle, now_ms
        if throttle > 0 and self.strict:
            return False
        self.recorded[key] = permits
        return True

    def give_back(self, keys: Iterable[object], now_ms: int) -> None:
        for key in keys:
            permits = self.recorded.pop(key, 0)
            if permits:
                self.manager.record(self.book, self.user, self.client_id, -permits, now_ms)

    def throttle_time_ms(self, now_ms: int) -> int:
        """Kafka's AbstractControllerMutationQuota.throttleTime: the last violation's
        throttle less the time since it was recorded."""
        return max(0, self._throttle_ms - (now_ms - self._throttled_at_ms))


# --- CreateTopics ---------------------------------------------------------------------------


def create_topics_permits(
    image: MetadataImage, request: CreateTopicsRequest, default_partitions: int
) -> list[tuple[object, int]]:
    """(topic name, partitions it creates) per topic; 0 for one that exists or is named
    twice (the controller refuses those)."""
    names = [t.name for t in request.topics]
    out: list[tuple[object, int]] = []
    for t in request.topics:
        if image.topic(t.name) is not None or names.count(t.name) > 1:
            out.append((t.name, 0))
        elif t.assignments:
            out.append((t.name, len(t.assignments)))
        else:
            out.append((t.name, default_partitions if t.num_partitions == -1 else t.num_partitions))
    return out


def split_create_topics(
    request: CreateTopicsRequest, admitted: list[bool]
) -> tuple[CreateTopicsRequest, list[CreateTopicsResponse.CreatableTopicResult]]:
    keep = [t for t, ok in zip(request.topics, admitted, strict=True) if ok]
    refused = [
        CreateTopicsResponse.CreatableTopicResult(
            name=t.name, error_code=int(THROTTLED), error_message=THROTTLED_MESSAGE
        )
        for t, ok in zip(request.topics, admitted, strict=True)
        if not ok
    ]
    forwarded = CreateTopicsRequest(
        topics=keep, timeout_ms=request.timeout_ms, validate_only=request.validate_only
    )
    return forwarded, refused


# --- DeleteTopics ---------------------------------------------------------------------------


def delete_topics_permits(
    image: MetadataImage, request: DeleteTopicsRequest
) -> list[tuple[object, int]]:
    """(name or topic id, partitions it deletes) per topic (v0-5 names, v6+ states)."""
    out: list[tuple[object, int]] = []
    for name in request.topic_names:
        topic = image.topic(name)
        out.append((name, 0 if topic is None else len(topic.partitions)))
    for state in request.topics:
        if state.name is not None:
            key: object = state.name
            topic = image.topic(state.name)
        else:
            key = state.topic_id
            topic = image.topic_by_id(state.topic_id)
        out.append((key, 0 if topic is None else len(topic.partitions)))
    return out


def split_delete_topics(
    image: MetadataImage, request: DeleteTopicsRequest, admitted: list[bool]
) -> tuple[DeleteTopicsRequest, list[DeleteTopicsResponse.DeletableTopicResult]]:
    flags = iter(admitted)
    names = [(n, next(flags)) for n in request.topic_names]
    states = [(s, next(flags)) for s in request.topics]
    R = DeleteTopicsResponse.DeletableTopicResult
    refused = [
        R(name=n, error_code=int(THROTTLED), error_message=THROTTLED_MESSAGE)
        for n, ok in names
        if not ok
    ]
    for s, ok in states:
        if not ok:
            topic = image.topic(s.name) if s.name is not None else image.topic_by_id(s.topic_id)
            refused.append(
                R(
                    name=s.name if topic is None else topic.name,
                    topic_id=s.topic_id if topic is None else topic.topic_id,
                    error_code=int(THROTTLED),
                    error_message=THROTTLED_MESSAGE,
                )
            )
    forwarded = DeleteTopicsRequest(
        topic_names=[n for n, ok in names if ok],
        topics=[s for s, ok in states if ok],
        timeout_ms=request.timeout_ms,
    )
    return forwarded, refused


# --- CreatePartitions -----------------------------------------------------------------------


def create_partitions_permits(
    image: MetadataImage, request: CreatePartitionsRequest
) -> list[tuple[object, int]]:
    """(topic name, partitions it adds) per topic; 0 when it is unknown or no increase."""
    out: list[tuple[object, int]] = []
    for t in request.topics:
        topic = image.topic(t.name)
        out.append((t.name, 0 if topic is None else max(0, t.count - len(topic.partitions))))
    return out


def split_create_partitions(
    request: CreatePartitionsRequest, admitted: list[bool]
) -> tuple[CreatePartitionsRequest, list[CreatePartitionsResponse.CreatePartitionsTopicResult]]:
    pairs = list(zip(request.topics, admitted, strict=True))
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    refused = [
        R(name=t.name, error_code=int(THROTTLED), error_message=THROTTLED_MESSAGE)
        for t, ok in pairs
        if not ok
    ]
    forwarded = CreatePartitionsRequest(
        topics=[t for t, ok in pairs if ok],
        timeout_ms=request.timeout_ms,
        validate_only=request.validate_only,
    )
    return forwarded, refused


def failed_keys(results: Iterable[tuple[object, int]]) -> list[object]:
    """Keys of the results the controller refused (their permits go back)."""
    return [key for key, code in results if code != 0]


def admit_all(
    permits: Sequence[tuple[object, int]], quota: RequestMutationQuota, now_ms: int
) -> list[bool]:
    """Each item's fate under the quota, in request order (Kafka's per-topic order)."""
    return [quota.admit(key, n, now_ms) for key, n in permits]


# --- the active controller ------------------------------------------------------------------

#: the first strict version of each quota'd request
_STRICT_SINCE: dict[type, int] = {
    CreateTopicsRequest: STRICT_SINCE_CREATE_TOPICS,
    DeleteTopicsRequest: STRICT_SINCE_DELETE_TOPICS,
    CreatePartitionsRequest: STRICT_SINCE_CREATE_PARTITIONS,
}
QuotaRequest = CreateTopicsRequest | DeleteTopicsRequest | CreatePartitionsRequest
QuotaResponse = CreateTopicsResponse | DeleteTopicsResponse | CreatePartitionsResponse


class ControllerMutationQuotas:
    """The active controller's ``controller_mutation_rate`` buckets
    (``controller.quota.window.*``) and the book of its current image."""

    def __init__(self, windows: QuotaWindows) -> None:
        self.manager = MutationQuotaManager(windows)
        self._source: object = None
        self._book = QuotaBook.of(CONTROLLER_MUTATION_RATE, {})

    def book(self, image: MetadataImage) -> QuotaBook:
        # images share the quotas mapping until a ClientQuotaRecord changes it
        if image.client_quotas is not self._source:
            self._source = image.client_quotas
            self._book = QuotaBook.of(CONTROLLER_MUTATION_RATE, image.client_quotas)
        return self._book

    def quota_for(
        self, image: MetadataImage, request: Message, user: str, client_id: str, version: int
    ) -> RequestMutationQuota | None:
        """Kafka's newQuotaFor(request, strictSinceVersion): None when no quota applies
        (not a mutation API, or no ``controller_mutation_rate`` configured)."""
        strict_since = _STRICT_SINCE.get(type(request))
        book = self.book(image)
        if strict_since is None or not book.enabled:
            return None
        return RequestMutationQuota(self.manager, book, user, client_id, version >= strict_since)


Run = Callable[[Message], Awaitable[Message]]


async def run_with_quota(
    quota: RequestMutationQuota,
    image: MetadataImage,
    request: QuotaRequest,
    run: Run,
    default_partitions: int,
    now_ms: Callable[[], int],
) -> QuotaResponse:
    """``run`` the part of ``request`` the quota admits (per topic, in request order),
    the refused topics answered THROTTLING_QUOTA_EXCEEDED, the quota's throttle in the
    response; permits of topics ``run`` then refused go back."""
    response: QuotaResponse
    if isinstance(request, CreateTopicsRequest):
        permits = create_topics_permits(image, request, default_partitions)
        response = await _create_topics(quota, request, permits, run, now_ms)
    elif isinstance(request, DeleteTopicsRequest):
        response = await _delete_topics(quota, image, request, run, now_ms)
    else:
        response = await _create_partitions(quota, image, request, run, now_ms)
    response.throttle_time_ms = max(response.throttle_time_ms, quota.throttle_time_ms(now_ms()))
    return response


async def _create_topics(
    quota: RequestMutationQuota,
    request: CreateTopicsRequest,
    permits: list[tuple[object, int]],
    run: Run,
    now_ms: Callable[[], int],
) -> CreateTopicsResponse:
    kept, refused = split_create_topics(request, admit_all(permits, quota, now_ms()))
    response = CreateTopicsResponse() if refused and not kept.topics else await run(kept)
    assert isinstance(response, CreateTopicsResponse)
    quota.give_back(failed_keys((t.name, t.error_code) for t in response.topics), now_ms())
    response.topics.extend(refused)
    return response


async def _delete_topics(
    quota: RequestMutationQuota,
    image: MetadataImage,
    request: DeleteTopicsRequest,
    run: Run,
    now_ms: Callable[[], int],
) -> DeleteTopicsResponse:
    admitted = admit_all(delete_topics_permits(image, request), quota, now_ms())
    kept, refused = split_delete_topics(image, request, admitted)
    empty = refused and not (kept.topic_names or kept.topics)
    response = DeleteTopicsResponse() if empty else await run(kept)
    assert isinstance(response, DeleteTopicsResponse)
    results = response.responses
    failed = [(r.name, r.error_code) for r in results] + [
        (r.topic_id, r.error_code) for r in results
    ]
    quota.give_back(failed_keys(failed), now_ms())
    response.responses.extend(refused)
    return response


async def _create_partitions(
    quota: RequestMutationQuota,
    image: MetadataImage,
    request: CreatePartitionsRequest,
    run: Run,
    now_ms: Callable[[], int],
) -> CreatePartitionsResponse:
    permits = create_partitions_permits(image, request)
    kept, refused = split_create_partitions(request, admit_all(permits, quota, now_ms()))
    response = CreatePartitionsResponse() if refused and not kept.topics else await run(kept)
    assert isinstance(response, CreatePartitionsResponse)
    quota.give_back(failed_keys((r.name, r.error_code) for r in response.results), now_ms())
    response.results.extend(refused)
    return response
