"""The `riverbed` command line: Kafka-style verbs (server, storage, topics, produce, ...).

Each verb lives in its own module `riverbed.cli.<verb>` with `register(subparsers)`, which
adds the verb's parser and sets `func=handler(args) -> int` on it.  To add a verb, write the
module and add its name to `VERBS`.  Heavy imports (the Kafka client, the server) happen
inside handlers so `riverbed --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from riverbed import __version__

#: Verb modules, in the order `riverbed --help` lists them.
VERBS: tuple[str, ...] = (
    "server",
    "storage",
    "topics",
    "configs",
    "produce",
    "consume",
    "cluster",
    "brokers",
    "bench",
    "pipeline",
    "quorum",
    "producers",
    "transactions",
    "groups",
    "leaders",
    "partitions",
    "dev",
    "acls",
    "console",
    "quotas",
    "users",
    "features",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="riverbed",
        description="riverbed: a Kafka-compatible streaming platform.",
        epilog="Run `riverbed COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"riverbed {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for verb in VERBS:
        module = importlib.import_module(f"riverbed.cli.{verb}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        # A verb without a sub-verb (e.g. `riverbed topics`) prints that verb's help.
        sub = getattr(args, "_parser", parser)
        sub.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`riverbed consume ... | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
