"""Metadata auto-creation through a node whose image lags the controller: kcat's producer
learned ``auto-kcat`` (1 partition) from one node, asked another whose replica had not
applied it yet, and was told UNKNOWN_TOPIC_OR_PARTITION, which librdkafka takes as
"partition count changed from 1 to 0" and fails its queued messages.

That node forwards the auto-creation and the controller answers TOPIC_ALREADY_EXISTS
(another node's Metadata created it a moment ago). The node now waits for its replica to
show the topic, as for one it created itself, and answers it with its partitions; if the
replica does not show it within the wait, LEADER_NOT_AVAILABLE without partitions (Kafka's
answer for a topic being created, which librdkafka ignores as temporary), never unknown.

The controller is the scripted fake listener of `test_forward_retries`; the node is
`QuorumMetadata` following it, behind the real Metadata handler."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.server.test_forward_retries import FakeController, Step, follower_of
from tests.unit.server.test_produce_record_errors import registered_image

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import MetadataImage, replay_all
from riverbed.metadata.recently_fenced import RecentlyFenced
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
)
from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.server.broker.auto_create import AUTO_CREATE_TOPICS_VERSION, AutoTopicCreations
from riverbed.server.broker.cluster_info import handle_metadata
from riverbed.server.forwarding import Origin
from riverbed.server.network import RequestContext

TOPIC = "auto-kcat"
#: seconds after the controller's answer at which the lagging replica applies the topic
APPLY_LAG_S = 0.2


def _images() -> tuple[MetadataImage, MetadataImage]:
    """This node's image without the topic, and with it (1 partition on broker 1)."""
    c = Controller(ControllerConfig(node_id=2))
    before = registered_image(c)
    CT = CreateTopicsRequest
    create = CT(
        topics=[CT.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)],
        timeout_ms=0,
        validate_only=False,
    )
    return before, replay_all(before, c.create_topics(before, create, 0).records)


async def _no_wait() -> None:
    return None


def _broker(quorum: Any) -> Any:
    """What the Metadata handler reads of a broker whose metadata is ``quorum``."""
    return SimpleNamespace(
        auto_topic_creations=AutoTopicCreations(quorum.auto_create_topic),
        metadata=quorum,
        authz=None,
        config=SimpleNamespace(auto_create_topics_enable=True, node_id=quorum.node_id),
        partitions=SimpleNamespace(settled=_no_wait),
        cluster_id="c",
        clock=SimpleNamespace(now_ms=lambda: 0),
        recently_fenced=RecentlyFenced(0),
    )


def ask_lagging_node(
    script: list[Step], applied_after_s: float | None
) -> MetadataResponse.MetadataResponseTopic:
    """A producer's Metadata (auto-creation allowed) to a node without the topic yet; its
    replica applies the topic ``applied_after_s`` after the controller answered (None:
    not during the request)."""
    (topic,), _ = ask_lagging_node_at_once(script, applied_after_s, 1)
    return topic


def ask_lagging_node_at_once(
    script: list[Step], applied_after_s: float | None, producers: int
) -> tuple[list[MetadataResponse.MetadataResponseTopic], int]:
    """``producers`` such Metadata requests at once; their answers for the topic and the
    number of requests the controller received."""
    before, after = _images()

    async def main() -> Any:
        fake = FakeController(script)
        quorum = follower_of(await fake.start(), before)
        broker = _broker(quorum)

        async def lagging_apply() -> None:
            while not fake.seen:
                await asyncio.sleep(0.01)
            if applied_after_s is not None:
                await asyncio.sleep(applied_after_s)
                quorum.service.image = quorum.image = after  # published, and mirrored
                quorum._image_changed.set()

        header = RequestHeader(int(ApiKey.METADATA), 12, 7, "kcat")
        ctx = RequestContext(header, "127.0.0.1:5000", "PLAINTEXT", 1, 0, ANONYMOUS)
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
            allow_auto_topic_creation=True,
        )
        applier = asyncio.create_task(lagging_apply())
        asks = [handle_metadata(broker, ctx, request) for _ in range(producers)]
        try:
            return await asyncio.wait_for(asyncio.gather(*asks), 20), len(fake.seen)
        finally:
            applier.cancel()
            await fake.close()

    responses, seen = asyncio.run(main())
    topics = [t for r in responses for t in r.topics]
    assert [t.name for t in topics] == [TOPIC] * producers
    return topics, seen


def test_topic_another_node_just_created_is_answered_once_applied() -> None:
    """The controller says TOPIC_ALREADY_EXISTS; the replica applies the topic a moment
    later: the answer is the topic with its partition (before: UNKNOWN_TOPIC_OR_PARTITION
    right after the controller's answer)."""
    topic = ask_lagging_node([ErrorCode.TOPIC_ALREADY_EXISTS], APPLY_LAG_S)
    assert topic.error_code == 0
    assert [p.partition_index for p in topic.partitions] == [0]


