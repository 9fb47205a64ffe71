"""`riverbed leaders elect --preferred|--unclean [--topic T [--partition P]]`: ElectLeaders.

As Kafka's ``kafka-leader-election.sh``: PREFERRED moves leadership back to each partition's
first replica when it is in the ISR; UNCLEAN elects any live replica for a partition that
has no leader (accepting the loss of what only the old ISR held). Without ``--topic`` every
partition of the cluster is asked. Prints one row per partition: the outcome (``elected``,
or the Kafka error such as ELECTION_NOT_NEEDED or PREFERRED_LEADER_NOT_AVAILABLE).
"""

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
    parser = verb_parser(subparsers, "leaders", "partition leader elections")
    sub = parser.add_subparsers(dest="leaders_command", metavar="SUBCOMMAND")
    elect = verb_parser(sub, "elect", "elect preferred (or, if leaderless, any live) leaders")
    kind = elect.add_mutually_exclusive_group(required=True)
    kind.add_argument("--preferred", action="store_true", help="the first replica, if in sync")
    kind.add_argument("--unclean", action="store_true", help="any live replica (data loss!)")
    elect.add_argument("--topic", help="only this topic (default: every partition)")
    elect.add_argument("--partition", type=int, help="only this partition of --topic")
    add_bootstrap(elect)
    add_json(elect)
    elect.set_defaults(func=run_guarded(elect_cmd))


def elect_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType, TopicPartition

    if args.partition is not None and not args.topic:
        raise CliError("--partition needs --topic")
    admin = admin_client(args)
    partitions: list[Any] | None = None
    if args.topic:
        if args.partition is not None:
            indexes = [args.partition]
        else:
            from riverbed.cli.partitions import current_assignment

            indexes = [p for _, p, _ in current_assignment(args, [args.topic])]
        partitions = [TopicPartition(args.topic, i) for i in indexes]
    kind = ElectionType.UNCLEAN if args.unclean else ElectionType.PREFERRED
    try:
        results = admin.elect_leaders(kind, partitions).result(ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise CliError(f"ElectLeaders failed: {kafka_error_text(exc)}") from None
    rows = []
    failed = 0
    for tp, outcome in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        text = "elected" if outcome is None else _outcome_text(outcome)
        failed += outcome is not None and "ELECTION_NOT_NEEDED" not in text
        rows.append({"topic": tp.topic, "partition": tp.partition, "result": text})
    if args.json:
        print_json(rows)
        return 1 if failed else 0
    if all(r["result"].startswith("ELECTION_NOT_NEEDED") for r in rows):
        # Kafka's tool says so too ("Valid replica already elected for partitions")
        led_by = "its preferred replica" if kind == ElectionType.PREFERRED else "a leader"
        print(f"nothing to elect: every partition asked is led by {led_by}")
        return 0
    print_table(
        "leader election",
        ["topic", "partition", "result"],
        [(r["topic"], r["partition"], r["result"]) for r in rows],
    )
    return 1 if failed else 0


def _outcome_text(outcome: Any) -> str:
    """`NAME: message` for a partition's KafkaError (or a KafkaException carrying one)."""
    err = outcome.args[0] if isinstance(outcome, Exception) and outcome.args else outcome
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(err)
