"""`riverbed server start`: run a node (broker + controller) in the foreground."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from riverbed.cli.common import load_server_config, verb_parser

EPILOG = """\
With no --config, runs the embedded default: one combined node
(process.roles=broker,controller) on PLAINTEXT://localhost:9092 with data in
./riverbed-data, formatted automatically on first start.

examples:
  riverbed server start
  riverbed server start --config server.properties
  riverbed server start --override listeners=PLAINTEXT://127.0.0.1:19092 \\
                        --override log.dirs=/tmp/rb
  riverbed server start -c server.properties \\
      -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=https://idp.example.com/jwks

-D sets a process property, as Kafka's JVM -D system properties (not a node config:
AlterConfigs cannot change it); the environment variable of the same name in upper
case with _ for . (ORG_APACHE_KAFKA_SASL_OAUTHBEARER_ALLOWED_URLS) does the same.
"""


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "server", "run a riverbed node")
    sub = parser.add_subparsers(dest="server_command", metavar="SUBCOMMAND")
    start = verb_parser(sub, "start", "start a node in the foreground (Ctrl-C stops it)")
    start.epilog = EPILOG
    start.add_argument("--config", "-c", metavar="FILE", help="server.properties file")
    start.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, repeatable",
    )
    start.add_argument(
        "-D",
        dest="properties",
        action="append",
        default=[],
        metavar="PROPERTY=VALUE",
        help="a process property (Kafka's JVM system property), repeatable: "
        "org.apache.kafka.sasl.oauthbearer.allowed.urls",
    )
    start.set_defaults(func=start_server)


def set_process_properties(properties: list[str]) -> str | None:
    """Put each ``-D PROPERTY=VALUE`` into the environment (where the node reads it);
    the error for one riverbed does not know, else None."""
    from riverbed.security.oauthbearer_urls import PROCESS_PROPERTIES, property_env_name

    for item in properties:
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in PROCESS_PROPERTIES:
            known = ", ".join(sorted(PROCESS_PROPERTIES))
            return f"-D {item}: riverbed knows the process properties {known}"
        os.environ[property_env_name(name.strip())] = value
    return None


def start_server(args: argparse.Namespace) -> int:
    from riverbed.metadata.storage_format import StorageFormatError

    refused = set_process_properties(args.properties)
    if refused is not None:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    config = load_server_config(args)
    if config is None:
        return 2
    from riverbed.server import node

    try:
        return int(node.run(config, _console_extension(config)))
    except StorageFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # Typically a listener port in use or an unwritable log dir: say so, no traceback.
        print(f"error: cannot start the node: {exc}", file=sys.stderr)
        return 1


def _console_extension(config: Any) -> Any:
    """With ``riverbed.http.console.enable``: the web console mounted on the node's HTTP
    listener, an admin client of the node's first PLAINTEXT listener (None otherwise)."""
    if not config.http_console:
        return None
    plain = [lst for lst in config.advertised_listeners if lst.security_protocol == "PLAINTEXT"]
    if not plain:
        print(
            "error: riverbed.http.console.enable needs a PLAINTEXT listener to connect to"
            " (use `riverbed console --command-config` for a secured cluster)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    host = plain[0].host or "localhost"
    bootstrap = f"{'[' + host + ']' if ':' in host else host}:{plain[0].port}"

    def mount(app: Any) -> None:
        from riverbed.console.admin import ConsoleAdmin
        from riverbed.console.app import mount_console

        mount_console(
            app, ConsoleAdmin({"bootstrap.servers": bootstrap, "log_level": 2}), bootstrap
        )

    return mount
