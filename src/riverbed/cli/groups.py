"""`riverbed groups list|describe|delete|delete-offsets|reset-offsets`: consumer groups, as
kafka-consumer-groups does them.

- ``list [--state S ...]``: every group of the cluster (ListGroups to each broker);
- ``describe --group G [--members] [--state]``: per partition the committed offset, the
  log end offset and the lag, with the member that owns it (``--members``: one row per
  member with its assignment; ``--state``: coordinator, state, protocol, member count);
- ``delete --group G ...``: only Empty groups can be deleted (NON_EMPTY_GROUP otherwise);
- ``delete-offsets --group G (--topic T[:P,P] ... | --all-topics)``: removes the group's
  committed offsets of those partitions (OffsetDelete, kafka-consumer-groups'
  ``--delete-offsets``); refused per topic (GROUP_SUBSCRIBED_TO_TOPIC) while an active
  member subscribes to it, for the whole group when it does not exist;
- ``reset-offsets --group G (--topic T[:P,P] ... | --all-topics)`` with one of
  ``--to-earliest``, ``--to-latest``, ``--to-current``, ``--to-offset N``,
  ``--shift-by N``, ``--to-datetime 2024-01-01T00:00:00[.000][Z|+hh:mm]`` or
  ``--by-duration PT1H`` (ISO-8601, that long before now): prints the
  plan (``--dry-run``, the default) or commits it (``--execute``); the group must be
  inactive (Empty or Dead), as in Kafka. Offsets out of range are clamped to
  [log start, log end].

``--json`` prints the same data as one JSON document.
"""

from __future__ import annotations

import argparse
import datetime
import re
import time
from typing import Any

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_json,
    print_json,
    print_table,
    progress_bar,
    run_guarded,
    verb_parser,
)

_INACTIVE = ("Empty", "Dead")
#: Partitions per OffsetCommit of a reset (a reset over many partitions commits in steps,
#: each a bounded request, with a progress bar on a terminal).
RESET_COMMIT_PARTITIONS_MAX = 1000


def register(subparsers: Any) -> None:
    parser = verb_parser(
        subparsers, "groups", "list, describe, delete consumer groups; reset offsets"
    )
    sub = parser.add_subparsers(dest="groups_command", metavar="SUBCOMMAND")

    lst = verb_parser(sub, "list", "every consumer group of the cluster")
    add_bootstrap(lst)
    lst.add_argument(
        "--state", action="append", default=[], help="only groups in this state (repeatable)"
    )
    add_json(lst)
    lst.set_defaults(func=run_guarded(list_cmd))

    desc = verb_parser(sub, "describe", "offsets, log end offsets and lag per partition")
    add_bootstrap(desc)
    desc.add_argument("--group", required=True, action="append", help="repeatable")
    view = desc.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="the group's state only")
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))

    delete = verb_parser(sub, "delete", "delete empty groups and their committed offsets")
    add_bootstrap(delete)
    delete.add_argument("--group", required=True, action="append", help="repeatable")
    add_json(delete)
    delete.set_defaults(func=run_guarded(delete_cmd))

    drop = verb_parser(sub, "delete-offsets", "delete a group's committed offsets of partitions")
    add_bootstrap(drop)
    drop.add_argument("--group", required=True, help="the consumer group")
    _add_topic_choice(drop)
    add_json(drop)
    drop.set_defaults(func=run_guarded(delete_offsets_cmd))

    reset = verb_parser(sub, "reset-offsets", "move an inactive group's committed offsets")
    add_bootstrap(reset)
    reset.add_argument("--group", required=True, help="the consumer group")
    _add_topic_choice(reset)
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--to-earliest", action="store_true", help="reset to each partition's earliest offset"
    )
    how.add_argument(
        "--to-latest", action="store_true", help="reset to each partition's latest offset"
    )
    how.add_argument(
        "--to-current",
        action="store_true",
        help="reset to the group's committed offsets (no change)",
    )
    how.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    how.add_argument(
        "--shift-by", type=int, metavar="N", help="move the committed offsets by N (negative: back)"
    )
    how.add_argument(
        "--by-duration", metavar="PnDTnHnMnS", help="to the offsets of this long ago (ISO-8601)"
    )
    how.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm]",
        help="reset to the first offset at or after this time",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_json(reset)
    reset.set_defaults(func=run_guarded(reset_cmd))


