"""`riverbed users scram set|delete|describe`: SCRAM credentials (as kafka-configs'
``--entity-type users --add-config 'SCRAM-SHA-256=[iterations=...,password=...]'``),
through confluent-kafka's AlterUserScramCredentials / DescribeUserScramCredentials.

- ``set USER --password PW [--mechanism SCRAM-SHA-512] [--iterations 4096]``: the client
  salts and hashes the password (a random salt); the broker stores only the derived keys;
- ``delete USER [--mechanism ...]``: removes that mechanism's credential;
- ``describe [USER ...]``: the mechanisms and iterations of the named users (all without).
Client security (SASL, TLS) from ``--command-config``.
"""

from __future__ import annotations

import argparse
from typing import Any

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_json,
    admin_client,
    kafka_error_text,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
    wait_futures,
)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: kafka-configs' default iterations (Kafka accepts 4096..16384)
DEFAULT_ITERATIONS = 4096


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "users", "manage users' SASL credentials")
    kinds = parser.add_subparsers(dest="users_kind", metavar="KIND")
    scram = verb_parser(kinds, "scram", "SCRAM credentials (set, delete, describe)")
    sub = scram.add_subparsers(dest="scram_command", metavar="SUBCOMMAND")
    p = verb_parser(sub, "set", "create or replace a user's SCRAM credential")
    p.add_argument("user", help="the user name")
    p.add_argument("--password", required=True, help="the user's password")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, help="4096..16384")
    _common(p, set_cmd)
    p = verb_parser(sub, "delete", "delete a user's SCRAM credential")
    p.add_argument("user", help="the user name")
    _common(p, delete_cmd)
    p = verb_parser(sub, "describe", "list SCRAM credentials (mechanisms, iterations)")
    p.add_argument("users", nargs="*", metavar="USER", help="users to describe (default: all)")
    _common(p, describe_cmd, mechanism=False)


def _common(p: argparse.ArgumentParser, func: Any, mechanism: bool = True) -> None:
    add_bootstrap(p)
    add_json(p)
    if mechanism:
        p.add_argument(
            "--mechanism",
            type=str.upper,
            choices=MECHANISMS,
            default="SCRAM-SHA-512",
            help="SCRAM-SHA-256 or SCRAM-SHA-512 (default)",
        )
    p.set_defaults(func=run_guarded(func))


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin._scram import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def _alter(args: argparse.Namespace, alteration: Any, what: str) -> int:
    admin = admin_client(args)  # held while waiting: a collected client fails its futures
    result = wait_futures(admin.alter_user_scram_credentials([alteration]))[args.user]
    error = kafka_error_text(result) if isinstance(result, BaseException) else None
    if args.json:
        print_json({"user": args.user, "mechanism": args.mechanism, "error": error})
        return 0 if error is None else 1
    if error is not None:
        raise CliError(f"cannot {what} the {args.mechanism} credential of {args.user}: {error}")
    print(f"{what.capitalize()} the {args.mechanism} credential of user {args.user}.")
    return 0


def set_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka.admin._scram import ScramCredentialInfo, UserScramCredentialUpsertion

    info = ScramCredentialInfo(_mechanism(args.mechanism), args.iterations)
    upsertion = UserScramCredentialUpsertion(args.user, info, args.password.encode())
    return _alter(args, upsertion, "set")


def delete_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka.admin._scram import UserScramCredentialDeletion

    return _alter(
        args, UserScramCredentialDeletion(args.user, _mechanism(args.mechanism)), "delete"
    )


def describe_cmd(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    if args.users:
        results = wait_futures(admin.describe_user_scram_credentials(args.users))
    else:
        (found,) = wait_futures({None: admin.describe_user_scram_credentials()}).values()
        if isinstance(found, BaseException):
            raise CliError(f"cannot describe SCRAM credentials: {kafka_error_text(found)}")
        results = found
    rows: list[dict[str, Any]] = []
    for user in sorted(results):
        result = results[user]
        if isinstance(result, BaseException):
            rows.append({"user": user, "error": kafka_error_text(result), "credentials": []})
            continue
        creds = [
            {"mechanism": info.mechanism.name.replace("_", "-"), "iterations": info.iterations}
            for info in result.scram_credential_infos
        ]
        rows.append({"user": user, "error": None, "credentials": creds})
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no SCRAM credentials")
        return 0
    table = [
        (r["user"], c["mechanism"], c["iterations"], "") for r in rows for c in r["credentials"]
    ]
    table += [(r["user"], "", "", r["error"]) for r in rows if r["error"]]
    print_table(None, ["USER", "MECHANISM", "ITERATIONS", "ERROR"], table)
    return 0
