"""`riverbed console [--bootstrap-server HOST:PORT] [--listen HOST:PORT]`: the web console.

Serves `riverbed.console` (cluster overview, topics, message browser with live tail,
consumer groups with lag and offset resets, transactions, ACLs and SCRAM users) on
``--listen`` (default 127.0.0.1:8080: loopback only, as the console has no login yet;
listening elsewhere is the operator's choice). It connects to any Kafka-compatible
cluster as an admin client with the settings of ``--command-config`` / ``-X``, as the
other verbs do. Port 0 binds a free port; the address is printed either way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

from riverbed.cli.common import CliError, add_bootstrap, client_config, run_guarded, verb_parser

#: Where the console listens without --listen.
DEFAULT_LISTEN = "127.0.0.1:8080"

EPILOG = """\
examples:
  riverbed console                                  # the embedded default at localhost:9092
  riverbed console -b broker1:9092 --listen 0.0.0.0:8080
  riverbed console -b broker1:9093 --command-config client.properties   # SASL / TLS
  riverbed console -b n1:9092 --metrics-url http://n1:9644/metrics --metrics-url http://n2:9644/metrics
"""


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "console", "serve the web console for a cluster")
    parser.epilog = EPILOG
    add_bootstrap(parser)
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address the console serves on (default: {DEFAULT_LISTEN}; port 0: a free port)",
    )
    parser.add_argument(
        "--metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="a node's Prometheus endpoint for the metrics page, repeatable"
        " (riverbed: http://HOST:9644/metrics, riverbed.http.listeners)",
    )
    parser.set_defaults(func=run_guarded(console_cmd))


def parse_listen(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--listen {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


async def _serve(args: argparse.Namespace, host: str, port: int) -> None:
    from aiohttp import web

    from riverbed.console.admin import ConsoleAdmin
    from riverbed.console.app import build_app

    admin = ConsoleAdmin(client_config(args))
    app = build_app(admin, args.bootstrap_server, args.metrics_url)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc}") from None
        for bound_host, bound_port, *_ in runner.addresses:
            print(
                f"riverbed console for {args.bootstrap_server} at http://{bound_host}:{bound_port}/",
                flush=True,
            )
        await asyncio.Event().wait()  # until Ctrl-C / SIGTERM
    finally:
        await runner.cleanup()


def console_cmd(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args, host, port))
    return 0
