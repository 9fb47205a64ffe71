"""Helpers shared by CLI verbs: client options, output as rich tables or JSON, errors.

Admin, produce, consume and bench talk to any Kafka-compatible broker through
confluent-kafka (librdkafka).  Client settings come from `--command-config FILE` (a Java
properties file, as Kafka's tools take) and `-X key=value` (librdkafka names, repeatable).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

#: How long admin calls wait for the broker before giving up, seconds.
ADMIN_TIMEOUT_S = 30.0
#: Table width when stdout is not a terminal.
TABLE_WIDTH_PIPED = 250


class CliError(Exception):
    """A user-facing failure: printed as `error: <message>`, exit code 1."""


#: Where the CLI connects without --bootstrap-server: the embedded default node (as rpk).
DEFAULT_BOOTSTRAP_SERVER = "localhost:9092"


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        "-b",
        default=DEFAULT_BOOTSTRAP_SERVER,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default: {DEFAULT_BOOTSTRAP_SERVER})",
    )
    add_client_settings(parser)


def add_client_settings(parser: argparse.ArgumentParser) -> None:
    """--command-config and -X (for a verb that names its servers its own way)."""
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties file (librdkafka / Kafka client settings)",
    )
    parser.add_argument(
        "-X",
        dest="client_props",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra client setting, repeatable (e.g. -X client.id=tool)",
    )


def add_acks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--acks",
        default="all",
        choices=["0", "1", "all", "-1"],
        help="acknowledgements per record: 0, 1 or all (-1)",
    )


def add_batching(parser: argparse.ArgumentParser) -> None:
    """--linger-ms and --compression, as a producer batches."""
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=5,
        help="how long a batch waits for more records (linger.ms)",
    )
    parser.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression codec of the batches",
    )


def add_config_changes(parser: argparse.ArgumentParser, what: str = "config") -> None:
    """--add-config, --delete-config and --validate-only (kafka-configs' options)."""
    parser.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help=f"{what} to set, K=V[,K=V], repeatable",
    )
    parser.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help=f"{what} to reset to its default, repeatable",
    )
    parser.add_argument(
        "--validate-only", action="store_true", help="check the request, change nothing"
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def parse_kv(items: Iterable[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in _split_commas(item):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise CliError(f"{what} {part!r} must have the form key=value")
            out[key.strip()] = value.strip()
    return out


def config_changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str], list[Any]]:
    """``--add-config`` / ``--delete-config`` as the keys to set, the keys to delete and
    the same as confluent-kafka incremental ``ConfigEntry`` items (SET, then DELETE)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
    )

    adds = parse_kv(args.add_config, "--add-config")
    deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not adds and not deletes:
        raise CliError("give --add-config KEY=VALUE and/or --delete-config KEY")
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in adds.items()
    ]
    entries += [
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes
    ]
    return adds, deletes, entries


def _split_commas(item: str) -> list[str]:
    # "a=1,b=2" is two settings, but a value may hold commas ("cleanup.policy=[a,b]").
    if "[" in item:
        return [item.replace("[", "").replace("]", "")]
    parts: list[str] = []
    for chunk in item.split(","):
        if "=" in chunk or not parts:
            parts.append(chunk)
        else:
            parts[-1] += "," + chunk
    return [p for p in parts if p]


def command_config(args: argparse.Namespace) -> dict[str, str]:
    """The ``--command-config`` properties (empty without one)."""
    if not getattr(args, "command_config", None):
        return {}
    from riverbed.server.config import ConfigError, read_properties_file

    try:
        return read_properties_file(args.command_config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """confluent-kafka's settings: ``--command-config`` (Kafka's or librdkafka's names,
    `riverbed.cli.client_security`), then ``-X``."""
    from riverbed.cli.client_security import ClientSecurityError, librdkafka_config

    conf: dict[str, Any] = {}
    try:
        conf.update(librdkafka_config(command_config(args)))
    except ClientSecurityError as exc:
        raise CliError(f"--command-config: {exc}") from None
    # librdkafka logs every failed connect; the CLI reports failures itself (-X log_level=7
    # brings the client logs back).
    conf.setdefault("log_level", 2)
    conf["bootstrap.servers"] = args.bootstrap_server
    conf.update(parse_kv(getattr(args, "client_props", []), "-X"))
    return conf


def admin_client(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(args))


def wire_request(args: argparse.Namespace, api_key: Any, body: Any, address: str = "") -> Any:
    """One request through riverbed's own client (`riverbed.cli.wire`), for the admin APIs
    librdkafka lacks; to ``address`` or the first bootstrap server."""
    from riverbed.cli.wire import WireClient, WireError

    try:
        with WireClient(address or args.bootstrap_server) as client:
            return client.request(api_key, body)
    except WireError as exc:
        raise CliError(str(exc)) from None


def wait_futures(futures: dict[Any, Any], timeout: float = ADMIN_TIMEOUT_S) -> dict[Any, Any]:
    """Resolve admin futures: {key: result or exception}."""
    out: dict[Any, Any] = {}
    for key, fut in futures.items():
        try:
            out[key] = fut.result(timeout=timeout)
        except Exception as exc:
            out[key] = exc
    return out


def kafka_error_text(exc: BaseException) -> str:
    """`NAME: message` for a KafkaException, str() otherwise."""
    err = exc.args[0] if getattr(exc, "args", None) else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(exc) or type(exc).__name__


def load_server_config(args: argparse.Namespace) -> Any | None:
    """The node's ``ServerConfig`` from ``--config`` and ``--override``, or None once
    `error: invalid configuration: ...` is printed (the caller exits 2, as kafka-storage)."""
    from riverbed.server.config import ConfigError, ServerConfig

    try:
        return ServerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"error: invalid configuration: {exc}", file=sys.stderr)
        return None


def print_table(
    title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*["" if v is None else str(v) for v in row])
    # Piped output (scripts, logs) must not be cut to an 80-column guess.
    Console(width=None if sys.stdout.isatty() else TABLE_WIDTH_PIPED).print(table)


def print_json(value: object) -> None:
    """Strict JSON (RFC 8259) for scripts: a non-finite number (a quota of +inf, which
    Kafka accepts) is written as its text, "Infinity", not as the bare token Python's json
    writes and jq and most parsers refuse."""
    json.dump(_finite(value), sys.stdout, indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write("\n")


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def run_guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn CliError (and client errors) into `error: ...` on stderr and exit code 1."""

    def wrapper(args: argparse.Namespace) -> int:
        from confluent_kafka import KafkaException

        restore_security: Callable[[], object] = _keep_security
        try:
            restore_security = _use_wire_security(args)
            return func(args)
        except CliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KafkaException as exc:
            print(f"error: {kafka_error_text(exc)}", file=sys.stderr)
            return 1
        finally:
            restore_security()

    return wrapper


