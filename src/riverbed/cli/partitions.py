"""`riverbed partitions reassign`: move replicas between brokers (kafka-reassign-partitions).

Plans are Kafka's JSON, so plans written for ``kafka-reassign-partitions.sh`` work::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: prints the current
  assignment (keep it to roll back) and a proposed one spreading each partition's replicas
  over the listed brokers (replication factor kept, leaders rotated);
- ``--execute --reassignment-json-file F``: starts the moves (AlterPartitionReassignments);
  new replicas catch up, join the ISR, then the old ones are removed and their logs deleted;
- ``--verify --reassignment-json-file F``: per partition: complete, in progress, or not
  started / failed (replicas differ from the plan and no move is listed);
- ``--cancel --reassignment-json-file F``: cancels the listed moves (the original replicas
  are restored).

``--wait`` (with --execute or --verify) polls until every move of the plan is complete, up to
``--wait-timeout-s``, with a progress bar (partitions complete of the plan) on a terminal.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
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
    progress_bar,
    run_guarded,
    verb_parser,
)

PLAN_PARTITIONS_MAX = 100_000
#: Default bound of --wait, seconds.
REASSIGN_WAIT_S = 3600.0
#: Seconds between two polls of the moves' progress under --wait.
REASSIGN_POLL_S = 1.0


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "partitions", "partition replica assignments")
    sub = parser.add_subparsers(dest="partitions_command", metavar="SUBCOMMAND")
    ra = verb_parser(sub, "reassign", "generate, execute, verify or cancel a reassignment", __doc__)
    mode = ra.add_mutually_exclusive_group(required=True)
    modes = {
        "generate": "propose a plan moving --topics-to-move-json-file to --broker-list",
        "execute": "start the moves of the plan in --reassignment-json-file",
        "verify": "per partition of the plan: complete, in progress or not started",
        "cancel": "cancel the plan's moves (the original replicas stay)",
    }
    for name, what in modes.items():
        mode.add_argument(f"--{name}", action="store_true", help=what)
    ra.add_argument("--reassignment-json-file", type=Path, help="the plan (execute/verify/cancel)")
    ra.add_argument("--topics-to-move-json-file", type=Path, help="topics (generate)")
    ra.add_argument("--broker-list", help="target brokers, e.g. 1,2,3 (generate)")
    ra.add_argument(
        "--wait",
        action="store_true",
        help="with --execute/--verify: wait until every move is complete (progress bar)",
    )
    ra.add_argument(
        "--wait-timeout-s",
        type=float,
        default=REASSIGN_WAIT_S,
        help=f"how long --wait waits at most, seconds (default {REASSIGN_WAIT_S:.0f})",
    )
    add_bootstrap(ra)
    add_json(ra)
    ra.set_defaults(func=run_guarded(reassign_cmd))


def reassign_cmd(args: argparse.Namespace) -> int:
    if args.generate:
        return _generate(args)
    if args.reassignment_json_file is None:
        raise CliError("--reassignment-json-file is required with --execute/--verify/--cancel")
    plan = read_plan(args.reassignment_json_file)
    if args.execute:
        code = _alter(args, plan, cancel=False)
        return code if code or not args.wait or args.json else _verify(args, plan)
    if args.cancel:
        return _alter(args, plan, cancel=True)
    return _verify(args, plan)


def read_plan(path: Path) -> list[tuple[str, int, list[int]]]:
    """(topic, partition, replicas) of a Kafka reassignment JSON file."""
    try:
        doc = json.loads(path.read_text())
        parts = doc["partitions"]
        plan = [
            (str(p["topic"]), int(p["partition"]), [int(r) for r in p["replicas"]]) for p in parts
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{path}: not a reassignment plan ({exc})") from None
    if not plan or len(plan) > PLAN_PARTITIONS_MAX:
        raise CliError(f"{path}: a plan lists 1 to {PLAN_PARTITIONS_MAX} partitions")
    return plan


def plan_json(assignment: list[tuple[str, int, list[int]]]) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in assignment],
    }


def propose(
    current: list[tuple[str, int, list[int]]], brokers: list[int]
) -> list[tuple[str, int, list[int]]]:
    """Each partition's replication factor over ``brokers``, rotating the first replica."""
    out = []
    for i, (topic, partition, replicas) in enumerate(current):
        rf = len(replicas)
        if rf > len(brokers):
            raise CliError(f"{topic}-{partition}: replication factor {rf} > {len(brokers)} brokers")
        out.append((topic, partition, [brokers[(i + k) % len(brokers)] for k in range(rf)]))
    return out


def current_assignment(
    args: argparse.Namespace, topics: list[str]
) -> list[tuple[str, int, list[int]]]:
    """(topic, partition, replicas) of every partition of ``topics``, from Metadata."""
    admin = admin_client(args)
    out = []
    for topic in topics:
        try:
            md = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics[topic]
        except Exception as exc:
            raise CliError(f"cannot describe {topic}: {kafka_error_text(exc)}") from None
        if md.error is not None:
            raise CliError(f"{topic}: {md.error}")
        out += [(topic, i, list(md.partitions[i].replicas)) for i in sorted(md.partitions)]
    return out


