"""`riverbed brokers list`: the live brokers and the partitions each leads and hosts.

Kafka has no single tool for this (kafka-broker-api-versions lists brokers,
kafka-topics --describe their partitions); the counts come from one Metadata request:
for each broker, the partitions it leads, the replicas it holds, and how many of those
are out of the ISR (a broker that is catching up or lagging); and which one is the active
controller (the KRaft quorum's leader, from DescribeQuorum), if it is a broker.
"""

from __future__ import annotations

import argparse
from typing import Any

from riverbed.cli.cluster import cluster_metadata, live_brokers
from riverbed.cli.common import (
    add_bootstrap,
    add_json,
    admin_client,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
)
from riverbed.cli.quorum import quorum_leader


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "brokers", "list the live brokers and their partitions")
    sub = parser.add_subparsers(dest="brokers_command", metavar="SUBCOMMAND")
    lst = verb_parser(sub, "list", "each broker: address, rack, leaders, replicas, out of ISR")
    add_bootstrap(lst)
    add_json(lst)
    lst.set_defaults(func=run_guarded(list_cmd))


def partition_counts(md: Any) -> dict[int, dict[str, int]]:
    """Per broker id: partitions led, replicas held, replicas outside the ISR."""
    counts: dict[int, dict[str, int]] = {}

    def of(broker_id: int) -> dict[str, int]:
        return counts.setdefault(broker_id, {"leaders": 0, "replicas": 0, "out_of_isr": 0})

    for topic in md.topics.values():
        for p in topic.partitions.values():
            if p.leader >= 0:
                of(p.leader)["leaders"] += 1
            for replica in p.replicas:
                of(replica)["replicas"] += 1
                if replica not in p.isrs:
                    of(replica)["out_of_isr"] += 1
    return counts


def list_cmd(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    md = cluster_metadata(admin, args)
    counts = partition_counts(md)
    # Not md.controller_id: a KRaft broker names itself or another live broker there
    controller = quorum_leader(args.bootstrap_server)
    rows = []
    for b in live_brokers(admin, md):
        c = counts.get(b["id"], {"leaders": 0, "replicas": 0, "out_of_isr": 0})
        rows.append({**b, **c, "controller": b["id"] == controller})
    if args.json:
        print_json(rows)
        return 0
    print_table(
        "brokers",
        ["id", "host", "port", "rack", "leaders", "replicas", "out of ISR", "controller"],
        [
            (
                r["id"],
                r["host"],
                r["port"],
                r["rack"] or "-",
                r["leaders"],
                r["replicas"],
                r["out_of_isr"],
                "yes" if r["controller"] else "",
            )
            for r in rows
        ],
    )
    return 0
