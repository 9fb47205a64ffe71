"""`riverbed storage format|random-uuid|info`, like kafka-storage."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from riverbed.cli.common import add_json, load_server_config, print_json, print_table, verb_parser


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "storage", "format and inspect log directories")
    sub = parser.add_subparsers(dest="storage_command", metavar="SUBCOMMAND")

    fmt = verb_parser(sub, "format", "write meta.properties into every log directory")
    fmt.add_argument("--config", "-c", required=True, metavar="FILE", help="server.properties")
    fmt.add_argument(
        "--cluster-id", "-t", metavar="ID", help="cluster id (default: a new random one)"
    )
    fmt.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server config key=value on top of --config, repeatable",
    )
    fmt.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="skip directories that are already formatted instead of failing",
    )
    fmt.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="CREDENTIAL",
        help="a SCRAM user the new cluster starts with (KIP-900): "
        "'SCRAM-SHA-256=[name=admin,password=admin-secret]'",
    )
    add_json(fmt)
    fmt.set_defaults(func=format_cmd)

    rnd = verb_parser(sub, "random-uuid", "print a new random cluster id")
    add_json(rnd)
    rnd.set_defaults(func=random_uuid_cmd)

    dump = verb_parser(
        sub, "dump-metadata", "print the cluster metadata records (snapshot + log), read-only"
    )
    dump.add_argument("--config", "-c", metavar="FILE", help="server.properties")
    dump.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server config key=value on top of --config, repeatable",
    )
    dump.add_argument("--skip-snapshot", action="store_true", help="only the log segments")
    dump.add_argument("--max-records", type=int, help="stop after this many records")
    dump.add_argument("--json", action="store_true", help="one JSON object per record")
    dump.set_defaults(func=dump_metadata_cmd)

    info = verb_parser(sub, "info", "show the format of each log directory")
    info.add_argument("--config", "-c", metavar="FILE", help="server.properties")
    info.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server config key=value on top of --config, repeatable",
    )
    add_json(info)
    info.set_defaults(func=info_cmd)


def dump_metadata_cmd(args: argparse.Namespace) -> int:
    from riverbed.protocol.exceptions import ProtocolError
    from riverbed.server.metadata_log import MetadataLogError, read_metadata_log

    config = load_server_config(args)
    if config is None:
        return 2
    count = 0
    try:
        for offset, record in read_metadata_log(
            config.metadata_log_dir, use_snapshot=not args.skip_snapshot
        ):
            fields = record.to_dict()
            if args.json:
                print(
                    json.dumps(
                        {"offset": offset, "type": type(record).__name__, **fields}, default=str
                    )
                )
            else:
                body = " ".join(f"{k}={v}" for k, v in fields.items())
                print(f"{offset}\t{type(record).__name__}\t{body}")
            count += 1
            if args.max_records is not None and count >= args.max_records:
                break
    except BrokenPipeError:
        raise  # the reader went away; main() ends quietly
    except (MetadataLogError, ProtocolError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def format_cmd(args: argparse.Namespace) -> int:
    from riverbed.metadata.storage_format import StorageFormatError, format_storage, random_uuid

    config = load_server_config(args)
    if config is None:
        return 2
    from riverbed.metadata.bootstrap_file import (
        BootstrapError,
        parse_add_scram,
        write_bootstrap_records,
    )

    cluster_id = args.cluster_id or random_uuid()
    try:
        scram = [parse_add_scram(text) for text in args.add_scram]
    except BootstrapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        dirs = format_storage(
            list(config.log_dirs),
            config.metadata_log_dir,
            config.node_id,
            cluster_id,
            ignore_formatted=args.ignore_formatted,
        )
        if scram:
            write_bootstrap_records(config.metadata_log_dir, scram)
    except (StorageFormatError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"cluster_id": cluster_id, "node_id": config.node_id, "formatted": dirs})
        return 0
    for d in dirs:
        print(f"Formatting {d} with cluster.id {cluster_id} and node.id {config.node_id}")
    if not dirs:
        print("All of the log directories are already formatted.")
    return 0


def random_uuid_cmd(args: argparse.Namespace) -> int:
    from riverbed.metadata.storage_format import random_uuid

    cluster_id = random_uuid()
    if args.json:
        print_json({"cluster_id": cluster_id})
    else:
        print(cluster_id)
    return 0


def info_cmd(args: argparse.Namespace) -> int:
    from riverbed.metadata.storage_format import StorageFormatError, read_meta_properties

    config = load_server_config(args)
    if config is None:
        return 2
    rows = []
    for d in dict.fromkeys([config.metadata_log_dir, *config.log_dirs]):
        try:
            meta = read_meta_properties(d)
        except StorageFormatError as exc:
            rows.append({"directory": d, "formatted": False, "error": str(exc)})
            continue
        rows.append(
            {
                "directory": d,
                "formatted": meta is not None,
                "cluster_id": meta.cluster_id if meta else None,
                "node_id": meta.node_id if meta else None,
                "directory_id": meta.directory_id if meta else None,
            }
        )
    if args.json:
        print_json(rows)
    else:
        print_table(
            "log directories",
            ["directory", "formatted", "cluster.id", "node.id"],
            [(r["directory"], r["formatted"], r.get("cluster_id"), r.get("node_id")) for r in rows],
        )
    return 0
