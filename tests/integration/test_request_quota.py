"""Issue 20, the request-time quota (``request_percentage``, KIP-124) against a real
broker process, as Kafka 4.x enforces it:

- a Fetch whose client is over its request time (and within any byte rate) is answered
  as KafkaApis.handleFetchRequest answers any throttled fetch: FetchContext's
  ``getThrottledResponse``, no partitions at all, error NONE, session 0, the throttle in
  ``throttle_time_ms``, and the connection muted; a real consumer takes that answer as
  Kafka's does (KIP-219) and reads on;
- requests refused by the authorizer count against the quota too (Kafka answers them
  through RequestHandlerHelper.sendErrorResponseMaybeThrottle / sendResponseMaybeThrottle,
  which record the handler time), so a client hammering with refused requests is throttled.

The broker keeps 2 quota samples of 1 s (``quota.window.num=2``, as Kafka's quota tests).
Quotas are set by client id, by the PLAINTEXT listener's super user (User:ANONYMOUS).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from riverbed.cli.main import main
from riverbed.cli.wire import WireClient
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    FetchRequest,
    FetchResponse,
    Message,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from riverbed.server.client_login import ClientSecurity
from riverbed.testing.cluster import scaled_s
from riverbed.testing.secure import AUTHORIZER_OVERRIDES, SecureBroker, running_secure_broker

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
#: requests a test sends at most before its client must have been throttled
REQUESTS_MAX = 300
#: alice has no ACL: every request she makes that needs one is refused
ALICE = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", "alice", USERS["alice"])
#: a round trip this long is a muted connection's (a refusal is answered in ~1 ms)
MUTED_S = 0.25
#: records of 100 bytes the consumer test reads, ~10 per fetch: ~100 fetches
CONSUMED_RECORDS = 1000


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    overrides = {**AUTHORIZER_OVERRIDES, "quota.window.num": "2"}
    with running_secure_broker(
        tmp_path_factory.mktemp("request-quota"), USERS, {}, overrides
    ) as broker:
        yield broker


def _set_request_percentage(bootstrap: str, client_id: str, percent: float) -> None:
    config = f"request_percentage={percent}"
    assert (
        main(["quotas", "alter", "-b", bootstrap, "--client", client_id, "--add-config", config])
        == 0
    )


def _load(bootstrap: str, topic: str, count: int) -> None:
    # batches of 10 records (~1 KiB): a fetch of max_partition_fetch_bytes=1024 reads one
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 10})
    for _ in range(count):
        producer.produce(topic, os.urandom(100))
    assert producer.flush(scaled_s(30)) == 0


def _fetch(topic: str) -> FetchRequest:
    F = FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[
                    F.FetchPartition(
                        partition=0,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                        current_leader_epoch=-1,
                    )
                ],
            )
        ],
    )


def _until_throttled(client: WireClient, api: ApiKey, body: Message) -> tuple[Message, float]:
    """Send ``body`` until an answer carries a throttle: that answer and when the last
    request was sent (the throttle started after the broker got it)."""
    for _ in range(REQUESTS_MAX):
        sent = time.monotonic()
        response = client.request(api, body)
        if response.throttle_time_ms > 0:  # type: ignore[attr-defined]
            return response, sent
    raise AssertionError(f"{REQUESTS_MAX} requests of api {api.name} were never throttled")


def test_a_fetch_over_its_request_time_is_answered_empty_and_muted(
    secure: SecureBroker,
) -> None:
    """KafkaApis.handleFetchRequest: ``maxThrottleTimeMs = max(bandwidth, request)``;
    when > 0 the fetch bytes are unrecorded and the answer is
    ``fetchContext.getThrottledResponse(maxThrottleTimeMs)``: FetchResponse.of(NONE,
    throttle, INVALID_SESSION_ID, an empty partition map). No byte-rate quota is set here:
    the request time alone throttles, and the data is still not sent."""
    bootstrap = secure.bootstrap("PLAINTEXT")
    topic = secure.create_topics(["request-time-fetch"])[0]
    _load(bootstrap, topic, 10)
    _set_request_percentage(bootstrap, "busy-reader", 0.01)
    with WireClient(bootstrap, client_id="busy-reader") as reader:
        throttled, sent = _until_throttled(reader, ApiKey.FETCH, _fetch(topic))
        assert isinstance(throttled, FetchResponse)
        assert (throttled.error_code, throttled.session_id) == (0, 0)
        assert throttled.responses == []  # no partition, no records
        # muted: the next request is not handled before the throttle ends
        reader.request(ApiKey.FETCH, _fetch(topic))
        assert time.monotonic() - sent >= (throttled.throttle_time_ms - 1) / 1000
    with WireClient(bootstrap, client_id="other-reader") as other:  # not held to it
        answer = other.request(ApiKey.FETCH, _fetch(topic))
        assert isinstance(answer, FetchResponse) and answer.throttle_time_ms == 0
        assert answer.responses[0].partitions[0].records


def _throttled_ms(consumer: KafkaConsumer) -> float:
    """The largest throttle kafka-python was answered (its network metrics; it has no
    Java fetch-throttle-time-max)."""
    return max(g.get("throttle-time-max", 0) for g in consumer.metrics().values())


def test_a_consumer_over_its_request_time_reads_on_after_empty_answers(
    secure: SecureBroker,
) -> None:
    """kafka-python takes the empty throttled full fetch response as Kafka's consumer does
    (no data this time, the node paused for the throttle) and fetches the same position
    again. Held to 0.01% of a second of handler time it is throttled within a few
    requests; its quota then raised to 10%, it reads every record."""
    bootstrap = secure.bootstrap("PLAINTEXT")
    topic = secure.create_topics(["request-time-consumer"])[0]
    _load(bootstrap, topic, CONSUMED_RECORDS)
    _set_request_percentage(bootstrap, "busy-consumer", 0.01)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="busy-consumer",
        max_partition_fetch_bytes=1024,  # ~100 fetches
        fetch_max_wait_ms=10,
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        read = 0
        deadline = time.monotonic() + scaled_s(60)
        while _throttled_ms(consumer) == 0 and time.monotonic() < deadline:
            read += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        assert _throttled_ms(consumer) > 0
        _set_request_percentage(bootstrap, "busy-consumer", 10)
        while read < CONSUMED_RECORDS and time.monotonic() < deadline:
            read += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        assert read == CONSUMED_RECORDS
    finally:
        consumer.close()


def _as_alice(secure: SecureBroker, client_id: str) -> WireClient:
    _set_request_percentage(secure.bootstrap("PLAINTEXT"), client_id, 0.01)
    return WireClient(secure.bootstrap("SASL_PLAINTEXT"), client_id=client_id, security=ALICE)


def test_requests_refused_whole_count_against_the_request_quota(secure: SecureBroker) -> None:
    """DescribeAcls without DESCRIBE on the cluster: Kafka's handler throws
    ClusterAuthorizationException, answered by handleError ->
    sendErrorResponseMaybeThrottle, which records the request time: a client refused
    again and again is throttled (in the refusal's throttle_time_ms) and muted."""
    any_acl = DescribeAclsRequest(
        resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
    )
    with _as_alice(secure, "refused-whole") as alice:
        refused, sent = _until_throttled(alice, ApiKey.DESCRIBE_ACLS, any_acl)
        assert isinstance(refused, DescribeAclsResponse)
        assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        alice.request(ApiKey.DESCRIBE_ACLS, any_acl)
        assert time.monotonic() - sent >= (refused.throttle_time_ms - 1) / 1000


def test_requests_refused_item_by_item_count_against_the_request_quota(
    secure: SecureBroker,
) -> None:
    """CreateTopics of a topic alice may not create: Kafka answers the topic
    TOPIC_AUTHORIZATION_FAILED through sendResponseMaybeThrottle, recording the time."""
    C = CreateTopicsRequest
    create = C(
        topics=[C.CreatableTopic(name="not-alices", num_partitions=1, replication_factor=1)],
        timeout_ms=5000,
    )
    with _as_alice(secure, "refused-items") as alice:
        refused, _ = _until_throttled(alice, ApiKey.CREATE_TOPICS, create)
        assert isinstance(refused, CreateTopicsResponse)
        assert [t.error_code for t in refused.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]


def test_refused_write_txn_markers_count_though_the_clusters_own_do_not(
    secure: SecureBroker,
) -> None:
    """The cluster's own WriteTxnMarkers are answered sendResponseExemptThrottle, but a
    client's refused one is a ClusterAuthorizationException, answered by handleError
    with the request time recorded (``mayThrottle``). WriteTxnMarkersResponse has no
    throttle_time_ms: the throttle shows as the connection muted."""
    W = WriteTxnMarkersRequest
    markers = W(
        markers=[
            W.WritableTxnMarker(
                producer_id=1,
                producer_epoch=0,
                transaction_result=False,
                coordinator_epoch=0,
                topics=[W.WritableTxnMarkerTopic(name="any", partition_indexes=[0])],
            )
        ]
    )
    with _as_alice(secure, "refused-markers") as alice:
        # the first waits out any throttle of the connection's ApiVersions
        alice.request(ApiKey.WRITE_TXN_MARKERS, markers)
        for _ in range(REQUESTS_MAX):
            sent = time.monotonic()
            refused = alice.request(ApiKey.WRITE_TXN_MARKERS, markers)
            assert isinstance(refused, WriteTxnMarkersResponse)
            codes = {p.error_code for m in refused.markers for t in m.topics for p in t.partitions}
            assert codes == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
            if time.monotonic() - sent >= MUTED_S:
                break
        else:
            raise AssertionError(f"{REQUESTS_MAX} refused WriteTxnMarkers were never muted")
