"""Produce throughput with client quotas configured but not binding, against no quota
(issue 20), as a ratio measured in the same run.

    python -m benchmarks.quota_bench [--records 30000] [--size 1024] [--rounds 5]

One broker; confluent-kafka produces ``--records`` records of ``--size`` bytes (acks=1)
per round, alternately without quotas and with a ``<default>`` user quota far above what
one client can reach (``producer_byte_rate`` 1 TB/s and ``request_percentage`` 1,000,000:
every produce is measured, its bytes and its handler time recorded, and the client is
served one request at a time as Kafka serves a connection under a quota, but nothing is
ever throttled). Prints MB/s of each round and the ratio of the medians. Nothing passes
or fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
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
