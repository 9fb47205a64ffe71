"""Every Kafka key riverbed accepts either does something or is listed, with why, in
`ACCEPTED_WITHOUT_EFFECT` (and then a broker set with it says so): a key described by
DescribeConfigs but read by nothing (as ``delete.topic.enable`` and the checkpoint
intervals were) fails here.

"Read" is a static approximation: the key's name appears in the source outside the tables
that define keys, or the key is one the code builds from a template (`BUILT_KEYS`)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import riverbed
from riverbed.metadata.broker_configs import CONFIG_DEFS
from riverbed.metadata.inert_configs import ACCEPTED_WITHOUT_EFFECT, inert_settings

SOURCE = Path(riverbed.__file__).parent
#: The modules that define keys (types, defaults, docs), not use them.
_TABLES = {"broker_configs.py", "config_defs.py", "security_configs.py", "inert_configs.py"}
#: Keys the code reads under a name it builds: where it builds them.
BUILT_KEYS = {
    "group.consumer.min.session.timeout.ms": "metadata/group_configs.py (group.consumer.min.*)",
    "group.consumer.max.session.timeout.ms": "metadata/group_configs.py (group.consumer.max.*)",
    "group.consumer.min.heartbeat.interval.ms": "metadata/group_configs.py",
    "group.consumer.max.heartbeat.interval.ms": "metadata/group_configs.py",
}


def _source_text() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8")
        for p in SOURCE.rglob("*.py")
        if p.name not in _TABLES and "schemas" not in p.parts
    )


def test_every_accepted_key_is_read_or_listed_as_without_effect() -> None:
    text = _source_text()
    unread = sorted(
        key
        for key in CONFIG_DEFS
        if key not in ACCEPTED_WITHOUT_EFFECT
        and key not in BUILT_KEYS
        and not re.search(rf"[\"'`]{re.escape(key)}[\"'`]", text)
    )
    assert unread == [], f"described but read by nothing: {unread}"


def test_the_listed_keys_are_kafka_keys_riverbed_accepts() -> None:
    assert set(ACCEPTED_WITHOUT_EFFECT) <= set(CONFIG_DEFS)
    assert set(BUILT_KEYS) <= set(CONFIG_DEFS)


def _props_with_an_inert_key() -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "socket.send.buffer.bytes": "102400",
    }


def test_a_broker_set_with_an_inert_key_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from riverbed.server import config
    from riverbed.server.config import ServerConfig

    monkeypatch.setattr(config, "_WARNED", set())  # another test may have warned already
    props = _props_with_an_inert_key()
    with caplog.at_level(logging.WARNING):
        ServerConfig(props)
    assert inert_settings(props) == [
        ("socket.send.buffer.bytes", ACCEPTED_WITHOUT_EFFECT["socket.send.buffer.bytes"])
    ]
    assert any(
        "socket.send.buffer.bytes is accepted but has no effect" in r.getMessage()
        for r in caplog.records
    )


def test_the_warning_is_logged_once_per_process(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node builds its ServerConfig again for each dynamic change: the warnings about
    its static keys are not news the second time."""
    from riverbed.server import config
    from riverbed.server.config import ServerConfig

    monkeypatch.setattr(config, "_WARNED", set())
    props = _props_with_an_inert_key() | {"no.such.key": "1"}
    with caplog.at_level(logging.WARNING):
        ServerConfig(props)
        ServerConfig(props)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("socket.send.buffer.bytes is accepted" in m for m in messages) == 1
    assert sum("ignoring unknown config key no.such.key" in m for m in messages) == 1
