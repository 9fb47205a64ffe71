"""`riverbed topics create|delete|list|describe|alter|alter-config`, like kafka-topics.

Talks to any Kafka-compatible broker with confluent-kafka's AdminClient.
"""

from __future__ import annotations

import argparse
from typing import Any

from riverbed.cli.common import (
    ADMIN_TIMEOUT_S,
    CliError,
    add_bootstrap,
    add_config_changes,
    add_json,
    admin_client,
    config_changes,
    kafka_error_text,
    parse_kv,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
    wait_futures,
)


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "topics", "create, delete, list, describe and alter topics")
    sub = parser.add_subparsers(dest="topics_command", metavar="SUBCOMMAND")
    _register_create(sub)
    _register_describe(sub)

    delete = verb_parser(sub, "delete", "delete topics")
    add_bootstrap(delete)
    delete.add_argument("--topic", action="append", required=True, help="repeatable")
    delete.add_argument(
        "--if-exists", action="store_true", help="no error when a topic does not exist"
    )
    add_json(delete)
    delete.set_defaults(func=run_guarded(delete_cmd))

    lst = verb_parser(sub, "list", "list topic names")
    add_bootstrap(lst)
    lst.add_argument(
        "--exclude-internal",
        action="store_true",
        help="leave out internal topics (__consumer_offsets, ...)",
    )
    add_json(lst)
    lst.set_defaults(func=run_guarded(list_cmd))

    alter = verb_parser(sub, "alter", "increase a topic's partition count")
    add_bootstrap(alter)
    alter.add_argument("--topic", required=True, help="the topic")
    alter.add_argument("--partitions", type=int, required=True, help="new total count")
    alter.add_argument(
        "--validate-only", action="store_true", help="check the request, change nothing"
    )
    add_json(alter)
    alter.set_defaults(func=run_guarded(alter_cmd))

    ac = verb_parser(sub, "alter-config", "set or remove topic configs (incremental)")
    add_bootstrap(ac)
    ac.add_argument("--topic", required=True, help="the topic")
    add_config_changes(ac, "topic config")
    add_json(ac)
    ac.set_defaults(func=run_guarded(alter_config_cmd))


def _register_create(sub: Any) -> None:
    create = verb_parser(sub, "create", "create a topic")
    add_bootstrap(create)
    create.add_argument("--topic", required=True, help="the topic")
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="default: default.replication.factor"
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config"
    )
    create.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="brokers per partition: partitions separated by ',', replicas by ':'",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="no error when the topic exists already"
    )
    create.add_argument("--validate-only", action="store_true", help="check, create nothing")
    add_json(create)
    create.set_defaults(func=run_guarded(create_cmd))


def _register_describe(sub: Any) -> None:
    desc = verb_parser(
        sub,
        "describe",
        "partitions: leader, leader epoch, replicas, ISR, adding/removing, each replica's lag",
    )
    add_bootstrap(desc)
    desc.add_argument("--topic", action="append", help="repeatable; default: all topics")
    desc.add_argument(
        "--exclude-internal",
        action="store_true",
        help="leave out internal topics (__consumer_offsets, ...)",
    )
    only = desc.add_mutually_exclusive_group()
    only.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions with ISR < replicas",
    )
    only.add_argument(
        "--unavailable-partitions", action="store_true", help="only partitions without a leader"
    )
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))


def parse_replica_assignment(text: str) -> list[list[int]]:
    out: list[list[int]] = []
    for part in text.split(","):
        try:
            out.append([int(b) for b in part.split(":")])
        except ValueError:
            raise CliError(
                f"bad --replica-assignment {text!r}: expected broker ids like 1:2,2:3"
            ) from None
    return out


