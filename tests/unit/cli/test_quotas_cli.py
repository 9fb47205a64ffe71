"""`riverbed quotas`: kafka-configs' entity flags pair in order."""

from __future__ import annotations

import pytest

from riverbed.cli.main import build_parser


def entities(*argv: str) -> list[list[str | None]]:
    return build_parser().parse_args(["quotas", *argv]).entities


def test_entity_flags_pair_in_order() -> None:
    assert entities(
        "alter",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--add-config",
        "x=1",
    ) == [["user", None], ["client-id", "app"]]
    assert entities("describe", "--user", "alice", "--client-defaults") == [
        ["user", "alice"],
        ["client-id", None],
    ]
    assert entities("describe", "--entity-type", "ips", "--entity-name", "10.0.0.1") == [
        ["ip", "10.0.0.1"]
    ]
    # the parser's default list is not shared between parses
    assert entities("describe") == []


def test_a_name_without_a_type_is_refused() -> None:
    with pytest.raises(SystemExit):
        entities("describe", "--entity-name", "x")


def test_ip_shortcuts_as_kafka_configs() -> None:
    assert entities("describe", "--ip", "10.0.0.1") == [["ip", "10.0.0.1"]]
    assert entities("alter", "--ip-defaults", "--add-config", "connection_creation_rate=5") == [
        ["ip", None]
    ]