def _add_topic_choice(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", help="TOPIC or TOPIC:P,P (repeatable)")
    which.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )


def _dash(value: Any) -> Any:
    return "-" if value is None else value


# ---------------------------------------------------------------------- list
def list_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli import group_admin

    groups = group_admin.list_groups(args.bootstrap_server, args.state or None)
    if args.json:
        print_json({"groups": groups})
        return 0
    if args.state:
        print_table(
            "consumer groups",
            ["GROUP", "STATE", "PROTOCOL TYPE", "GROUP TYPE"],
            [(g["group"], g["state"], g["protocol_type"], g["type"]) for g in groups],
        )
    else:
        for g in groups:
            print(g["group"])
    return 0


# ---------------------------------------------------------------------- describe
def describe_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli import group_admin

    described = [group_admin.describe(args.bootstrap_server, g) for g in args.group]
    if args.json:
        print_json({"groups": described})
        return 0
    for d in described:
        if args.state:
            _print_state(d)
        elif args.members:
            _print_members(d)
        elif not d["offsets"] and d["state"] in _INACTIVE:
            print(f"Consumer group '{d['group']}' does not exist or has no offsets.")
        else:
            _print_offsets(d)
    return 0


_MEMBER_COLUMNS = [
    "GROUP",
    "CONSUMER-ID",
    "GROUP-INSTANCE-ID",
    "HOST",
    "CLIENT-ID",
    "#PARTITIONS",
    "ASSIGNMENT",
]
_OFFSET_COLUMNS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


def _print_state(d: dict[str, Any]) -> None:
    print_table(
        f"group {d['group']}",
        ["GROUP", "COORDINATOR", "STATE", "PROTOCOL TYPE", "PROTOCOL", "#MEMBERS"],
        [
            (
                d["group"],
                d["coordinator"],
                d["state"],
                d["protocol_type"],
                d["protocol"],
                len(d["members"]),
            )
        ],
    )


def _print_members(d: dict[str, Any]) -> None:
    print_table(
        f"members of {d['group']}",
        _MEMBER_COLUMNS,
        [
            (
                d["group"],
                m["member_id"],
                _dash(m["group_instance_id"]),
                m["host"],
                m["client_id"],
                sum(len(ps) for ps in m["assignment"].values()),
                ", ".join(f"{t}({','.join(map(str, ps))})" for t, ps in m["assignment"].items()),
            )
            for m in d["members"]
        ],
    )


def _print_offsets(d: dict[str, Any]) -> None:
    print_table(
        f"group {d['group']} ({d['state']})",
        _OFFSET_COLUMNS,
        [
            (
                d["group"],
                r["topic"],
                r["partition"],
                _dash(r["current_offset"]),
                _dash(r["log_end_offset"]),
                _dash(r["lag"]),
                _dash(r["member_id"]),
                _dash(r["host"]),
                _dash(r["client_id"]),
            )
            for r in d["offsets"]
        ],
    )


# ---------------------------------------------------------------------- delete
def delete_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli import group_admin

    results = group_admin.delete_groups(args.bootstrap_server, args.group)
    if args.json:
        print_json(
            {
                "deleted": [g for g, e in results.items() if e is None],
                "errors": {g: e for g, e in results.items() if e is not None},
            }
        )
    else:
        for group, error in results.items():
            if error is None:
                print(f"Deletion of requested consumer group '{group}' was successful.")
            else:
                print(f"Deletion of requested consumer group '{group}' failed: {error}")
    return 0 if all(e is None for e in results.values()) else 1


# ---------------------------------------------------------------------- delete-offsets
def delete_offsets_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli import group_admin

    address = group_admin.coordinator(args.bootstrap_server, args.group)
    committed = group_admin.committed_offsets(address, args.group) if args.all_topics else {}
    targets = _targets(args, committed)
    group_error, results = (
        group_admin.delete_offsets(address, args.group, targets) if targets else (None, {})
    )
    rows = [{"topic": t, "partition": p, "error": e} for (t, p), e in sorted(results.items())]
    if args.json:
        print_json({"group": args.group, "error": group_error, "partitions": rows})
    elif group_error is not None:
        print(f"Error: Deletion of offsets failed due to: {group_error}")
    else:
        print_table(
            f"group {args.group}",
            ["TOPIC", "PARTITION", "STATUS"],
            [
                (r["topic"], r["partition"], "Successful" if r["error"] is None else r["error"])
                for r in rows
            ],
        )
    return 1 if group_error is not None or any(r["error"] for r in rows) else 0


