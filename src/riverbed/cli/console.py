"""`riverbed console [--bootstrap-server HOST:PORT] [--listen HOST:PORT]`: the web console.

Serves `riverbed.console` (cluster overview, topics, message browser with live tail,
consumer groups with lag and offset resets, transactions, ACLs and SCRAM users) on
``--listen`` (default 127.0.0.1:8080: loopback only; listening elsewhere is the
operator's choice). It connects to any Kafka-compatible cluster as an admin client with
the settings of ``--command-config`` / ``-X``, as the other verbs do; with ``--login`` each
user signs in with their own SASL credentials instead (`riverbed.console.login`), and
``--tls-cert``/``--tls-key`` serve HTTPS. Port 0 binds a free port; the address is printed either way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
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
    parser.add_argument(
        "--login",
        action="store_true",
        help="each user signs in with their SASL user name and password and sees what that"
        " principal may see (--command-config sets security.protocol and sasl.mechanism)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS: certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="serve HTTPS: private key (PEM)")
    parser.set_defaults(func=run_guarded(console_cmd))


def parse_listen(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--listen {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    if not args.tls_cert and not args.tls_key:
        return None
    if not (args.tls_cert and args.tls_key):
        raise CliError("--tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"cannot load --tls-cert/--tls-key: {exc}") from None
    return context


def login_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """--login needs a SASL protocol and mechanism; the user brings the credentials."""
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if not protocol.startswith("SASL_") or not conf.get(
        "sasl.mechanism", conf.get("sasl.mechanisms")
    ):
        raise CliError(
            "--login signs users in with SASL: --command-config must set security.protocol="
            "SASL_PLAINTEXT or SASL_SSL and sasl.mechanism"
        )
    return {k: v for k, v in conf.items() if k not in ("sasl.username", "sasl.password")}


async def _serve(args: argparse.Namespace, host: str, port: int) -> None:
    from aiohttp import web

    from riverbed.console.admin import ConsoleAdmin
    from riverbed.console.app import build_app

    conf = client_config(args)
    context = tls_context(args)
    if args.login:
        app = build_app(None, args.bootstrap_server, args.metrics_url, tls=context is not None,
                        base_conf=login_conf(conf))  # fmt: skip
    else:
        app = build_app(ConsoleAdmin(conf), args.bootstrap_server, args.metrics_url,
                        tls=context is not None)  # fmt: skip
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=context)
        try:
            await site.start()
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc}") from None
        for bound_host, bound_port, *_ in runner.addresses:
            print(
                f"riverbed console for {args.bootstrap_server} at "
                f"{'https' if context else 'http'}://{bound_host}:{bound_port}/",
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
