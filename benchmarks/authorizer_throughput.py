"""Produce throughput through a broker checking 10,000 unrelated ACLs, against a broker
without an authorizer, in one run (issue 20: "no measurable change in produce throughput").

    python -m benchmarks.authorizer_throughput [--acls 10000] [--records 20000] [--rounds 3]

Two brokers run side by side: one plain, one with Kafka's StandardAuthorizer and
``allow.everyone.if.no.acl.found=true`` (so the PLAINTEXT client, User:ANONYMOUS, may
create the ACLs: the cluster resource has none), ``--acls`` ACLs for other principals
(literal topic names and prefixes of many lengths, as `benchmarks.authorizer_bench` makes
them) and one ALLOW WRITE on the benchmark topic for User:ANONYMOUS, which is no super
user: every Produce request goes through the whole decision. confluent-kafka produces
``--records`` records of 1 KiB with acks=1 and small batches (linger.ms=0, 16 KiB: many
requests, so the per-request check weighs as much as it can). Rounds alternate between
the brokers, which goes first alternating too (so that running second is not counted as
the authorizer's cost); ``--control`` gives both brokers no authorizer
(an A/A run: what the method itself shows as a difference); printed: each round's MB/s and the broker's CPU time per MB (user + system:
less disturbed by other load than wall time), the medians and their ratios.
Nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from benchmarks.authorizer_bench import make_acls
from riverbed.testing.cluster import BrokerProcess

TOPIC = "bench-authz"
VALUE = b"x" * 1024


def _create_acls(bootstrap: str, count: int) -> int:
    """Create the ACLs; how many."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    bindings = [
        AclBinding(ResourceType(a.resource_type), a.resource_name,
                   ResourcePatternType(a.pattern_type), a.principal, a.host,
                   AclOperation(a.operation), AclPermissionType(a.permission_type))
        for a in make_acls(count, random.Random(7))  # other principals than the producer's
    ]  # fmt: skip
    bindings.append(AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL,
                               "User:ANONYMOUS", "*", AclOperation.WRITE,
                               AclPermissionType.ALLOW))  # fmt: skip
    for start in range(0, len(bindings), 1000):
        for future in admin.create_acls(bindings[start : start + 1000]).values():
            future.result(timeout=120)
    return len(bindings)


def _produce_mb_s(bootstrap: str, records: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": "0", "batch.size": "16384"}
    )
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(TOPIC, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    return records * len(VALUE) / 1e6 / (time.perf_counter() - started)


def _cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (user + system, /proc/<pid>/stat): unlike wall
    time, barely moved by other processes on a shared machine."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    parser = argparse.ArgumentParser()
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--control", action="store_true", help="A/A: no authorizer on either")
    args = parser.parse_args()
    authz = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    brokers = {
        "no authorizer": BrokerProcess(),
        f"{args.acls} ACLs": BrokerProcess(overrides={} if args.control else authz),
    }
    try:
        for broker in brokers.values():
            broker.start(timeout_s=120)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                f.result(timeout=60)
        if not args.control:
            created = _create_acls(brokers[f"{args.acls} ACLs"].bootstrap, args.acls)
            print(f"{created} ACLs created (the last for the producer)", flush=True)
        for broker in brokers.values():
            _produce_mb_s(broker.bootstrap, args.records // 10)  # warm-up, not counted
        mb_s: dict[str, list[float]] = {name: [] for name in brokers}
        cpu_ms: dict[str, list[float]] = {name: [] for name in brokers}
        mb = args.records * len(VALUE) / 1e6
        for round_no in range(args.rounds):
            pair = list(brokers.items())
            for name, broker in pair if round_no % 2 == 0 else pair[::-1]:
                assert broker.pid is not None
                cpu_before = _cpu_s(broker.pid)
                rate = _produce_mb_s(broker.bootstrap, args.records)
                per_mb = (_cpu_s(broker.pid) - cpu_before) * 1000 / mb
                mb_s[name].append(rate)
                cpu_ms[name].append(per_mb)
                print(f"round {round_no + 1} {name:14s} {rate:7.2f} MB/s  "
                      f"broker CPU {per_mb:6.1f} ms/MB", flush=True)  # fmt: skip
        rate_med = {name: statistics.median(v) for name, v in mb_s.items()}
        cpu_med = {name: statistics.median(v) for name, v in cpu_ms.items()}
        for name in brokers:
            print(f"median {name:14s} {rate_med[name]:7.2f} MB/s  "
                  f"broker CPU {cpu_med[name]:6.1f} ms/MB")  # fmt: skip
        base, checked = rate_med.values()
        cpu_base, cpu_checked = cpu_med.values()
        print(f"ratio ACLs / no authorizer: throughput {checked / base:.3f}, "
              f"broker CPU per MB {cpu_checked / cpu_base:.3f}")  # fmt: skip
    finally:
        for broker in brokers.values():
            broker.close()


if __name__ == "__main__":
    main()
