"""Issue 20, controller mutation quotas (KIP-599): ``controller_mutation_rate`` on
CreateTopics, CreatePartitions and DeleteTopics, with real clients against a real broker.

kafka-python 3 sends CreateTopics v7, DeleteTopics v6 and CreatePartitions v3, where the
quota is strict (a topic over it is refused with THROTTLING_QUOTA_EXCEEDED);
confluent-kafka (librdkafka) sends CreateTopics v4, DeleteTopics v4 and CreatePartitions
v2, where it is permissive (accepted, the client throttled).

``controller.quota.window.num=1`` makes the token bucket's burst one second of the rate
(Kafka's default 11 would let a client take 11 seconds' worth at once). At 0.5 mutations/s
a topic of 8 partitions leaves the bucket 7.5 tokens short: 15 s before the client may
mutate again, longer than any of the steps below takes. A throttled connection is muted
for its throttle, so each step after a throttle uses a new client.

Also counted (Kafka's rule for each): a Metadata auto-creation, against the asking
client's quota (Kafka's broker forwards it in an Envelope with that client's principal and
client id, at CreateTopics' latest version: strict), and a CreateTopics sent straight to
a controller listener, against its sender's (ControllerApis' ``newQuotaFor(request)``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient, NewPartitions
from kafka.admin import NewTopic as KNewTopic

from riverbed.cli.main import main
from riverbed.cli.wire import WireClient
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from riverbed.testing.cluster import BrokerProcess, scaled_s

RATE = 0.5
THROTTLED = int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)


@pytest.fixture(scope="module")
def muted() -> Iterator[list[AdminClient]]:
    """confluent-kafka clients whose connections the broker muted: destroying one waits
    for the requests it sent meanwhile (until the throttle ends); they are let go after
    the broker stopped."""
    clients: list[AdminClient] = []
    yield clients
    clients.clear()


@pytest.fixture(scope="module")
def broker(muted: list[AdminClient]) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(overrides={"num.partitions": "1", "controller.quota.window.num": "1"})
    proc.start()
    try:
        for client_id in ("strict", "legacy", "auto", "direct"):
            args = [
                "quotas",
                "alter",
                "-b",
                proc.bootstrap,
                "--entity-type",
                "clients",
                "--entity-name",
                client_id,
                "--add-config",
                f"controller_mutation_rate={RATE}",
            ]
            assert main(args) == 0
        yield proc
    finally:
        proc.close()


def _kafka_python(bootstrap: str, client_id: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        request_timeout_ms=int(scaled_s(30) * 1000),
    )


def _codes(result: dict) -> dict[str, tuple[int, str | None]]:
    return {t["name"]: (t["error_code"], t["error_message"]) for t in result["topics"]}


def test_strict_versions_refuse_the_mutations_over_the_quota(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    admin = _kafka_python(bootstrap, "strict")
    try:
        # a full bucket (0.5 token) takes the first topic whole, 8 partitions
        first = admin.create_topics([KNewTopic("mq-a", 8, 1)], raise_errors=False)
        assert _codes(first) == {"mq-a": (0, None)}
        second = admin.create_topics(
            [KNewTopic("mq-b", 1, 1), KNewTopic("mq-a", 1, 1)], raise_errors=False
        )
    finally:
        admin.close()
    codes = _codes(second)
    assert codes["mq-b"] == (THROTTLED, "The throttling quota has been exceeded.")
    # an existing topic takes no permits: the controller's own answer
    assert codes["mq-a"][0] == ErrorCode.TOPIC_ALREADY_EXISTS

    admin = _kafka_python(bootstrap, "strict")
    try:
        grown = admin.create_partitions({"mq-a": NewPartitions(9)}, raise_errors=False)
    finally:
        admin.close()
    assert [(r.name, r.error_code) for r in grown.results] == [("mq-a", THROTTLED)]
    admin = _kafka_python(bootstrap, "strict")
    try:
        deleted = admin.delete_topics(["mq-a"], raise_errors=False)
    finally:
        admin.close()
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("mq-a", THROTTLED)]

    # the response's throttle_time_ms: 7.5 tokens short at 0.5/s, ~15 s less the time since
    with WireClient(bootstrap, client_id="strict") as wire:
        Topic = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(
            topics=[Topic(name="mq-d", num_partitions=1, replication_factor=1)],
            timeout_ms=int(scaled_s(30) * 1000),
        )
        answer = wire.request_at(ApiKey.CREATE_TOPICS, 7, request)
    assert isinstance(answer, CreateTopicsResponse)
    assert [t.error_code for t in answer.topics] == [THROTTLED]
    assert 1_000 < answer.throttle_time_ms <= 15_000

    # another client id has no quota: unaffected
    other = _kafka_python(bootstrap, "other")
    try:
        made = other.create_topics([KNewTopic("mq-c", 8, 1)], raise_errors=False)
        assert _codes(made) == {"mq-c": (0, None)}
        topics = other.list_topics()
    finally:
        other.close()
    assert "mq-a" in topics and "mq-b" not in topics and "mq-d" not in topics


def test_older_versions_are_accepted_and_throttled(
    broker: BrokerProcess, muted: list[AdminClient]
) -> None:
    throttles: list[int] = []

    def stats(stats_json: str) -> None:
        brokers = json.loads(stats_json)["brokers"].values()
        throttles.append(max((b["throttle"]["max"] for b in brokers), default=0))

    def admin(**extra: object) -> AdminClient:
        client = AdminClient(
            {"bootstrap.servers": broker.bootstrap, "client.id": "legacy", **extra}
        )
        muted.append(client)
        return client

    timeout = scaled_s(30)
    first = admin()
    first.create_topics([NewTopic("mq-l1", 8, 1)])["mq-l1"].result(timeout=timeout)
    emptied = time.monotonic()  # 7.5 tokens short: 15 s of refill at RATE
    # (each step on a new connection: the last one is muted for its throttle)
    # over the quota, yet created: CreateTopics v4 is permissive; the client is throttled
    second = admin(**{"statistics.interval.ms": 100, "stats_cb": stats})
    second.create_topics([NewTopic("mq-l2", 1, 1)])["mq-l2"].result(timeout=timeout)
    # what the bucket still lacked when the request came (a loaded machine is slower)
    owed_ms = (7.5 / RATE - (time.monotonic() - emptied)) * 1000
    deadline = time.monotonic() + scaled_s(5)
    while max(throttles, default=0) == 0 and time.monotonic() < deadline:
        second.poll(0.1)  # the stats callback reports the throttle
    assert owed_ms > 1_000, "the steps took longer than the bucket's refill"
    assert max(throttles, default=0) > min(5_000, owed_ms - 1_000)
    third = admin()
    third.delete_topics(["mq-l1"])["mq-l1"].result(timeout=timeout)
    # (listed by another client: "legacy"'s connection is muted again)
    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=timeout)
    assert "mq-l1" not in listed.topics and "mq-l2" in listed.topics


def _create(wire: WireClient, name: str, partitions: int) -> CreateTopicsResponse:
    Topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[Topic(name=name, num_partitions=partitions, replication_factor=1)],
        timeout_ms=int(scaled_s(30) * 1000),
    )
    answer = wire.request_at(ApiKey.CREATE_TOPICS, 7, request)
    assert isinstance(answer, CreateTopicsResponse)
    return answer


def _metadata(wire: WireClient, names: list[str] | None) -> MetadataResponse:
    topics = (
        None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    )
    answer = wire.request_at(
        ApiKey.METADATA, 12, MetadataRequest(topics=topics, allow_auto_topic_creation=True)
    )
    assert isinstance(answer, MetadataResponse)
    return answer


def test_auto_creation_counts_against_the_asking_clients_quota(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap, client_id="auto") as wire:
        # a full bucket takes 8 partitions whole: 7.5 tokens short, 15 s
        assert [t.error_code for t in _create(wire, "mq-auto-a", 8).topics] == [0]
    with WireClient(broker.bootstrap, client_id="auto") as wire:
        refused = _metadata(wire, ["mq-auto-b"])
    # not created: unknown to the client, which asks again later; not muted
    assert [(t.name, t.error_code) for t in refused.topics] == [
        ("mq-auto-b", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert refused.throttle_time_ms == 0
    with WireClient(broker.bootstrap, client_id="other") as wire:
        made = _metadata(wire, ["mq-auto-c"])  # another client id: no quota
        listed = {t.name for t in _metadata(wire, None).topics}
    assert [t.error_code for t in made.topics] in ([0], [ErrorCode.LEADER_NOT_AVAILABLE])
    assert "mq-auto-c" in listed and "mq-auto-b" not in listed


def test_create_topics_on_the_controller_listener_counts_against_the_quota(
    broker: BrokerProcess,
) -> None:
    controller = f"127.0.0.1:{broker.controller_port}"
    with WireClient(controller, client_id="direct") as wire:
        assert [t.error_code for t in _create(wire, "mq-direct-a", 8).topics] == [0]
    with WireClient(controller, client_id="direct") as wire:
        refused = _create(wire, "mq-direct-b", 1)
    assert [t.error_code for t in refused.topics] == [THROTTLED]
    assert 1_000 < refused.throttle_time_ms <= 15_000
    with WireClient(controller, client_id="other") as wire:
        assert [t.error_code for t in _create(wire, "mq-direct-c", 8).topics] == [0]
