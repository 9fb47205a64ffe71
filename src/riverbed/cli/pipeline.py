"""`riverbed pipeline run FILE`: run a PySpark pipeline script against a broker.

A pipeline is a Python file defining ``main(argv: list[str] | None) -> int`` that accepts
``--bootstrap-server HOST:PORT`` (the examples/ directory holds three). The verb loads the
file, puts its directory on ``sys.path`` and calls ``main`` with
``--bootstrap-server <address>`` followed by every argument after FILE (so the verb's own
options come before FILE):

    riverbed pipeline run examples/click_generator.py --events 5000
    riverbed pipeline run --bootstrap-server host:9092 examples/page_counts_stream.py
    riverbed pipeline run --start-broker examples/backfill_batch.py --from 9m

The default address is the embedded default broker (``localhost:9092``, what
``riverbed server start`` / ``make run`` listen on). ``--start-broker`` instead starts a
throw-away riverbed node on a free loopback port for the run and stops it afterwards.
``--master spark://HOST:PORT`` runs the pipeline's SparkSession on that Spark cluster
(it sets ``RIVERBED_SPARK_MASTER``, which ``riverbed.spark.session.local_session``
reads); the executors' Python must have riverbed installed (``make wheel``, see the
README).
``riverbed pipeline list [DIR]`` lists the pipelines of a directory (default examples/).

No ``--command-config``: a pipeline's client security is its Spark source's and sink's
``kafka.*`` options, which the script builds; the verb cannot put them there, and a
script that takes its own ``--command-config`` gets it after FILE like any argument.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from riverbed.cli.common import CliError, run_guarded, verb_parser

DEFAULT_BOOTSTRAP = "localhost:9092"


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "pipeline", "run PySpark pipelines (see examples/)")
    sub = parser.add_subparsers(dest="pipeline_command", metavar="SUBCOMMAND")
    run = verb_parser(sub, "run", "run a pipeline file's main() against a broker", __doc__)
    run.add_argument("file", type=Path, help="pipeline script, e.g. examples/backfill_batch.py")
    where = run.add_mutually_exclusive_group()
    where.add_argument(
        "--bootstrap-server",
        "-b",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker to use (default {DEFAULT_BOOTSTRAP}, the embedded default broker)",
    )
    where.add_argument(
        "--start-broker",
        action="store_true",
        help="start a temporary riverbed node on a free port for this run",
    )
    run.add_argument(
        "--master",
        metavar="URL",
        help="Spark master for the pipeline's session, e.g. spark://HOST:7077 (default local[2])",
    )
    run.add_argument(
        "args", nargs=argparse.REMAINDER, help="arguments for the pipeline (everything after FILE)"
    )
    run.set_defaults(func=run_guarded(run_cmd))
    lst = verb_parser(sub, "list", "list the pipelines in a directory")
    lst.add_argument(
        "directory",
        nargs="?",
        type=Path,
        default=Path("examples"),
        help="where the pipeline scripts are (default: examples)",
    )
    lst.set_defaults(func=run_guarded(list_cmd))


def load_main(path: Path) -> Any:
    if not path.is_file():
        raise CliError(f"pipeline file {str(path)!r} does not exist")
    directory = str(path.resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        namespace = runpy.run_path(str(path), run_name="riverbed_pipeline")
    except SyntaxError as exc:
        raise CliError(f"{path} is not valid Python: {exc}") from None
    main = namespace.get("main")
    if not callable(main):
        raise CliError(f"{path} defines no main(argv) function")
    return main


def run_cmd(args: argparse.Namespace) -> int:
    main = load_main(args.file)
    if args.master:
        from riverbed.spark.session import MASTER_ENV

        # The pipeline builds its own session (local_session), which reads the master here.
        os.environ[MASTER_ENV] = args.master
    extra = list(args.args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    if not args.start_broker:
        return int(main(["--bootstrap-server", args.bootstrap_server, *extra]) or 0)
    from riverbed.testing.cluster import start_broker

    node = start_broker(overrides={"transaction.two.phase.commit.enable": "true"})
    try:
        print(f"started a temporary riverbed node at {node.bootstrap}", file=sys.stderr)
        return int(main(["--bootstrap-server", node.bootstrap, *extra]) or 0)
    finally:
        node.stop()


def list_cmd(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    if not directory.is_dir():
        raise CliError(f"{str(directory)!r} is not a directory")
    for path in sorted(directory.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "def main(" not in text:
            continue
        summary = ""
        if text.lstrip().startswith('"""'):
            summary = text.lstrip()[3:].splitlines()[0].strip()
        print(f"{path}  {summary}")
    return 0