def test_topic_the_controller_has_but_the_image_not_yet_is_leader_not_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replica does not show the topic within the wait: LEADER_NOT_AVAILABLE with no
    partitions (librdkafka ignores it), not UNKNOWN_TOPIC_OR_PARTITION (it would drop the
    partitions it knows)."""
    monkeypatch.setattr("riverbed.server.write_forwarding.FORWARD_APPLY_WAIT_S", 0.3)
    topic = ask_lagging_node([ErrorCode.TOPIC_ALREADY_EXISTS], None)
    assert (topic.error_code, topic.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])


def test_topic_the_controller_refuses_to_create_stays_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a topic the controller has is LEADER_NOT_AVAILABLE: one it refused (here no
    broker to place it on) is still UNKNOWN_TOPIC_OR_PARTITION."""
    monkeypatch.setattr("riverbed.server.write_forwarding.FORWARD_APPLY_WAIT_S", 0.3)
    topic = ask_lagging_node([ErrorCode.INVALID_REPLICATION_FACTOR], None)
    assert (topic.error_code, topic.partitions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


def test_producers_asking_at_once_cost_the_controller_one_creation() -> None:
    """Five producers ask a follower for the same missing topic at once: one CreateTopics
    reaches the controller (Kafka's AutoTopicCreationManager keeps the topics in flight and
    sends none twice), and every producer is answered with the created topic (before: one
    CreateTopics per Metadata request)."""
    script: list[Step] = [ErrorCode.NONE] * 5
    topics, seen = ask_lagging_node_at_once(script, APPLY_LAG_S, 5)
    assert seen == 1
    assert [(t.error_code, len(t.partitions)) for t in topics] == [(0, 1)] * 5


def test_auto_creations_in_flight_are_bounded() -> None:
    """At `inflight_max` topics in flight another topic's creation is not sent (the
    client asks again); the same topic joins its creation; a finished creation frees its
    place."""

    async def main() -> tuple[list[CreateTopicsResponse | None], list[str], int]:
        sent: list[str] = []
        release = asyncio.Event()

        async def create(name: str, origin: Origin | None) -> CreateTopicsResponse:
            sent.append(name)
            await release.wait()
            return CreateTopicsResponse(topics=[])

        creations = AutoTopicCreations(create, inflight_max=1)
        first = asyncio.ensure_future(creations.create("a"))
        joined = asyncio.ensure_future(creations.create("a"))
        while len(sent) < 1:  # both have started: "a" is in flight
            await asyncio.sleep(0)
        refused = await creations.create("b")
        release.set()
        answers = [await asyncio.wait_for(first, 10), await joined, refused]
        after = await creations.create("b")
        return [*answers, after], sent, creations.inflight

    answers, sent, inflight = asyncio.run(main())
    assert answers[0] is answers[1] and answers[0] is not None
    assert answers[2] is None and answers[3] is not None
    assert sent == ["a", "b"] and inflight == 0


def test_a_metadata_requests_missing_topics_are_created_at_once() -> None:
    """A Metadata request naming three missing topics asks for all three creations before
    any is answered, as Kafka sends them in one CreateTopics (before: one after another,
    each waiting for the controller's answer and this replica's apply)."""
    from riverbed.server.broker.cluster_info import _auto_create

    names = ["m1", "m2", "m3"]

    async def main() -> set[str]:
        started: list[str] = []
        all_started = asyncio.Event()

        async def create(name: str, origin: Origin | None) -> CreateTopicsResponse:
            started.append(name)
            if len(started) == len(names):
                all_started.set()
            await all_started.wait()  # answered only once every creation was asked for
            R = CreateTopicsResponse.CreatableTopicResult
            return CreateTopicsResponse(topics=[R(name=name, error_code=0)])

        broker: Any = SimpleNamespace(auto_topic_creations=AutoTopicCreations(create))
        header = RequestHeader(int(ApiKey.METADATA), 12, 7, "c")
        ctx = RequestContext(header, "127.0.0.1:5000", "PLAINTEXT", 1, 0, ANONYMOUS)
        return await asyncio.wait_for(_auto_create(broker, ctx, names), 10)

    assert asyncio.run(main()) == set(names)


def test_auto_creation_is_the_asking_clients_mutation() -> None:
    """Kafka's KRaft broker sends a Metadata auto-creation to the controller in an
    Envelope with the asking client's principal and client id, at its latest CreateTopics
    version (strict): the controller counts it against that client's
    controller_mutation_rate and refuses it over the quota; the client is told the topic
    is unknown (it asks again later), its connection is not muted."""
    before, _ = _images()
    alice = KafkaPrincipal("User", "alice")

    async def main() -> tuple[MetadataResponse, list[Origin], list[Message]]:
        fake = FakeController([ErrorCode.THROTTLING_QUOTA_EXCEEDED])
        quorum = follower_of(await fake.start(), before)
        broker = _broker(quorum)
        header = RequestHeader(int(ApiKey.METADATA), 12, 7, "kcat")
        ctx = RequestContext(header, "127.0.0.1:5000", "PLAINTEXT", 1, 0, alice)
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
            allow_auto_topic_creation=True,
        )
        try:
            response = await asyncio.wait_for(handle_metadata(broker, ctx, request), 20)
        finally:
            await fake.close()
        return response, fake.origins, fake.seen

    response, origins, seen = asyncio.run(main())
    assert origins == [Origin(alice, "kcat", AUTO_CREATE_TOPICS_VERSION, "127.0.0.1")]
    assert AUTO_CREATE_TOPICS_VERSION >= 6  # strict
    assert [type(m) for m in seen] == [CreateTopicsRequest]
    assert [(t.name, t.error_code) for t in response.topics] == [
        (TOPIC, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert response.throttle_time_ms == 0
