"""A real node's log lines with ``riverbed.log.format=json`` and a per-logger level
(issue 21): every log line is one JSON object, and ``log.level.riverbed.server.node=WARN``
silences that logger's INFO lines (its "node started" line) while others keep theirs."""

from __future__ import annotations

import json

import pytest

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration


def test_json_lines_and_a_quieted_logger() -> None:
    overrides = {"riverbed.log.format": "json", "log.level.riverbed.server.node": "WARN"}
    with BrokerProcess(overrides=overrides) as broker:
        assert broker.stop() == 0
        text = broker.log_text()  # the whole run, shutdown included
    lines = [line for line in text.splitlines() if line.strip()]
    ready = [line for line in lines if " ready: " in line]
    assert len(ready) == 1  # the ready line is stdout's, not a log line
    entries = [json.loads(line) for line in lines if line not in ready]
    assert entries, text[-2000:]
    loggers = {e["logger"] for e in entries}
    assert all(e["node"] == 1 and e["level"] for e in entries)
    assert any(name.startswith("riverbed.") for name in loggers)
    node_infos = [
        e for e in entries if e["logger"] == "riverbed.server.node" and e["level"] == "INFO"
    ]
    assert not node_infos, node_infos
    assert any(e["level"] == "INFO" for e in entries)  # other loggers keep INFO
