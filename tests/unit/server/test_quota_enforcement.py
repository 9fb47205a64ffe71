"""The broker's quota shell: a handler's time on the loop (not its waits) is what the
request-time quota counts; the throttle goes into throttle_time_ms; the books follow the
image's quotas."""

from __future__ import annotations

import asyncio
import time

import pytest

from riverbed.metadata.image import MetadataImage, client_quota_record, replay_all
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import ProduceResponse, SaslHandshakeResponse
from riverbed.security.client_quotas import QuotaWindows
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.broker.quota_enforcement import BrokerQuotas, run_timed, set_throttle_time
from riverbed.server.network import ChannelThrottle, RequestContext

BUSY_S = 0.05
SLEEP_S = 0.3


async def _busy_then_sleep() -> str:
    end = time.perf_counter() + BUSY_S
    while time.perf_counter() < end:
        pass
    await asyncio.sleep(SLEEP_S)
    return "done"


def test_run_timed_counts_the_steps_not_the_waits() -> None:
    result, spent_ns = asyncio.run(run_timed(_busy_then_sleep()))
    assert result == "done"
    assert BUSY_S * 1e9 <= spent_ns < (BUSY_S + SLEEP_S / 2) * 1e9


def test_run_timed_passes_cancellation_into_the_handler() -> None:
    seen: list[str] = []

    async def handler() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        task = asyncio.create_task(run_timed(handler()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_throttle_time_goes_into_responses_that_have_the_field() -> None:
    resp = ProduceResponse(responses=[])
    set_throttle_time(resp, 1234)
    assert resp.throttle_time_ms == 1234
    set_throttle_time(SaslHandshakeResponse(error_code=0, mechanisms=[]), 5)  # no field: no-op


def _ctx(client_id: str, user: str = "alice", size: int = 0) -> RequestContext:
    return RequestContext(
        header=RequestHeader(0, 9, 1, client_id),
        peer="127.0.0.1:1",
        listener_name="PLAINTEXT",
        connection_id=1,
        received_ms=0,
        principal=KafkaPrincipal("User", user),
        size_bytes=size,
        throttle=ChannelThrottle(),
    )


def test_produce_bytes_of_a_quota_client_are_throttled_others_not() -> None:
    entity = (("client-id", "slow"),)
    image = replay_all(
        MetadataImage.EMPTY, [client_quota_record(entity, "producer_byte_rate", 1000.0)]
    )
    quotas = BrokerQuotas(QuotaWindows())
    assert quotas.record_produce(image, _ctx("slow", size=50_000)) > 0
    assert quotas.record_produce(image, _ctx("fast", size=10**9)) == 0
    assert quotas.fetch_bytes_max(image, _ctx("slow")) is None  # no consumer quota
    # a removed quota stops the throttling (the books follow the image)
    image = replay_all(image, [client_quota_record(entity, "producer_byte_rate", None)])
    assert quotas.record_produce(image, _ctx("slow", size=50_000)) == 0


def test_a_nan_quota_in_the_log_throttles_nothing() -> None:
    """A NaN quota (accepted before the controller refused it) is no quota: Kafka's
    throttle for it is Math.round(NaN) = 0; it must not fail the client's requests."""
    nan = float("nan")
    image = replay_all(
        MetadataImage.EMPTY,
        [
            client_quota_record((("client-id", "c"),), key, nan)
            for key in ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
        ]
        + [client_quota_record((("ip", None),), "connection_creation_rate", nan)],
    )
    quotas = BrokerQuotas(QuotaWindows())
    assert quotas.record_produce(image, _ctx("c", size=50_000)) == 0
    assert quotas.fetch_bytes_max(image, _ctx("c")) is None
    assert quotas.record_fetch(image, _ctx("c"), 50_000) == 0
    assert quotas.record_request_time(image, _ctx("c"), 10**9) == 0
    assert quotas.connection_throttle_ms(image, "127.0.0.1") == 0


def test_a_throttled_fetch_is_taken_back() -> None:
    image = replay_all(
        MetadataImage.EMPTY,
        [client_quota_record((("user", None),), "consumer_byte_rate", 1000.0)],
    )
    quotas = BrokerQuotas(QuotaWindows())
    assert quotas.fetch_bytes_max(image, _ctx("c")) == 10_000
    assert quotas.record_fetch(image, _ctx("c"), 50_000) > 0
    # what the throttled fetch did not send is not held against the consumer
    assert quotas.record_fetch(image, _ctx("c"), 5_000) == 0


def test_a_fetch_throttled_by_its_request_time_is_taken_back_too() -> None:
    """KafkaApis.handleFetchRequest: the larger of the byte-rate and request throttles;
    either one > 0 unrecords the bytes (the fetch is answered empty)."""
    image = replay_all(
        MetadataImage.EMPTY,
        [client_quota_record((("user", None),), "consumer_byte_rate", 1000.0)],
    )
    quotas = BrokerQuotas(QuotaWindows())
    assert quotas.record_fetch(image, _ctx("c"), 5_000, request_throttle_ms=700) == 700
    # the 5,000 bytes not sent were taken back: 9,000 more still fit the window
    assert quotas.record_fetch(image, _ctx("c"), 9_000) == 0
    # no consumer quota: the request throttle alone decides
    assert quotas.record_fetch(MetadataImage.EMPTY, _ctx("c"), 10**9, 300) == 300


def test_the_clusters_own_write_txn_markers_are_exempt_unless_refused() -> None:
    """KafkaApis answers WriteTxnMarkers sendResponseExemptThrottle, but a refused one (a
    ClusterAuthorizationException) through handleError, which counts it."""
    image = replay_all(
        MetadataImage.EMPTY,
        [client_quota_record((("client-id", None),), "request_percentage", 1.0)],
    )
    quotas = BrokerQuotas(QuotaWindows())
    markers = _ctx("c")._replace(header=RequestHeader(27, 1, 1, "c"))
    assert not quotas.measures_request_time(image, markers)
    assert quotas.measures_request_time(image, markers, refused=True)
    assert quotas.measures_request_time(image, _ctx("c"))
    assert not quotas.measures_request_time(MetadataImage.EMPTY, _ctx("c"), refused=True)


def test_channel_throttle_waits_until_its_end() -> None:
    throttle = ChannelThrottle()

    async def main() -> float:
        throttle.throttle(100)
        start = time.monotonic()
        await throttle.wait()
        return time.monotonic() - start

    assert asyncio.run(main()) >= 0.09
