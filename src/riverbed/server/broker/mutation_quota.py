"""Controller mutation quotas (KIP-599) on CreateTopics, CreatePartitions and DeleteTopics.

Kafka's ControllerApis gives each of these requests a quota of the sender (principal,
client id): strict from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3, whose
clients know THROTTLING_QUOTA_EXCEEDED; permissive below ("older versions are throttled
instead"). The controller applies it per topic once the topic passed validation
(``context.applyPartitionChangeQuota(numPartitions)``): a new topic's partitions, a
deleted topic's partitions, the partitions CreatePartitions adds. A refused topic gets
THROTTLING_QUOTA_EXCEEDED; the response carries the quota's throttle time
(``sendResponseMaybeThrottleWithControllerQuota``: the larger of it and the request-time
throttle), and the connection is muted for it.

riverbed's forwarded metadata writes carry no principal, so the quota is applied where
the request arrives, before it is forwarded (the place Kafka's ZooKeeper-mode brokers
applied it): the permits of each topic are taken from this broker's image, a topic the
controller will refuse anyway (unknown, already existing, no increase) takes no permits,
and the permits of a topic the controller then refused are given back, so that, as in
Kafka, only mutations that happen are counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
)
from riverbed.security.client_quotas import QuotaBook
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
