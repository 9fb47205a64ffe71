"""The node's logging: per-logger levels and a JSON format, from server.properties.

Kafka sets logger levels in ``log4j.properties`` (``log4j.logger.kafka.network=DEBUG``);
riverbed reads them from its own config, one key per logger:

    log.level.root=WARN                      # the root logger (default INFO)
    log.level.riverbed.server.network=DEBUG  # any logger name
    riverbed.log.format=json                 # text (default) or json, for log shippers

Levels are log4j's and Python's names (TRACE is DEBUG, FATAL is CRITICAL, WARN is
WARNING); a bad level is a `ConfigError` naming the key when the config is built. The
JSON format writes one object per line: ``time`` (ISO 8601, UTC, ms), ``level``,
``logger``, ``node`` (node.id), ``message`` and, with an exception, ``exception`` (its
traceback), so a line never spans two lines.

The state-change lines (logger ``riverbed.state.change``: a controller's partition
decisions, a broker's registrations received, become leader/follower, ISR changes) go to
``state-change.log`` only, once the node has opened it, as Kafka's ``state.change.logger``
(additivity false): with 10,000 partitions a fail-over would otherwise flood the node's
log, and ``log.level.root=WARN`` would still print them.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

#: Config keys ``log.level.<logger>`` set one logger's level (``root``: the root logger).
LOG_LEVEL_PREFIX = "log.level."
#: The replication state changes' logger (``state-change.log``'s).
STATE_CHANGE_LOGGER = "riverbed.state.change"
#: The text format (the node's default since it first logged).
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}


class LogLevelError(ValueError):
    """A ``log.level.<logger>`` value that is not a level; ``key`` names the key."""

    def __init__(self, key: str, value: str) -> None:
        super().__init__(f"{key}={value!r} is not a log level ({', '.join(_LEVELS)})")
        self.key = key


def logger_levels(props: Mapping[str, str]) -> dict[str, int]:
    """``log.level.<logger>`` keys -> {logger name ("" = root): level}; LogLevelError."""
    out: dict[str, int] = {}
    for key, raw in props.items():
        if not key.startswith(LOG_LEVEL_PREFIX) or len(key) == len(LOG_LEVEL_PREFIX):
            continue
        level = _LEVELS.get(str(raw).strip().upper())
        if level is None:
            raise LogLevelError(key, str(raw))
        name = key[len(LOG_LEVEL_PREFIX) :]
        out["" if name == "root" else name] = level
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, object] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "node": self.node_id,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(
    node_id: int, levels: Mapping[str, int], json_format: bool, stream: object = None
) -> None:
    """Give the root logger the node's handler (stderr, text or JSON) unless logging is
    configured already (an embedding program's choice wins), and set every level."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
        formatter = JsonFormatter(node_id) if json_format else logging.Formatter(TEXT_FORMAT)
        handler.setFormatter(formatter)
        handler.addFilter(state_changes_kept_to_their_file)
        root.addHandler(handler)
    root.setLevel(levels.get("", logging.INFO))
    for name, level in levels.items():
        if name:
            logging.getLogger(name).setLevel(level)


def state_changes_kept_to_their_file(record: logging.LogRecord) -> bool:
    """The node's handler's filter: a state-change line is left to ``state-change.log``
    while that file is open (its handler on the logger), else printed as any line."""
    return record.name != STATE_CHANGE_LOGGER or not logging.getLogger(STATE_CHANGE_LOGGER).handlers
