"""Produce through a broker checking 10,000 unrelated ACLs, against a broker without an
authorizer, in one run (issue 20: "no measurable change in produce throughput").

    python -m benchmarks.authorizer_throughput [--acls 10000] [--records 20000] [--rounds 4]
        [--control] [--slices N] [--sequential] [--hash-seeds A,B]

Two brokers run side by side: one plain, one with Kafka's StandardAuthorizer and
``allow.everyone.if.no.acl.found=true`` (so the PLAINTEXT client, User:ANONYMOUS, may
create the ACLs: the cluster resource has none), ``--acls`` ACLs for other principals
(literal topic names and prefixes of many lengths, as `benchmarks.authorizer_bench` makes
them) and one ALLOW WRITE on the benchmark topic for User:ANONYMOUS, which is no super
user: every Produce request goes through the whole decision. confluent-kafka produces
``--records`` records of 1 KiB with acks=1 and small batches of one size (15 records,
linger.ms=20 to fill them; ``--batch-records N`` other sizes: many requests, so the per-request check weighs as much as it
can, and as many to each broker, however fast it answers). ``--control`` gives both
brokers no authorizer (an A/A run: what the method itself shows as a difference).
``--acls 0``: the authorizer on, no ACL created at all (``allow.everyone.if.no.acl.found``
lets the producer write): what checking costs before any ACL exists. ``--hash-seeds A,B``:
the plain and the checked broker's ``PYTHONHASHSEED`` (default: random per process), so a
series of runs can vary or fix the dicts' and sets' layout on purpose.

The default method is `benchmarks.ab_brokers`'s (as `benchmarks.metrics_bench`): both
brokers pinned to one CPU and fed at once, the producer (on the other CPUs) alternating
message by message between them, each broker's CPU from /proc/<pid>/task/*/schedstat;
this machine's vCPUs each run at one of two speeds for seconds at a time, so a broker
measured alone costs 1x or 2x by its CPU's speed during its round (broker CPU per MB of
19-32 ms within one sequential run), while two brokers at once meet the same speed.
Printed per round and over all rounds: each broker's CPU per MB and the ratio ACLs / no
authorizer (> 1: the authorizer costs CPU; a CPU-bound broker's throughput scales with
its inverse), with a speed probe of each CPU. ``--slices N``: the brokers take a round's
records in N alternating slices instead (each alone on the CPU in its slice).
``--sequential``: the old way, each round one broker's records then the other's (which
goes first alternating), printed: MB/s and broker CPU per MB (/proc/<pid>/stat), their
medians and ratios. Nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.ab_brokers import (
    check_cpus,
    cpu_speed_ms,
    pin,
    produce,
    producers_off_broker_cpu,
    shared_round,
    speeds_text,
)
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


def _producer(bootstrap: str, batch_records: int = 15) -> Producer:
    """Batches of ``batch_records`` records always (linger.ms long enough to fill them): a
    broker answering slower would otherwise get fuller batches, fewer requests per MB and
    so less CPU per MB, whatever its work per request. The default, 15 (15 KiB: within
    batch.size's default 16 KiB), is the worst case for a per-request check."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": "20",
            "batch.size": str(max(16384, batch_records * BATCH_BYTES_PER_RECORD)),
            "batch.num.messages": batch_records,
        }
    )


#: A 1 KiB record's room in a batch (its value, key, headers and record overhead).
BATCH_BYTES_PER_RECORD = 1100
#: The largest ``--batch-records`` (a batch within the broker's message.max.bytes).
BATCH_RECORDS_MAX = 900


def _produce_mb_s(bootstrap: str, records: int, batch_records: int) -> float:
    producer = _producer(bootstrap, batch_records)
    started = time.perf_counter()
    for _ in range(records):
        produce(producer, TOPIC, VALUE)
    producer.flush(300)
    return records * len(VALUE) / 1e6 / (time.perf_counter() - started)


def _cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (user + system, /proc/<pid>/stat): unlike wall
    time, barely moved by other processes on a shared machine."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sequential_rounds(brokers: dict[str, BrokerProcess], args: argparse.Namespace) -> None:
    """--sequential: each round one broker's records, then the other's (which goes first
    alternating, so that running second is not counted as the authorizer's cost)."""
    mb_s: dict[str, list[float]] = {name: [] for name in brokers}
    cpu_ms: dict[str, list[float]] = {name: [] for name in brokers}
    mb = args.records * len(VALUE) / 1e6
    for round_no in range(args.rounds):
        pair = list(brokers.items())
        for name, broker in pair if round_no % 2 == 0 else pair[::-1]:
            assert broker.pid is not None
            cpu_before = _cpu_s(broker.pid)
            rate = _produce_mb_s(broker.bootstrap, args.records, args.batch_records)
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