def _generate(args: argparse.Namespace) -> int:
    if args.topics_to_move_json_file is None or not args.broker_list:
        raise CliError("--generate needs --topics-to-move-json-file and --broker-list")
    try:
        doc = json.loads(args.topics_to_move_json_file.read_text())
        topics = [str(t["topic"]) for t in doc["topics"]]
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"bad --topics-to-move-json-file or --broker-list: {exc}") from None
    current = current_assignment(args, topics)
    proposed = propose(current, brokers)
    if args.json:
        print_json({"current": plan_json(current), "proposed": plan_json(proposed)})
        return 0
    print("Current partition replica assignment")
    print(json.dumps(plan_json(current)))
    print("\nProposed partition reassignment configuration")
    print(json.dumps(plan_json(proposed)))
    return 0


def _alter(args: argparse.Namespace, plan: list[tuple[str, int, list[int]]], cancel: bool) -> int:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import AlterPartitionReassignmentsRequest as R

    topics: dict[str, list[Any]] = {}
    for topic, partition, replicas in plan:
        part = R.ReassignablePartition(
            partition_index=partition, replicas=None if cancel else replicas
        )
        topics.setdefault(topic, []).append(part)
    request = R(
        timeout_ms=int(ADMIN_TIMEOUT_S * 1000),
        topics=[R.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )
    current = [] if cancel else current_assignment(args, sorted(topics))
    try:
        with WireClient(args.bootstrap_server) as client:
            reply: Any = client.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request)
    except WireError as exc:
        raise CliError(str(exc)) from None
    from riverbed.protocol.errors import ErrorCode

    if reply.error_code:
        raise CliError(f"AlterPartitionReassignments: {ErrorCode.of(reply.error_code).name}")
    rows = []
    for t in reply.responses:
        for p in t.partitions:
            result = "ok" if not p.error_code else ErrorCode.of(p.error_code).name
            rows.append({"topic": t.name, "partition": p.partition_index, "result": result})
    failed = any(r["result"] != "ok" for r in rows)
    if args.json:
        doc = {"rollback": plan_json(current) if current else None, "results": rows}
        if args.wait and not cancel and not failed:  # one JSON document: the moves' end too
            doc["verify"] = verify = _wait_complete(args, plan)
            failed = any(r["status"] != "complete" for r in verify)
        print_json(doc)
    else:
        if current:
            print("Current partition replica assignment (save it to roll back)")
            print(json.dumps(plan_json(current)))
        verb = "cancellation" if cancel else "reassignment"
        print_table(
            verb,
            ["topic", "partition", "result"],
            [(r["topic"], r["partition"], r["result"]) for r in rows],
        )
    return 1 if failed else 0


def _verify(args: argparse.Namespace, plan: list[tuple[str, int, list[int]]]) -> int:
    rows = _wait_complete(args, plan) if args.wait else _statuses(args, plan)
    if args.json:
        print_json(rows)
    else:
        print_table(
            "reassignment",
            ["topic", "partition", "status"],
            [(r["topic"], r["partition"], r["status"]) for r in rows],
        )
    return 1 if args.wait and any(r["status"] != "complete" for r in rows) else 0


def _wait_complete(
    args: argparse.Namespace, plan: list[tuple[str, int, list[int]]]
) -> list[dict[str, Any]]:
    """Poll the plan's statuses until every partition is complete or --wait-timeout-s has
    passed; the last statuses."""
    deadline = time.monotonic() + args.wait_timeout_s
    shown = 0
    with progress_bar(args.json, "reassigning partitions", len(plan)) as advance:
        while True:
            rows = _statuses(args, plan)
            done = sum(1 for r in rows if r["status"] == "complete")
            advance(done - shown)
            shown = done
            if done == len(plan) or time.monotonic() >= deadline:
                return rows
            time.sleep(REASSIGN_POLL_S)


def _statuses(
    args: argparse.Namespace, plan: list[tuple[str, int, list[int]]]
) -> list[dict[str, Any]]:
    """Per partition of the plan: complete, in progress, or not started or failed."""
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import ListPartitionReassignmentsRequest

    try:
        with WireClient(args.bootstrap_server) as client:
            reply: Any = client.request(
                ApiKey.LIST_PARTITION_REASSIGNMENTS, ListPartitionReassignmentsRequest(topics=None)
            )
    except WireError as exc:
        raise CliError(str(exc)) from None
    ongoing = {(t.name, p.partition_index) for t in reply.topics for p in t.partitions}
    actual = {(t, p): r for t, p, r in current_assignment(args, sorted({t for t, _, _ in plan}))}
    rows = []
    for topic, partition, replicas in plan:
        if (topic, partition) in ongoing:
            status = "in progress"
        elif actual.get((topic, partition)) == replicas:
            status = "complete"
        else:
            status = "not started or failed"
        rows.append({"topic": topic, "partition": partition, "status": status})
    return rows
