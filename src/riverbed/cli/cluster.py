"""`riverbed cluster describe`: cluster id, controller and brokers."""

from __future__ import annotations

import argparse
from typing import Any

from riverbed.cli.common import (
    ADMIN_TIMEOUT_S,
    CliError,
    add_bootstrap,
    add_json,
    admin_client,
    kafka_error_text,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
)


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "cluster", "inspect the cluster")
    sub = parser.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    desc = verb_parser(sub, "describe", "cluster id, controller and brokers")
    add_bootstrap(desc)
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))


def cluster_metadata(admin: Any, args: argparse.Namespace) -> Any:
    """The whole cluster's Metadata (every topic), or a CLI error naming the bootstrap."""
    try:
        return admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {kafka_error_text(exc)}") from None


def live_brokers(admin: Any, md: Any) -> list[dict[str, Any]]:
    """The registered, unfenced brokers (id, host, port, rack), by id."""
    brokers = [
        {"id": b.id, "host": b.host, "port": b.port, "rack": None}
        for b in sorted(md.brokers.values(), key=lambda b: b.id)
    ]
    try:
        # DescribeCluster adds racks; older brokers only answer Metadata.
        desc = admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_S).result()
        brokers = [
            {"id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
            for n in sorted(desc.nodes, key=lambda n: n.id)
        ]
    except Exception:
        pass
    return brokers


def describe_cmd(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    md = cluster_metadata(admin, args)
    brokers = live_brokers(admin, md)
    info = {
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "brokers": brokers,
        "topics": len(md.topics),
    }
    if args.json:
        print_json(info)
        return 0
    print(f"Cluster ID: {md.cluster_id}")
    print(f"Controller: {md.controller_id}")
    print(f"Topics: {len(md.topics)}")
    print_table(
        "brokers",
        ["id", "host", "port", "rack"],
        [(b["id"], b["host"], b["port"], b["rack"]) for b in brokers],
    )
    return 0