def _shared_rounds(
    brokers: dict[str, BrokerProcess], cpus: list[int], args: argparse.Namespace
) -> None:
    """The default: `ab_brokers.shared_round` rounds, which broker the producer serves
    first alternating; each round's and the overall CPU ratio ACLs / no authorizer."""
    base, checked = brokers
    mb = args.records * len(VALUE) / 1e6
    cpu: dict[str, list[float]] = {name: [] for name in brokers}
    for round_no in range(args.rounds):
        order = list(brokers) if round_no % 2 == 0 else list(brokers)[::-1]
        producers = {name: _producer(brokers[name].bootstrap, args.batch_records) for name in order}
        for p in producers.values():
            p.produce(TOPIC, VALUE)  # metadata first
            assert p.flush(30) == 0
        speeds = cpu_speed_ms(cpus)
        pids = {name: brokers[name].pid for name in order}
        got = shared_round(pids, producers, TOPIC, VALUE, args.records, args.slices)
        for name in brokers:
            cpu[name].append(got[name][0])
        per_mb = {name: got[name][0] * 1000 / mb for name in brokers}
        print(
            f"round {round_no + 1} ({order[0]} first): broker CPU per MB"
            f" {base} {per_mb[base]:.2f} ms, {checked} {per_mb[checked]:.2f} ms"
            f" (ratio {per_mb[checked] / per_mb[base]:.3f}); "
            + ", ".join(f"{name} {mb / got[name][1]:.1f} MB/s" for name in brokers)
            + "; "
            + speeds_text(cpus, speeds),
            flush=True,
        )
    ratios = [b / a for a, b in zip(cpu[base], cpu[checked], strict=True)]
    total_mb = mb * args.rounds
    per_base, per_checked = (sum(cpu[name]) * 1000 / total_mb for name in brokers)
    print(
        f"broker CPU per MB over {args.rounds} rounds: {base} {per_base:.2f} ms,"
        f" {checked} {per_checked:.2f} ms; ratio {per_checked / per_base:.3f}"
        f" (per-round ratios: median {statistics.median(ratios):.3f},"
        f" min {min(ratios):.3f}, max {max(ratios):.3f});"
        f" CPU-bound throughput ratio {per_base / per_checked:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--batch-records",
        type=int,
        default=15,
        help="records per Produce request (15: the worst case for a per-request check)",
    )
    parser.add_argument("--control", action="store_true", help="A/A: no authorizer on either")
    parser.add_argument(
        "--hash-seeds", default="", help="PYTHONHASHSEED of the plain and the checked broker: A,B"
    )
    parser.add_argument(
        "--slices", type=int, default=0, help="a round's records in slices, in turn (0: at once)"
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="the old way: one broker's records, then the other's",
    )
    args = parser.parse_args()
    if not 1 <= args.batch_records <= BATCH_RECORDS_MAX:
        parser.error(f"--batch-records {args.batch_records}: 1 to {BATCH_RECORDS_MAX} expected")
    refused = None if args.sequential else check_cpus()
    if refused:
        parser.error(f"{refused}; --sequential runs anywhere")
    # before any client or broker: librdkafka's threads inherit it (the brokers are pinned)
    cpus = [] if args.sequential else producers_off_broker_cpu()
    authz = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    checked = "no authorizer 2" if args.control else f"{args.acls} ACLs"
    seeds = args.hash_seeds.split(",") if args.hash_seeds else []
    if seeds and (len(seeds) != 2 or not all(s.isdigit() for s in seeds)):
        parser.error(f"--hash-seeds {args.hash_seeds}: two seeds A,B (integers) expected")
    envs = [{"PYTHONHASHSEED": s} for s in seeds] or [{}, {}]
    brokers = {
        "no authorizer": BrokerProcess(env=envs[0]),
        checked: BrokerProcess(overrides={} if args.control else authz, env=envs[1]),
    }
    try:
        for broker in brokers.values():
            broker.start(timeout_s=120)
            if not args.sequential:
                pin(broker.pid)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                f.result(timeout=60)
        if not args.control and args.acls > 0:
            created = _create_acls(brokers[checked].bootstrap, args.acls)
            print(f"{created} ACLs created (the last for the producer)", flush=True)
        for broker in brokers.values():
            _produce_mb_s(
                broker.bootstrap, args.records // 10, args.batch_records
            )  # warm-up, not counted
        if args.sequential:
            _sequential_rounds(brokers, args)
        else:
            _shared_rounds(brokers, cpus, args)
    finally:
        for broker in brokers.values():
            broker.close()


if __name__ == "__main__":
    main()
