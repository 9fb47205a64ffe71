"""Command-line polish (issue 21): every option says what it does in ``--help``, the
bootstrap server defaults to the embedded default's ``localhost:9092`` (as rpk does), and
``quorum describe`` takes ``-b`` like every other verb."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from riverbed.cli.main import build_parser


def _parsers(
    parser: argparse.ArgumentParser, path: str = "riverbed"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:  # argparse keeps its tree here only
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_has_help_text() -> None:
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and action.help in (None, "")
    ]
    assert not missing, missing


def test_bootstrap_server_defaults_to_the_embedded_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["topics", "list"]).bootstrap_server == "localhost:9092"
    assert parser.parse_args(["produce", "-t", "x"]).bootstrap_server == "localhost:9092"
    assert parser.parse_args(["topics", "list", "-b", "h:1"]).bootstrap_server == "h:1"


def test_quorum_describe_takes_b_and_defaults_to_the_embedded_broker() -> None:
    parser = build_parser()
    args = parser.parse_args(["quorum", "describe", "-b", "h:2"])
    assert args.bootstrap_server == "h:2" and args.bootstrap_controller is None
    args = parser.parse_args(["quorum", "describe"])
    assert args.bootstrap_server == "localhost:9092"


def test_json_output_is_strict_json_for_non_finite_numbers(capsys) -> None:  # type: ignore[no-untyped-def]
    """A quota of +inf (Kafka accepts it for request_percentage) printed with --json must
    still parse as RFC 8259 JSON (no bare Infinity token)."""
    import json

    from riverbed.cli.common import print_json

    print_json([{"quotas": {"request_percentage": float("inf"), "x": -float("inf")}, "n": 1.5}])
    out = capsys.readouterr().out

    def refuse(token: str) -> None:
        raise ValueError(token)

    parsed = json.loads(out, parse_constant=refuse)
    assert parsed == [{"quotas": {"request_percentage": "Infinity", "x": "-Infinity"}, "n": 1.5}]
