"""`riverbed producers describe --topic T`: active producers per partition and the ledger.

Like ``kafka-transactions describe-producers``: DescribeProducers to each partition's
leader (found with Metadata), one row per active producer (id, epoch, last sequence, last
timestamp, coordinator epoch, open transaction start), and per partition riverbed's
producer-id ledger counts (the tagged field ``riverbed.server.broker.producers``
adds): ids in the ledger, sealed files, active filter fill, cache hit rate and
false-positive checks. ``--json`` prints everything as one document.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_json,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
)


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "producers", "idempotent producers and the producer-id ledger")
    sub = parser.add_subparsers(dest="producers_command", metavar="SUBCOMMAND")
    desc = verb_parser(sub, "describe", "active producers per partition and ledger counts")
    add_bootstrap(desc)
    desc.add_argument(
        "--topic", required=True, help="the topic whose partitions' producers are listed"
    )
    desc.add_argument("--partition", type=int, action="append", help="repeatable; default: all")
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))


def _leaders(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, str]]:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import MetadataRequest

    try:
        with WireClient(bootstrap) as client:
            md: Any = client.request(
                ApiKey.METADATA,
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                    allow_auto_topic_creation=False,
                ),
            )
    except WireError as exc:
        raise CliError(str(exc)) from None
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    (t,) = md.topics
    if t.error_code:
        raise CliError(f"topic {topic}: error code {t.error_code}")
    return {p.partition_index: p.leader_id for p in t.partitions}, brokers


def describe(bootstrap: str, topic: str, partitions: list[int] | None) -> list[dict[str, Any]]:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import DescribeProducersRequest
    from riverbed.server.broker.producers import LEDGER_STATS_TAG

    leaders, brokers = _leaders(bootstrap, topic)
    wanted = sorted(partitions) if partitions else sorted(leaders)
    by_leader: dict[int, list[int]] = {}
    for p in wanted:
        if p not in leaders:
            raise CliError(f"topic {topic} has no partition {p}")
        by_leader.setdefault(leaders[p], []).append(p)
    out: list[dict[str, Any]] = []
    for leader, parts in sorted(by_leader.items()):
        address = brokers.get(leader)
        if address is None:
            for p in parts:
                out.append({"partition": p, "error": "no leader", "producers": []})
            continue
        request = DescribeProducersRequest(
            topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=parts)]
        )
        try:
            with WireClient(address) as client:
                resp: Any = client.request(ApiKey.DESCRIBE_PRODUCERS, request)
        except WireError as exc:
            raise CliError(f"broker {leader} ({address}): {exc}") from None
        for part in resp.topics[0].partitions:
            stats = dict(part._unknown_tagged_fields or []).get(LEDGER_STATS_TAG)
            out.append(
                {
                    "partition": part.partition_index,
                    "leader": leader,
                    "error_code": part.error_code,
                    "producers": [
                        {
                            "producer_id": s.producer_id,
                            "producer_epoch": s.producer_epoch,
                            "last_sequence": s.last_sequence,
                            "last_timestamp": s.last_timestamp,
                            "coordinator_epoch": s.coordinator_epoch,
                            "current_txn_start_offset": s.current_txn_start_offset,
                        }
                        for s in part.active_producers
                    ],
                    "ledger": json.loads(stats) if stats else None,
                }
            )
    return sorted(out, key=lambda r: r["partition"])


def describe_cmd(args: argparse.Namespace) -> int:
    rows = describe(args.bootstrap_server, args.topic, args.partition)
    if args.json:
        print_json({"topic": args.topic, "partitions": rows})
        return 0
    print_table(
        f"producers of {args.topic}",
        ["partition", "producer id", "epoch", "last seq", "last timestamp", "txn start"],
        [
            (r["partition"], p["producer_id"], p["producer_epoch"], p["last_sequence"],
             p["last_timestamp"], p["current_txn_start_offset"])
            for r in rows
            for p in r["producers"]
        ],
    )  # fmt: skip
    print_table(
        "producer-id ledger",
        ["partition", "ids", "files", "filter fill", "cache hit rate", "false-positive checks"],
        [
            (r["partition"], led["ledger_entries"], led["files"], led["active_filter_fill"],
             led["cache_hit_rate"], f'{led["false_positive_checks"]}/{led["filter_checks"]}')
            for r in rows
            if (led := r.get("ledger"))
        ],
    )  # fmt: skip
    return 0
