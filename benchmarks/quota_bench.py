"""Produce throughput with client quotas configured but not binding, against no quota
(issue 20), as a ratio measured in the same run.

    python -m benchmarks.quota_bench [--records 200000] [--size 1024] [--rounds 5]

One broker; confluent-kafka produces ``--records`` records of ``--size`` bytes (acks=1)
per round, alternately without quotas and with a ``<default>`` user quota far above what
one client can reach (``producer_byte_rate`` 1 TB/s and ``request_percentage`` 1,000,000:
every produce is measured, its bytes and its handler time recorded, but nothing is ever
throttled). Prints MB/s of each round and the ratio of the medians. Then, in this
process, the broker's quota bookkeeping per produce request (its bytes and handler time
recorded, the handler awaited through the step timer), the
figure a loaded machine does not blur. Nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time

from benchmarks.security_bench import produce_seconds
from riverbed.cli.main import main as cli
from riverbed.testing.cluster import BrokerProcess

NO_BIND = ["--add-config", "producer_byte_rate=1000000000000,request_percentage=1000000"]


def _produce_mb_per_s(bootstrap: str, topic: str, records: int, size: int) -> float:
    conf = {"bootstrap.servers": bootstrap}
    return records * size / 1e6 / produce_seconds(conf, topic, records, size)


def _quota(bootstrap: str, on: bool) -> None:
    change = NO_BIND if on else ["--delete-config", "producer_byte_rate,request_percentage"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(["quotas", "alter", "-b", bootstrap, "--user-defaults", *change]) == 0


def bookkeeping_us(requests: int) -> tuple[float, float]:
    """(µs per produce request of the quota bookkeeping, µs of a bare coroutine await):
    `record_produce`, `record_request_time` and `run_timed`."""
    import asyncio

    from riverbed.metadata.image import MetadataImage, client_quota_record, replay_all
    from riverbed.protocol.headers import RequestHeader
    from riverbed.security.client_quotas import QuotaWindows
    from riverbed.security.principal import KafkaPrincipal
    from riverbed.server.broker.quota_enforcement import BrokerQuotas, run_timed
    from riverbed.server.network import ChannelThrottle, RequestContext

    image = replay_all(
        MetadataImage.EMPTY,
        [
            client_quota_record((("user", None),), "producer_byte_rate", 1e12),
            client_quota_record((("user", None),), "request_percentage", 1e6),
        ],
    )
    quotas = BrokerQuotas(QuotaWindows())
    ctx = RequestContext(
        RequestHeader(0, 9, 1, "bench"),
        "127.0.0.1:1",
        "PLAINTEXT",
        1,
        0,
        KafkaPrincipal.user("alice"),
        size_bytes=16_500,
        throttle=ChannelThrottle(),
    )

    async def handler() -> None:
        return None

    async def with_quotas() -> None:
        for _ in range(requests):
            _, spent = await run_timed(handler())
            quotas.record_produce(image, ctx)
            quotas.record_request_time(image, ctx, spent)

    async def bare() -> None:
        for _ in range(requests):
            await handler()

    def best_us(fn: object) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            asyncio.run(fn())  # type: ignore[operator]
            best = min(best, time.perf_counter() - start)
        return best / requests * 1e6

    return best_us(with_quotas), best_us(bare)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bookkeeping-requests", type=int, default=50_000)
    args = parser.parse_args()
    quota_us, bare_us = bookkeeping_us(args.bookkeeping_requests)
    print(f"quota bookkeeping per produce request: {quota_us - bare_us:.2f} µs")
    proc = BrokerProcess(overrides={"num.partitions": "1"})
    proc.start()
    try:
        bootstrap = proc.bootstrap
        rates: dict[bool, list[float]] = {False: [], True: []}
        for i in range(args.rounds):
            for on in (False, True):
                if on:
                    _quota(bootstrap, True)
                rate = _produce_mb_per_s(bootstrap, f"bench-{i}-{on}", args.records, args.size)
                if on:
                    _quota(bootstrap, False)
                rates[on].append(rate)
                label = "quota (not binding)" if on else "no quota"
                print(f"round {i + 1} {label:20s} {rate:8.2f} MB/s")
        base, quota = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"median no quota {base:.2f} MB/s, quota {quota:.2f} MB/s")
        print(f"ratio quota / no quota: {quota / base:.3f}")
    finally:
        proc.close()


if __name__ == "__main__":
    main()
