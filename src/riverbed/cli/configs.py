"""`riverbed configs describe|alter`: topic and broker configs, like kafka-configs.

`describe` shows each config's value and where it comes from (DYNAMIC_TOPIC_CONFIG,
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, ...) and, with `--synonyms`, the chain of keys it
falls back to (topic key <- broker `log.*` key <- default).  Without `--all` only values
that are set somewhere (not defaults) are listed, as kafka-configs does.
"""

from __future__ import annotations

import argparse
from typing import Any

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_config_changes,
    add_json,
    admin_client,
    config_changes,
    kafka_error_text,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
    wait_futures,
)

ENTITY_TYPES = {"topics": "TOPIC", "brokers": "BROKER"}


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "configs", "describe and alter topic/broker configs")
    sub = parser.add_subparsers(dest="configs_command", metavar="SUBCOMMAND")

    desc = verb_parser(sub, "describe", "configs with their sources")
    add_bootstrap(desc)
    desc.add_argument(
        "--entity-type", required=True, choices=sorted(ENTITY_TYPES), help="topics or brokers"
    )
    _entity_args(desc)
    desc.add_argument("--all", action="store_true", help="include defaults")
    desc.add_argument("--synonyms", action="store_true", help="show each config's fallbacks")
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))

    alter = verb_parser(sub, "alter", "set or delete configs (incremental)")
    add_bootstrap(alter)
    alter.add_argument(
        "--entity-type", required=True, choices=sorted(ENTITY_TYPES), help="topics or brokers"
    )
    _entity_args(alter)
    add_config_changes(alter, "config")
    add_json(alter)
    alter.set_defaults(func=run_guarded(alter_cmd))