# ---------------------------------------------------------------------- reset-offsets
def _parse_datetime(text: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm]"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool reads it
    return int(when.timestamp() * 1000)


_DURATION = re.compile(
    r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as kafka-consumer-groups takes it (``PnDTnHnMnS``), in ms."""
    m = _DURATION.match(text.strip())
    if m is None or text.strip().upper() in ("P", "PT"):
        raise CliError(f"--by-duration {text!r}: expected an ISO-8601 duration like PT1H30M")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def _targets(
    args: argparse.Namespace, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    from riverbed.cli import group_admin

    if args.all_topics:
        return sorted(committed)
    out: list[tuple[str, int]] = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                out += [(topic, int(p)) for p in parts.split(",") if p.strip()]
            except ValueError:
                raise CliError(f"--topic {spec!r}: partitions must be numbers") from None
        else:
            out += group_admin.topic_partitions(args.bootstrap_server, [topic])
    return sorted(set(out))


def plan_reset(
    args: argparse.Namespace, committed: dict[tuple[str, int], int], targets: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The new offset of every target partition, clamped to [log start, log end]."""
    from riverbed.cli import group_admin as ga

    boot = args.bootstrap_server
    earliest = ga.list_offsets(boot, targets, ga.EARLIEST)
    latest = ga.list_offsets(boot, targets, ga.LATEST)
    if args.to_earliest:
        wanted = dict(earliest)
    elif args.to_latest:
        wanted = dict(latest)
    elif args.to_datetime is not None or args.by_duration is not None:
        if args.to_datetime is not None:
            when = _parse_datetime(args.to_datetime)
        else:
            when = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        found = ga.list_offsets(boot, targets, when)
        wanted = {tp: (off if off >= 0 else latest[tp]) for tp, off in found.items()}
    elif args.to_offset is not None:
        wanted = {tp: args.to_offset for tp in targets}
    else:  # --to-current / --shift-by: from the committed offset (log end when none)
        shift = args.shift_by or 0
        wanted = {tp: committed.get(tp, latest[tp]) + shift for tp in targets}
    return {tp: min(max(off, earliest[tp]), latest[tp]) for tp, off in wanted.items()}


def _commit_in_steps(
    args: argparse.Namespace, address: str, plan: dict[tuple[str, int], int]
) -> dict[tuple[str, int], str | None]:
    """Commit ``plan`` RESET_COMMIT_PARTITIONS_MAX partitions at a time; errors by partition."""
    from riverbed.cli import group_admin

    items = sorted(plan.items())
    errors: dict[tuple[str, int], str | None] = {}
    with progress_bar(args.json, f"resetting {args.group}", len(items)) as advance:
        for start in range(0, len(items), RESET_COMMIT_PARTITIONS_MAX):
            step = dict(items[start : start + RESET_COMMIT_PARTITIONS_MAX])
            errors |= group_admin.commit_offsets(address, args.group, step)
            advance(len(step))
    return errors


def reset_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli import group_admin

    address = group_admin.coordinator(args.bootstrap_server, args.group)
    state = group_admin.describe_group(address, args.group).group_state
    if state not in _INACTIVE:
        raise CliError(
            f"Assignments can only be reset if the group '{args.group}' is inactive, "
            f"but the current state is {state}."
        )
    committed = group_admin.committed_offsets(address, args.group)
    targets = _targets(args, committed)
    plan = plan_reset(args, committed, targets)
    errors: dict[tuple[str, int], str | None] = {}
    if args.execute and plan:
        errors = _commit_in_steps(args, address, plan)
    rows = [
        {
            "topic": t,
            "partition": p,
            "new_offset": off,
            "previous_offset": committed.get((t, p)),
            "error": errors.get((t, p)),
        }
        for (t, p), off in sorted(plan.items())
    ]
    if args.json:
        print_json({"group": args.group, "executed": bool(args.execute), "partitions": rows})
    else:
        if not args.execute:
            print("(dry run: nothing committed; add --execute to commit these offsets)")
        print_table(
            f"group {args.group}",
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"] + (["ERROR"] if errors else []),
            [
                (args.group, r["topic"], r["partition"], r["new_offset"])
                + ((_dash(r["error"]),) if errors else ())
                for r in rows
            ],
        )
    return 1 if any(e is not None for e in errors.values()) else 0
