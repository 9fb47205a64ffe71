"""Per-logger levels and the JSON log format from the node's config (issue 21)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from riverbed.server.config import ConfigError, ServerConfig
from riverbed.server.logging_config import (
    STATE_CHANGE_LOGGER,
    JsonFormatter,
    configure_logging,
    logger_levels,
)


def test_levels_come_from_log_level_keys_with_log4j_names() -> None:
    levels = logger_levels(
        {"log.level.root": "warn", "log.level.riverbed.server.network": "TRACE", "x": "1"}
    )
    assert levels == {"": logging.WARNING, "riverbed.server.network": logging.DEBUG}


def test_a_bad_level_names_its_key_and_log_level_keys_are_not_unknown() -> None:
    with pytest.raises(ConfigError) as err:
        ServerConfig.load(overrides=["log.level.riverbed.storage=LOUD"])
    assert err.value.key == "log.level.riverbed.storage"
    config = ServerConfig.load(overrides=["log.level.riverbed=ERROR", "riverbed.log.format=json"])
    assert config.unknown_keys == ()
    assert config.logger_levels == {"riverbed": logging.ERROR} and config.log_json
    with pytest.raises(ConfigError):
        ServerConfig.load(overrides=["riverbed.log.format=xml"])


def test_json_lines_carry_level_logger_node_and_one_line_tracebacks() -> None:
    record = logging.LogRecord("riverbed.x", logging.ERROR, __file__, 1, "bad %s", ("disk",), None)
    try:
        raise OSError("gone")
    except OSError:
        import sys

        record.exc_info = sys.exc_info()
    line = JsonFormatter(node_id=3).format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR" and entry["logger"] == "riverbed.x" and entry["node"] == 3
    assert entry["message"] == "bad disk" and "OSError: gone" in entry["exception"]
    assert entry["time"].endswith("Z")


def test_configure_logging_sets_levels_without_replacing_an_existing_handler() -> None:
    root = logging.getLogger()
    mine = logging.StreamHandler(io.StringIO())
    plain = mine.formatter
    saved = (root.level, logging.getLogger("riverbed.test.quiet").level)
    root.addHandler(mine)
    try:
        configure_logging(1, {"": logging.WARNING, "riverbed.test.quiet": logging.ERROR}, True)
        assert root.level == logging.WARNING
        assert logging.getLogger("riverbed.test.quiet").level == logging.ERROR
        assert mine.formatter is plain  # the embedding program's handler is left alone
    finally:
        root.removeHandler(mine)
        root.setLevel(saved[0])
        logging.getLogger("riverbed.test.quiet").setLevel(saved[1])


def test_configure_logging_installs_the_json_handler_on_a_bare_root() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = []
    stream = io.StringIO()
    try:
        configure_logging(7, {}, True, stream)
        logging.getLogger("riverbed.test.json").info("hello")
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)
    assert json.loads(stream.getvalue())["message"] == "hello"


def test_state_changes_go_to_their_file_only_while_it_is_open() -> None:
    """Kafka's state.change.logger (additivity false): once the node has opened
    state-change.log, its lines are not printed in the node's log too."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = []
    stream, state_file = io.StringIO(), io.StringIO()
    state_changes = logging.getLogger(STATE_CHANGE_LOGGER)
    file_handler = logging.StreamHandler(state_file)
    try:
        configure_logging(1, {"": logging.WARNING}, False, stream)
        state_changes.setLevel(logging.INFO)
        state_changes.info("before the file: printed")
        state_changes.addHandler(file_handler)
        state_changes.info("broker 1 received t-0: to the file only")
        logging.getLogger("riverbed.test.other").warning("any other line: printed")
        state_changes.removeHandler(file_handler)
    finally:
        state_changes.removeHandler(file_handler)
        state_changes.setLevel(logging.NOTSET)
        root.handlers = saved_handlers
        root.setLevel(saved_level)
    printed = stream.getvalue()
    assert "before the file: printed" in printed and "any other line: printed" in printed
    assert "to the file only" not in printed
    assert "to the file only" in state_file.getvalue()