def create_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    kwargs: dict[str, Any] = {"config": parse_kv(args.config, "--config")}
    if args.replica_assignment:
        if args.partitions != -1 or args.replication_factor != -1:
            # as kafka-topics: the assignment gives both counts
            raise CliError(
                "--replica-assignment cannot be used with --partitions or --replication-factor"
            )
        assignment = parse_replica_assignment(args.replica_assignment)
        # confluent-kafka refuses an assignment with the default count (-1)
        kwargs["num_partitions"] = len(assignment)
        kwargs["replica_assignment"] = assignment
    else:
        kwargs["num_partitions"] = args.partitions
        kwargs["replication_factor"] = args.replication_factor
    new = NewTopic(args.topic, **kwargs)
    admin = admin_client(args)
    result = wait_futures(
        admin.create_topics(
            [new], validate_only=args.validate_only, operation_timeout=ADMIN_TIMEOUT_S
        )
    )[args.topic]
    if isinstance(result, Exception):
        err = result.args[0] if result.args else None
        if (
            args.if_not_exists
            and err is not None
            and getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS
        ):
            return 0
        raise CliError(f"cannot create topic {args.topic}: {kafka_error_text(result)}")
    verb = "Validated" if args.validate_only else "Created"
    if args.json:
        print_json({"topic": args.topic, "created": not args.validate_only})
    else:
        print(f"{verb} topic {args.topic}.")
    return 0


def delete_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError

    admin = admin_client(args)
    results = wait_futures(admin.delete_topics(args.topic, operation_timeout=ADMIN_TIMEOUT_S))
    failed = 0
    out = []
    for topic, res in results.items():
        if isinstance(res, Exception):
            err = res.args[0] if res.args else None
            code = getattr(err, "code", lambda: None)()
            if args.if_exists and code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                out.append({"topic": topic, "deleted": False})
                continue
            failed += 1
            out.append({"topic": topic, "deleted": False, "error": kafka_error_text(res)})
            if not args.json:
                print(f"error: cannot delete topic {topic}: {kafka_error_text(res)}")
        else:
            out.append({"topic": topic, "deleted": True})
            if not args.json:
                print(f"Deleted topic {topic}.")
    if args.json:
        print_json(out)
    return 1 if failed else 0


def _metadata(args: argparse.Namespace) -> Any:
    admin = admin_client(args)
    try:
        return admin, admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {kafka_error_text(exc)}") from None


def _internal(name: str) -> bool:
    return name.startswith("__")


def list_cmd(args: argparse.Namespace) -> int:
    _admin, md = _metadata(args)
    names = sorted(n for n in md.topics if not (args.exclude_internal and _internal(n)))
    if args.json:
        print_json(names)
    else:
        for n in names:
            print(n)
    return 0


def _topic_configs(admin: Any, names: list[str]) -> dict[str, dict[str, str]]:
    """Non-default configs per topic (what kafka-topics --describe shows)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType  # type: ignore[attr-defined]

    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    out: dict[str, dict[str, str]] = {}
    for res, entries in wait_futures(admin.describe_configs(resources)).items():
        if isinstance(entries, Exception):
            continue
        out[res.name] = {
            e.name: e.value
            for e in entries.values()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        }
    return out


def _topic_ids(admin: Any, names: list[str]) -> dict[str, str]:
    """Topic ids in Kafka's base64url form (empty when the broker cannot say)."""
    import base64

    from confluent_kafka import TopicCollection

    if not names:
        return {}
    out: dict[str, str] = {}
    try:
        futures = admin.describe_topics(TopicCollection(names))
    except Exception:
        return out
    for name, desc in wait_futures(futures).items():
        if isinstance(desc, Exception) or desc.topic_id is None:
            continue
        # librdkafka prints ids in standard base64; Kafka's tools use the URL-safe form.
        raw = base64.b64decode(str(desc.topic_id) + "==")
        out[name] = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return out


def _replica_state(args: argparse.Namespace, names: list[str]) -> Any:
    """Leader epochs, ongoing moves and per-replica lag (empty if the wire client fails)."""
    from riverbed.cli.replica_state import ReplicaState, replica_state
    from riverbed.cli.wire import WireError

    try:
        return replica_state(args.bootstrap_server, names)
    except WireError:
        return ReplicaState()