def _entity_args(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--entity-name", help="topic name or broker id")
    who.add_argument(
        "--entity-default",
        action="store_true",
        help="the cluster-wide default broker config (with --entity-type brokers)",
    )


def _check_entity(args: argparse.Namespace) -> None:
    if args.entity_default and args.entity_type != "brokers":
        raise CliError("--entity-default only applies to --entity-type brokers")
    if args.entity_default:
        args.entity_name = ""


#: DescribeConfigs resource types (Kafka's ConfigResource.Type ids).
_RESOURCE_TYPE_IDS = {"topics": 2, "brokers": 4}


def _wire_describe(args: argparse.Namespace) -> dict[str, Any]:
    """DescribeConfigs through riverbed's own client: for the cluster-default broker
    resource (librdkafka cannot address it) and for topics with ``--synonyms`` (librdkafka
    keys synonyms by name, so ``log.segment.bytes`` STATIC and DEFAULT would collapse)."""
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse

    DC = DescribeConfigsRequest
    req = DC(
        resources=[
            DC.DescribeConfigsResource(
                resource_type=_RESOURCE_TYPE_IDS[args.entity_type],
                resource_name=args.entity_name,
                configuration_keys=None,
            )
        ],
        include_synonyms=True,
    )
    try:
        with WireClient(args.bootstrap_server) as client:
            resp = client.request(ApiKey.DESCRIBE_CONFIGS, req)
    except WireError as exc:
        raise CliError(str(exc)) from None
    assert isinstance(resp, DescribeConfigsResponse)
    (result,) = resp.results
    if result.error_code:
        from riverbed.protocol.errors import ErrorCode

        what = (
            "the broker default"
            if args.entity_default
            else f"{args.entity_type} {args.entity_name}"
        )
        raise CliError(
            f"cannot describe {what}: {ErrorCode.of(result.error_code).name}: "
            f"{result.error_message}"
        )
    return {
        c.name: {
            "name": c.name,
            "value": c.value,
            "source": _source_name(c.config_source),
            "read_only": c.read_only,
            "sensitive": c.is_sensitive,
            "synonyms": [
                {"name": s.name, "value": s.value, "source": _source_name(s.source)}
                for s in c.synonyms
            ],
        }
        for c in result.configs
    }


def _wire_alter(args: argparse.Namespace, adds: dict[str, str], deletes: list[str]) -> None:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.metadata.config_control import OP_DELETE, OP_SET
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import (
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

    IA = IncrementalAlterConfigsRequest
    configs = [
        IA.AlterableConfig(name=k, config_operation=OP_SET, value=v) for k, v in adds.items()
    ]
    configs += [IA.AlterableConfig(name=k, config_operation=OP_DELETE, value=None) for k in deletes]
    req = IA(
        resources=[IA.AlterConfigsResource(resource_type=4, resource_name="", configs=configs)],
        validate_only=args.validate_only,
    )
    try:
        with WireClient(args.bootstrap_server) as client:
            resp = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, req)
    except WireError as exc:
        raise CliError(str(exc)) from None
    assert isinstance(resp, IncrementalAlterConfigsResponse)
    (result,) = resp.responses
    if result.error_code:
        from riverbed.protocol.errors import ErrorCode

        name = ErrorCode(result.error_code).name
        raise CliError(f"cannot alter the broker default: {name}: {result.error_message}")


def _resource(args: argparse.Namespace, **kw: Any) -> Any:
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    if not args.entity_name:
        # librdkafka cannot address the cluster-wide default broker resource ("").
        raise CliError("--entity-name must not be empty (a topic name or a broker id)")

    return ConfigResource(
        getattr(ResourceType, ENTITY_TYPES[args.entity_type]), args.entity_name, **kw
    )


def _source_name(source: int) -> str:
    from riverbed.metadata.config_defs import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def describe_cmd(args: argparse.Namespace) -> int:
    from riverbed.metadata.config_defs import ConfigSource

    _check_entity(args)
    if args.entity_default or (args.synonyms and args.entity_type == "topics"):
        found = _wire_describe(args)
    else:
        admin = admin_client(args)
        futures = admin.describe_configs([_resource(args)])
        (entries,) = wait_futures(futures).values()
        if isinstance(entries, Exception):
            raise CliError(
                f"cannot describe {args.entity_type} {args.entity_name}: "
                f"{kafka_error_text(entries)}"
            )
        found = {
            e.name: {
                "name": e.name,
                "value": None if e.is_sensitive else e.value,
                "source": _source_name(e.source),
                "read_only": e.is_read_only,
                "sensitive": e.is_sensitive,
                "synonyms": [
                    {"name": s.name, "value": s.value, "source": _source_name(s.source)}
                    for s in e.synonyms.values()
                ],
            }
            for e in entries.values()
        }
    rows = [
        found[name]
        for name in sorted(found)
        if args.all or found[name]["source"] != ConfigSource.DEFAULT_CONFIG.name
    ]
    if args.json:
        print_json(rows)
        return 0
    columns = ["name", "value", "source"] + (["synonyms"] if args.synonyms else [])
    print_table(
        f"configs of {args.entity_type[:-1]} {args.entity_name or '(cluster default)'}",
        columns,
        [
            (
                r["name"],
                "(sensitive)" if r["sensitive"] else r["value"],
                r["source"],
                *(
                    [", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in r["synonyms"])]
                    if args.synonyms
                    else []
                ),
            )
            for r in rows
        ],
    )
    return 0


def alter_cmd(args: argparse.Namespace) -> int:
    adds, deletes, entries = config_changes(args)
    _check_entity(args)
    summary = {
        "entity_type": args.entity_type,
        "entity_name": args.entity_name,
        "set": adds,
        "deleted": deletes,
        "altered": not args.validate_only,
    }
    if args.entity_default:
        _wire_alter(args, adds, deletes)
        if args.json:
            print_json(summary)
        else:
            print("Completed updating default config for brokers in the cluster.")
        return 0
    admin = admin_client(args)
    futures = admin.incremental_alter_configs(
        [_resource(args, incremental_configs=entries)], validate_only=args.validate_only
    )
    (res,) = wait_futures(futures).values()
    if isinstance(res, Exception):
        raise CliError(
            f"cannot alter {args.entity_type} {args.entity_name}: {kafka_error_text(res)}"
        )
    if args.json:
        print_json(summary)
    else:
        print(f"Completed updating config for {args.entity_type[:-1]} {args.entity_name}.")
    return 0