def _keep_security() -> None:
    """Nothing to put back: the command failed before it chose its security."""


def _use_wire_security(args: argparse.Namespace) -> Callable[[], object]:
    """riverbed's own wire client connects as the command's --command-config, then -X,
    say (as confluent-kafka's settings, `client_config`)."""
    from riverbed.cli.client_security import ClientSecurityError, wire_security
    from riverbed.cli.wire import WireError, use_security
    from riverbed.server.client_login import ClientSecurity

    props = command_config(args) | parse_kv(getattr(args, "client_props", []), "-X")

    def security() -> ClientSecurity:
        try:
            return wire_security(props)
        except ClientSecurityError as exc:
            raise WireError(f"--command-config: {exc}") from None

    return use_security(security)


def verb_parser(
    subparsers: Any, name: str, help_text: str, description: str | None = None
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=description or help_text,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(_parser=parser)
    return parser


@contextlib.contextmanager
def progress_bar(
    json_output: bool, description: str, total: int
) -> Iterator[Callable[[int], None]]:
    """A transient rich progress bar on stderr for a long operation; yields ``advance(n)``.
    Shown only when stderr is a terminal and never with --json (whose output is data):
    otherwise ``advance`` does nothing."""
    if json_output or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        description,
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.update(task, advance=n)