def describe_cmd(args: argparse.Namespace) -> int:
    admin, md = _metadata(args)
    wanted = args.topic or sorted(md.topics)
    topics = []
    for name in wanted:
        if args.exclude_internal and _internal(name):
            continue
        tmd = md.topics.get(name)
        if tmd is None or (tmd.error is not None and not tmd.partitions):
            reason = kafka_error_text(Exception(tmd.error)) if tmd is not None else "unknown"
            raise CliError(f"topic {name} does not exist ({reason})")
        parts = [
            {
                "partition": p.id,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isrs),
            }
            for p in sorted(tmd.partitions.values(), key=lambda p: p.id)
        ]
        if args.under_replicated_partitions:
            parts = [p for p in parts if len(p["isr"]) < len(p["replicas"])]
        elif args.unavailable_partitions:
            parts = [p for p in parts if p["leader"] < 0]
        if parts or not (args.under_replicated_partitions or args.unavailable_partitions):
            topics.append({"topic": name, "partitions": parts})
    configs = _topic_configs(admin, [t["topic"] for t in topics])
    ids = _topic_ids(admin, [t["topic"] for t in topics])
    state = _replica_state(args, [t["topic"] for t in topics])
    for t in topics:
        t["topic_id"] = ids.get(t["topic"])
        t["configs"] = configs.get(t["topic"], {})
        for p in t["partitions"]:
            key = (t["topic"], p["partition"])
            p["leader_epoch"] = state.leader_epoch.get(key, -1)
            p["adding_replicas"] = state.adding.get(key, [])
            p["removing_replicas"] = state.removing.get(key, [])
            lags = state.lag.get(key, {})
            p["lag"] = {str(r): lags.get(r) for r in p["replicas"]}
    if args.json:
        print_json(topics)
        return 0
    for t in topics:
        cfg = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        print(
            f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\t"
            f"PartitionCount: {len(t['partitions'])}\t"
            f"ReplicationFactor: {len(t['partitions'][0]['replicas']) if t['partitions'] else 0}"
            f"\tConfigs: {cfg}"
        )
        print_table(
            None,
            ["partition", "leader", "epoch", "replicas", "isr", "adding", "removing", "lag"],
            [
                (
                    p["partition"],
                    p["leader"],
                    p["leader_epoch"],
                    ",".join(map(str, p["replicas"])),
                    ",".join(map(str, p["isr"])),
                    ",".join(map(str, p["adding_replicas"])),
                    ",".join(map(str, p["removing_replicas"])),
                    ",".join(f"{r}:{'?' if v is None else v}" for r, v in p["lag"].items()),
                )
                for p in t["partitions"]
            ],
        )
    return 0


def alter_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    admin = admin_client(args)
    res = wait_futures(
        admin.create_partitions(
            [NewPartitions(args.topic, args.partitions)], validate_only=args.validate_only
        )
    )[args.topic]
    if isinstance(res, Exception):
        raise CliError(f"cannot add partitions to {args.topic}: {kafka_error_text(res)}")
    if args.json:
        print_json(
            {"topic": args.topic, "partitions": args.partitions, "altered": not args.validate_only}
        )
    elif args.validate_only:
        print(f"Topic {args.topic} can have {args.partitions} partitions (validate only).")
    else:
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


def alter_config_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConfigResource,
        ResourceType,
    )

    adds, deletes, entries = config_changes(args)
    resource = ConfigResource(ResourceType.TOPIC, args.topic, incremental_configs=entries)
    admin = admin_client(args)
    res = next(
        iter(
            wait_futures(
                admin.incremental_alter_configs([resource], validate_only=args.validate_only)
            ).values()
        )
    )
    if isinstance(res, Exception):
        raise CliError(f"cannot alter configs of {args.topic}: {kafka_error_text(res)}")
    if args.json:
        print_json(
            {
                "topic": args.topic,
                "set": adds,
                "deleted": deletes,
                "altered": not args.validate_only,
            }
        )
    elif args.validate_only:
        print(f"Config changes for topic {args.topic} are valid (validate only).")
    else:
        print(f"Completed updating config for topic {args.topic}.")
    return 0
